"""`erase ORDER_ID`: one strict commit that removes every row of the subject, tombstones included.

Order of work, each step safe to repeat after a crash:
1. the ledger gets a `pending` entry (keyed hash only): from now on ingest and replay block the subject,
   and a version that holds it is refused by a scan of that version;
2. the partitions holding the subject are rewritten at the latest version without its rows, through the
   same stage -> gate -> strict commit path as ingest (a stale parent re-reads and rebuilds);
3. the entry becomes `done`, with the version ranges and data files that still hold the subject, found
   from the table's lineage and a scan of the key column of every file still on storage;
4. the quarantine forgets the subject's raw text (rows of the subject's hash, and unparseable lines that
   contain the id).
The plain id lives only in this call's memory; nothing here writes it, and no error names it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import polars as pl

from .. import _delta
from ..arguments import finite
from ..clock import iso
from ..commit.writer import Change, Plan, replace_partitions, write
from ..context import LakeContext, TableContext
from ..contract.decode import MAX_ORDER_ID
from ..errors import DeltaReleaseError, InputError
from ..tables import DEFAULT_TABLE
from ..views import partition_filter
from .ledger import ErasureEntry
from .lineage import data_files_on_storage, files_holding, merge_ranges, table_lineage
from .pending import BACKUP_EXPIRY_DAYS, RAW_RETENTION_DAYS, pending_for, raw_batches_holding


@dataclass(slots=True, kw_only=True)
class ErasureReport:
    subject: str  # the keyed hash, never the id
    table: str
    version: int | None
    rows_removed: int
    partitions: list[int | None] = field(default_factory=list)
    files_removed: list[str] = field(default_factory=list)
    exposed_versions: list[list[int]] = field(default_factory=list)
    quarantine_scrubbed: int = 0
    already_erased: bool = False
    attempts: int = 0
    stale_parents: list[dict[str, Any]] = field(default_factory=list)
    pending: list[dict[str, Any]] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {
            "subject": self.subject, "table": self.table, "version": self.version,
            "rows_removed": self.rows_removed, "partitions": self.partitions,
            "files_removed": self.files_removed, "exposed_versions": self.exposed_versions,
            "quarantine_scrubbed": self.quarantine_scrubbed, "already_erased": self.already_erased,
            "attempts": self.attempts, "stale_parents": self.stale_parents, "pending": self.pending,
        }


def _check_id(order_id: Any) -> str:
    if not isinstance(order_id, str) or not order_id or len(order_id) > MAX_ORDER_ID:
        raise InputError(f"an order id must be 1 to {MAX_ORDER_ID} characters")
    return order_id


class RemoveSubject(Plan):
    """The table without one subject's rows (tombstones too): the partitions holding it, rewritten."""

    def __init__(self, order_id: str) -> None:
        self.order_id = order_id
        self.rows_removed = 0
        self.partitions: list[Any] = []

    def build(self, ctx: TableContext, parent: int) -> Change:
        key, pcol = ctx.table.key or "", ctx.table.partition
        lf = _delta.scan(ctx.uri, ctx.storage_options, parent)
        hits = lf.filter(pl.col(key) == self.order_id).select(pcol).collect()
        self.partitions = sorted(set(hits[pcol].to_list()), key=lambda d: (d is None, d or 0))
        if not self.partitions:
            self.rows_removed = 0
            return Change(operation="erase")
        base = lf.filter(partition_filter(pcol, self.partitions)).collect()
        kept = base.filter(pl.col(key) != self.order_id)
        self.rows_removed = base.height - kept.height
        partitions = {d: kept.filter(partition_filter(pcol, [d])) for d in self.partitions}
        return replace_partitions(ctx, parent, partitions, operation="erase",
                                  details={"rows_removed": self.rows_removed, "subjects_removed": 1})


