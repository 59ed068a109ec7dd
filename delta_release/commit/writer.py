"""The one writer path: every commit of ours goes through here.

    write(ctx, plan, retry=RetryPolicy()):     # the caller ran its upkeep (maintenance/upkeep.py) first
        repeat (at most retry.max_attempts):
            parent = latest version
            staged = stage(ctx, plan, parent)  # plan.build(ctx, parent) -> Change; stage; gate; evidence
            plan.before_commit(ctx, staged)    # the plan's side effects that must precede the commit
            version = commit(ctx, staged)      # strict, on `parent`; StaleParentError -> discard, retry
            publish (or defer to a later ship decision)

A plan only says WHAT it wants on a given parent (`Change`): partitions whose whole content it
replaces, files already on storage it (re-)registers, files it removes, and its evidence details. It is
rebuilt from scratch after a stale parent, so a candidate computed on an old snapshot is never published
(a delete would come back), unless the plan proves (`Plan.can_rebase`, commit/rebase.py) that no commit
in between touched what its candidate depends on: then the same staged files are committed on the new
parent. Anything staged by a failed attempt and not rebased is discarded.

`stage` and `commit` are separate calls so a caller can stage a candidate, check it, and commit it later
on the same parent (`commit` raises StaleParentError if the table moved meanwhile).

Crash points (names kept for the crash drill): stage.after_first_file (in stage/candidate.py),
ingest.after_staging, ingest.after_gate, commit.during (a window around the Delta commit),
ingest.after_commit, publish.before_swap (in the publisher), ingest.after_publish. Callers add their
own: ingest.after_raw, ingest.after_quarantine, erase.after_ledger, run.after_stage,
run.before_ship_commit, run.after_ship_commit, storage.after_temp:<top directory>.
"""

from __future__ import annotations

import dataclasses
import random
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import polars as pl

from .. import _delta, index, progress
from ..context import TableContext
from ..errors import InputError, NotFoundError, StaleParentError
from ..evidence import DEFERRED, FILTER_MAX_KEYS, IMMEDIATE, CommitEvidence, FileRecord, KeyFilter
from ..faults import crash_point, crash_window
from ..gateway.catalog import Publication
from ..stage import Candidate, gate_candidate, stage_partitions
from ..stage.candidate import FileEvidence

if TYPE_CHECKING:
    from ..index.keys import Premerge

# Each failed attempt means another writer committed, so the table moved forward: with N writers at
# once a writer waits for at most N - 1 others. 64 covers dozens of concurrent writers; a jittered
# backoff (capped at BACKOFF_MAX_S) keeps many writers from re-colliding in lockstep.
MAX_ATTEMPTS = 64
BACKOFF_MAX_S = 0.5
BACKOFF_BASE_S = 0.01


@dataclass(frozen=True, slots=True, kw_only=True)
class RetryPolicy:
    """How a `write` answers stale parents: a property of the call (as delta-rs's `CommitProperties`).

    At most `max_attempts` attempts; after a rebuilt (not rebased) attempt, a jittered wait of up to
    min(backoff_max_s, backoff_base_s * 2 ** attempt) seconds (the exponent capped at 8)."""

    max_attempts: int = MAX_ATTEMPTS
    backoff_max_s: float = BACKOFF_MAX_S
    backoff_base_s: float = BACKOFF_BASE_S

    def __post_init__(self) -> None:
        if isinstance(self.max_attempts, bool) or not isinstance(self.max_attempts, int) or self.max_attempts < 1:
            raise InputError(f"max_attempts must be an int >= 1, got {self.max_attempts!r}", argument="max_attempts")
        for name in ("backoff_max_s", "backoff_base_s"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int | float) or not 0 <= value < float("inf"):
                raise InputError(f"{name} must be a finite number >= 0, got {value!r}", argument=name)

    def backoff(self, attempt: int) -> float:
        """Seconds to wait after failed attempt number `attempt` (jittered)."""
        return random.uniform(0, min(self.backoff_max_s, self.backoff_base_s * 2 ** min(attempt, 8)))


