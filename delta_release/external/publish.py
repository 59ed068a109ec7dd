"""Publish an external partition: gate, one strict Delta commit, the catalog generation, cache refresh.

The commit registers the manifest's files as add actions and removes the partition's files that the new
generation does not list, so a corrected generation replaces an hour in one commit and readers move as a
unit. Removed files stay on storage (retained until the replay horizon closes); only vacuum deletes them.
A failed gate commits nothing and publishes nothing.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any

from .. import _delta
from ..commit.writer import Change, ExistingFile, Plan, write
from ..context import LakeContext, TableContext
from ..errors import InputError
from ..evidence import FileRecord
from ..gateway.catalog import Publication
from ..lakeroot import holds_lake
from ..maintenance.upkeep import before_work
from ..storage import Storage
from ..tables import DEFAULT_TABLES_DIR, load_table_defs
from .manifest import GateReport, Manifest, gate_manifest, load_manifest


@dataclass(slots=True, kw_only=True)
class PublishReport:
    gate: GateReport
    version: int | None = None
    catalog: dict[str, Any] | None = None
    cache: dict[str, Any] | None = None
    added: list[str] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)
    already_published: bool = False

    @property
    def ok(self) -> bool:
        return self.gate.ok

    def to_json(self) -> dict[str, Any]:
        return {**self.gate.to_json(), "published": self.gate.ok and not self.already_published,
                "already_published": self.already_published, "version": self.version,
                "catalog": self.catalog, "cache": self.cache, "added": self.added, "removed": self.removed}


def ensure_table(lake: LakeContext, name: str) -> None:
    """Create the external table's Delta log (version 0, empty) on first use."""
    tdef = lake.table_def(name)
    uri = lake.table_uri(name)
    if lake.latest_version(name) is None:
        _delta.create_table(uri, lake.options, tdef.arrow_schema(), [tdef.partition], name=name)


class RegisterPartition(Plan):
    """A gated manifest's files as add actions; the partition's files it does not list, removed."""

    def __init__(self, manifest: Manifest, gate: GateReport) -> None:
        self.manifest, self.gate = manifest, gate

    def build(self, ctx: TableContext, parent: int) -> Change:
        manifest, pcol = self.manifest, ctx.table.partition
        in_part = [e for e in _delta.file_entries(ctx.uri, ctx.storage_options, parent)
                   if _as_int(e.partition_values.get(pcol)) == manifest.value]
        listed = {f.path for f in manifest.files}
        have = {e.path for e in in_part}
        now_ms = ctx.now_ms()
        existing = [ExistingFile(
            add=_delta.FileAdd(path=f.path, size=f.size_bytes, partition_values={pcol: str(manifest.value)},
                               stats=self.gate.stats[f.path], modification_time=now_ms),
            record=FileRecord(path=f.path, size=f.size_bytes, sha256=f.sha256, rows=f.records,
                              partition={pcol: manifest.value}, min_partition=manifest.value,
                              max_partition=manifest.value))
            for f in manifest.files if f.path not in have]
        return Change(operation="publish", existing=existing, removes=[e for e in in_part if e.path not in listed],
                      label=manifest.generation,
                      details={"generation": manifest.generation, "partition": {manifest.column: manifest.value},
                               "manifest_sha256": manifest.digest()})


def publish_manifest(lake: LakeContext, manifest: Manifest) -> PublishReport:
    ensure_table(lake, manifest.table)
    ctx = lake.table(manifest.table)
    before_work(ctx)
    gate = gate_manifest(lake, manifest)
    report = PublishReport(gate=gate)
    if not gate.ok:
        report.catalog = _pub_json(lake.published(manifest.table))
        return report
    result = write(ctx, RegisterPartition(manifest, gate))
    if result.version is None:  # every listed file is already registered
        current = lake.published(manifest.table)
        report.already_published = True
        report.version = current.version if current is not None else None
        report.catalog = _pub_json(current)
    else:
        report.version = result.version
        report.catalog = _pub_json(result.publication)
        report.added = [a.path for a in result.staged.adds]
        report.removed = [e.path for e in result.staged.removes]
    report.cache = lake.gateway.refresh(manifest.table).to_json()
    return report


def _pub_json(pub: Publication | None) -> dict[str, Any] | None:
    if pub is None:
        return None
    return {"generation": pub.generation, "version": pub.version, "label": pub.label, "completed": pub.completed,
            "digest": pub.digest}


def _as_int(value: Any) -> int | None:
    try:
        return None if value is None else int(str(value))
    except ValueError:
        return None


def check_publish_target(uri: str, manifest: str | os.PathLike[str], storage_options: dict[str, str] | None,
                         *, create: bool) -> None:
    """A bad manifest is refused (InputError) before any lake is opened or created. With `create`, when
    `uri` holds no lake, `publish --create` may create one only where the producer put the manifest's
    objects (its partition folder under the table's root): a mistyped --lake has none, and its gate would
    fail after the lake had been created. InputError (exit 2), nothing created."""
    parsed = load_manifest(manifest, load_table_defs(DEFAULT_TABLES_DIR))
    if not create:
        return
    root = Storage(uri, storage_options)
    if holds_lake(root):
        return
    tdef = load_table_defs(DEFAULT_TABLES_DIR)[parsed.table]
    folder = f"{tdef.location or tdef.name}/{parsed.directory}"
    if not root.list(folder, recursive=False):
        raise InputError(f"--lake {uri}: holds no lake, and the manifest's objects are not there "
                         f"({folder}/ is empty or missing): nothing to publish", argument="--lake")
