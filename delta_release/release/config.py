"""`config/release.yaml`: the release run's configuration, loaded with safe YAML and checked strictly.

Unknown keys, duplicate keys and wrong types are a ConfigError naming the file and the dotted key.
Secrets are never written in the file: a storage option value `${NAME}` is read from the environment
when the run starts and is never copied into the packet, the report or a log.
"""

from __future__ import annotations

import math
import os
import re
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from ..arguments import MAXIMUM
from ..errors import ConfigError, InputError
from ..retention import BACKUP_EXPIRY_DAYS, RAW_RETENTION_DAYS, RETAIN_VERSIONS

MAX_WINDOW = 36_500  # release.window_days: a century

_ENV_REF = re.compile(r"^\$\{([A-Z_][A-Z0-9_]*)\}$")


class _StrictLoader(yaml.SafeLoader):  # type: ignore[misc]  # PyYAML ships no type stubs
    """Safe YAML that refuses aliases (no alias bombs, no python tags). Duplicate keys and oversized numbers
    are caught on the composed node tree (`_check_nodes`), where the dotted key is known."""

    def compose_node(self, parent: Any, index: Any) -> Any:
        if self.check_event(yaml.AliasEvent):
            mark = self.peek_event().start_mark
            raise ConfigError(f"{self.name}: YAML aliases are not allowed (line {mark.line + 1})",
                              file=str(self.name), key=None)
        return super().compose_node(parent, index)


_INT_TAG = "tag:yaml.org,2002:int"
_FLOAT_TAG = "tag:yaml.org,2002:float"
_MAX_NUMBER_CHARS = 40  # far beyond any sensible day count or share; int() of 5,000 digits is refused by Python


def _check_nodes(node: Any, file: str, prefix: str) -> None:
    """Walk the composed YAML: duplicate keys, and numbers too long to be meant, name their dotted key."""
    if isinstance(node, yaml.MappingNode):
        seen: set[str] = set()
        for key_node, value_node in node.value:
            key = str(key_node.value)
            dotted = f"{prefix}.{key}" if prefix else key
            if key in seen:
                raise ConfigError(f"{file}: duplicate key {dotted!r} (line {key_node.start_mark.line + 1})",
                                  file=file, key=dotted)
            seen.add(key)
            _check_nodes(value_node, file, dotted)
    elif isinstance(node, yaml.SequenceNode):
        for i, item in enumerate(node.value):
            _check_nodes(item, file, f"{prefix}[{i}]")
    elif isinstance(node, yaml.ScalarNode) and node.tag in (_INT_TAG, _FLOAT_TAG) \
            and len(str(node.value)) > _MAX_NUMBER_CHARS:
        raise ConfigError(f"{file}: {prefix} is a number of {len(str(node.value))} characters (line "
                          f"{node.start_mark.line + 1}); at most {_MAX_NUMBER_CHARS}", file=file, key=prefix)


@dataclass(frozen=True, slots=True, kw_only=True)
class AuditCheck:
    days: tuple[int, int]
    max_fraction: float


@dataclass(frozen=True, slots=True, kw_only=True)
class Thresholds:
    """Release thresholds (config `thresholds:`); every share is in [0, 1]. See THRESHOLD_DEFAULTS."""

    rejected_per_batch: float
    rejected_mostly: float
    rejected_overall: float
    rejected_by_reason: dict[str, float]
    late_events: float
    stale_days: int
    stale_events: float
    moved_orders: float


# Defaults chosen so the demo ships and a batch of 95 garbage lines + 5 good ones holds (tests pin both).
THRESHOLD_DEFAULTS: dict[str, Any] = {
    "rejected.per_batch": 0.50,  # a batch whose quarantined/extracted share is above this is "over"
    "rejected.mostly": 0.75,     # at least this share of the run's lines must be in batches not "over"
    "rejected.overall": 0.20,    # quarantined/extracted over all the run's batches
    "rejected.by_reason.default": 0.05,  # per reason code, share of the run's extracted lines
    "late_events.max_share": 0.10,  # accepted events whose ordering value is below the table's max applied
    "stale_events.older_than_days": 30,  # upserts whose partition (day) is this many days before the newest
    "stale_events.max_share": 0.10,
    "moved_orders.max_share": 0.05,  # keys the run moves to another partition, share of the parent's keys
}