def _remove_subject(lake: LakeContext, table: str, order_id: str, report: ErasureReport) -> None:
    """Commit the table without the subject's rows (no commit when it holds none)."""
    plan = RemoveSubject(order_id)
    result = write(lake.table(table), plan)
    report.attempts = result.attempts
    report.stale_parents = [s.to_json() for s in result.stale_parents]
    if result.version is None:
        return
    report.version = result.version
    report.rows_removed = plan.rows_removed
    report.partitions = plan.partitions
    report.files_removed = [r.path for r in result.staged.removes]


def scrub_quarantine_text(lake: LakeContext, order_id: str) -> int:
    """Forget the raw text of rejected lines that name the subject but whose subject was never known
    (a line too broken to parse keeps its raw text, and with it the id). Returns the rows changed."""
    from ..contract import Reason, Reject

    rows = lake.quarantine.rows()
    if rows.height == 0:
        return 0
    hit = rows.filter(pl.col("raw").is_not_null() & pl.col("raw").str.contains(order_id, literal=True))
    changed = 0
    for (batch_id,) in hit.select("batch_id").unique().iter_rows():
        batch = rows.filter(pl.col("batch_id") == batch_id).sort("line")
        rejects = [Reject(line=r["line"], reason=Reason(r["reason"]), detail=r["detail"],
                          raw=None if r["raw"] is not None and order_id in r["raw"] else r["raw"],
                          order_id=r["subject"])  # already a keyed hash: written back as it is
                   for r in batch.iter_rows(named=True)]
        changed += sum(1 for r in batch.iter_rows(named=True) if r["raw"] is not None and order_id in r["raw"])
        lake.quarantine.write(batch_id, rejects, lambda subject: subject)
    return changed


def erase_subject(lake: LakeContext, order_id: str, *, table: str = DEFAULT_TABLE,
                  raw_retention_days: float = RAW_RETENTION_DAYS,
                  backup_expiry_days: float | None = BACKUP_EXPIRY_DAYS) -> ErasureReport:
    """Erase one subject (an order id) from `table`; see the module docstring for the steps."""
    order_id = _check_id(order_id)
    raw_retention_days = finite("raw_retention_days", raw_retention_days)
    if backup_expiry_days is not None:
        backup_expiry_days = finite("backup_expiry_days", backup_expiry_days)
    tdef = lake.table_def(table)
    if not tdef.key:
        raise InputError(f"table {table} has no subject key; erasure applies to keyed tables", table=table)
    ledger = lake.erasures
    subject = ledger.subject_key(order_id)
    existing = ledger.get(subject)
    report = ErasureReport(subject=subject, table=table, version=None, rows_removed=0,
                           already_erased=existing is not None and existing.done)
    entry = existing if existing is not None else ErasureEntry(
        subject=subject, version=None, erased_at=iso(lake.clock.now()), table=table, state="pending")
    if existing is None:
        entry = ledger.write(entry)  # create-only: a concurrent erasure's entry stands
    _remove_subject(lake, table, order_id, report)

    lineage = table_lineage(lake, table)
    present = data_files_on_storage(lake, table)
    holding = files_holding(lake, table, tdef.key, order_id, sorted(p for p in lineage.lifetimes if p in present))
    exposed = merge_ranges([r for p in holding for r in lineage.ranges(p)])
    still_current = sorted(holding & lineage.files_at(lineage.latest))
    if still_current:  # a concurrent writer re-added it after our commit: refuse to call this done
        raise DeltaReleaseError("erasure incomplete: the latest version still holds the subject; run erase again",
                                table=table, version=lineage.latest, files=still_current)
    entry = ledger.update(
        entry, state="done", version=report.version if report.version is not None else entry.version,
        exposed=exposed, files=sorted(holding), raw_batches=raw_batches_holding(lake, order_id),
        rows_removed=entry.rows_removed + report.rows_removed)
    report.exposed_versions = exposed
    report.quarantine_scrubbed = lake.quarantine.scrub_subject(subject) + scrub_quarantine_text(lake, order_id)
    report.pending = pending_for(lake, entry, raw_retention_days=raw_retention_days,
                                 backup_expiry_days=backup_expiry_days)
    return report
