"""A release run's candidate: staged, checked, and committed only when the run ships (issue 13, item 1).

    receive:    each source (a file, cut in parts past the part limit; each file a batch) decoded, its raw
                bytes kept in the raw store (received evidence, kept whatever the decision) and its events
                spilled by group of buckets, one part at a time (parts.py `folded_sources`)
    open_run:   before_work (upkeep, pending erasures); parent = latest version of orders
    stage:      ONE plan over every new batch, a group of buckets at a time, each batch applied in order as
                if committed after the ones before (`fold_in_order`: same rows, conflicts and quarantine
                lines as committing them one by one; the parts of one file are one batch, as an ingest of
                the file); ONE candidate on the parent (`commit.writer.stage`, publication "deferred"),
                each (day, bucket) file written once; the quarantine records of every batch are written
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

import os
from dataclasses import dataclass
from typing import Any

from ..commit.view import StagedSnapshot, staged_snapshot
from ..commit.writer import StagedCandidate, commit, discard, stage
from ..context import LakeContext, TableContext
from ..contract import DecodedBatch
from ..contract.parts import part_ranges
from ..contract.source import BytesBatch, FileBatch
from ..errors import StaleParentError
from ..evidence import DEFERRED
from ..faults import crash_point
from ..ingest import IngestReport
from ..maintenance.upkeep import before_work
from ..parts import Planner, Source, bytes_source, file_sources, folded_sources
from ..tables import DEFAULT_TABLE


@dataclass(slots=True, kw_only=True)
class RunBatch:
    data: FileBatch | BytesBatch
    report: IngestReport

    @property
    def batch_id(self) -> str:
        return self.report.batch_id

    @property
    def decoded(self) -> DecodedBatch:
        return self.data.decoded


def _counts_from_ledger(lake: LakeContext, b: RunBatch) -> None:
    """A batch already applied: what its quarantine says (conflicts and erased subjects found when it was
    applied included), so the run's reconciliation reads the same counts as the ledger."""
    if not lake.quarantine.has(b.batch_id):
        return
    reasons = lake.quarantine.rows(b.batch_id)["reason"].to_list()
    b.report.quarantined = len(reasons)
    b.report.accepted = b.decoded.extracted - len(reasons)
    b.report.reasons = {r: reasons.count(r) for r in sorted(set(reasons))}


def run_sources(inputs: list[str | os.PathLike[str] | bytes]) -> tuple[list[Source], list[tuple[int, int]]]:
    """The run's sources: each input (a batch file, cut in parts past the part limit, or bytes) a batch of
    its own; and for each source, which part of its input it is and of how many."""
    sources: list[Source] = []
    where: list[tuple[int, int]] = []
    for number, item in enumerate(inputs):
        if isinstance(item, bytes):
            mine = [bytes_source(item, batch=number)]
        else:
            mine = file_sources(item, part_ranges(item) if os.path.isfile(item) else [(0, -1)], batch=number)
        sources += mine
        where += [(i, len(mine)) for i in range(1, len(mine) + 1)]
    return sources, where


@dataclass(slots=True, kw_only=True)
class RunCandidate:
    """The run's staged candidate on `parent` and the view every check reads."""

    ctx: TableContext
    staged: StagedCandidate
    snapshot: StagedSnapshot
    batches: list[RunBatch]
    applied: list[RunBatch]
    where: list[tuple[int, int]]  # of each batch: which part of its source it is, of how many (`run_sources`)

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


def stage_run(lake: LakeContext, inputs: list[str | os.PathLike[str] | bytes], *, run_id: str,
              table: str = DEFAULT_TABLE, planner: Planner | None = None) -> RunCandidate:
    """Receive every input (`run_sources`: decoded, kept raw and spilled one part at a time), upkeep, then
    stage ONE candidate of every batch on the latest version (parts.py: each (day, bucket) file folded and
    written once), and write the quarantine of every batch it applies. `planner` gives the plan when every
    input is a file and the table has buckets (the Ray executor: workers decode, fold and stage; default
    `folded_sources`, in this process)."""
    ctx = lake.table(table)
    sources, where = run_sources(inputs)
    spread = ctx.table.buckets and not any(isinstance(i, bytes) for i in inputs)
    plans = planner if planner is not None and spread else folded_sources
    with plans(lake, sources, table=table, operation="release", details={"run_id": run_id}) as plan:
        before_work(ctx)
        parent = ctx.latest_version()
        assert parent is not None  # Lake.open created the table
        staged = stage(ctx, plan, parent, publication=DEFERRED)
        try:
            plan.before_commit(ctx, staged)  # every applied batch reconciled, its quarantine written
            snapshot = staged_snapshot(ctx, staged)
        except BaseException:
            discard(ctx, staged)
            raise
    crash_point("run.after_stage")
    batches: list[RunBatch] = []
    for part, row in zip(plan.parts, plan.rows(None), strict=True):
        report = IngestReport(batch_id=part.batch_id, extracted=row["extracted"], accepted=row["accepted"],
                              quarantined=row["quarantined"], reasons=plan.reasons(part),
                              schema_versions=part.batch.decoded.schema_versions, version=None,
                              duplicate=part.duplicate)
        batches.append(b := RunBatch(data=part.batch, report=report))
        if part.duplicate and not part.repeat:
            _counts_from_ledger(lake, b)  # applied by a committed version: its counts are those of its ledger
    applied = [b for b, p in zip(batches, plan.parts, strict=True) if not p.duplicate]
    return RunCandidate(ctx=ctx, staged=staged, snapshot=snapshot, batches=batches, applied=applied,
                        where=where)


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
