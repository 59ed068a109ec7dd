"""`rollback --to N [--repair-forward]`: point readers back at version N's content with a new commit.

- restore: when N holds no erased subject, one strict commit on the latest version adds N's files that
  the latest lacks and removes the latest's files that N lacks. Each re-added file is gated first: it
  exists, with the size the log records and the sha256 recorded when it was first committed.
- refuse: when N holds an erased subject, `ErasureExposureError` (exit 3); readers keep the latest.
- repair-forward: N's content minus every erased subject as a new version: partitions of N that hold an
  erased subject are rewritten without those rows (staged, gated), every other file of N is re-added.
A stale parent (another writer committed meanwhile) re-plans on the new latest version.
"""

from __future__ import annotations

import hashlib
import io
from dataclasses import dataclass, field
from typing import Any

import polars as pl
import pyarrow.parquet as pq

from .. import _delta
from ..commit.writer import Change, ExistingFile, Plan, partition_text, write
from ..context import LakeContext, TableContext
from ..erasure.lineage import table_lineage
from ..erasure.permission import exposing_entries, exposure_error, nearest_hint, pending_resume
from ..erasure.records import Lineage
from ..erasure.vacuumlog import check_readable
from ..errors import GateError, InputError
from ..evidence import FileRecord
from ..stage import partition_dir
from ..stage.candidate import file_stats
from ..tables import DEFAULT_TABLE
from ..views import partition_filter
from .upkeep import before_work


@dataclass(slots=True, kw_only=True)
class RollbackReport:
    table: str
    restored_to: int
    version: int | None
    mode: str  # "restore" or "repair-forward"
    parent: int
    files_added: list[str] = field(default_factory=list)
    files_removed: list[str] = field(default_factory=list)
    rows_dropped: int = 0  # rows of erased subjects left out (repair-forward)
    erased_subjects: int = 0
    attempts: int = 0
    stale_parents: list[dict[str, Any]] = field(default_factory=list)
    dry_run: bool = False  # the plan only: nothing staged, nothing committed (`version` is None)
    partitions_rewritten: list[str] = field(default_factory=list)  # repair-forward: rewritten without the erased

    def to_json(self) -> dict[str, Any]:
        return {"table": self.table, "restored_to": self.restored_to, "version": self.version,
                "mode": self.mode, "parent": self.parent, "files_added": self.files_added,
                "files_removed": self.files_removed, "rows_dropped": self.rows_dropped,
                "erased_subjects": self.erased_subjects, "attempts": self.attempts,
                "stale_parents": self.stale_parents, "dry_run": self.dry_run,
                "partitions_rewritten": self.partitions_rewritten}


def _regate(ctx: TableContext, entry: _delta.FileEntry, lineage: Lineage, now_ms: int) -> ExistingFile:
    """Check an existing file before it is committed again; return its add action and its evidence."""
    store = ctx.storage
    recorded = lineage.evidence.get(entry.path)
    pcol, pval = next(iter(entry.partition_values.items()))

    def fail(mismatch: str, detail: str) -> GateError:
        return GateError(f"cannot restore {entry.path}: {mismatch}: {detail}", path=entry.path, mismatch=mismatch)

    if not entry.path.startswith(partition_dir(pcol, pval) + "/"):
        raise fail("partition_path", f"expected a file under {partition_dir(pcol, pval)}/")
    size = store.size(entry.path)
    if size is None:
        raise fail("missing", "file does not exist (vacuumed?)")
    if size != entry.size or (recorded is not None and recorded.get("size") not in (None, size)):
        raise fail("size_mismatch", f"expected {entry.size} bytes, found {size}")
    data = store.read_bytes(entry.path)
    digest = hashlib.sha256(data).hexdigest()
    if recorded is not None and recorded.get("sha256") not in (None, digest):
        raise fail("checksum_mismatch", f"expected sha256 {str(recorded['sha256'])[:16]}..., found {digest[:16]}...")
    arrow = pq.read_table(io.BytesIO(data))
    if entry.num_records is not None and arrow.num_rows != entry.num_records:
        raise fail("count_mismatch", f"expected {entry.num_records} rows, found {arrow.num_rows}")
    add = _delta.FileAdd(path=entry.path, size=size, partition_values={pcol: partition_text(pval)},
                         stats=file_stats(arrow), modification_time=now_ms)
    record = FileRecord.from_json(recorded) if recorded is not None else FileRecord(
        path=entry.path, size=size, sha256=digest, rows=arrow.num_rows, partition={pcol: pval},
        min_partition=pval, max_partition=pval)
    return ExistingFile(add=add, record=record)


def _erased_mask_keys(lake: LakeContext, frame: pl.DataFrame, key: str, subjects: set[str]) -> list[str]:
    return [k for k in frame[key].unique().drop_nulls().to_list() if lake.erasures.subject_key(k) in subjects]


