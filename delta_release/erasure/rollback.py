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
from typing import TYPE_CHECKING, Any

import polars as pl
import pyarrow.parquet as pq

from .. import _delta
from ..apply.fold import partition_filter
from ..errors import GateError, InputError, StaleParentError
from ..ingest import MAX_ATTEMPTS, discard_candidate, evidence_digest, partition_text
from ..publish import gate_candidate, partition_dir, stage_partitions
from ..publish.candidate import Candidate, file_stats
from .lineage import Lineage, table_lineage
from .permission import exposing_entries, exposure_error
from .vacuumlog import check_readable

if TYPE_CHECKING:
    from ..lake import Lake



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

    def to_json(self) -> dict[str, Any]:
        return {"table": self.table, "restored_to": self.restored_to, "version": self.version,
                "mode": self.mode, "parent": self.parent, "files_added": self.files_added,
                "files_removed": self.files_removed, "rows_dropped": self.rows_dropped,
                "erased_subjects": self.erased_subjects, "attempts": self.attempts,
                "stale_parents": self.stale_parents}


def _regate(lake: Lake, table: str, entry: _delta.FileEntry, lineage: Lineage,
            now_ms: int) -> tuple[_delta.FileAdd, dict[str, Any]]:
    """Check an existing file before it is committed again; return its add action and its evidence."""
    store = lake.table_storage(table)
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
    evidence = dict(recorded) if recorded is not None else {
        "path": entry.path, "size": size, "sha256": digest, "rows": arrow.num_rows,
        "partition": {pcol: pval}, "min_partition": pval, "max_partition": pval, "distinct_keys": None}
    return add, evidence


def _erased_mask_keys(lake: Lake, frame: pl.DataFrame, key: str, subjects: set[str]) -> list[str]:
    return [k for k in frame[key].unique().drop_nulls().to_list() if lake.erasures.subject_key(k) in subjects]


def rollback(lake: Lake, to: int, *, repair_forward: bool = False, table: str = "orders") -> RollbackReport:
    tdef = lake.table_def(table)
    uri = lake.table_uri(table)
    pcol = tdef.partition
    lake.recover_publication(table)
    stale: list[dict[str, Any]] = []
    for attempt in range(1, MAX_ATTEMPTS + 1):
        parent = lake.latest_version(table)
        assert parent is not None
        if to < 0 or to >= parent:
            raise InputError(f"rollback target must be an earlier version of {table}: expected 0 to {parent - 1},"
                             f" found {to}", table=table, version=to, latest=parent)
        check_readable(lake, table, to, action="rolling back to")  # vacuumed: nothing left to restore
        exposing = exposing_entries(lake, table, to)
        if exposing and not repair_forward:
            err = exposure_error(table, to, len(exposing), action="rolling back to")
            err.message += "; use --repair-forward to restore it without the erased subjects"
            err.args = (err.message,)
            raise err
        mode = "repair-forward" if exposing else "restore"
        report = RollbackReport(table=table, restored_to=to, version=None, mode=mode, parent=parent,
                                erased_subjects=len(exposing), attempts=attempt, stale_parents=stale)
        lineage = table_lineage(lake, table)
        target = _delta.file_entries(uri, lake.options, to)
        current = {e.path: e for e in _delta.file_entries(uri, lake.options, parent)}
        now_ms = int(lake.clock.now().timestamp() * 1000)

        rewrite: list[Any] = []
        if exposing:
            subjects = {e.subject for e in exposing}
            known = set().union(*(set(e.files or []) for e in exposing))
            all_known = all(e.done for e in exposing)
            rewrite = sorted({e.partition_values.get(pcol) for e in target if not all_known or e.path in known},
                             key=lambda d: (d is None, d or 0))
        kept = [e for e in target if e.partition_values.get(pcol) not in rewrite]
        candidate: Candidate | None = None
        if rewrite:
            frame = (pl.scan_delta(uri, version=to, storage_options=lake.options or None)
                     .filter(partition_filter(pcol, rewrite)).collect())
            drop = _erased_mask_keys(lake, frame, tdef.key or "order_id", subjects)
            clean = frame.filter(pl.col(tdef.key or "order_id").is_in(drop).not_())
            report.rows_dropped = frame.height - clean.height
            store = lake.table_storage(table)
            candidate = stage_partitions(store, table=table, parent=parent, batch_ids=[], partition_column=pcol,
                                         key=tdef.key or "order_id", file_schema=tdef.file_schema(),
                                         partitions={d: clean.filter(partition_filter(pcol, [d])) for d in rewrite},
                                         removes=[], now_ms=now_ms)
        try:
            if candidate is not None:
                gate_candidate(lake.table_storage(table), candidate)
            readds = [_regate(lake, table, e, lineage, now_ms) for e in kept if e.path not in current]
            keep_paths = {e.path for e in kept}
            removes = [e for p, e in sorted(current.items()) if p not in keep_paths]
            adds = [a for a, _ in readds] + ([f.to_add() for f in candidate.files] if candidate else [])
            files_ev = [ev for _, ev in readds] + ([f.public() for f in candidate.files] if candidate else [])
            operation = "rollback" if mode == "restore" else "repair-forward"
            evidence: dict[str, Any] = {
                "operation": operation, "table": table, "parent": parent, "restored_to": to, "batch_ids": [],
                "files": files_ev, "removed": [r.path for r in removes], "rows_dropped": report.rows_dropped,
                "erased_subjects": len(exposing)}
            evidence["digest"] = evidence_digest(evidence)
            version = _delta.commit(uri, lake.options, table=table, parent=parent, adds=adds, removes=removes,
                                    evidence=evidence, partition_by=[pcol])
        except BaseException as exc:  # nothing of a failed attempt stays staged
            if candidate is not None:
                discard_candidate(lake, candidate)
            if not isinstance(exc, StaleParentError):
                raise
            stale.append({"expected": exc.expected, "found": exc.found})
            continue
        lake.publish_version(table, version, digest=evidence["digest"])
        report.version = version
        report.files_added = [a.path for a in adds]
        report.files_removed = [r.path for r in removes]
        return report
    raise StaleParentError(table, stale[-1]["expected"], stale[-1]["found"])
