"""`vacuum [--apply]`: retention- and erasure-aware cleanup of a table's data files (dry run by default).

A version is *needed* when it is the latest or the published one, one of the newest `retain_versions`
versions (rollback targets), or committed within the replay horizon (`replay_horizon_hours`, measured
on the lake's clock; 0 turns it off). A version that still holds an erased subject is never needed: no
read, restore or rollback may use it. Every data file a needed version references is kept. Every other
file is removed: first of all files holding an erased subject (`erased_subject`), as soon as no needed
version references them; then files that only versions refused for an erased subject still need, however
recent (`refused_version`, with those `versions`); then expired files (`expired`: past the retention and
the replay horizon); then orphans (in no version at all, e.g. staged files of a killed writer)
once older than `orphan_grace_hours`, so an in-flight writer's staged candidate is never touched.

Temp files anywhere in the lake (`.tmp-*`, left by a writer killed between writing and renaming them,
and holding whatever it was writing: in the `_tmp/` folders, or next to their final names when an earlier
version wrote them) and in every table root outside the lake (reported by full path) are reported in
`temp_files` and removed once stale: their writer is gone, or they are older than `orphan_grace_hours`
(`Storage.temp_files`); a running writer's are reported as kept.

Files are deleted directly on storage; no Delta commit is written, so vacuum never makes a concurrent
writer's parent stale. The Delta log itself is left alone: it holds no subject ids (DESIGN.md, 5).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

import pyarrow.fs as pafs

from ..arguments import finite
from ..erasure.lineage import table_lineage
from ..erasure.permission import snapshot_allowed
from ..erasure.vacuumlog import record_vacuum
from ..errors import InputError
from ..faults import crash_point
from ..quarantine.temp_sweep import lake_temp_files, shown_temp_files
from ..storage import TEMP_PREFIX

if TYPE_CHECKING:
    from ..context import LakeContext

from ..retention import ORPHAN_GRACE_HOURS, REPLAY_HORIZON_HOURS, RETAIN_VERSIONS  # noqa: E402 - one set

_PRIORITY = ("latest", "published", "retained", "replay_horizon")


@dataclass(slots=True, kw_only=True)
class VacuumReport:
    table: str
    dry_run: bool
    latest: int
    published: int | None
    needed_versions: dict[int, str]
    refused_versions: list[int]  # versions left unneeded because they hold an erased subject
    removed: list[dict[str, Any]] = field(default_factory=list)
    kept: list[dict[str, Any]] = field(default_factory=list)
    kept_current: int = 0
    bytes_removed: int = 0
    temp_files: list[dict[str, Any]] = field(default_factory=list)  # relative to the lake root (outside: full)
    vacuum_id: str | None = None  # the record of this run under _vacuum/ (vacuumlog.py), when it removed files

    def to_json(self) -> dict[str, Any]:
        counts: dict[str, int] = {}
        for item in self.removed:
            counts[item["reason"]] = counts.get(item["reason"], 0) + 1
        return {"table": self.table, "dry_run": self.dry_run, "applied": not self.dry_run,
                "latest": self.latest, "published": self.published,
                "needed_versions": {str(v): r for v, r in sorted(self.needed_versions.items())},
                "refused_versions": self.refused_versions, "removed": self.removed,
                "removed_by_reason": dict(sorted(counts.items())), "kept": self.kept,
                "kept_current": self.kept_current, "bytes_removed": self.bytes_removed,
                "temp_files": self.temp_files, "vacuum_id": self.vacuum_id}


def _table_files(lake: LakeContext, table: str) -> list[tuple[str, int, datetime | None]]:
    """(path, size, modified) of every file in the table directory outside the Delta log."""
    store = lake.table_storage(table)
    base = store.uri().removeprefix("s3://") if not store.is_local else store.root
    selector = pafs.FileSelector(base, recursive=True, allow_not_found=True)
    out = []
    for info in store.fs.get_file_info(selector):
        if info.type != pafs.FileType.File:
            continue
        rel = info.path[len(base) + 1:]
        if rel.startswith("_delta_log/") or rel == "_delta_log" or rel.rsplit("/", 1)[-1].startswith(TEMP_PREFIX):
            continue  # the log, and temp files: the lake-wide temp sweep reports those
        mtime = info.mtime
        if mtime is not None and mtime.tzinfo is None:
            mtime = mtime.replace(tzinfo=UTC)
        out.append((rel, int(info.size), mtime))
    return sorted(out)


def vacuum_table(lake: LakeContext, *, table: str = "orders", apply: bool = False,
                 retain_versions: int = RETAIN_VERSIONS, replay_horizon_hours: float = REPLAY_HORIZON_HOURS,
                 orphan_grace_hours: float = ORPHAN_GRACE_HOURS) -> VacuumReport:
    lake.table_def(table)  # one of the lake's own tables: a registered table (written by others) is never vacuumed
    replay_horizon_hours = finite("replay_horizon_hours", replay_horizon_hours)
    orphan_grace_hours = finite("orphan_grace_hours", orphan_grace_hours)
    if isinstance(retain_versions, bool) or not isinstance(retain_versions, int) or retain_versions < 0:
        raise InputError(f"retain_versions must be an integer >= 0, found {retain_versions!r}",
                         argument="retain_versions")
    lineage = table_lineage(lake, table)
    latest = lineage.latest
    pub = lake.published(table)
    now = lake.clock.now()
    wanted: dict[int, str] = {latest: "latest"}
    if pub is not None:
        wanted.setdefault(pub.version, "published")
    for v in range(max(0, latest - max(retain_versions, 0) + 1), latest + 1):
        wanted.setdefault(v, "retained")
    if replay_horizon_hours > 0:
        horizon_ms = (now - timedelta(hours=replay_horizon_hours)).timestamp() * 1000
        for v, ts in lineage.timestamps.items():
            if ts >= horizon_ms:
                wanted.setdefault(v, "replay_horizon")
    needed: dict[int, str] = {}
    refused: list[int] = []
    for v, reason in sorted(wanted.items()):
        if reason in ("latest", "published") or snapshot_allowed(lake, table, v):
            needed[v] = reason
        else:
            refused.append(v)
    erased_files = {p for e in lake.erasures.entries() if e.table == table for p in (e.files or [])}
    current = lineage.files_at(latest)
    report = VacuumReport(table=table, dry_run=not apply, latest=latest,
                          published=None if pub is None else pub.version, needed_versions=needed,
                          refused_versions=refused)
    grace = timedelta(hours=orphan_grace_hours)
    for path, size, mtime in _table_files(lake, table):
        if path in current:
            report.kept_current += 1
            continue
        if path not in lineage.lifetimes:
            young = orphan_grace_hours > 0 and (mtime is None or mtime > now - grace)
            if young:
                report.kept.append({"path": path, "reason": "in_flight", "size": size})
            else:
                report.removed.append({"path": path, "reason": "orphan", "size": size})
            continue
        users = lineage.referenced(path, set(needed))
        if users:
            reason = min((needed[v] for v in users), key=_PRIORITY.index)
            report.kept.append({"path": path, "reason": reason, "size": size,
                                "versions": sorted(users)})
            continue
        if path in erased_files:
            report.removed.append({"path": path, "reason": "erased_subject", "size": size})
            continue
        refused_users = lineage.referenced(path, set(refused))  # kept by retention but for an erased subject
        if refused_users:
            report.removed.append({"path": path, "reason": "refused_version", "size": size,
                                   "versions": sorted(refused_users)})
        else:
            report.removed.append({"path": path, "reason": "expired", "size": size})
    report.removed.sort(key=lambda r: (r["reason"] != "erased_subject", r["path"]))
    report.bytes_removed = sum(r["size"] for r in report.removed)
    temps = lake_temp_files(lake.storage, max(orphan_grace_hours, 0) * 3600, tables=lake.table_roots())
    report.temp_files = [{**t.to_json(), "action": ("removed" if apply else "would_remove") if t.stale else "kept"}
                         for t in shown_temp_files(lake.storage, temps)]
    if apply:
        record = record_vacuum(lake, table, lineage, [r["path"] for r in report.removed])
        report.vacuum_id = None if record is None else record["vacuum"]
        store = lake.table_storage(table)
        for i, item in enumerate(report.removed):
            store.delete(item["path"])
            if i == 0:
                crash_point("vacuum.after_first_remove")
        for owner, t in temps:
            if t.stale:
                owner.delete_temp(t.path)
    return report
