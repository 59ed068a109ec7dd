"""Ingest of a batch file: in one piece, or, past the part limit, as consecutive parts (bounded memory);
and the same one fold for many batches (a release run, `replay --all`).

A file of at most `max_part_bytes()` (256 MiB, `DELTA_RELEASE_MAX_PART_BYTES`) is one batch, ingested by
`ingest.ingest_batch` as before. A larger file is cut at line boundaries (contract/parts.py) and each part,
in file order, is decoded, stored raw (the byte-identical slice, under its own sha256) and reconciled as a
batch of its own (its quarantine ledger); only the decoded events of one part are held at a time. Each
part's events are spilled (`spill_directory`: the lake's `_tmp`, swept by the next writer if this one is
killed) by group of buckets; ONE plan folds all parts' events of a group at a time with their parent files
(the groups never share a (day, bucket) file; a table without buckets is one group), so each (day, bucket)
file is written once, in ONE stage, gate and strict commit (deferred) recording every part's batch id. The
groups hold at most `max_group_bytes()` of input each (64 MiB, `DELTA_RELEASE_MAX_GROUP_BYTES`;
`group_count`), so memory stays bounded: past buckets x that (512 MiB on `orders`) each bucket is split in
sub-groups, folded two at a time (`fold_subgroups`), whose winners replace the bucket's files together
(`replace_groups`), and the key index locations of each are spilled sorted and merged by range at the
commit. The same-position check runs over all parts whose ranges of positions overlap (a group of
positions at a time; a file whose positions rise part after part has none to check), so the counts,
quarantine and table equal those of ingesting the file at once. (On Ray, whose reduce tasks stage whole
buckets, a file past buckets x the group limit is folded in several folds (`folds_of`), each its own
deferred commit, published once after the last; a position a later fold reuses with other content is judged
as between batches.)
A stale parent rebuilds the plan from the spill. The map of a source (`map_events`: its events by
group of buckets, its positions by group (for Ray), its erased subjects' events held apart), the same-position
check of a group (`reused_in`) and the fold of a group (`fold_group`) are functions of their own:
`distributed/` runs them as Ray tasks (`--executor ray`), the driver holding the erased subjects' events.

The sources of the fold (`Source`) need not be one file: each carries a batch number, the parts of a file
share one, and batches apply in order, each as if committed after the ones before (`fold_in_order`). A
release run (release/candidate.py) stages the fold of its files without committing; `replay_batches`
with all_batches folds every applied raw batch into one commit, published at once.

After the commit the catalog publishes once: the version holding every part. So readers through the
gateway see the file all at once or not at all (no writer's crash recovery publishes a deferred commit;
a later ingest of another file does publish its own version, on top of what was committed); a crash
leaves the published snapshot as it was, and rerunning the same ingest finds the parts already applied
(duplicates by batch id), applies the rest and publishes, also when every part was applied and only the
publication was missing.

The report (`IngestReport.parts`) lists the parts: `batch_id`, `first_line` (the file line of the
part's line 1: a quarantined line N of the part is file line first_line + N - 1), `offset` and `size`
(bytes in the file), `extracted`, `accepted`, `quarantined`, `version`, `duplicate`. The top-level
counts are the sums, `batch_id` the first part's, `version` the commit's (null when none), `duplicate`
true when every part was. A file within the limit has `parts: []`.
"""

from __future__ import annotations

import bisect
import collections
import dataclasses
import functools
import itertools
import os
import shutil
from collections.abc import Callable, Generator, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import AbstractContextManager, closing, contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

import numpy as np
import polars as pl

from . import _delta, index, progress
from ._malloc import fix_mmap_threshold, use_system_arrow_pool
from .apply.bucketed import GroupRows, Planned, Stream, fold_group_rows, plan_bucketed, replace_groups
from .apply.fold import ApplyPlan, Columns, Conflict
from .commit.writer import Change, Plan, StagedCandidate, WriteResult, write
from .context import LakeContext, TableContext
from .contract import Reason, Reject
from .contract.decode import CONTENT, count_reasons
from .contract.parts import max_group_bytes, max_part_bytes, part_ranges
from .contract.source import READ_PHASE, BytesBatch, FileBatch, as_batch, read_batch_file
from .errors import ReconciliationError, SafetyError
from .evidence import FILTER_MAX_KEYS
from .faults import crash_point
from .index.keyfile import sorted_run, spilled
from .ingest import IngestReport, _already_applied, applied_batches, erasure_filter, ingest_batch
from .maintenance import upkeep
from .raw import RawStore
from .raw.background import RawCopy
from .stage.buckets import KnownDigests, bucket_of_path, digest_array, groups_of, take_hashes
from .storage import local_spill_root, temp_name
from .tables import DEFAULT_TABLE

if TYPE_CHECKING:
    from .index.keys import Premerge

T = TypeVar("T")
R = TypeVar("R")
# Buckets folded on helper threads ahead of the one being staged (`_PartsPlan._stream`); memory holds
# their folds too. The 20M-event file: 1 ahead 65.1 s, peak 928 MiB; 2 ahead 58.5 s, peak 1,264 MiB,
# too close to the 1,283 MiB budget.
FOLDS_AHEAD = 1
# The spill is written once and read once, in this process: lz4, not Polars' default zstd. The 20M-event
# file's spill phase 12.6 -> 10.8 s, its ingest 65.1 -> 63.3 s (uncompressed: 63.6 s, a larger spill).
SPILL_COMPRESSION: Any = "lz4"
# A bucket's sub-groups folded at once (`fold_subgroups`, on helper threads of the fold, while the main
# thread stages the bucket before): the fold was the 20M-event file's critical path, the main thread
# waiting 15-17 s on it. Plan-and-stage phase 36.6 -> 29.7 s (2 at once), 33 s with 3 (peak +130 MiB).
SUBGROUP_FOLDS = 2


class PartsRunner(Protocol):
    """What ingests a file in parts on a bucketed table: `ingest_parts_once` (this process), or an executor
    that maps and reduces on a cluster (distributed/); same arguments, same report."""

    def __call__(self, lake: LakeContext, sources: list[Source], *, table: str, publish: bool) -> IngestReport: ...