DEFAULT_RETRY = RetryPolicy()


@dataclass(frozen=True, slots=True, kw_only=True)
class ExistingFile:
    """A file already on storage that a commit adds (a rollback's re-add, a producer's file); the plan has
    gated it before returning it."""

    add: _delta.FileAdd
    record: FileRecord


@dataclass(slots=True, kw_only=True)
class Change:
    """What a plan wants on one parent. Empty: nothing to commit."""

    operation: str
    partitions: dict[Any, pl.DataFrame] = field(default_factory=dict)  # value -> new content; staged here
    # Or: (value, rows) pairs computed lazily and staged one at a time as they come (bounded memory); the
    # rows of a value are the new content of the files `removes` holds in it. Needs `locations`.
    stream: Iterable[tuple[Any, pl.DataFrame]] | None = None
    existing: list[ExistingFile] = field(default_factory=list)
    removes: list[_delta.FileEntry] = field(default_factory=list)  # files of the parent version
    batch_ids: list[str] = field(default_factory=list)
    details: dict[str, Any] = field(default_factory=dict)  # evidence details (JSON-able, no subject ids)
    label: str | None = None  # a publication label (an external generation)
    # For the key index (never written as plain ids): key -> partition value of the orders this change
    # places (None: derive them from every row it stages), and keys it removes from the table (erasure).
    locations: dict[str, Any] | None = None
    gone_keys: list[str] = field(default_factory=list)
    # more locations, by keyed hash (index/keys.py `record`): one run, or sorted spilled runs with no hash in two
    hashed_locations: tuple[Any, Any] | list[Any] | None = None
    premerged: Premerge | None = None  # the key index file of `hashed_locations` (a list), written ahead
    # Or: files already staged elsewhere for this parent (by workers: distributed/), with their evidence;
    # gated here like the writer's own, and discarded like them (a failed gate, a stale parent)
    prestaged: Candidate | None = None
    # Every key whose row this change writes, moves or tombstones (an ingest's fold: its new rows), for the
    # evidence's key filter (commit/rebase.py). None: not recorded; a rebase over it reads its files. A
    # count: more keys than a filter holds (FILTER_MAX_KEYS), not kept (the filter then says `all`).
    changed: pl.Series | int | None = None

    @property
    def empty(self) -> bool:
        return (not self.partitions and self.stream is None and not self.existing and not self.removes
                and self.prestaged is None)


class Plan:
    """What a caller of `write` supplies. Subclass and implement `build`; a plan may keep what it learns
    (conflicts, counts) as attributes for its caller's report. `build` runs once per attempt."""

    def build(self, ctx: TableContext, parent: int) -> Change:
        raise NotImplementedError

    def before_commit(self, ctx: TableContext, staged: StagedCandidate) -> None:
        """Runs after staging and the gate, before the commit (also for an empty change). An exception
        discards the staged files and ends the write."""

    def can_rebase(self, ctx: TableContext, staged: StagedCandidate, new_parent: int) -> bool:
        """After a stale parent: are `staged`'s files still right on `new_parent` (commit/rebase.py)? If
        so they are committed there as they are (no build, no staging, no before_commit); else the plan is
        rebuilt on the new parent. Default: always rebuild."""
        return False


@dataclass(frozen=True, slots=True, kw_only=True)
class StagedCandidate:
    """A gated candidate on `parent`: nothing of it is visible until `commit`."""

    table: str
    parent: int
    change: Change
    staged: Candidate | None  # the files written for `change.partitions` (None when none)
    evidence: CommitEvidence

    @property
    def empty(self) -> bool:
        return self.change.empty

    @property
    def staged_files(self) -> list[FileEvidence]:
        return [] if self.staged is None else list(self.staged.files)

    @property
    def adds(self) -> list[_delta.FileAdd]:
        return [f.to_add() for f in self.staged_files] + [e.add for e in self.change.existing]

    @property
    def removes(self) -> list[_delta.FileEntry]:
        return list(self.change.removes)