Num = (int, float)


@dataclass(frozen=True, slots=True, kw_only=True)
class ReleaseConfig:
    path: Path
    lake_uri: str
    storage_options: dict[str, str]
    sources: list[Path]
    manifests: list[Path]
    window_days: int
    raw_retention_days: float
    backup_expiry_days: float
    retained_snapshots: int
    schema_fixtures: dict[int, Path]
    audit: AuditCheck
    thresholds: Thresholds
    checks: list[str]
    packet_dir: Path
    digest: str = ""
    lake_from: str = "config"
    secret_names: list[str] = field(default_factory=list)
    create_lake: bool = False  # lake.create: the run may create a lake at lake.uri (default: refuse)


# the schema: key -> type (or nested dict); lists are (list, item type); "*" means any key
_SCHEMA: dict[str, Any] = {
    "lake": {"uri": str, "storage_options": dict, "create": bool},
    "sources": {"batches": (list, str), "manifests": (list, str)},
    "release": {"window_days": int},
    "retention": {"raw_days": Num, "backup_days": Num, "retained_snapshots": int},
    "checks": {
        "schema_fixtures": {"v2": str, "v3": str},
        "amount_unit": bool, "reconciliation": bool, "checksums": bool, "pinned_query": bool,
        "conflict_drill": bool, "erasure_drill": bool, "freshness_gate": bool, "thresholds": bool,
        "audit": {"days": str, "max_fraction": float},
    },
    "thresholds": {
        "rejected": {"per_batch": float, "mostly": float, "overall": float, "by_reason": {"*": float}},
        "late_events": {"max_share": float},
        "stale_events": {"older_than_days": int, "max_share": float},
        "moved_orders": {"max_share": float},
    },
    "packet": {"directory": str},
}
# Keys the run once parsed and never read (issue 12): refused by name with what to do instead, so an old
# config fails loudly rather than seeming to choose tables or a replay horizon.
REMOVED_KEYS: dict[str, str] = {
    "tables": "the run releases the orders table from sources.batches and the telemetry table from"
              " sources.manifests; delete the key",
    "retention.replay_horizon_days": "the run never vacuums; `vacuum --replay-horizon-hours` sets the horizon;"
                                     " delete the key",
}
CHECK_NAMES = ["schema_fixtures", "amount_unit", "reconciliation", "checksums", "pinned_query",
               "conflict_drill", "erasure_drill", "audit", "freshness_gate", "thresholds"]
_DEFAULT_ON = ("schema_fixtures", "audit", "thresholds")


def _type_name(t: Any) -> str:
    if t is Num:
        return "a number"
    return {str: "a string", int: "an integer", float: "a number", bool: "true or false",
            dict: "a mapping", list: "a list"}.get(t, str(t))


def _hint(schema: Any, doc: Any) -> str:
    if schema is str and isinstance(doc, int) and not isinstance(doc, bool):
        return " (YAML reads an unquoted 10:11 as the base-60 number 611: quote it, \"10:11\")"
    return ""


