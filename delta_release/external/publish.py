"""Publish an external partition: gate, one strict Delta commit, the catalog generation, cache refresh.

The commit registers the manifest's files as add actions and removes the partition's files that the new
generation does not list, so a corrected generation replaces an hour in one commit and readers move as a
unit. Removed files stay on storage (retained until the replay horizon closes); only vacuum deletes them.
A failed gate commits nothing and publishes nothing.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from .. import _delta
from .manifest import GateReport, Manifest, gate_manifest

if TYPE_CHECKING:
    from ..lake import Lake


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


def ensure_table(lake: Lake, name: str) -> None:
    """Create the external table's Delta log (version 0, empty) on first use."""
    tdef = lake.table_def(name)
    uri = lake.table_uri(name)
    if lake.latest_version(name) is None:
        _delta.create_table(uri, lake.options, tdef.arrow_schema(), [tdef.partition], name=name)


def publish_manifest(lake: Lake, manifest: Manifest) -> PublishReport:
    ensure_table(lake, manifest.table)
    lake.recover_publication(manifest.table)
    gate = gate_manifest(lake, manifest)
    report = PublishReport(gate=gate)
    current = lake.published(manifest.table)
    if not gate.ok:
        report.catalog = _pub_json(current)
        return report
    tdef = lake.table_def(manifest.table)
    uri = lake.table_uri(manifest.table)
    parent = lake.latest_version(manifest.table)
    assert parent is not None
    in_hour = [e for e in _delta.file_entries(uri, lake.options, parent)
               if _as_int(e.partition_values.get(tdef.partition)) == manifest.value]
    listed = {f.path for f in manifest.files}
    have = {e.path for e in in_hour}
    removes = [e for e in in_hour if e.path not in listed]
    now_ms = int(lake.clock.now().timestamp() * 1000)
    adds = [_delta.FileAdd(path=f.path, size=f.size_bytes, partition_values={tdef.partition: str(manifest.value)},
                           stats=gate.stats[f.path], modification_time=now_ms)
            for f in manifest.files if f.path not in have]
    if not adds and not removes and current is not None and current.version >= parent:
        report.already_published = True
        report.version = current.version
        report.catalog = _pub_json(current)
        report.cache = lake.gateway.refresh(manifest.table).to_json()
        return report
    evidence: dict[str, Any] = {
        "operation": "publish", "table": manifest.table, "generation": manifest.generation,
        "partition": {manifest.column: manifest.value}, "manifest_sha256": manifest.digest(), "parent": parent,
        "files": [{"path": f.path, "size": f.size_bytes, "rows": f.records, "sha256": f.sha256}
                  for f in manifest.files if f.path not in have],
        "removed": [e.path for e in removes],
    }
    evidence["digest"] = hashlib.sha256(json.dumps(evidence, sort_keys=True).encode()).hexdigest()
    version = _delta.commit(uri, lake.options, table=manifest.table, parent=parent, adds=adds, removes=removes,
                            evidence=evidence, partition_by=[tdef.partition])
    pub = lake.publish_version(manifest.table, version, digest=evidence["digest"], label=manifest.generation)
    report.version = version
    report.catalog = _pub_json(pub)
    report.cache = lake.gateway.refresh(manifest.table).to_json()
    report.added = [a.path for a in adds]
    report.removed = [e.path for e in removes]
    return report


def _pub_json(pub: Any) -> dict[str, Any] | None:
    if pub is None:
        return None
    return {"generation": pub.generation, "version": pub.version, "label": pub.label, "completed": pub.completed,
            "digest": pub.digest}


def _as_int(value: Any) -> int | None:
    try:
        return None if value is None else int(str(value))
    except ValueError:
        return None