@dataclass(frozen=True, slots=True, kw_only=True)
class StaleParent:
    expected: int | None
    found: int | None
    rebased: bool = False  # the same staged files were committed on the new parent (no rebuild)

    def to_json(self) -> dict[str, Any]:
        return {"expected": self.expected, "found": self.found, "rebased": self.rebased}


@dataclass(frozen=True, slots=True, kw_only=True)
class WriteResult:
    """The outcome of `write`: the version committed (None when the change was empty), what was
    committed, and the publication (None when deferred or nothing changed)."""

    table: str
    version: int | None
    staged: StagedCandidate
    publication: Publication | None
    attempts: int
    stale_parents: list[StaleParent]

    @property
    def rebased(self) -> int:
        """Stale parents answered by a rebase of the staged files rather than a rebuild."""
        return sum(s.rebased for s in self.stale_parents)


# -- the steps ------------------------------------------------------------------------------------
def partition_text(value: Any) -> str | None:
    """A partition value as the Delta log writes it (None stays None: the null partition)."""
    return None if value is None else str(value)


def files_of_partitions(entries: list[_delta.FileEntry], column: str, values: Any) -> list[_delta.FileEntry]:
    """The files of `entries` in the partitions `values` (None: the null partition): what a rewrite removes."""
    wanted = {partition_text(v) for v in values}
    return [e for e in entries if partition_text(e.partition_values.get(column)) in wanted]


def replace_files(removes: list[_delta.FileEntry], stream: Iterable[tuple[Any, pl.DataFrame]], *,
                  locations: dict[str, Any], operation: str, batch_ids: list[str] | None = None,
                  details: dict[str, Any] | None = None) -> Change:
    """A change that replaces some files of the parent (a bucketed apply: the (partition, bucket) files
    holding a batch's keys) by the rows `stream` yields, staged as they come."""
    return Change(operation=operation, stream=stream, removes=list(removes), batch_ids=list(batch_ids or []),
                  details=dict(details or {}), locations=locations)


def replace_partitions(ctx: TableContext, parent: int, partitions: dict[Any, pl.DataFrame], *, operation: str,
                       batch_ids: list[str] | None = None, details: dict[str, Any] | None = None) -> Change:
    """A change that replaces whole partitions: their new content, and every file they hold at `parent`
    (bucketed tables: all buckets of the partition; staging splits the content into bucket files)."""
    column = ctx.table.partition
    removes = _delta.partition_entries(ctx.uri, ctx.storage_options, parent, column,
                                       [partition_text(v) for v in partitions]) if partitions else []
    return Change(operation=operation, partitions=partitions, removes=removes, batch_ids=list(batch_ids or []),
                  details=dict(details or {}))