def _validate(doc: Any, schema: Any, file: str, prefix: str) -> None:
    if isinstance(schema, dict):
        if not isinstance(doc, dict):
            raise ConfigError(f"{file}: {prefix or 'the document'} must be a mapping", file=file, key=prefix or None)
        for key, value in doc.items():
            dotted = f"{prefix}.{key}" if prefix else str(key)
            if dotted in REMOVED_KEYS:
                raise ConfigError(f"{file}: key {dotted!r} was removed: {REMOVED_KEYS[dotted]}", file=file, key=dotted)
            if key not in schema and "*" not in schema:
                raise ConfigError(f"{file}: unknown key {dotted!r}", file=file, key=dotted)
            _validate(value, schema.get(key, schema.get("*")), file, dotted)
        return
    if isinstance(schema, tuple) and schema and schema[0] is list:
        if not isinstance(doc, list):
            raise ConfigError(f"{file}: {prefix} must be a list", file=file, key=prefix)
        for i, item in enumerate(doc):
            _validate(item, schema[1], file, f"{prefix}[{i}]")
        return
    numeric = schema in (int, float, Num)
    if numeric:
        ok = isinstance(doc, (int, float)) and not isinstance(doc, bool) and (schema is not int or isinstance(doc, int))
    else:
        ok = isinstance(doc, schema)
    if not ok:
        raise ConfigError(f"{file}: {prefix} must be {_type_name(schema)}, got {type(doc).__name__}"
                          f"{_hint(schema, doc)}", file=file, key=prefix)
    if numeric and not math.isfinite(doc):
        raise ConfigError(f"{file}: {prefix} must be a finite number, got {doc}", file=file, key=prefix)


def _require(doc: dict[str, Any], dotted: str, file: str) -> Any:
    node: Any = doc
    for part in dotted.split("."):
        if not isinstance(node, dict) or part not in node:
            raise ConfigError(f"{file}: missing key {dotted!r}", file=file, key=dotted)
        node = node[part]
    return node


def _get(doc: dict[str, Any], dotted: str, default: Any) -> Any:
    node: Any = doc
    for part in dotted.split("."):
        if not isinstance(node, dict) or part not in node or node[part] is None:
            return default
        node = node[part]
    return node


def _in_range(value: Any, dotted: str, file: str, low: float, high: float | None = None) -> Any:
    if value < low or (high is not None and value > high):
        span = f"in [{low:g}, {high:g}]" if high is not None else f">= {low:g}"
        raise ConfigError(f"{file}: {dotted} must be {span}, got {value}", file=file, key=dotted)
    return value


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


def _read_yaml(p: Path, file: str) -> Any:
    try:
        raw = p.read_bytes()
    except OSError as exc:
        raise ConfigError(f"{file}: cannot read the config: {exc.strerror}", file=file) from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = raw[:exc.start].count(b"\n") + 1
        raise ConfigError(f"{file}: not UTF-8: invalid byte 0x{raw[exc.start]:02x} at offset {exc.start}"
                          f" (line {line})", file=file) from None
    try:
        loader = _StrictLoader(text)
        loader.name = file
        try:
            node = loader.get_single_node()
            if node is None:
                return None
            _check_nodes(node, file, "")
            return loader.construct_document(node)
        finally:
            loader.dispose()
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" (line {mark.line + 1})" if mark else ""
        raise ConfigError(f"{file}: not valid safe YAML{where}: {getattr(exc, 'problem', exc)}", file=file) from None
    except RecursionError:  # thousands of nested [ or mappings: no release config is nested past 5 levels
        raise ConfigError(f"{file}: nested too deeply to be a release config", file=file) from None


def _lake_uri(uri: str, rel: Any, file: str) -> str:
    if "://" not in uri:
        if not uri.strip():
            raise ConfigError(f"{file}: lake.uri is empty", file=file, key="lake.uri")
        return str(rel(uri))
    scheme, _, rest = uri.partition("://")
    if scheme != "s3":
        raise ConfigError(f"{file}: lake.uri scheme {scheme!r} is not supported (a local path or s3://bucket/prefix)",
                          file=file, key="lake.uri")
    if not rest.split("/", 1)[0].strip():
        raise ConfigError(f"{file}: lake.uri {uri!r} names no bucket: write s3://bucket/prefix", file=file,
                          key="lake.uri")
    return uri


