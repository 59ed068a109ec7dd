"""The ingest pipeline: decode -> raw -> erasure filter -> apply -> quarantine, then the writer path
(stage -> gate -> strict commit -> publish; a stale parent rebuilds on the new parent)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import polars as pl

from . import _delta, index
from .apply import ApplyPlan, plan_apply
from .apply.bucketed import plan_bucketed
from .apply.reader import parent_reader
from .commit.rebase import KeySet, independent_since
from .commit.writer import Change, Plan, StagedCandidate, commit, replace_files, replace_partitions, stage, write
from .context import LakeContext, TableContext
from .contract import DecodedBatch, Reason, Reject
from .contract.decode import count_reasons
from .contract.source import BytesBatch, FileBatch, as_batch
from .errors import ReconciliationError
from .evidence import DEFERRED, IMMEDIATE, CommitEvidence
from .faults import crash_point
from .maintenance import upkeep
from .raw.background import RawCopy
from .stage.buckets import KnownDigests
from .tables import DEFAULT_TABLE


@dataclass(slots=True, kw_only=True)
class IngestReport:
    batch_id: str
    extracted: int
    accepted: int
    quarantined: int
    reasons: dict[str, int]
    schema_versions: list[int]
    version: int | None
    duplicate: bool = False
    attempts: int = 0
    stale_parents: list[dict[str, Any]] = field(default_factory=list)
    files: list[dict[str, Any]] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)
    parts: list[dict[str, Any]] = field(default_factory=list)  # a file received in parts (parts.py); else []

    def to_json(self) -> dict[str, Any]:
        return {
            "batch_id": self.batch_id, "extracted": self.extracted, "accepted": self.accepted,
            "quarantined": self.quarantined, "reasons": self.reasons,
            "schema_versions": self.schema_versions, "version": self.version,
            "duplicate": self.duplicate, "attempts": self.attempts, "stale_parents": self.stale_parents,
            "files": self.files, "removed": self.removed, "parts": self.parts,
        }


def applied_batches(lake: LakeContext, table: str = DEFAULT_TABLE, *, upto: int | None = None) -> set[str]:
    """Batch ids that are part of a committed version (of version `upto` and those before it, when given):
    the `batch_ids` of every commit of ours, from the applied-batch index (caught up to the latest
    version), or from the whole history when the indexes are off. A held release run commits nothing, so
    its batches are not here: ingest re-applies them if given again, `replay --all` skips them."""
    ctx = lake.table(table)
    batches = index.batch_index(ctx)
    latest = ctx.latest_version() if upto is None else upto
    if batches is not None and latest is not None:
        return batches.all(upto=latest)
    out: set[str] = set()
    for entry in _delta.history(lake.table_uri(table), lake.options):
        if entry.evidence is not None and (upto is None or entry.version <= upto):
            out.update(CommitEvidence.from_json(entry.evidence).batch_ids)
    return out


def _already_applied(lake: LakeContext, ctx: TableContext, batch_id: str, parent: int) -> bool:
    batches = index.batch_index(ctx)
    if batches is None:
        return batch_id in applied_batches(lake, ctx.name)
    return batches.applied(batch_id, upto=parent)


def _erasure_filter(lake: LakeContext, decoded: DecodedBatch) -> tuple[pl.DataFrame, list[Reject]]:
    return erasure_filter(lake, decoded.events)


def erasure_filter(lake: LakeContext, events: pl.DataFrame, *, known: KnownDigests | None = None
                   ) -> tuple[pl.DataFrame, list[Reject]]:
    """`events` without those of erased subjects, and a reject (by its `line`) for each of them. `known`:
    the keyed hashes of the events' keys by line, computed before (a file in parts: its map's), looked up
    instead of hashing every key again (a lake with one erasure paid 35% more for a 5M-event file)."""
    erased = lake.erasures.erased_subjects()
    if not erased or events.height == 0:
        return events, []
    key = lake.table_def(DEFAULT_TABLE).keyed().key  # an event's fields are named as its table's columns
    erased_raw = {bytes.fromhex(s) for s in erased if len(s) == 64}
    if known is not None:
        hashes = known.lookup(events["line"], events[key], lake.erasures.subject_key)
        hit = pl.Series(np.isin(hashes, np.array(sorted(erased_raw), dtype="S32")))
        if not hit.any():
            return events, []
        mask: pl.Series | pl.Expr = hit
    else:
        keys = events[key].unique()
        raw = lake.erasures.subject_digests(keys)
        blocked = [k for i, k in enumerate(keys.to_list()) if raw[32 * i:32 * i + 32] in erased_raw]
        if not blocked:
            return events, []
        mask = pl.col(key).is_in(blocked)
    rejects = [Reject(line=int(line), reason=Reason.ERASED_SUBJECT, detail="the subject of this event is erased",
                      raw=None, order_id=oid)
               for oid, line in events.filter(mask).select(key, "line").iter_rows()]
    return events.filter(mask.not_()), rejects


class ApplyEvents(Plan):
    """Apply decoded events on a parent: the partitions they change, replaced whole."""

    def __init__(self, events: pl.DataFrame, *, batch_ids: list[str], operation: str) -> None:
        self.events = events
        self.batch_ids = batch_ids
        self.operation = operation
        self.applied: ApplyPlan = ApplyPlan()

    def build(self, ctx: TableContext, parent: int) -> Change:
        if ctx.table.buckets:  # only the (day, bucket) files holding the batch's keys, staged a day at a time
            self.applied, removes, stream = plan_bucketed(ctx, parent, self.events)
            if stream is None:
                return Change(operation=self.operation, batch_ids=self.batch_ids)
            change = replace_files(removes, stream, locations=self.applied.locations, operation=self.operation,
                                   batch_ids=self.batch_ids, details={"changed_keys": self.applied.changed_keys})
            change.hashed_locations, change.changed = self.applied.hashed_locations, self.applied.changed
            return change
        self.applied = plan_apply(self.events, parent_reader(ctx, parent))
        if self.applied.empty:
            return Change(operation=self.operation, batch_ids=self.batch_ids)
        change = replace_partitions(ctx, parent, self.applied.partitions, operation=self.operation,
                                    batch_ids=self.batch_ids, details={"changed_keys": self.applied.changed_keys})
        change.locations, change.changed = self.applied.locations, self.applied.changed
        return change


class IngestPlan(Plan):
    """One batch: on every attempt, skip it if already applied, filter erased subjects (after the parent
    is read, so an erasure that made the parent stale is seen), apply, then write the quarantine."""

    def __init__(self, lake: LakeContext, data: FileBatch | BytesBatch, decoded: DecodedBatch, *, batch_id: str,
                 replay: bool, report: IngestReport, raw_kept: Callable[[], None] = lambda: None) -> None:
        self.lake, self.data, self.decoded, self.batch_id = lake, data, decoded, batch_id
        self.raw_kept = raw_kept  # waits for the raw copy (raw/background.py): called before anything is staged
        self.replay, self.report = replay, report
        self.apply = ApplyEvents(decoded.events, batch_ids=[batch_id], operation="replay" if replay else "ingest")
        self.blocked: list[Reject] = []
        self._keys: tuple[pl.DataFrame, KeySet] | None = None  # the applied events' keys, for rebases

    def build(self, ctx: TableContext, parent: int) -> Change:
        if not self.replay and _already_applied(self.lake, ctx, self.batch_id, parent):
            self.report.duplicate = True
            self.raw_kept()
            return Change(operation=self.apply.operation)
        events, self.blocked = _erasure_filter(self.lake, self.decoded)
        self.apply.events = events
        change = self.apply.build(ctx, parent)  # a stream is lazy: nothing is staged until this returns
        self.raw_kept()
        return change

    def can_rebase(self, ctx: TableContext, staged: StagedCandidate, new_parent: int) -> bool:
        """Commit the same staged files on `new_parent` when the commits in between are independent
        ingests (commit/rebase.py) and no subject of this batch was erased since it was filtered."""
        if self.report.duplicate or staged.empty:
            return False
        _, blocked = _erasure_filter(self.lake, self.decoded)
        if len(blocked) != len(self.blocked):
            return False
        events = self.apply.events
        if self._keys is None or self._keys[0] is not events:
            self._keys = events, KeySet(events[ctx.table.keyed().key].unique().to_list())
        return independent_since(ctx, staged, new_parent, keys=self._keys[1], batch_ids=[self.batch_id])

    def before_commit(self, ctx: TableContext, staged: StagedCandidate) -> None:
        if self.report.duplicate:
            return
        decoded, report = self.decoded, self.report
        conflicts = self.apply.applied.conflicts
        conflict_rejects = [Reject(line=c.line, reason=Reason.POSITION_CONFLICT, detail=c.detail,
                                   raw=self.data.line_text(c.line), order_id=c.order_id) for c in conflicts]
        rejects = sorted([*decoded.rejects, *self.blocked, *conflict_rejects],
                         key=lambda r: r.line)
        accepted = self.apply.events.height - len(conflicts)
        if accepted + len(rejects) != decoded.extracted:
            raise ReconciliationError(self.batch_id, decoded.extracted, accepted, len(rejects))
        report.accepted, report.quarantined = accepted, len(rejects)
        report.reasons = count_reasons(rejects)
        self.lake.quarantine.write(self.batch_id, rejects, self.lake.erasures.subject_key, self.data)
        crash_point("ingest.after_quarantine")


def prepare_candidate(lake: LakeContext, events: pl.DataFrame, *, parent: int, batch_ids: list[str],
                      operation: str, table: str = DEFAULT_TABLE, publish_now: bool = True) -> StagedCandidate:
    """Stage and gate `events` applied on `parent` (no commit): for drills and tests that race writers."""
    return stage(lake.table(table), ApplyEvents(events, batch_ids=batch_ids, operation=operation), parent,
                 publication=IMMEDIATE if publish_now else DEFERRED)


def commit_candidate(lake: LakeContext, staged: StagedCandidate) -> int:
    """Commit a staged candidate strictly on its parent (StaleParentError discards it)."""
    return commit(lake.table(staged.table), staged)


def ingest_batch(lake: LakeContext, data: bytes | FileBatch | BytesBatch, *, replay: bool = False,
                 table: str = DEFAULT_TABLE, publish: bool = True) -> IngestReport:
    """Ingest one batch. With publish=False (a release run) the commit lands but the catalog is left to
    the run's ship decision, and crash recovery will not publish it either."""
    batch = as_batch(data)  # a file batch was decoded while streaming (contract/source.py)
    decoded, batch_id = batch.decoded, batch.batch_id
    raw = RawCopy(batch, lake.raw, received=lake.clock.now(),  # a large batch's on a thread (raw/background.py)
                  size=batch.size if isinstance(batch, FileBatch) else len(batch.data))
    report = IngestReport(batch_id=batch_id, extracted=decoded.extracted, accepted=decoded.accepted,
                          quarantined=len(decoded.rejects), reasons=decoded.reasons(),
                          schema_versions=decoded.schema_versions, version=None)
    plan = IngestPlan(lake, batch, decoded, batch_id=batch_id, replay=replay, report=report, raw_kept=raw.kept)
    ctx = lake.table(table)
    with raw:
        upkeep.before_work(ctx)  # after the raw copy started, before the plan reads its parent
        result = write(ctx, plan, publish_now=publish)
    report.attempts = result.attempts
    report.stale_parents = [s.to_json() for s in result.stale_parents]
    if result.version is not None:
        report.version = result.version
        report.files = [f.public() for f in result.staged.staged_files]
        report.removed = [r.path for r in result.staged.removes]
    return report


def _line_text(data: bytes, line: int) -> str:
    from .contract.decode import split_lines

    return split_lines(data)[line - 1].decode("utf-8", errors="backslashreplace")
