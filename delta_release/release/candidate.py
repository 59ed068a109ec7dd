"""A release run's candidate: staged, checked, and committed only when the run ships (issue 13, item 1).

    open_run:   before_work (upkeep, pending erasures); parent = latest version of orders
    receive:    decode each batch; its raw bytes go to the raw store (received evidence, kept whatever
                the decision)
    stage:      apply every new batch, in order, each on the overlay of the ones before
                (apply/overlay.py: same rows, conflicts and quarantine lines as committing them one by
                one); ONE candidate on the parent (`commit.writer.stage`, publication "deferred"); the
                quarantine records of every batch are written (received evidence too)
    checks:     read the staged file set (`commit.view.StagedSnapshot`), never a Delta version
    SHIP:       before_work again, then `commit.writer.commit` strictly on the run's parent: one commit
                for orders, then the catalog, then each telemetry manifest's own commit + publication
    HOLD:       `commit.writer.discard`: the staged files are deleted, and telemetry objects this run
                uploaded that no version references; no Delta log is touched

A parent that moved while the run checked (another writer committed) is a HOLD with the failed check
`stale_parent`: the candidate was checked on a parent that is no longer the latest, and re-checking
would be a different release. Rerun the run: its batches were never applied, so it rebuilds on the new
parent. Nothing here publishes a version the checks did not read.

Replay: `ingest.applied_batches` (batch ids in the evidence of committed versions) is what `replay
--all` re-applies, so a held run's batches never come back through a replay.

Crash points: `run.after_stage` (staged + quarantine written, before the checks),
`run.before_ship_commit`, `run.after_ship_commit` (committed, catalog not yet moved: the commit's
evidence says "deferred", so recovery does not publish it; rerunning the run finds its batches applied,
stages nothing and ships (publishes) that version after its checks).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import polars as pl

from .. import _delta
from ..apply.fold import read_rows_from
from ..apply.overlay import apply_in_sequence
from ..commit.view import StagedSnapshot, staged_snapshot
from ..commit.writer import Change, Plan, StagedCandidate, commit, discard, replace_partitions, stage
from ..context import LakeContext, TableContext
from ..contract import DecodedBatch, Reason, Reject
from ..contract.decode import count_reasons
from ..contract.source import BytesBatch, FileBatch, as_batch
from ..errors import ReconciliationError, StaleParentError
from ..evidence import DEFERRED
from ..faults import crash_point
from ..ingest import IngestReport, _erasure_filter, applied_batches
from ..maintenance.upkeep import before_work
from ..tables import DEFAULT_TABLE


@dataclass(slots=True, kw_only=True)
class RunBatch:
    data: FileBatch | BytesBatch
    decoded: DecodedBatch
    report: IngestReport
    rejects: list[Reject] = field(default_factory=list)

    @property
    def batch_id(self) -> str:
        return self.report.batch_id


def receive(lake: LakeContext, source: bytes | FileBatch | BytesBatch) -> RunBatch:
    """Decode one batch and keep its bytes in the raw store (what ingest does before it applies)."""
    data = as_batch(source)
    decoded, batch_id = data.decoded, data.batch_id
    data.store(lake.raw, received=lake.clock.now())
    crash_point("ingest.after_raw")  # the name ingest uses for the same step
    report = IngestReport(batch_id=batch_id, extracted=decoded.extracted, accepted=decoded.accepted,
                          quarantined=len(decoded.rejects), reasons=decoded.reasons(),
                          schema_versions=decoded.schema_versions, version=None)
    return RunBatch(data=data, decoded=decoded, report=report)


def _counts_from_ledger(lake: LakeContext, b: RunBatch) -> None:
    """A batch already applied: what its quarantine says (conflicts and erased subjects found when it was
    applied included), so the run's reconciliation reads the same counts as the ledger."""
    if not lake.quarantine.has(b.batch_id):
        return
    reasons = lake.quarantine.rows(b.batch_id)["reason"].to_list()
    b.report.quarantined = len(reasons)
    b.report.accepted = b.decoded.extracted - len(reasons)
    b.report.reasons = {r: reasons.count(r) for r in sorted(set(reasons))}