def _source_file(path: Path, dotted: str, file: str) -> Path:
    if not path.exists():
        raise ConfigError(f"{file}: {dotted}: file not found: {path}", file=file, key=dotted)
    if not path.is_file():
        raise ConfigError(f"{file}: {dotted}: not a file: {path}", file=file, key=dotted)
    return path


def load_release_config(path: str | os.PathLike[str], *, lake_override: str | None = None) -> ReleaseConfig:
    """Load and validate the whole config before any work: a ConfigError (exit 2) names the file and the
    dotted key. `lake_override` (the CLI's `run --lake`) replaces `lake.uri`."""
    p = Path(path)
    file = str(p)
    if not p.exists():
        raise ConfigError(f"config file not found: {file}", file=file)
    if not p.is_file():
        raise ConfigError(f"config is not a file: {file}", file=file)
    doc = _read_yaml(p, file)
    _validate(doc, _SCHEMA, file, "")
    base = p.resolve().parent

    def rel(value: str) -> Path:
        q = Path(value)
        return q if q.is_absolute() else (base / q).resolve()

    lake_uri = _lake_uri(_require(doc, "lake.uri", file), rel, file)
    if lake_override is not None:
        lake_uri = lake_override if "://" in lake_override else str(Path(lake_override).resolve())
        _lake_uri(lake_uri, rel, f"--lake {lake_override}")
    options, secret_names = _resolve_options(doc["lake"].get("storage_options", {}) or {}, file)
    checks = doc.get("checks", {})
    enabled = [c for c in CHECK_NAMES if checks.get(c, c in _DEFAULT_ON) not in (False, None)]
    fixtures = _require(doc, "checks.schema_fixtures", file)
    _require(doc, "checks.audit", file)
    from ..audit import parse_days

    days_spec = _require(doc, "checks.audit.days", file)
    try:
        days = parse_days(days_spec)
    except Exception:
        raise ConfigError(f"{file}: checks.audit.days must look like A:B with 0 <= A <= B, got {days_spec!r}",
                          file=file, key="checks.audit.days") from None
    batches = _require(doc, "sources.batches", file)
    if not batches:
        raise ConfigError(f"{file}: sources.batches is empty: name at least one batch", file=file,
                          key="sources.batches")
    sources = [_source_file(rel(s), f"sources.batches[{i}]", file) for i, s in enumerate(batches)]
    manifests = [_source_file(rel(s), f"sources.manifests[{i}]", file)
                 for i, s in enumerate(doc["sources"].get("manifests", []) or [])]
    _parse_manifests(manifests, file)
    schema_fixtures = {v: _source_file(rel(fixtures[f"v{v}"]), f"checks.schema_fixtures.v{v}", file)
                       for v in (2, 3) if f"v{v}" in fixtures}
    if "schema_fixtures" in enabled and len(schema_fixtures) < 2:
        raise ConfigError(f"{file}: checks.schema_fixtures needs v2 and v3", file=file, key="checks.schema_fixtures")
    packet_dir = rel(_require(doc, "packet.directory", file))
    if packet_dir.exists() and not packet_dir.is_dir():
        raise ConfigError(f"{file}: packet.directory is not a directory: {packet_dir}", file=file,
                          key="packet.directory")

    thresholds = _thresholds(doc, file)

    def count(dotted: str, default: Any, low: float = 0, high: float = MAXIMUM) -> Any:
        return _in_range(_get(doc, dotted, default), dotted, file, low, high)

    import hashlib

    config = ReleaseConfig(
        path=p, lake_uri=lake_uri, storage_options=options,
        sources=sources, manifests=manifests,
        window_days=_in_range(_require(doc, "release.window_days", file), "release.window_days", file, 1, MAX_WINDOW),
        raw_retention_days=float(count("retention.raw_days", RAW_RETENTION_DAYS)),
        backup_expiry_days=float(count("retention.backup_days", BACKUP_EXPIRY_DAYS)),
        retained_snapshots=int(count("retention.retained_snapshots", RETAIN_VERSIONS, 1, 2**31 - 1)),
        schema_fixtures=schema_fixtures,
        audit=AuditCheck(days=days, max_fraction=float(_in_range(_require(doc, "checks.audit.max_fraction", file),
                                                                 "checks.audit.max_fraction", file, 0.0, 1.0))),
        thresholds=thresholds,
        checks=enabled, packet_dir=packet_dir, secret_names=secret_names,
        digest=hashlib.sha256(p.read_bytes()).hexdigest(),
        lake_from="config" if lake_override is None else "--lake",
        create_lake=bool(doc["lake"].get("create", False)),
    )
    _writable(packet_dir, file)
    return config