class RestorePlan(Plan):
    """Version `to`'s content as a change on the latest parent (or its repair without erased subjects)."""

    def __init__(self, lake: LakeContext, to: int, *, repair_forward: bool) -> None:
        self.lake, self.to, self.repair_forward = lake, to, repair_forward
        self.mode = "restore"
        self.rows_dropped = 0
        self.erased_subjects = 0
        self.parent = -1

    def build(self, ctx: TableContext, parent: int) -> Change:
        lake, to, table, pcol = self.lake, self.to, ctx.name, ctx.table.partition
        self.parent = parent
        if to < 0 or to >= parent:
            raise InputError(f"rollback target must be an earlier version of {table}: expected 0 to {parent - 1},"
                             f" found {to}", table=table, version=to, latest=parent)
        check_readable(lake, table, to, action="rolling back to")  # vacuumed: nothing left to restore
        exposing = exposing_entries(lake, table, to)
        if exposing and not self.repair_forward:
            err = exposure_error(table, to, len(exposing), action="rolling back to",
                                 hint=nearest_hint(lake, table, to), resume=pending_resume(lake, exposing))
            err.message += "; use --repair-forward to restore it without the erased subjects"
            err.args = (err.message,)
            raise err
        self.mode = "repair-forward" if exposing else "restore"
        self.erased_subjects = len(exposing)
        lineage = table_lineage(lake, table)
        target = _delta.file_entries(ctx.uri, ctx.storage_options, to)
        current = {e.path: e for e in _delta.file_entries(ctx.uri, ctx.storage_options, parent)}
        rewrite: list[Any] = []
        if exposing:
            known = set().union(*(set(e.files or []) for e in exposing))
            all_known = all(e.done for e in exposing)
            rewrite = sorted({e.partition_values.get(pcol) for e in target if not all_known or e.path in known},
                             key=lambda d: (d is None, d or 0))
        kept = [e for e in target if e.partition_values.get(pcol) not in rewrite]
        partitions: dict[Any, pl.DataFrame] = {}
        self.rows_dropped = 0
        if rewrite:
            key = ctx.table.key or ""
            frame = _delta.scan(ctx.uri, ctx.storage_options, to).filter(partition_filter(pcol, rewrite)).collect()
            drop = _erased_mask_keys(lake, frame, key, {e.subject for e in exposing})
            clean = frame.filter(pl.col(key).is_in(drop).not_())
            self.rows_dropped = frame.height - clean.height
            partitions = {d: clean.filter(partition_filter(pcol, [d])) for d in rewrite}
        now_ms = ctx.now_ms()
        existing = [_regate(ctx, e, lineage, now_ms) for e in kept if e.path not in current]
        keep_paths = {e.path for e in kept}
        removes = [e for p, e in sorted(current.items()) if p not in keep_paths]
        return Change(operation="rollback" if self.mode == "restore" else "repair-forward", partitions=partitions,
                      existing=existing, removes=removes,
                      details={"restored_to": to, "rows_dropped": self.rows_dropped,
                               "erased_subjects": self.erased_subjects})


def rollback(lake: LakeContext, to: int, *, repair_forward: bool = False, table: str = DEFAULT_TABLE,
             dry_run: bool = False) -> RollbackReport:
    lake.table_def(table)
    plan = RestorePlan(lake, to, repair_forward=repair_forward)
    ctx = lake.table(table)
    if dry_run:
        return _plan_only(ctx, plan)
    before_work(ctx)
    result = write(ctx, plan)
    return RollbackReport(table=table, restored_to=to, version=result.version, mode=plan.mode, parent=plan.parent,
                          files_added=[a.path for a in result.staged.adds],
                          files_removed=[r.path for r in result.staged.removes], rows_dropped=plan.rows_dropped,
                          erased_subjects=plan.erased_subjects, attempts=result.attempts,
                          stale_parents=[s.to_json() for s in result.stale_parents])


def _plan_only(ctx: TableContext, plan: RestorePlan) -> RollbackReport:
    """The rollback's plan on the latest version, as the real one would build it (refusals included; the
    files it re-adds are gated), with nothing written: no upkeep, no staged file, no commit."""
    parent = ctx.latest_version()
    if parent is None:
        raise InputError(f"no Delta table for {ctx.name}", table=ctx.name)
    change = plan.build(ctx, parent)
    column = ctx.table.partition
    return RollbackReport(table=ctx.name, restored_to=plan.to, version=None, mode=plan.mode, parent=parent,
                          files_added=[e.add.path for e in change.existing],
                          files_removed=[r.path for r in change.removes], rows_dropped=plan.rows_dropped,
                          erased_subjects=plan.erased_subjects, dry_run=True,
                          partitions_rewritten=[f"{column}={partition_text(v)}" for v in change.partitions])
