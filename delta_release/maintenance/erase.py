"""`erase ORDER_ID`: one strict commit that removes every row of the subject, tombstones included.

Order of work, each step safe to repeat after a crash:
1. the ledger gets a `pending` entry (keyed hash only): from now on ingest and replay block the subject,
   and a version that holds it is refused by a scan of that version;
2. the partitions holding the subject are rewritten at the latest version without its rows, through the
   same stage -> gate -> strict commit path as ingest (a stale parent re-reads and rebuilds);
3. the entry becomes `done`, with the version ranges and data files that still hold the subject, found
   from the table's lineage and a scan of the key column of every file still on storage;
4. stale temp files (a killed writer's, which may hold the subject's text) are removed.
The quarantine holds no payload text (it points into the raw batches), so nothing there needs scrubbing.
The plain id lives only in this call's memory; nothing here writes it, and no error names it.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any

import polars as pl

from .. import _delta, index
from ..arguments import finite
from ..clock import iso
from ..commit.writer import Change, Plan, replace_partitions, write
from ..context import LakeContext, TableContext
from ..contract.decode import MAX_ORDER_ID
from ..erasure.ledger import ErasureEntry
from ..erasure.lineage import data_files_on_storage, files_holding, merge_ranges, table_lineage
from ..erasure.pending import pending_for, raw_batches_holding
from ..errors import DeltaReleaseError, InputError
from ..faults import crash_point
from ..quarantine.temp_sweep import sweep_lake_temp
from ..retention import BACKUP_EXPIRY_DAYS, RAW_RETENTION_DAYS
from ..storage import HOST_TAG
from ..storage import _pid_alive as pid_alive
from ..tables import DEFAULT_TABLE
from ..views import partition_filter


@dataclass(slots=True, kw_only=True)
class ErasureReport:
    subject: str  # the keyed hash, never the id
    table: str
    version: int | None
    rows_removed: int
    partitions: list[int | None] = field(default_factory=list)
    files_removed: list[str] = field(default_factory=list)
    exposed_versions: list[list[int]] = field(default_factory=list)
    temp_files_removed: list[str] = field(default_factory=list)
    erasures_completed: int = 0  # pending erasures of killed writers completed before this one
    already_erased: bool = False
    attempts: int = 0
    stale_parents: list[dict[str, Any]] = field(default_factory=list)
    pending: list[dict[str, Any]] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {
            "subject": self.subject, "table": self.table, "version": self.version,
            "rows_removed": self.rows_removed, "partitions": self.partitions,
            "files_removed": self.files_removed, "exposed_versions": self.exposed_versions,
            "temp_files_removed": self.temp_files_removed,
            "erasures_completed": self.erasures_completed, "already_erased": self.already_erased,
            "attempts": self.attempts, "stale_parents": self.stale_parents, "pending": self.pending,
        }


def _check_id(subject_id: Any) -> str:
    if not isinstance(subject_id, str) or not subject_id or len(subject_id) > MAX_ORDER_ID:
        raise InputError(f"an order id must be 1 to {MAX_ORDER_ID} characters")
    return subject_id


class RemoveSubject(Plan):
    """The table without one subject's rows (tombstones too): the partitions holding it, rewritten."""

    def __init__(self, subject_id: str) -> None:
        self.subject_id = subject_id
        self.rows_removed = 0
        self.partitions: list[Any] = []

    def build(self, ctx: TableContext, parent: int) -> Change:
        key, pcol = ctx.table.key or "", ctx.table.partition
        lf = _delta.scan(ctx.uri, ctx.storage_options, parent)
        keys = index.key_index(ctx)
        if keys is not None:  # the partition the key index names (stale at worst: then it holds nothing)
            where = keys.locate([self.subject_id], upto=parent)
            lf = lf.filter(partition_filter(pcol, list(where.values())))
        hits = lf.filter(pl.col(key) == self.subject_id).select(pcol).collect()
        self.partitions = sorted(set(hits[pcol].to_list()), key=lambda d: (d is None, d or 0))
        if not self.partitions:
            self.rows_removed = 0
            return Change(operation="erase")
        base = lf.filter(partition_filter(pcol, self.partitions)).collect()
        kept = base.filter(pl.col(key) != self.subject_id)
        self.rows_removed = base.height - kept.height
        partitions = {d: kept.filter(partition_filter(pcol, [d])) for d in self.partitions}
        change = replace_partitions(ctx, parent, partitions, operation="erase",
                                    details={"rows_removed": self.rows_removed, "subjects_removed": 1})
        change.locations, change.gone_keys = {}, [self.subject_id]  # the rest of those partitions stays put
        return change