def stage(ctx: TableContext, plan: Plan, parent: int, *, publication: str = IMMEDIATE) -> StagedCandidate:
    """Ask `plan` for its change on `parent`, write its new files, gate them, record the evidence.
    Nothing is visible; on any failure the files written here are removed."""
    progress.phase("apply")
    change = plan.build(ctx, parent)
    candidate: Candidate | None = None
    try:
        if change.prestaged is not None:
            candidate = change.prestaged
            progress.phase("gate")
            gate_candidate(ctx.storage, candidate)
            crash_point("ingest.after_gate")
        elif change.partitions or change.stream is not None:
            tdef = ctx.table
            progress.phase("stage")
            candidate = stage_partitions(ctx.storage, table=ctx.name, parent=parent, batch_ids=change.batch_ids,
                                         partition_column=tdef.partition, key=tdef.key,
                                         file_schema=tdef.file_schema(),
                                         partitions=change.partitions if change.stream is None else change.stream,
                                         removes=change.removes, now_ms=ctx.now_ms(), buckets=tdef.buckets,
                                         hasher=ctx.erasures.subject_key)
            crash_point("ingest.after_staging")
            progress.phase("gate")
            gate_candidate(ctx.storage, candidate)
            crash_point("ingest.after_gate")
    except BaseException:
        if candidate is not None:
            _discard_files(ctx, candidate.files)
        raise
    files = ([f.record() for f in candidate.files] if candidate else []) + [e.record for e in change.existing]
    evidence = CommitEvidence(operation=change.operation, table=ctx.name, parent=parent,
                              candidate=candidate.candidate_id if candidate else None, batch_ids=change.batch_ids,
                              files=files, removed=[r.path for r in change.removes], publication=publication,
                              details=change.details, key_filter=key_filter_of(ctx, change.changed))
    return StagedCandidate(table=ctx.name, parent=parent, change=change, staged=candidate, evidence=evidence)


def key_filter_of(ctx: TableContext, keys: pl.Series | int | None) -> KeyFilter | None:
    """The evidence's filter of `keys` (None stays None; a count: that many keys, not kept); over
    FILTER_MAX_KEYS keys `all`, without hashing (nor a pass over a backfill's keys: a fold's new rows hold
    each key once)."""
    if keys is None:
        return None
    count = keys if isinstance(keys, int) else keys.len()
    if isinstance(keys, int) or count > FILTER_MAX_KEYS:
        return KeyFilter(keys=count, all=True)
    keys = keys.unique()
    return KeyFilter.of(ctx.erasures.filter_digests(keys))


def commit(ctx: TableContext, staged: StagedCandidate, *, keep_on_stale: bool = False) -> int:
    """One strict Delta commit of a staged candidate on its parent; returns the new version.

    StaleParentError (the table moved past the parent) discards the staged files first (unless
    keep_on_stale: the caller may rebase them): that commit did not land. Any other error leaves them
    (the commit may have landed); vacuum's orphan rule removes them if no version references them."""
    try:
        with crash_window("commit.during"):
            return _delta.commit(ctx.uri, ctx.storage_options, table=ctx.name, parent=staged.parent,
                                 adds=staged.adds, removes=staged.removes, evidence=staged.evidence.to_json(),
                                 partition_by=[ctx.table.partition])
    except StaleParentError:
        if not keep_on_stale:
            discard(ctx, staged)
        raise


def discard(ctx: TableContext, staged: StagedCandidate) -> None:
    """Remove the files a staged candidate wrote; no version references them."""
    _discard_files(ctx, staged.staged_files)


def _discard_files(ctx: TableContext, files: list[FileEvidence]) -> None:
    store = ctx.storage
    for f in files:
        store.delete(f.path)


def publish(ctx: TableContext, version: int, evidence: CommitEvidence, *, label: str | None = None) -> Publication:
    """Point the catalog at `version` under the evidence's digest."""
    return ctx.publisher.publish(ctx.name, version, digest=evidence.digest, label=label)


def recover_publication(ctx: TableContext) -> Publication | None:
    """Publish a commit of ours that landed but whose catalog update was interrupted (not a deferred one:
    that waits for its release run's ship decision)."""
    latest = ctx.latest_version()
    current = ctx.publisher.current(ctx.name)
    if latest is None or (current is not None and current.version >= latest):
        return current
    raw = _delta.version_evidence(ctx.uri, ctx.storage_options, latest)
    if raw is None:
        return current  # not ours
    evidence = CommitEvidence.from_json(raw)
    if evidence.publication == DEFERRED:
        return current
    return ctx.publisher.publish(ctx.name, latest, digest=str(raw.get("digest", "")))