class RunPlan(Plan):
    """Every batch of the run not applied yet, applied in order on one parent: one Change."""

    def __init__(self, lake: LakeContext, batches: list[RunBatch], *, run_id: str) -> None:
        self.lake, self.batches, self.run_id = lake, batches, run_id
        self.applied: list[RunBatch] = []

    def build(self, ctx: TableContext, parent: int) -> Change:
        done = applied_batches(self.lake, ctx.name)
        todo: list[tuple[RunBatch, pl.DataFrame, list[Reject]]] = []
        for b in self.batches:
            if b.batch_id in done:  # applied by a committed version: its counts are those of its ledger
                b.report.duplicate = True
                _counts_from_ledger(self.lake, b)
                continue
            done.add(b.batch_id)  # a batch given twice in one run is applied once
            events, blocked = _erasure_filter(self.lake, b.decoded)
            todo.append((b, events, blocked))
        base = read_rows_from(_delta.scan(ctx.uri, ctx.storage_options, parent))
        merged, plans = apply_in_sequence([events for _, events, _ in todo], base)
        changed = 0
        for (b, events, blocked), plan in zip(todo, plans, strict=True):
            conflicts = [Reject(line=c.line, reason=Reason.POSITION_CONFLICT, detail=c.detail,
                                raw=b.data.line_text(c.line), order_id=c.order_id) for c in plan.conflicts]
            b.rejects = sorted([*b.decoded.rejects, *blocked, *conflicts], key=lambda r: r.line)
            accepted = events.height - len(conflicts)
            if accepted + len(b.rejects) != b.decoded.extracted:
                raise ReconciliationError(b.batch_id, b.decoded.extracted, accepted, len(b.rejects))
            b.report.accepted, b.report.quarantined = accepted, len(b.rejects)
            b.report.reasons = count_reasons(b.rejects)
            changed += plan.changed_keys
        self.applied = [b for b, _, _ in todo]
        batch_ids = [b.batch_id for b in self.applied]
        details = {"run_id": self.run_id, "changed_keys": changed}
        if not merged:
            return Change(operation="release", batch_ids=batch_ids, details=details)
        return replace_partitions(ctx, parent, merged, operation="release", batch_ids=batch_ids, details=details)


@dataclass(slots=True, kw_only=True)
class RunCandidate:
    """The run's staged candidate on `parent` and the view every check reads."""

    ctx: TableContext
    staged: StagedCandidate
    snapshot: StagedSnapshot
    batches: list[RunBatch]
    applied: list[RunBatch]

    @property
    def parent(self) -> int:
        return self.staged.parent

    @property
    def batch_ids(self) -> list[str]:
        """The batches this candidate applies (duplicates of committed ones are not in it)."""
        return [b.batch_id for b in self.applied]

    @property
    def reports(self) -> list[IngestReport]:
        return [b.report for b in self.batches]

    def discarded(self) -> dict[str, Any]:
        """What a HOLD throws away: the staged files, their rows, the batches they would have applied."""
        files = self.staged.staged_files
        return {"files": [f.path for f in files], "rows": sum(f.rows or 0 for f in files),
                "bytes": sum(f.size for f in files), "batch_ids": self.batch_ids,
                "candidate": self.staged.evidence.candidate}


def stage_run(lake: LakeContext, batches: list[RunBatch], *, run_id: str, table: str = DEFAULT_TABLE) -> RunCandidate:
    """Upkeep, then stage ONE candidate of every batch on the latest version; write the quarantine."""
    ctx = lake.table(table)
    before_work(ctx)
    parent = ctx.latest_version()
    assert parent is not None  # Lake.open created the table
    plan = RunPlan(lake, batches, run_id=run_id)
    staged = stage(ctx, plan, parent, publication=DEFERRED)
    try:
        for b in plan.applied:
            lake.quarantine.write(b.batch_id, b.rejects, lake.erasures.subject_key, b.data)
            crash_point("ingest.after_quarantine")
        snapshot = staged_snapshot(ctx, staged)
    except BaseException:
        discard(ctx, staged)
        raise
    crash_point("run.after_stage")
    return RunCandidate(ctx=ctx, staged=staged, snapshot=snapshot, batches=batches, applied=plan.applied)


@dataclass(frozen=True, slots=True, kw_only=True)
class Shipped:
    version: int  # the version the run publishes (its commit, or the parent when it changed nothing)
    committed: bool


def ship(candidate: RunCandidate) -> Shipped:
    """Commit the candidate strictly on the run's parent (StaleParentError: the staged files are discarded
    and nothing was committed). The catalog is the caller's next step."""
    ctx, staged = candidate.ctx, candidate.staged
    before_work(ctx)  # a pending erasure completed here moves the parent: the commit below then refuses
    crash_point("run.before_ship_commit")
    if staged.empty:
        latest = ctx.latest_version()
        if latest != staged.parent:
            raise StaleParentError(ctx.name, staged.parent, latest)
        return Shipped(version=staged.parent, committed=False)
    version = commit(ctx, staged)
    crash_point("run.after_ship_commit")
    for b in candidate.applied:
        b.report.version = version
        b.report.files = [f.public() for f in staged.staged_files]
        b.report.removed = [r.path for r in staged.removes]
    return Shipped(version=version, committed=True)


def hold(candidate: RunCandidate) -> dict[str, Any]:
    """Discard the staged files; returns what was discarded (for the packet)."""
    out = candidate.discarded()
    discard(candidate.ctx, candidate.staged)
    return out