def _remove_subject(lake: LakeContext, table: str, subject_id: str, report: ErasureReport) -> None:
    """Commit the table without the subject's rows (no commit when it holds none). The caller ran the
    writers' upkeep (maintenance/upkeep.py) already, or is that upkeep (completing pending erasures)."""
    plan = RemoveSubject(subject_id)
    ctx = lake.table(table)
    result = write(ctx, plan)
    keys = index.key_index(ctx)
    latest = ctx.latest_version()
    if keys is not None and latest is not None:  # the subject's hash leaves the key index's files
        keys.forget(subject_id, latest)
    report.attempts = result.attempts
    report.stale_parents = [s.to_json() for s in result.stale_parents]
    if result.version is None:
        return
    report.version = result.version
    report.rows_removed = plan.rows_removed
    report.partitions = plan.partitions
    report.files_removed = [r.path for r in result.staged.removes]


def check_request(lake: LakeContext, subject_id: Any, *, table: str = DEFAULT_TABLE,
                  raw_retention_days: float = RAW_RETENTION_DAYS,
                  backup_expiry_days: float | None = BACKUP_EXPIRY_DAYS) -> tuple[str, float, float | None]:
    """The checked arguments of an erasure (InputError naming the wrong one); nothing is read or written."""
    subject_id = _check_id(subject_id)
    raw_retention_days = finite("raw_retention_days", raw_retention_days)
    if backup_expiry_days is not None:
        backup_expiry_days = finite("backup_expiry_days", backup_expiry_days)
    tdef = lake.table_def(table)
    if not tdef.key:
        raise InputError(f"table {table} has no subject key; erasure applies to keyed tables", table=table)
    return subject_id, raw_retention_days, backup_expiry_days


def erase_subject(lake: LakeContext, subject_id: str, *, table: str = DEFAULT_TABLE,
                  raw_retention_days: float = RAW_RETENTION_DAYS,
                  backup_expiry_days: float | None = BACKUP_EXPIRY_DAYS) -> ErasureReport:
    """Erase one subject (an order id) from `table`; see the module docstring for the steps. Like every
    writer's, its upkeep runs first, by its caller (`Lake.erase`: maintenance/upkeep.py `before_work`),
    which completes a killed erasure (this subject's too)."""
    subject_id, raw_retention_days, backup_expiry_days = check_request(
        lake, subject_id, table=table, raw_retention_days=raw_retention_days, backup_expiry_days=backup_expiry_days)
    return _erase(lake, subject_id, table, raw_retention_days=raw_retention_days,
                  backup_expiry_days=backup_expiry_days)