def ingest_file(lake: LakeContext, path: str | os.PathLike[str], *, table: str = DEFAULT_TABLE,
                publish: bool = True, max_part: int | None = None, in_parts: PartsRunner | None = None
                ) -> IngestReport:
    """Ingest a batch file: as one batch, or in parts past the part limit (module docstring). `in_parts`
    runs a file in parts on a bucketed table (default `ingest_parts_once`, in this process; a table
    without buckets is one group, folded here)."""
    fix_mmap_threshold()  # else glibc's heaps keep freed MiB blocks and grow part after part (_malloc.py)
    use_system_arrow_pool()  # (a lake opened by other means than Lake.open)
    ranges = part_ranges(path, max_part_bytes(max_part)) if os.path.isfile(path) else [(0, -1)]
    if len(ranges) == 1:
        return ingest_batch(lake, read_batch_file(path, tee=lake.raw.tee()), table=table, publish=publish)
    buckets = lake.table(table).table.buckets
    runner = in_parts if in_parts is not None and buckets else ingest_parts_once
    sources = file_sources(path, ranges)
    # In this process one fold takes the whole file (its groups split buckets: `group_count`); a cluster's
    # reduce stages a group of whole buckets per task, so a larger file is several folds there.
    folds = folds_of(sources, buckets * max_group_bytes()) if buckets and runner is not ingest_parts_once else [sources]
    if len(folds) == 1:
        return runner(lake, sources, table=table, publish=publish)
    reports = [runner(lake, fold, table=table, publish=False) for fold in folds]  # each fold: its own commit
    rows = [row for r in reports for row in r.parts]
    if publish:
        publish_parts(lake, table, [row["batch_id"] for row in rows], [row["version"] for row in rows])
    return _folds_report(reports)


