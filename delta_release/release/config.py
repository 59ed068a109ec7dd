"""`config/release.yaml`: the release run's configuration, loaded with safe YAML and checked strictly.

Unknown keys, duplicate keys and wrong types are a ConfigError naming the file and the dotted key.
Secrets are never written in the file: a storage option value `${NAME}` is read from the environment
when the run starts and is never copied into the packet, the report or a log.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from ..errors import ConfigError

_ENV_REF = re.compile(r"^\$\{([A-Z_][A-Z0-9_]*)\}$")


class _StrictLoader(yaml.SafeLoader):  # type: ignore[misc]  # PyYAML ships no type stubs
    """Safe YAML that refuses duplicate keys and aliases (no alias bombs, no python tags)."""

    def compose_node(self, parent: Any, index: Any) -> Any:
        if self.check_event(yaml.AliasEvent):
            mark = self.peek_event().start_mark
            raise ConfigError(f"{self.name}: YAML aliases are not allowed (line {mark.line + 1})",
                              file=str(self.name), key=None)
        return super().compose_node(parent, index)


def _mapping(loader: _StrictLoader, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
    seen: set[Any] = set()
    for key_node, _ in node.value:
        key = loader.construct_object(key_node, deep=deep)
        if key in seen:
            raise ConfigError(f"duplicate key {key!r} (line {key_node.start_mark.line + 1})",
                              file=loader.name, key=str(key))
        seen.add(key)
    return dict(loader.construct_mapping(node, deep=deep))


_StrictLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _mapping)


@dataclass(frozen=True, slots=True, kw_only=True)
class AuditCheck:
    days: tuple[int, int]
    max_fraction: float


@dataclass(frozen=True, slots=True, kw_only=True)
class ReleaseConfig:
    path: Path
    lake_uri: str
    storage_options: dict[str, str]
    tables: list[str]
    sources: list[Path]
    manifests: list[Path]
    window_days: int
    raw_retention_days: int
    backup_expiry_days: int
    replay_horizon_days: int
    retained_snapshots: int
    schema_fixtures: dict[int, Path]
    audit: AuditCheck
    checks: list[str]
    packet_dir: Path
    secret_names: list[str] = field(default_factory=list)
    create_lake: bool = False  # lake.create: the run may create a lake at lake.uri (default: refuse)


# the schema: key -> type (or nested dict); lists are (list, item type)
_SCHEMA: dict[str, Any] = {
    "lake": {"uri": str, "storage_options": dict, "create": bool},
    "tables": (list, str),
    "sources": {"batches": (list, str), "manifests": (list, str)},
    "release": {"window_days": int},
    "retention": {"raw_days": int, "backup_days": int, "replay_horizon_days": int, "retained_snapshots": int},
    "checks": {
        "schema_fixtures": {"v2": str, "v3": str},
        "amount_unit": bool, "reconciliation": bool, "checksums": bool, "pinned_query": bool,
        "conflict_drill": bool, "erasure_drill": bool, "freshness_gate": bool,
        "audit": {"days": str, "max_fraction": float},
    },
    "packet": {"directory": str},
}
CHECK_NAMES = ["schema_fixtures", "amount_unit", "reconciliation", "checksums", "pinned_query",
               "conflict_drill", "erasure_drill", "audit", "freshness_gate"]


def _type_name(t: Any) -> str:
    return {str: "a string", int: "an integer", float: "a number", bool: "true or false",
            dict: "a mapping", list: "a list"}.get(t, str(t))


def _validate(doc: Any, schema: Any, file: str, prefix: str) -> None:
    if isinstance(schema, dict):
        if not isinstance(doc, dict):
            raise ConfigError(f"{file}: {prefix or 'the document'} must be a mapping", file=file, key=prefix or None)
        for key, value in doc.items():
            dotted = f"{prefix}.{key}" if prefix else str(key)
            if key not in schema:
                raise ConfigError(f"{file}: unknown key {dotted!r}", file=file, key=dotted)
            _validate(value, schema[key], file, dotted)
        return
    if isinstance(schema, tuple):
        if not isinstance(doc, list):
            raise ConfigError(f"{file}: {prefix} must be a list", file=file, key=prefix)
        for i, item in enumerate(doc):
            _validate(item, schema[1], file, f"{prefix}[{i}]")
        return
    ok = isinstance(doc, schema) and not (schema in (int, float) and isinstance(doc, bool))
    if schema is float and isinstance(doc, int) and not isinstance(doc, bool):
        ok = True
    if not ok:
        raise ConfigError(f"{file}: {prefix} must be {_type_name(schema)}, got {type(doc).__name__}",
                          file=file, key=prefix)


def _require(doc: dict[str, Any], dotted: str, file: str) -> Any:
    node: Any = doc
    for part in dotted.split("."):
        if not isinstance(node, dict) or part not in node:
            raise ConfigError(f"{file}: missing key {dotted!r}", file=file, key=dotted)
        node = node[part]
    return node


def _resolve_options(options: dict[str, Any], file: str) -> tuple[dict[str, str], list[str]]:
    out: dict[str, str] = {}
    secrets: list[str] = []
    for key, value in options.items():
        if not isinstance(value, str):
            raise ConfigError(f"{file}: lake.storage_options.{key} must be a string", file=file,
                              key=f"lake.storage_options.{key}")
        ref = _ENV_REF.match(value)
        if ref:
            name = ref.group(1)
            if name not in os.environ:
                raise ConfigError(f"{file}: lake.storage_options.{key} refers to unset environment variable"
                                  f" {name}", file=file, key=f"lake.storage_options.{key}")
            out[key] = os.environ[name]
            secrets.append(name)
        elif "SECRET" in key.upper() or "TOKEN" in key.upper() or "PASSWORD" in key.upper():
            raise ConfigError(f"{file}: lake.storage_options.{key} must come from the environment: write"
                              " ${ENV_VAR}", file=file, key=f"lake.storage_options.{key}")
        else:
            out[key] = value
    return out, secrets


def load_release_config(path: str | os.PathLike[str]) -> ReleaseConfig:
    p = Path(path)
    file = str(p)
    if not p.is_file():
        raise ConfigError(f"config file not found: {file}", file=file)
    try:
        loader = _StrictLoader(p.read_text(encoding="utf-8"))
        loader.name = file
        try:
            doc = loader.get_single_data()
        finally:
            loader.dispose()
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" (line {mark.line + 1})" if mark else ""
        raise ConfigError(f"{file}: not valid safe YAML{where}: {getattr(exc, 'problem', exc)}", file=file) from None
    _validate(doc, _SCHEMA, file, "")
    base = p.resolve().parent

    def rel(value: str) -> Path:
        q = Path(value)
        return q if q.is_absolute() else (base / q).resolve()

    uri = _require(doc, "lake.uri", file)
    lake_uri = uri if "://" in uri else str(rel(uri))
    options, secret_names = _resolve_options(doc["lake"].get("storage_options", {}) or {}, file)
    checks = doc.get("checks", {})
    enabled = [c for c in CHECK_NAMES if checks.get(c, c in ("schema_fixtures", "audit")) not in (False, None)]
    fixtures = _require(doc, "checks.schema_fixtures", file)
    _require(doc, "checks.audit", file)
    from ..audit import parse_days

    try:
        days = parse_days(_require(doc, "checks.audit.days", file))
    except Exception:
        raise ConfigError(f"{file}: checks.audit.days must look like A:B", file=file, key="checks.audit.days") from None
    return ReleaseConfig(
        path=p, lake_uri=lake_uri, storage_options=options,
        tables=list(doc.get("tables", ["orders"])),
        sources=[rel(s) for s in _require(doc, "sources.batches", file)],
        manifests=[rel(s) for s in doc["sources"].get("manifests", [])],
        window_days=_require(doc, "release.window_days", file),
        raw_retention_days=_require(doc, "retention.raw_days", file),
        backup_expiry_days=_require(doc, "retention.backup_days", file),
        replay_horizon_days=_require(doc, "retention.replay_horizon_days", file),
        retained_snapshots=_require(doc, "retention.retained_snapshots", file),
        schema_fixtures={2: rel(fixtures["v2"]), 3: rel(fixtures["v3"])},
        audit=AuditCheck(days=days, max_fraction=float(_require(doc, "checks.audit.max_fraction", file))),
        checks=enabled, packet_dir=rel(_require(doc, "packet.directory", file)), secret_names=secret_names,
        create_lake=bool(doc["lake"].get("create", False)),
    )