def _erase(lake: LakeContext, subject_id: str, table: str, *, raw_retention_days: float = RAW_RETENTION_DAYS,
           backup_expiry_days: float | None = BACKUP_EXPIRY_DAYS) -> ErasureReport:
    """Steps 1-4 of the module docstring (the writers' upkeep already ran, or this is it)."""
    tdef = lake.table_def(table)
    assert tdef.key is not None
    ledger = lake.erasures
    subject = ledger.subject_key(subject_id)
    existing = ledger.get(subject)
    report = ErasureReport(subject=subject, table=table, version=None, rows_removed=0,
                           already_erased=existing is not None and existing.done)
    entry = existing if existing is not None else ErasureEntry(
        subject=subject, version=None, erased_at=iso(lake.clock.now()), table=table, state="pending",
        owner=f"{HOST_TAG}-{os.getpid()}", sealed_length=ledger.seal_length(subject_id))
    if existing is None:
        entry = ledger.write(entry)  # create-only: a concurrent erasure's entry stands
    crash_point("erase.after_ledger")
    _ERASING.add(subject)
    try:
        _remove_subject(lake, table, subject_id, report)
    finally:
        _ERASING.discard(subject)

    lineage = table_lineage(lake, table)
    present = data_files_on_storage(lake, table)
    holding = files_holding(lake, table, tdef.key, subject_id, sorted(p for p in lineage.lifetimes if p in present))
    exposed = merge_ranges([r for p in holding for r in lineage.ranges(p)])
    still_current = sorted(holding & lineage.files_at(lineage.latest))
    if still_current:  # a concurrent writer re-added it after our commit: refuse to call this done
        raise DeltaReleaseError("erasure incomplete: the latest version still holds the subject; run erase again",
                                table=table, version=lineage.latest, files=still_current)
    entry = ledger.update(
        entry, state="done", version=report.version if report.version is not None else entry.version,
        exposed=exposed, files=sorted(holding), raw_batches=raw_batches_holding(lake, subject_id),
        rows_removed=entry.rows_removed + report.rows_removed,
        retention={"raw_days": raw_retention_days, "backup_days": backup_expiry_days or 0.0})
    report.exposed_versions = exposed
    report.temp_files_removed = [t.path for t in sweep_lake_temp(lake.storage, tables=lake.table_roots())]
    report.pending = pending_for(lake, entry, raw_retention_days=raw_retention_days,
                                 backup_expiry_days=backup_expiry_days)
    return report


# -- completing an erasure a killed writer left pending (issue 13, item 4) -------------------------
def _find_subject(lake: LakeContext, entry: ErasureEntry) -> str | None:
    """The plain id of a pending entry's subject, recovered from what still holds it (the ledger keeps
    only the keyed hash): the latest version's keys, then every data file on storage, then the raw
    batches. None when nothing holds it any more. The id lives only in memory."""
    tdef = lake.tables.get(entry.table)
    if tdef is None or not tdef.key or lake.latest_version(entry.table) is None:
        return None
    key, uri = tdef.key, lake.table_uri(entry.table)

    def match(ids: list[str]) -> str | None:
        return next((i for i in ids if i is not None and lake.erasures.subject_key(i) == entry.subject), None)

    latest = lake.latest_version(entry.table)
    found = match(_delta.scan(uri, lake.options, latest).select(pl.col(key).unique()).collect()[key].to_list())
    if found is None:
        paths = sorted(data_files_on_storage(lake, entry.table))
        if paths:
            store = lake.table_storage(entry.table)
            frame = pl.scan_parquet([store.uri(p) for p in paths], hive_partitioning=False,
                                    storage_options=lake.options or None).select(pl.col(key).unique())
            found = match(frame.collect()[key].to_list())
    if found is None:
        from ..contract import decode_batch

        for batch in lake.raw.list():
            decoded = decode_batch(lake.raw.read_sha(batch.sha256))
            found = match(decoded.events[key].unique().to_list()
                          + [r.order_id for r in decoded.rejects if r.order_id])
            if found is not None:
                break
    return found


_ERASING: set[str] = set()  # subjects this process is erasing right now (their writers' upkeep skips them)


def _in_flight(entry: ErasureEntry) -> bool:
    """True when a live process is working on this pending entry: this one (a writer inside its own
    erasure), or another process on this host that is still running. A pending entry of a process that
    is gone (or of another host: we cannot tell, so we complete it; a duplicate erasure is harmless, a
    strict commit serialises the two) is a killed erasure."""
    if entry.subject in _ERASING:
        return True
    host, _, pid = (entry.owner or "").rpartition("-")
    return bool(pid.isdigit() and host == HOST_TAG and int(pid) != os.getpid() and pid_alive(int(pid)))


def complete_pending_erasures(lake: LakeContext) -> int:
    """Complete every erasure recorded in the ledger but never finished (its writer was killed between
    the ledger entry and the commit, or before the entry became done). Runs in every writer's upkeep
    (maintenance/upkeep.py `before_work`), before the writer's own work; returns how many it completed."""
    completed = 0
    for entry in lake.erasures.entries():
        if entry.done or _in_flight(entry):
            continue
        subject_id = _find_subject(lake, entry)
        if subject_id is not None:
            _erase(lake, subject_id, entry.table)
        else:  # nothing holds it any more: no version ever will (the subject is blocked)
            lake.erasures.update(entry, state="done", exposed=[], files=[])
        completed += 1
    return completed