def record_indexes(ctx: TableContext, version: int, staged: StagedCandidate) -> None:
    """Tell the indexes what commit `version` did. They are caches: a writer killed before this point
    leaves them behind, and the next lookup rebuilds what is missing from the Delta log."""
    change = staged.change
    batches = index.batch_index(ctx)
    if batches is not None and change.batch_ids:
        batches.record(change.batch_ids, version)
    keys = index.key_index(ctx)
    if keys is None:
        return
    locations = change.locations
    if locations is None:
        assert change.stream is None, "a streamed change carries its locations"
        key = ctx.table.key or ""
        locations = {}
        for value, frame in change.partitions.items():
            locations.update(dict.fromkeys(frame[key].to_list(), value))
    keys.record(version, locations, change.gone_keys, files=[e.add.path for e in change.existing],
                hashed_locations=change.hashed_locations, premerged=change.premerged)


def write(ctx: TableContext, plan: Plan, *, publish_now: bool = True,
          retry: RetryPolicy = DEFAULT_RETRY) -> WriteResult:
    """Build `plan` on the latest parent, stage, gate, commit strictly, retry on a stale parent (as
    `retry` says), publish. The writer ran its upkeep first (maintenance/upkeep.py `before_work`).

    With publish_now=False the commit lands with `publication: deferred` in its evidence and the
    catalog is left alone (a release run publishes on ship).
    """
    stale: list[StaleParent] = []
    publication = IMMEDIATE if publish_now else DEFERRED
    rebased: StagedCandidate | None = None  # staged files carried onto a new parent (commit/rebase.py)
    for attempt in range(1, retry.max_attempts + 1):
        if rebased is not None:
            staged, rebased = rebased, None
        else:
            parent = ctx.latest_version()
            if parent is None:
                raise NotFoundError(f"no Delta table for {ctx.name}", table=ctx.name)
            staged = stage(ctx, plan, parent, publication=publication)
            try:
                plan.before_commit(ctx, staged)
            except BaseException:
                discard(ctx, staged)
                raise
            if staged.empty:
                return WriteResult(table=ctx.name, version=None, staged=staged, publication=None,
                                   attempts=attempt, stale_parents=stale)
        progress.phase("commit")
        try:
            version = commit(ctx, staged, keep_on_stale=True)
        except StaleParentError as exc:
            rebased = _rebase(ctx, plan, staged)
            stale.append(StaleParent(expected=exc.expected, found=exc.found, rebased=rebased is not None))
            if rebased is None:
                time.sleep(retry.backoff(attempt))
            continue
        crash_point("ingest.after_commit")
        if publish_now:
            progress.phase("publish")
        pub = publish(ctx, version, staged.evidence, label=staged.change.label) if publish_now else None
        crash_point("ingest.after_publish")
        record_indexes(ctx, version, staged)
        return WriteResult(table=ctx.name, version=version, staged=staged, publication=pub, attempts=attempt,
                           stale_parents=stale)
    if rebased is not None:
        discard(ctx, rebased)
    raise StaleParentError(ctx.name, stale[-1].expected, stale[-1].found)


def _rebase(ctx: TableContext, plan: Plan, staged: StagedCandidate) -> StagedCandidate | None:
    """`staged` carried onto the new latest version when the plan says its files still hold there; else
    None, with the staged files discarded (the plan is rebuilt)."""
    try:
        latest = ctx.latest_version()
        if latest is not None and latest > staged.parent and plan.can_rebase(ctx, staged, latest):
            return onto(staged, latest)
    except BaseException:
        discard(ctx, staged)
        raise
    discard(ctx, staged)
    return None


def onto(staged: StagedCandidate, new_parent: int) -> StagedCandidate:
    """The same staged candidate (same files, same adds and removes) on `new_parent`."""
    candidate = staged.staged
    if candidate is not None:
        candidate = dataclasses.replace(candidate, parent=new_parent)
    evidence = dataclasses.replace(staged.evidence, parent=new_parent)
    return dataclasses.replace(staged, parent=new_parent, staged=candidate, evidence=evidence)