def _thresholds(doc: dict[str, Any], file: str) -> Thresholds:
    """The `thresholds:` section: shares in [0, 1], reason codes known, the defaults for what is left out."""

    def share(dotted: str) -> float:
        default = THRESHOLD_DEFAULTS.get(dotted, THRESHOLD_DEFAULTS["rejected.by_reason.default"])
        return float(_in_range(_get(doc, f"thresholds.{dotted}", default),
                               f"thresholds.{dotted}", file, 0.0, 1.0))

    from ..contract.reasons import Reason

    codes = {r.value for r in Reason}
    # erased_subject lines are the erasure working, not bad data: unlimited unless the config says otherwise
    by_reason: dict[str, float] = {"default": share("rejected.by_reason.default"), "erased_subject": 1.0}
    for code in (_get(doc, "thresholds.rejected.by_reason", {}) or {}):
        if code != "default" and code not in codes:
            raise ConfigError(f"{file}: thresholds.rejected.by_reason.{code}: unknown reason code (one of "
                              f"{', '.join(sorted(codes))}, or default)", file=file,
                              key=f"thresholds.rejected.by_reason.{code}")
        by_reason[code] = share(f"rejected.by_reason.{code}")
    thresholds = Thresholds(
        rejected_per_batch=share("rejected.per_batch"), rejected_mostly=share("rejected.mostly"),
        rejected_overall=share("rejected.overall"), rejected_by_reason=by_reason,
        late_events=share("late_events.max_share"),
        stale_days=int(_in_range(_get(doc, "thresholds.stale_events.older_than_days",
                                      THRESHOLD_DEFAULTS["stale_events.older_than_days"]),
                                 "thresholds.stale_events.older_than_days", file, 0)),
        stale_events=share("stale_events.max_share"), moved_orders=share("moved_orders.max_share"))
    return thresholds


def _parse_manifests(manifests: list[Path], file: str) -> None:
    """Each manifest parsed and checked as `publish` would, now: a bad one published nothing but failed the
    run after it had shipped and published the orders (exit 2, no packet)."""
    from ..external.manifest import load_manifest
    from ..tables import DEFAULT_TABLES_DIR, load_table_defs

    tables = load_table_defs(DEFAULT_TABLES_DIR)  # the tables a release run's lake has (open_run_lake)
    for i, path in enumerate(manifests):
        try:
            load_manifest(path, tables)
        except InputError as exc:
            raise ConfigError(f"{file}: sources.manifests[{i}]: {exc.message}", file=file,
                              key=f"sources.manifests[{i}]") from None


def _writable(packet_dir: Path, file: str) -> None:
    """The packet folder can be written (the last check of a valid config), so one that cannot fails the
    run before it commits anything, not after it published (exit 1, no packet). Leaves no trace: a temp
    file in the folder, or, when it does not exist yet, a temp folder in its nearest existing parent."""
    existing = packet_dir
    while not existing.exists() and existing.parent != existing:
        existing = existing.parent
    try:
        if existing == packet_dir:
            tempfile.TemporaryFile(dir=packet_dir).close()
        else:
            os.rmdir(tempfile.mkdtemp(dir=existing))
    except OSError as exc:
        raise ConfigError(f"{file}: packet.directory cannot be written: {packet_dir} ({exc.strerror or exc})",
                          file=file, key="packet.directory") from None