def group_count(sources: list[Source], buckets: int, *, split: bool = True) -> int:
    """How many groups a fold of `sources` is planned in: enough that a group holds at most
    `max_group_bytes()` of input, and up to one per source (a part's events a group) while groups are
    whole buckets. Past `buckets` groups (`split`), a multiple of `buckets`: each bucket in as many
    sub-groups (`buckets.groups_of`), folded two at a time and written together (`fold_subgroups`).
    Without `split` (a table without buckets; the Ray reduce, a task per group that stages its own
    files) never more than the buckets: the caller folds a larger input in several folds (`folds_of`)."""
    total = sum(s.size for s in sources)
    need = -(-total // max_group_bytes())
    if need <= buckets or not split:
        return max(1, min(buckets, max(len(sources), need)))
    return buckets * -(-need // buckets)


def folds_of(sources: list[Source], capacity: int) -> list[list[Source]]:
    """Consecutive sources cut into folds of at most `capacity` bytes (at least one source each)."""
    folds: list[list[Source]] = [[]]
    held = 0
    for source in sources:
        if folds[-1] and held + source.size > capacity:
            folds.append([])
            held = 0
        folds[-1].append(source)
        held += source.size
    return folds


def _folds_report(reports: list[IngestReport]) -> IngestReport:
    """A file folded in several folds (more parts than the table has buckets): the sums, each part's row
    with its line in the whole file, the last commit's version."""
    lines = 0
    for r in reports:
        for row in r.parts:
            row["first_line"] += lines
        lines += r.extracted
    versions = [r.version for r in reports if r.version is not None]
    return IngestReport(
        batch_id=reports[0].batch_id, extracted=lines, accepted=sum(r.accepted for r in reports),
        quarantined=sum(r.quarantined for r in reports), reasons=_summed([r.reasons for r in reports]),
        schema_versions=sorted({v for r in reports for v in r.schema_versions}),
        version=max(versions) if versions else None, duplicate=all(r.duplicate for r in reports),
        attempts=sum(r.attempts for r in reports), stale_parents=[s for r in reports for s in r.stale_parents],
        files=[f for r in reports for f in r.files], removed=[x for r in reports for x in r.removed],
        parts=[row for r in reports for row in r.parts])


class Folder(Protocol):
    """What folds many sources into one commit: `fold_and_write` (this process), or an executor that maps
    and reduces on a cluster (distributed/); the plan (its parts and rejects) and the writer's result."""

    def __call__(self, lake: LakeContext, sources: list[Source], *, table: str, publish: bool,
                 replay: bool) -> tuple[_PartsPlan, WriteResult]: ...


class Planner(Protocol):
    """What gives the ONE plan of many sources, for as long as the context lasts: `folded_sources` (this
    process: the sources spilled locally), or an executor whose workers map them (distributed/)."""

    def __call__(self, lake: LakeContext, sources: list[Source], *, table: str, replay: bool = False,
                 operation: str | None = None, details: dict[str, Any] | None = None
                 ) -> AbstractContextManager[_PartsPlan]: ...


def replay_batches(lake: LakeContext, batch_id: str | None, *, all_batches: bool,
                   table: str = DEFAULT_TABLE, folder: Folder | None = None) -> list[IngestReport]:
    """Re-apply one retained batch (any: the caller names it), or with all_batches every retained batch that
    is part of a committed version (`applied_batches`: a held release run's batches stay out), oldest
    received first, folded as the parts of a file are (`ingest_parts_once`): each batch applied as if
    committed after the ones before, each (day, bucket) file written once, in ONE strict commit recording
    every batch id, published at once. One report per batch (its counts, the commit's version); the
    commit's `files` and `removed` are on the first report. `folder` folds them on a bucketed table
    (default `fold_and_write`, in this process; a table without buckets is folded here)."""
    if not all_batches:
        return [ingest_batch(lake, lake.raw.read(batch_id), replay=True, table=table)] if batch_id else []
    applied = applied_batches(lake, table)
    shas = [b.sha256 for b in lake.raw.list() if b.batch_id in applied]  # one listing, then no lookups
    if not shas:
        return []
    if len(shas) == 1:
        return [ingest_batch(lake, lake.raw.read_sha(shas[0]), replay=True, table=table)]
    fold = folder if folder is not None and lake.table(table).table.buckets else fold_and_write
    plan, result = fold(lake, raw_sources(shas), table=table, publish=True, replay=True)
    staged = result.staged
    reports = []
    for part, row in zip(plan.parts, plan.rows(result.version), strict=True):
        reports.append(IngestReport(
            batch_id=row["batch_id"], extracted=row["extracted"], accepted=row["accepted"],
            quarantined=row["quarantined"], reasons=plan.reasons(part),
            schema_versions=part.batch.decoded.schema_versions, version=row["version"], duplicate=row["duplicate"],
            attempts=result.attempts, stale_parents=[s.to_json() for s in result.stale_parents]))
    if result.version is not None:
        reports[0].files = [f.public() for f in staged.staged_files]
        reports[0].removed = [r.path for r in staged.removes]
    return reports


def publish_parts(lake: LakeContext, table: str, batch_ids: list[str], versions: list[int | None]) -> int | None:
    """Publish the version holding every part: the last one committed now, else (a rerun whose parts were
    all applied before) the last version that applied one of them. Never moves the catalog backwards."""
    ctx = lake.table(table)
    committed = [v for v in versions if v is not None]
    target = max(committed) if committed else None
    if target is None:
        latest = ctx.latest_version()
        if latest is None:
            return None
        batches = index.batch_index(ctx)
        if batches is not None:
            found = [batches.version_of(b, upto=latest) for b in batch_ids]
        else:
            wanted = set(batch_ids)
            found = [e.version for e in _delta.history(ctx.uri, ctx.storage_options)
                     if e.evidence is not None and wanted & set(e.evidence.get("batch_ids") or [])]
        target = max((v for v in found if v is not None), default=None)
        if target is None:
            return None  # no part changed the table (every line quarantined): nothing to publish
    evidence = _delta.version_evidence(ctx.uri, ctx.storage_options, target) or {}
    return lake.publish_version(table, target, digest=str(evidence.get("digest", ""))).version


# -- a file in parts on a bucketed table: each (day, bucket) file folded and written once ----------------
GROUP_COLUMN = "__group"  # in memory only: the group of buckets an event's key hashes to
Loaded = tuple[pl.DataFrame, KnownDigests] | None  # a group's spilled events and their keys' hashes (None: none)
SEQ_COLUMN = "__seq"  # in the spill only: the batch number of an event's source (Source.batch)


@dataclass(frozen=True, slots=True, kw_only=True)
class Source:
    """One batch of a folded ingest, read when its turn comes (`load`, given the spill directory), so one
    source's events are decoded at a time. Sources with the same `batch` number are ONE batch for the
    same-position check (the parts of a file); batches apply in increasing number, each as if committed
    after the ones before (a release run's files, `replay --all`'s raw batches). `keep_raw`: store the
    source's bytes in the raw store (a retained raw batch is there already). A retained raw batch is named
    by its sha256 (`raw`), not by a loader: read from the raw store of the lake that loads it (`read`), so
    the source is picklable and a Ray worker reads it from its own opening of the lake."""

    load: Callable[[str, RawStore | None], FileBatch | BytesBatch] | None = None
    batch: int = 0
    size: int = 0  # bytes, for the progress bar
    keep_raw: bool = True
    raw: str | None = None  # sha256 of a retained raw batch (then no `load`)

    def read(self, lake: LakeContext, spill: str) -> FileBatch | BytesBatch:
        """The source's batch, hashed and decoded (`spill`: a local directory for a copy of a raw batch)."""
        if self.raw is not None:
            return _raw_batch(lake, self.raw, spill)
        assert self.load is not None
        return self.load(spill, lake.raw if self.keep_raw else None)


def file_sources(path: str | os.PathLike[str], ranges: list[tuple[int, int]], *, batch: int = 0) -> list[Source]:
    """The parts of a batch file (byte ranges, contract/parts.py `part_ranges`): one batch."""
    return [Source(load=functools.partial(_file_part, path, offset, size), batch=batch, size=size)
            for offset, size in ranges]


def _file_part(path: str | os.PathLike[str], offset: int, size: int, _spill: str, raw: RawStore | None) -> FileBatch:
    """A part of a file, copied for the raw store as it is read (`RawTee`) when the store is given."""
    return read_batch_file(path, offset=offset, length=size, tee=None if raw is None else raw.tee())


def bytes_source(data: bytes, *, batch: int = 0) -> Source:
    """A batch given as bytes (decoded in memory)."""
    return Source(load=lambda _spill, _raw: as_batch(data), batch=batch, size=len(data))


def raw_sources(shas: list[str]) -> list[Source]:
    """Retained raw batches (by sha256), each a batch of its own, in the order given (`replay --all`)."""
    return [Source(raw=sha, batch=i, keep_raw=False) for i, sha in enumerate(shas)]


def _raw_batch(lake: LakeContext, sha: str, spill: str) -> FileBatch:
    """A raw batch decoded from its file in the raw store (local lake), or from a copy in the spill
    directory (object store); its sha256 checked as `RawStore.read_sha` checks it."""
    path: str | os.PathLike[str] | None = lake.raw.local_file(sha)
    if path is None:
        path = os.path.join(spill, f"raw-{sha}.jsonl")
        with open(path, "wb") as handle:
            handle.write(lake.raw.read_sha(sha))
    batch = read_batch_file(path)
    if batch.sha256 != sha:
        raise SafetyError(f"raw batch {sha[:16]} on storage does not match its sha256 (damaged); refused",
                          batch_id=sha[:16])
    return batch


@dataclass(slots=True, kw_only=True)
class _Part:
    """One source while the sources are planned: its batch (for its lines' text; its decoded events are
    spilled, not held), where it sits, and what the plan decided for it."""

    number: int
    batch: FileBatch | BytesBatch
    first_line: int  # its line 1 in the numbering of every source's lines (unique over the sources)
    file_line: int  # its line 1 in its batch's file (the report's `first_line`)
    seq: int  # its batch number (Source.batch)
    accepted: int  # accepted by the decoder (before the erasure filter and the position checks)
    repeat: bool = False  # the same bytes as an earlier source: applied once, as that one
    held: dict[int, pl.DataFrame] = field(default_factory=dict)  # group -> erased subjects' events (`_erased_events`)
    span: tuple[int, int] | None = None  # the least and greatest position of its events (None: none, or a repeat)
    duplicate: bool = False
    rejects: list[Reject] = field(default_factory=list)  # the plan's: erased subjects, position conflicts

    @property
    def batch_id(self) -> str:
        return self.batch.batch_id

    def local(self, line: int) -> int:
        return line - self.first_line + 1


def _offset(batch: FileBatch | BytesBatch) -> int:
    return batch.offset if isinstance(batch, FileBatch) else 0


def _size(batch: FileBatch | BytesBatch) -> int:
    return batch.size if isinstance(batch, FileBatch) else len(batch.data)


@contextmanager
def spill_directory(lake: LakeContext) -> Iterator[str]:
    """A fresh local directory for the spill, removed on exit. On a local lake in the lake's temp folder
    (`<lake>/_tmp/.tmp-<host>-<pid>-<uuid>`, on the lake's disk), where the next writer's upkeep removes it
    if this process is killed (quarantine/temp_sweep.py: a temp folder whose process is gone); for an
    object-store lake, the same name in the local spill root (`storage.local_spill_root()`), swept the same
    way by every writer start on an object-store lake."""
    path = lake.storage.temp_path() if lake.storage.is_local else os.path.join(local_spill_root(), temp_name())
    os.makedirs(path)
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def ingest_parts_once(lake: LakeContext, sources: list[Source], *, table: str, publish: bool,
                      replay: bool = False) -> IngestReport:
    """Every source decoded, stored raw and spilled (its events, by group of buckets, to a local temp
    directory), one source at a time; then ONE plan over all of them (a group of buckets at a time: every
    source's events of those buckets folded once with their parent files), ONE stage and gate, ONE strict
    commit recording every source's batch id (deferred, then one publication; a replay's is immediate)."""
    plan, result = fold_and_write(lake, sources, table=table, publish=publish, replay=replay)
    return parts_report(plan, result)


def parts_report(plan: _PartsPlan, result: WriteResult) -> IngestReport:
    """The report of a fold of several sources after its one commit (whichever executor ran it)."""
    version = result.version
    rows = plan.rows(version)
    staged = result.staged
    return IngestReport(
        batch_id=plan.parts[0].batch_id, extracted=sum(r["extracted"] for r in rows),
        accepted=sum(r["accepted"] for r in rows), quarantined=sum(r["quarantined"] for r in rows),
        reasons=_summed([plan.reasons(p) for p in plan.parts]),
        schema_versions=sorted({v for p in plan.parts for v in p.batch.decoded.schema_versions}),
        version=version, duplicate=all(p.duplicate for p in plan.parts), attempts=result.attempts,
        stale_parents=[s.to_json() for s in result.stale_parents],
        files=[f.public() for f in staged.staged_files] if version is not None else [],
        removed=[r.path for r in staged.removes] if version is not None else [], parts=rows)


def fold_and_write(lake: LakeContext, sources: list[Source], *, table: str, publish: bool,
                    replay: bool) -> tuple[_PartsPlan, WriteResult]:
    with folded_sources(lake, sources, table=table, replay=replay) as plan:
        result = write_plan(lake, plan, table=table, publish=publish)
    publish_plan(lake, plan, result, table=table, publish=publish)
    return plan, result


def write_plan(lake: LakeContext, plan: _PartsPlan, *, table: str, publish: bool) -> WriteResult:
    """The one strict commit of a fold (whichever executor folds): upkeep, then the writer; a replay's
    commit is published at once, an ingest's by `publish_plan`."""
    ctx = lake.table(table)
    upkeep.before_work(ctx)
    return write(ctx, plan, publish_now=plan.replay and publish)


def publish_plan(lake: LakeContext, plan: _PartsPlan, result: WriteResult, *, table: str, publish: bool) -> None:
    """After an ingest's deferred commit: the one publication of the version holding every source."""
    if publish and not plan.replay:
        publish_parts(lake, table, [p.batch_id for p in plan.parts],
                      [None if p.duplicate else result.version for p in plan.parts])


def _summed(counts: list[dict[str, int]]) -> dict[str, int]:
    out: dict[str, int] = {}
    for c in counts:
        for code, n in c.items():
            out[code] = out.get(code, 0) + n
    return dict(sorted(out.items()))


@contextmanager
def folded_sources(lake: LakeContext, sources: list[Source], *, table: str, replay: bool = False,
                   operation: str | None = None, details: dict[str, Any] | None = None) -> Iterator[_PartsPlan]:
    """The sources spilled (`_spill`) and their ONE plan, for `write` (an ingest) or `stage` (a release
    run, which commits later); the spill directory lives as long as the context."""
    ctx = lake.table(table)
    n = ctx.table.buckets or 1
    groups = group_count(sources, n, split=bool(ctx.table.buckets))
    with spill_directory(lake) as spill:
        parts = _spill(lake, ctx, sources, spill, groups)
        reused = _reused_positions(spill, parts, groups)
        crash_point("parts.after_spill")
        # (a release run, `operation`, commits later and leaves the key index to catch up: no premerge)
        plan = _PartsPlan(lake, parts, spill, groups=groups, buckets=n, reused=reused, replay=replay,
                          operation=operation or ("replay" if replay else "ingest"), details=details or {},
                          premerge=operation is None)
        try:
            yield plan
        finally:
            plan.discard_premerged()


def _spill(lake: LakeContext, ctx: TableContext, sources: list[Source], spill: str, groups: int) -> list[_Part]:
    """Each source in turn: decoded, kept raw, its events spilled (`_spill_events`), its line spans mapped."""
    with closing(read_ahead(lake, sources, spill)) as read:  # closed (its read in flight waited for) on an error
        return _spill_read(lake, ctx, sources, read, spill, groups)


def _spill_read(lake: LakeContext, ctx: TableContext, sources: list[Source],
                read: Iterator[tuple[Source, FileBatch | BytesBatch]], spill: str, groups: int) -> list[_Part]:
    parts: list[_Part] = []
    for number, (source, batch) in enumerate(read, start=1):
        progress.item(f"part {number}/{len(sources)}", source.size)  # the bar of the CLI's `progress.work`, if any
        progress.advance(source.size, during=READ_PHASE)  # read on the helper thread, which leaves the bar alone
        part = next_part(parts, batch, seq=source.batch, accepted=batch.decoded.events.height)
        with raw_kept(lake, batch, keep=source.keep_raw):
            if not part.repeat:
                part.held = _spill_events(lake, ctx, batch.decoded.events.with_columns(
                    pl.col("line") + (part.first_line - 1)), spill, groups, number, seq=source.batch)
                part.span = _span(batch.decoded.events["position"])
        parts.append(part)
        decoded = batch.decoded
        decoded.events = decoded.events.clear()  # spilled: only the rejects stay on the heap
        for name in ("offsets", "lengths"):  # 16 bytes a line: read back mapped, for a conflict's text
            np.save(spans := os.path.join(spill, f"{name}-p{number:06d}.npy"), getattr(decoded, name))
            setattr(decoded, name, np.load(spans, mmap_mode="r"))
    return parts


def read_ahead(lake: LakeContext, sources: list[Source], spill: str
               ) -> Generator[tuple[Source, FileBatch | BytesBatch], None, None]:
    """Each source with its batch, hashed and decoded (`Source.read`) on a helper thread one source ahead:
    the next source is read while the caller spills this one (polars' decode and the keyed hash release the
    GIL), so at most two sources' events are in memory. A read's error is raised when its turn comes; on
    the way out a read in flight is waited for (a thread cannot be stopped), its batch dropped."""
    reads = in_order_ahead(lambda source: (source, source.read(lake, spill)), sources, ahead=1, name="read-ahead")
    with closing(reads):
        yield from reads


def in_order_ahead(work: Callable[[T], R], items: list[T], *, ahead: int, name: str) -> Generator[R, None, None]:
    """`work` of each item, in order, computed on `ahead` helper threads up to `ahead` items ahead of the
    caller (who works on the one yielded meanwhile). An error is raised at its item's turn; closing the
    generator cancels the items not begun and waits for those in flight (a thread cannot be stopped)."""
    pool = ThreadPoolExecutor(max_workers=ahead, thread_name_prefix=name)
    try:
        pending = collections.deque(pool.submit(work, item) for item in items[:ahead])
        for i in range(ahead, len(items) + ahead):
            done = pending.popleft().result()
            if i < len(items):
                pending.append(pool.submit(work, items[i]))
            yield done
    finally:
        pool.shutdown(wait=True, cancel_futures=True)


@contextmanager
def raw_kept(lake: LakeContext, batch: FileBatch | BytesBatch, *, keep: bool) -> Iterator[None]:
    """The body's work while the batch's raw copy is stored alongside (`RawCopy`), waited for when the body
    ends (its error raised); with `keep` false (a retained raw batch) no copy."""
    if not keep:
        yield
        return
    with RawCopy(batch, lake.raw, received=lake.clock.now(), size=_size(batch)) as raw:
        yield
        raw.kept()


def next_part(parts: list[_Part], batch: FileBatch | BytesBatch, *, seq: int, accepted: int) -> _Part:
    """The part of the next source after `parts` (whichever executor decoded it): its lines numbered after
    theirs, its line 1 in its batch's file (the parts of a batch share a numbering), and whether it is a
    repeat (the same bytes as an earlier source: applied once, as that one)."""
    first_line = parts[-1].first_line + parts[-1].batch.decoded.extracted if parts else 1
    start = next((p.first_line for p in parts if p.seq == seq), first_line)
    return _Part(number=len(parts) + 1, batch=batch, first_line=first_line, file_line=first_line - start + 1,
                 seq=seq, accepted=accepted, repeat=any(p.batch_id == batch.batch_id for p in parts))


def _spill_events(lake: LakeContext, ctx: TableContext, events: pl.DataFrame, spill: str, groups: int,
                  number: int, *, seq: int) -> dict[int, pl.DataFrame]:
    """Write one source's events (lines numbered over every source) and their keys' hashes by group of
    buckets (`map_events`); returns the erased subjects' events by group (held, not spilled). Their
    positions are split later, for parts whose positions overlap only (`_reused_positions`)."""
    mapped = map_events(lake, ctx, events, groups, seq=seq, positions=False)
    for g, frame in mapped.by_group.items():
        frame.write_parquet(_spill_path(spill, g, number), compression=SPILL_COMPRESSION, statistics=False)
        mapped.digests[g].tofile(_digests_path(spill, g, number))
    return mapped.held


def _span(positions: pl.Series) -> tuple[int, int] | None:
    return None if positions.is_empty() else (int(positions.min()), int(positions.max()))  # type: ignore[arg-type]


@dataclass(slots=True, kw_only=True)
class Mapped:
    """The map of one source's events: by group of buckets (erased subjects' events left out), each event's
    (position, line, batch number, content hash) by group of positions, and the erased subjects' events by
    group of buckets (`held`: kept by the process that commits, never spilled nor shipped to a worker)."""

    by_group: dict[int, pl.DataFrame]
    by_position: dict[int, pl.DataFrame]
    held: dict[int, pl.DataFrame]
    digests: dict[int, np.ndarray] = field(default_factory=dict)  # the keyed hash (S32) of each by_group event


def map_events(lake: LakeContext, ctx: TableContext, events: pl.DataFrame, groups: int, *, seq: int,
               positions: bool = True) -> Mapped:
    """The map of one source's decoded events (`events`, lines as the caller numbers them), tagged with its
    batch number `seq` (SEQ_COLUMN): split into `groups` groups of the table's buckets (by the keyed hash
    of its key: `buckets.groups_of`) and, with `positions`, as many groups of positions (the local
    ingest makes those later, and only for parts whose positions overlap: `_reused_positions`). Groups
    without events are absent."""
    n = ctx.table.buckets or 1
    key = ctx.table.keyed().key
    events = events.with_columns(pl.lit(seq, dtype=pl.Int32).alias(SEQ_COLUMN))
    hashes = digest_array(events[key], ctx.erasures.subject_key)  # each event's key hashed
    group = groups_of(hashes, n, groups)
    grouped = events.with_columns(pl.Series(GROUP_COLUMN, group))
    held = _erased_events(lake, grouped, KnownDigests.of(grouped["line"].to_numpy(), hashes))  # never spilled:
    # the spill holds no erased subject's id
    if held is not None:
        spilled = ~np.isin(grouped["line"].to_numpy(), held["line"].to_numpy())
        grouped, hashes, group = grouped.filter(pl.Series(spilled)), hashes[spilled], group[spilled]
    digests = _digests_by_group(hashes, group)
    del hashes  # (held apart by group now: one copy at a time)
    return Mapped(by_group=_by_group(grouped), by_position=_by_group(_positions(events, groups)) if positions else {},
                  held={} if held is None else _by_group(held), digests=digests)


def _digests_by_group(hashes: np.ndarray, group: np.ndarray) -> dict[int, np.ndarray]:
    """The hashes of each group's events, in their order (as `_by_group` keeps the events')."""
    if not len(group):
        return {}
    # numpy's stable sort of 16-bit integers is a radix sort: 19 ms per 1.8M events, 73 ms for int32; the
    # counts give each group's range of the sorted hashes (np.unique sorted them again)
    order = np.argsort(group.astype(np.int16) if group.max() < 1 << 15 else group, kind="stable")
    counts = np.bincount(group)
    present = np.flatnonzero(counts)
    ends = np.cumsum(counts[present])
    by_group = take_hashes(hashes, order)
    return {int(g): by_group[end - counts[g]:end] for g, end in zip(present, ends, strict=True)}


def _by_group(frame: pl.DataFrame) -> dict[int, pl.DataFrame]:
    return {int(g): f.drop(GROUP_COLUMN) for (g,), f in frame.partition_by(GROUP_COLUMN, as_dict=True).items()}


def _erased_events(lake: LakeContext, events: pl.DataFrame, known: KnownDigests) -> pl.DataFrame | None:
    """The events of erased subjects (None: none), held in memory instead of spilled: a spill left by a
    killed ingest is in the lake's temp folder until the next writer sweeps it, and no file we write
    after an erasure holds the subject's id (I4). The plan screens them (`screened`) as the fold does."""
    _, blocked = erasure_filter(lake, events, known=known)
    if not blocked:
        return None
    return events.filter(pl.col("line").is_in(pl.Series([r.line for r in blocked], dtype=events["line"].dtype)
                                              .implode()))


def _spill_path(spill: str, group: int, number: int, kind: str = "g") -> str:
    return os.path.join(spill, f"{kind}{group:04d}-p{number:06d}.parquet")


def _digests_path(spill: str, group: int, number: int) -> str:
    """The keyed hashes (32 bytes each, raw) of the events of `_spill_path(spill, group, number)`, in order."""
    return os.path.join(spill, f"h{group:04d}-p{number:06d}.s32")


CONTENT_COLUMN = "__content"  # in memory and in the spill only: a 64-bit hash of an event's content


def _positions(events: pl.DataFrame, groups: int) -> pl.DataFrame:
    """Each event's position, line, batch number and content hash (`differing_repeats`' content), with the
    group of positions it is checked in."""
    return events.select("position", "line", SEQ_COLUMN, pl.struct(CONTENT).hash().alias(CONTENT_COLUMN),
                         (pl.col("position") % groups).cast(pl.Int32).alias(GROUP_COLUMN))


def _reused_positions(spill: str, parts: list[_Part], groups: int) -> pl.Series:
    """The lines whose position an earlier line of another part of the same batch holds with other content:
    what the one-part ingest's batch-wide check (`differing_repeats`: the first line of a position stands)
    rejects beyond each part's own check. Only parts whose ranges of positions overlap (`overlapping`) can
    share a position: none for a file whose positions rise part after part (the 20M-event file: its map
    no longer splits and writes every event's position, content hash and line, 328 MB, and reads them
    back, 47.8-50.4 s instead of 55.4-56.5). Those parts' positions are split by group of positions from
    their spilled events (`_spill_positions`) and checked a group at a time (28 bytes an event): every
    line of a position is in the same group."""
    bad: list[pl.Series] = [pl.Series("line", [], dtype=pl.Int64)]
    involved = overlapping(parts)
    for part in involved:
        _spill_positions(spill, part, groups)
    for g in range(groups):
        frames = [pl.read_parquet(s) for p in involved if os.path.exists(s := _spill_path(spill, g, p.number, "q"))]
        if frames:
            bad.append(reused_in(frames))
    return pl.concat(bad).sort()


def overlapping(parts: list[_Part]) -> list[_Part]:
    """The parts (in order) whose range of positions meets that of another part of the same batch: a
    position can repeat across parts only between those (within a part, the decoder's check judged it)."""
    spanned = [p for p in parts if p.span is not None]
    meet = {q.number for a, b in itertools.combinations(spanned, 2) if a.seq == b.seq
            and a.span[0] <= b.span[1] and b.span[0] <= a.span[1] for q in (a, b)}  # type: ignore[index]
    return [p for p in spanned if p.number in meet]


def _spill_positions(spill: str, part: _Part, groups: int) -> None:
    """A part's (position, line, batch number, content hash) by group of positions (`_positions`), from its
    spilled events and its erased subjects' (held) ones: every event it accepted, one part in memory."""
    columns = ["position", "line", SEQ_COLUMN, *CONTENT]
    frames = [pl.read_parquet(s, columns=columns) for g in range(groups)
              if os.path.exists(s := _spill_path(spill, g, part.number))]
    frames += [held.select(columns) for held in part.held.values()]
    if frames:
        for g, frame in _by_group(_positions(pl.concat(frames), groups)).items():
            frame.write_parquet(_spill_path(spill, g, part.number, "q"), compression=SPILL_COMPRESSION,
                                statistics=False)


def reused_in(frames: list[pl.DataFrame]) -> pl.Series:
    """Of one group of positions (every source's (position, line, batch number, content hash) of it, lines
    numbered over the sources): the lines whose position an earlier line of the same batch holds with other
    content. Between batches (SEQ_COLUMN) the fold judges a reused position."""
    # Only the (usually few) events whose (position, batch) repeats are ranked: the window over every event
    # of the group cost 40 ms per 420k events, the duplicate screen first 15-19 ms.
    seen = pl.concat(frames)
    repeats = seen.filter(pl.struct("position", SEQ_COLUMN).is_duplicated())
    first = pl.col(CONTENT_COLUMN).sort_by("line").first().over("position", SEQ_COLUMN)
    return repeats.filter(pl.col(CONTENT_COLUMN) != first)["line"].cast(pl.Int64)


class _PartsPlan(Plan):
    """All sources as one change: on every attempt, the parts already applied on the parent are left out
    (an ingest's; a replay re-applies them); the others' events are read back a group of buckets at a time
    (every part's events of those buckets, in source order), screened for a position reused with other
    content by the same order in an earlier part of the same batch (quarantined, as the one-part ingest's
    batch-wide check does) and for erased subjects, and folded on the parent (`fold_group`) restricted to
    those buckets. Each group's new (day, bucket) files stream to staging; the groups never share a file."""

    def __init__(self, lake: LakeContext, parts: list[_Part], spill: str, *, groups: int, buckets: int,
                 reused: pl.Series, replay: bool = False, operation: str = "ingest",
                 details: dict[str, Any] | None = None, premerge: bool = False) -> None:
        self.lake, self.parts, self.spill, self.groups, self.buckets = lake, parts, spill, groups, buckets
        self.reused = reused  # lines of positions reused with other content (`_reused_positions`)
        self.starts = [p.first_line for p in parts]
        self.replay, self.operation, self.details = replay, operation, dict(details or {})
        self.sequenced = len({p.seq for p in parts}) > 1  # several batches: folded in order (`fold_in_order`)
        self.premerged: Premerge | None = None  # the key index file of the last attempt's runs, written ahead
        self.premerge = premerge  # write it ahead (an ingest or replay, whose writer records the key index)

    def rows(self, version: int | None) -> list[dict[str, Any]]:
        """The report's row of each source (IngestReport.parts), `version` the commit (None: none)."""
        return [{"batch_id": p.batch_id, "first_line": p.file_line, "offset": _offset(p.batch), "size": _size(p.batch),
                 "extracted": p.batch.decoded.extracted, "accepted": self.accepted(p),
                 "quarantined": len(self.all_rejects(p)), "version": None if p.duplicate else version,
                 "duplicate": p.duplicate} for p in self.parts]

    def reasons(self, part: _Part) -> dict[str, int]:
        return count_reasons(self.all_rejects(part))

    def accepted(self, part: _Part) -> int:
        """The part's accepted events (a duplicate part: as decoded, as `ingest_batch` reports one)."""
        return part.accepted - len(part.rejects)

    def all_rejects(self, part: _Part) -> list[Reject]:
        return sorted([*part.batch.decoded.rejects, *part.rejects], key=lambda r: r.line)

    def _part_of(self, line: int) -> _Part:
        return self.parts[bisect.bisect_right(self.starts, line) - 1]

    def build(self, ctx: TableContext, parent: int) -> Change:
        live, change = self.start(ctx, parent)
        if not live:
            return change
        stream = self._stream(ctx, parent, live, change)
        first = next(stream, None)  # the groups up to the first that changes anything (none: nothing to commit)
        if first is None:
            change.removes, change.locations = [], {}
            return change
        change.stream = itertools.chain([first], stream)
        return change

    def start(self, ctx: TableContext, parent: int) -> tuple[list[_Part], Change]:
        """An attempt on `parent`: the parts to apply there (not a repeat of an earlier source, and for an
        ingest not yet applied; each part's plan-made rejects cleared), and the empty change applying them."""
        for part in self.parts:
            part.duplicate = part.repeat or (not self.replay and _already_applied(self.lake, ctx, part.batch_id,
                                                                                  parent))
            part.rejects = []
        live = [p for p in self.parts if not p.duplicate]
        return live, Change(operation=self.operation, batch_ids=[p.batch_id for p in live], removes=[],
                            locations={}, details={**self.details, "changed_keys": 0})

    def chosen_groups(self, ctx: TableContext, parent: int) -> list[tuple[list[int], set[int] | None]]:
        """The groups planned together, each with the buckets it may touch (None: any). An untagged
        (pre-bucket) file holds any bucket and is rewritten whole by whoever touches its day: with one in the
        parent, the groups are planned as one (correct; memory then the file's, not a part's)."""
        everything = list(range(self.groups))
        if any(bucket_of_path(e.path, self.buckets) is None
               for e in _delta.file_entries(ctx.uri, ctx.storage_options, parent)):
            return [(everything, None)]
        if self.groups > self.buckets:  # each bucket in sub-groups (`group_count`): folded one by one, written once
            return [([b + self.buckets * s for s in range(self.groups // self.buckets)], {b})
                    for b in range(self.buckets)]
        return [([g], {b for b in range(self.buckets) if b % self.groups == g}) for g in everything]

    def screen_held(self, chosen: list[int], live: list[_Part], key: str) -> list[Reject]:
        """The held events (erased subjects') of the groups `chosen`, screened in this process as the fold
        screens every event (`screened`): each a reject (for `add_rejects`), none folded (an erasure is
        never undone)."""
        held = [p.held[g] for g in chosen for p in live if g in p.held]
        if not held:
            return []
        rest, rejects = screened(self.lake, pl.concat(held, how="vertical_relaxed"), self.reused, key)
        if rest.height:
            raise SafetyError("an event held as an erased subject's is no longer blocked by the erasure ledger; "
                              "refused", batch_id=self._part_of(int(rest["line"][0])).batch_id)
        return rejects

    def add_rejects(self, rejects: list[Reject]) -> None:
        """The plan's rejects (lines over the sources), by part, with the line's span (the ledger then reads
        no raw batch)."""
        for r in rejects:
            part = self._part_of(r.line)
            line = part.local(r.line)
            raw = None if r.reason == Reason.ERASED_SUBJECT else part.batch.line_text(line)
            offset, length = part.batch.decoded.span(line)
            part.rejects.append(dataclasses.replace(r, line=line, raw=raw, offset=offset, length=length))

    def _stream(self, ctx: TableContext, parent: int, live: list[_Part], change: Change) -> Stream:
        """The groups' new content, group after group. Each group is folded (and its key index locations
        sorted and spilled: `record` merges the runs by range) on a helper thread one group ahead: the
        next group folds while this one's days are staged (the fold is Polars and numpy, outside the
        GIL), so at most two groups' folds are in memory. The rejects, the change and the crash point are
        this thread's, in group order."""
        runs: list[Any] = []
        changed = ChangedKeys()
        cols = Columns.of(ctx.table)
        chosen = self.chosen_groups(ctx, parent)
        folds = in_order_ahead(lambda args: self._fold(ctx, parent, live, cols, *args), [
            (groups, only, i) for i, (groups, only) in enumerate(chosen)], ahead=FOLDS_AHEAD, name="fold-ahead")
        with closing(folds):
            for i, ((groups, _only), (fold, run)) in enumerate(zip(chosen, folds, strict=True)):
                self.add_rejects(self.screen_held(groups, live, cols.key))
                if fold is None:
                    continue
                self.add_rejects(fold.rejects)
                if fold.stream is None:
                    continue
                change.removes.extend(fold.removes)
                change.details["changed_keys"] += fold.applied.changed_keys
                changed.add(fold.applied.changed)
                if run is not None:
                    runs.append(run)
                if i == len(chosen) - 1:  # every run is in: their key index file is written meanwhile
                    self._premerge(ctx, runs)
                fold.applied.changed = None
                yield from fold.stream
                crash_point("parts.after_group")
        if runs:
            change.hashed_locations = runs
            change.premerged = self._premerge(ctx, runs)
        change.changed = changed.result()

    def _premerge(self, ctx: TableContext, runs: list[Any]) -> Premerge | None:
        """The key index file of `runs`, written on a thread from now on (`keys.Premerge`: the commit's record
        links it in), once per attempt; the one of an earlier attempt discarded."""
        if self.premerged is not None and self.premerged.runs is runs:
            return self.premerged
        self.discard_premerged()
        keys = index.key_index(ctx) if self.premerge else None
        self.premerged = keys.premerge(runs) if keys is not None else None
        return self.premerged

    def discard_premerged(self) -> None:
        if self.premerged is not None:
            self.premerged.discard()
            self.premerged = None

    def _fold(self, ctx: TableContext, parent: int, live: list[_Part], cols: Columns, chosen: list[int],
              only: set[int] | None, index: int) -> tuple[GroupFold | None, Any]:
        """The fold of the groups `chosen` (None: no events) and its key index locations as a sorted run
        spilled to a file (None: none)."""
        if only is not None and len(chosen) > 1:  # a bucket's sub-groups, each read back when folded
            fold = fold_subgroups(self.lake, ctx, parent, [functools.partial(self._events, live, [g]) for g in chosen],
                                  reused=self.reused, key=cols.key, only=only, sequenced=self.sequenced)
        else:
            loaded = self._events(live, chosen)
            if loaded is None:
                return None, None
            fold = fold_group(self.lake, ctx, parent, loaded[0], reused=self.reused, key=cols.key, only=only,
                              sequenced=self.sequenced, known=loaded[1])
            del loaded
        run = None
        if fold.stream is not None and fold.applied.hashed_locations is not None:
            run = spilled(sorted_run(fold.applied.hashed_locations),
                          os.path.join(self.spill, f"locations-{index:04d}.kx2"))
        fold.applied.hashed_locations = None
        return fold, run

    def _events(self, live: list[_Part], chosen: list[int]) -> Loaded:
        """Every live part's spilled events of the groups `chosen`, in source order, and their keys' hashes
        by line (None: no events)."""
        frames, hashes = [], []
        for g, p in itertools.product(chosen, live):
            if os.path.exists(s := _spill_path(self.spill, g, p.number)):
                frames.append(pl.read_parquet(s))
                hashes.append(np.fromfile(_digests_path(self.spill, g, p.number), dtype="S32"))
        if not frames:
            return None
        lines = np.concatenate([f["line"].to_numpy() for f in frames])
        return in_order(frames, several=len(chosen) > 1), KnownDigests.of(lines, np.concatenate(hashes))

    def before_commit(self, ctx: TableContext, staged: StagedCandidate) -> None:
        for part in self.parts:
            if part.duplicate:
                continue
            rejects = self.all_rejects(part)
            accepted, extracted = self.accepted(part), part.batch.decoded.extracted
            if accepted + len(rejects) != extracted:
                raise ReconciliationError(part.batch_id, extracted, accepted, len(rejects))
            self.lake.quarantine.write(part.batch_id, rejects, self.lake.erasures.subject_key, part.batch)
        crash_point("ingest.after_quarantine")


@dataclass(slots=True)
class ChangedKeys:
    """The keys every group's fold changed, for the commit's key filter (`Change.changed`: a rebase over
    this commit then reads none of its files): gathered group by group, only their count once there are
    more than a filter holds (a backfill's millions of keys are not kept to say `all`)."""

    keys: list[pl.Series] = field(default_factory=list)
    count: int = 0
    groups: int = 0
    unknown: bool = False  # a group's are unknown: the rebase reads the commit's files

    def add(self, keys: pl.Series | None) -> None:
        self.groups += 1
        if keys is None:
            self.unknown = True
            return
        self.count += keys.len()
        self.keys = [] if self.count > FILTER_MAX_KEYS else [*self.keys, keys]

    def result(self) -> pl.Series | int | None:
        if self.unknown or not self.groups:
            return None
        return self.count if self.count > FILTER_MAX_KEYS else pl.concat(self.keys)


def changed_keys(groups: list[pl.Series | None]) -> pl.Series | int | None:
    """`ChangedKeys` of `groups` (each group's changed keys, None: unknown)."""
    gathered = ChangedKeys()
    for keys in groups:
        gathered.add(keys)
    return gathered.result()


def in_order(frames: list[pl.DataFrame], *, several: bool) -> pl.DataFrame:
    """One group's events from every part (each in line order, the parts in source order), in source order;
    `several` groups planned as one are interleaved, so sorted by line."""
    events = pl.concat(frames)
    return events.sort("line") if several else events


@dataclass(slots=True, kw_only=True)
class GroupFold:
    """The fold of one group of buckets on a parent: its plan, the parent files it replaces, the lazy
    stream of their new content (None: nothing to commit) and its rejects (lines over the sources; no text,
    no span)."""

    applied: ApplyPlan
    removes: list[_delta.FileEntry]
    stream: Stream | None
    rejects: list[Reject]


def fold_group(lake: LakeContext, ctx: TableContext, parent: int, events: pl.DataFrame, *, reused: pl.Series,
               key: str, only: set[int] | None, sequenced: bool, known: KnownDigests | None = None) -> GroupFold:
    """The fold of one group, in this process or a Ray worker: every part's events of its buckets (in source
    order), `screened`, then planned on `parent` by `plan_bucketed` restricted to the group's buckets
    (`only`; None: any), several batches (`sequenced`) each as if committed after the ones before.
    `known`: the events' keyed hashes by line (the map's; None: hashed where needed)."""
    events, rejects = screened(lake, events if sequenced else events.drop(SEQ_COLUMN), reused, key, known)
    planned = plan_bucketed(ctx, parent, events, only_buckets=only, sequence=SEQ_COLUMN if sequenced else None,
                            known=known)
    return _group_fold(planned, rejects)


def fold_subgroups(lake: LakeContext, ctx: TableContext, parent: int,
                   groups: list[Callable[[], Loaded]], *, reused: pl.Series, key: str, only: set[int],
                   sequenced: bool) -> GroupFold:
    """`fold_group` of a bucket's sub-groups (`groups`: each one's loader of its events, None for none):
    each read, `screened` and folded on its own (`fold_group_rows`), SUBGROUP_FOLDS of them at once on helper
    threads (they hold distinct keys), their winners written together (`replace_groups`: each (day, bucket)
    file once). Rejects and conflicts in sub-group order, whatever the order the folds end in."""
    sequence = SEQ_COLUMN if sequenced else None
    rejects: list[Reject] = []

    def one(load: Callable[[], Loaded]) -> tuple[list[Reject], GroupRows]:
        loaded = load()
        if loaded is None:
            return [], ([], None, None)
        events, known = loaded
        events, screened_out = screened(lake, events if sequenced else events.drop(SEQ_COLUMN), reused, key, known)
        return screened_out, fold_group_rows(ctx, parent, events, only_buckets=only, sequence=sequence, known=known)

    def each() -> Iterator[GroupRows]:
        with closing(in_order_ahead(one, groups, ahead=SUBGROUP_FOLDS, name="subgroup-fold")) as folds:
            for screened_out, rows in folds:
                rejects.extend(screened_out)
                yield rows

    return _group_fold(replace_groups(ctx, parent, each()), rejects)


def _group_fold(planned: Planned, rejects: list[Reject]) -> GroupFold:
    applied, removes, stream = planned
    conflicts = [Reject(line=c.line, reason=Reason.POSITION_CONFLICT, detail=c.detail, raw=None,
                        order_id=c.order_id) for c in applied.conflicts]
    return GroupFold(applied=applied, removes=removes, stream=stream, rejects=[*rejects, *conflicts])


def screened(lake: LakeContext, events: pl.DataFrame, reused: pl.Series, key: str, known: KnownDigests | None = None
             ) -> tuple[pl.DataFrame, list[Reject]]:
    """`events` without those at `reused` lines (a position an earlier line of the batch holds with other
    content) and without erased subjects' (`erasure_filter`; `known`: their keys' hashes by line, the
    map's), and a reject for each one left out."""
    events, repeats = _without_lines(events, reused, key)
    events, blocked = erasure_filter(lake, events, known=known)
    return events, [*blocked, *(Reject(line=c.line, reason=Reason.POSITION_CONFLICT, detail=c.detail, raw=None,
                                       order_id=c.order_id) for c in repeats)]


def _without_lines(events: pl.DataFrame, lines: pl.Series, key: str) -> tuple[pl.DataFrame, list[Conflict]]:
    """`events` without those at `lines` (positions reused with other content), and their conflicts."""
    if events.height == 0 or lines.len() == 0:
        return events, []
    mask = pl.col("line").is_in(lines.implode())
    conflicts = [Conflict(line=line, order_id=oid, detail=f"position {pos} already holds a different event in "
                          "this batch") for line, pos, oid in events.filter(mask).select("line", "position", key)
                 .sort("line").iter_rows()]
    return events.filter(mask.not_()), conflicts
