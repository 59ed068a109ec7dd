"""A file in parts on a bucketed table, ingested on Ray: workers map and reduce, the driver alone commits.

The same steps as `parts.ingest_parts_once`, with the same functions, spread over Ray core tasks:

- **map**, a task per part (a `parts.Source`: a byte range of the file, cut at line ends): sha256 and
  strict decode of the range, its raw copy into the lake, and its events tagged with its batch number and
  split by group of buckets (`parts.map_events`, as the local spill splits them), each group an Arrow
  table returned through Ray's object store (`num_returns`: the driver owns them, so they outlive the
  worker that made them), with its (position, line, batch number, content hash) by group of positions and
  its line spans. Only a small summary (sha256, counts, the decoder's rejects) comes to the driver, with
  the erased subjects' events (`Mapped.held`): these never enter a group's frame nor reach a reduce task,
  the driver screens them (`_PartsPlan.screen_held`) as the local plan does.
- **same-position check**, a task per group of positions (`parts.reused_in`): the lines whose position an
  earlier line of the file holds with other content.
- **reduce**, a task per group of buckets (`parts.fold_group`, the local plan's fold of a group): every
  part's events of its buckets folded once with the parent's files of those buckets, staged straight
  into the lake under a fresh candidate id (`stage_partitions`), returning the files' evidence, the
  parent files they replace, the hashed key locations and the rejects.
- **driver**: the parts numbered as the local spill numbers them (`parts.next_part`), then the local
  path's commit (`parts.write_plan`: upkeep, the writer): the union of the reducers' files is gated and
  committed in ONE strict commit (deferred), the indexes recorded, the version published once
  (`parts.publish_plan`). A stale parent discards the staged files and runs the reduce stage again on the
  new parent; the map outputs stay in the object store, nothing is decoded again.

Faults: a worker that dies is retried by Ray (`max_retries`); files a dead attempt staged are in no commit
(vacuum's orphan rule removes them). A driver killed before the commit leaves nothing visible (staged
files are orphans, raw copies are kept, no batch id is applied); a rerun does it all again.

The lake must be storage every worker reaches (`s3://`, or a local path when every node of the cluster is
this machine: anything else is refused), and the input file must be readable at the same path on every
node (the map tasks read their ranges). `replay --all` runs the same tasks over the retained raw batches
(`fold_on_ray`): a map task reads its batch from the raw store of its own opening of the lake, and the
driver reads a rejected line's text from the raw store when the worker's copy was a scratch file (an
object-store lake). A release run's staging runs the map stage and its plan (`folded_on_ray`) without the
commit: the run's `stage` gates the reducers' files, its SHIP commits them, its HOLD deletes them.
"""

from __future__ import annotations

import importlib
import logging
import os
import tempfile
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NoReturn

import numpy as np
import polars as pl

from .. import _delta, progress
from ..apply.fold import Columns
from ..commit.writer import Change, WriteResult
from ..context import LakeContext, TableContext
from ..contract import Reject
from ..contract.decode import DecodedBatch
from ..contract.source import BytesBatch, FileBatch
from ..errors import DeltaReleaseError, InputError
from ..faults import crash_point, exit_once, exit_once_spec
from ..ingest import IngestReport
from ..parts import (
    Source,
    _Part,
    _PartsPlan,
    changed_keys,
    fold_group,
    group_count,
    in_order,
    map_events,
    next_part,
    parts_report,
    publish_plan,
    raw_kept,
    reused_in,
    write_plan,
)
from ..stage import Candidate, stage_partitions
from ..stage.candidate import FileEvidence

Opener = Callable[[], LakeContext]  # opens the driver's lake in a worker (picklable: lake.py `_Reopen`)
RETRIES = 3  # attempts Ray makes again after a worker dies mid-task
ADDRESS_ENV = "RAY_ADDRESS"  # Ray's own convention: the cluster to join


def connect(lake: LakeContext) -> Any:
    """The `ray` module, connected: to the cluster `RAY_ADDRESS` names, else a local one with this machine's
    cores (kept for the rest of the process). A lake on local disk with a node on another machine is refused
    (its workers would stage into their own disks): InputError, before any task runs."""
    ray: Any = importlib.import_module("ray")  # (Any: Ray's API is not typed throughout)
    address = os.environ.get(ADDRESS_ENV) or None
    if not ray.is_initialized():
        if address:
            ray.init(address=address, log_to_driver=False, logging_level=logging.WARNING)
        else:
            ray.init(num_cpus=os.cpu_count() or 1, include_dashboard=False, log_to_driver=False,
                     logging_level=logging.WARNING)
    if lake.storage.is_local:
        here = ray.util.get_node_ip_address()
        elsewhere = sorted({n["NodeManagerAddress"] for n in ray.nodes() if n.get("Alive")} - {here})
        if elsewhere:
            raise InputError(f"the lake {lake.storage.root} is on local disk but the Ray cluster "
                             f"{address or 'joined'} has nodes on other machines ({', '.join(elsewhere[:3])}): put "
                             "the lake on s3://", argument="executor")
    return ray


@dataclass(slots=True, kw_only=True)
class _PartSummary:
    """What a map task sends the driver itself: the part's identity and counts, not its events (but for the
    erased subjects' events, `held`: the driver keeps them, as the local path keeps them out of its spill)."""

    path: str
    offset: int
    sha256: str
    size: int
    extracted: int
    accepted: int
    rejects: list[Reject]
    schema_versions: list[int]
    held: dict[int, pl.DataFrame]  # group of buckets -> erased subjects' events (part lines)


@dataclass(slots=True, kw_only=True)
class _MapRefs:
    """A map task's outputs in the object store."""

    spans: Any  # (offsets, lengths) of the part's lines: fetched only for a part the reduce rejected lines of
    events: list[Any]  # per group of buckets: an Arrow table of the part's events, or None
    positions: list[Any]  # per group of positions: (position, line, batch number, content hash), or None


@dataclass(slots=True, kw_only=True)
class _Reduced:
    """What a reduce task returns: the evidence of the files it staged and what the commit needs of them."""

    files: list[FileEvidence] = field(default_factory=list)
    removes: list[_delta.FileEntry] = field(default_factory=list)
    changed_keys: int = 0
    hashed_locations: tuple[Any, Any] | None = None
    changed: pl.Series | None = None  # the keys the fold changed (the commit's key filter)
    rejects: list[Reject] = field(default_factory=list)  # lines over the file, no text, no span


def _map_task(opener: Opener, table: str, source: Source, groups: int) -> tuple[Any, ...]:
    lake = opener()
    ctx = lake.table(table)
    with tempfile.TemporaryDirectory(prefix="delta-release-map-") as scratch:
        batch = source.read(lake, scratch)  # sha256 and strict decode of the range (or raw batch)
    if not isinstance(batch, FileBatch):
        raise InputError("the ray executor maps parts of a file (byte ranges) or retained raw batches; this "
                         "source is neither", argument="executor")
    with raw_kept(lake, batch, keep=source.keep_raw):
        mapped = map_events(lake, ctx, batch.decoded.events, groups, seq=source.batch)  # part lines
    decoded = batch.decoded
    summary = _PartSummary(path=os.fspath(batch.path), offset=batch.offset, sha256=batch.sha256, size=batch.size,
                           extracted=decoded.extracted, accepted=decoded.events.height, rejects=decoded.rejects,
                           schema_versions=decoded.schema_versions, held=mapped.held)
    events = [None if (f := mapped.by_group.get(g)) is None else f.to_arrow() for g in range(groups)]
    positions = [None if (f := mapped.by_position.get(g)) is None else f.to_arrow() for g in range(groups)]
    return (summary, (decoded.offsets, decoded.lengths), *events, *positions)


def _in_lines(shifts: list[int], frames: tuple[Any, ...]) -> list[pl.DataFrame]:
    """The parts' frames (Arrow, part lines) as Polars frames in lines over the file."""
    out = []
    for shift, frame in zip(shifts, frames, strict=True):
        if frame is not None:
            df = pl.from_arrow(frame)
            assert isinstance(df, pl.DataFrame)
            out.append(df.with_columns(pl.col("line") + shift))
    return out


def _reused_task(shifts: list[int], *frames: Any) -> pl.Series:
    found = _in_lines(shifts, frames)
    return reused_in(found) if found else pl.Series("line", [], dtype=pl.Int64)


def _reduce_task(opener: Opener, table: str, parent: int, batch_ids: list[str], chosen: list[int],
                 only: set[int] | None, reused: pl.Series, shifts: list[int], sequenced: bool, fault: str | None,
                 *frames: Any) -> _Reduced:
    lake = opener()
    ctx = lake.table(table)
    found = _in_lines(shifts, frames)
    if not found:
        return _Reduced()
    events = in_order(found, several=len(chosen) > 1)
    del found
    fold = fold_group(lake, ctx, parent, events, reused=reused, key=Columns.of(ctx.table).key, only=only,
                      sequenced=sequenced)
    del events
    if fold.stream is None:
        return _Reduced(rejects=fold.rejects)
    tdef = ctx.table
    staged = stage_partitions(ctx.storage, table=ctx.name, parent=parent, batch_ids=batch_ids,
                              partition_column=tdef.partition, key=tdef.key, file_schema=tdef.file_schema(),
                              partitions=fold.stream, removes=fold.removes, now_ms=ctx.now_ms(),
                              buckets=tdef.buckets, hasher=ctx.erasures.subject_key)
    exit_once(fault, "distributed.after_stage")  # the kill test: a worker dead after staging, once
    return _Reduced(files=staged.files, removes=fold.removes, changed_keys=fold.applied.changed_keys,
                    hashed_locations=fold.applied.hashed_locations, changed=fold.applied.changed,
                    rejects=fold.rejects)


def _gathered(ray: Any, ctx: TableContext, tasks: list[Any]) -> list[Any]:
    """Every task's result, in order. One failed (after Ray's retries): the files the others staged are
    removed and its error raised (ours as itself, so the CLI's exit code holds)."""
    results: list[Any] = []
    failure: BaseException | None = None
    for task in tasks:
        try:
            results.append(ray.get(task))
        except Exception as exc:  # noqa: BLE001 - raised below, once the others' files are gone
            failure = failure or exc
    if failure is None:
        return results
    for reduced in results:
        for f in getattr(reduced, "files", []):
            ctx.storage.delete(f.path)
    _raise_ours(failure)


def _unwrapped(ray: Any, refs: list[Any]) -> list[Any]:
    try:
        return list(ray.get(refs))
    except Exception as exc:  # noqa: BLE001 - re-raised by _raise_ours
        _raise_ours(exc)


def _raise_ours(exc: BaseException) -> NoReturn:
    """Raise a failed task's error: our own as itself (RayTaskError wraps it), so the CLI's exit code
    holds; anything else as Ray raised it."""
    cause = getattr(exc, "cause", None)
    if isinstance(cause, DeltaReleaseError):
        raise cause from None
    raise exc


class _RayPartsPlan(_PartsPlan):
    """`parts._PartsPlan` whose groups are reduced by Ray tasks that stage their own files: `build` returns
    them as one pre-staged candidate for the writer to gate and commit. Rebuilt on a stale parent: only
    the reduce tasks run again (on the new parent), from the map outputs still in the object store."""

    def __init__(self, lake: LakeContext, parts: list[_Part], *, groups: int, buckets: int, reused: pl.Series,
                 ray: Any, refs: list[_MapRefs], opener: Opener, raws: list[str | None], replay: bool,
                 operation: str | None, details: dict[str, Any] | None) -> None:
        super().__init__(lake, parts, "", groups=groups, buckets=buckets, reused=reused, replay=replay,
                         operation=operation or ("replay" if replay else "ingest"), details=details)
        self.ray, self.refs, self.opener, self.raws = ray, refs, opener, raws
        self.reducer = ray.remote(num_cpus=1, max_retries=RETRIES)(_reduce_task)
        self.reduce_runs = 0  # reduce stages run (one per attempt that had parts to apply)

    def build(self, ctx: TableContext, parent: int) -> Change:
        live, change = self.start(ctx, parent)
        if not live:
            return change
        self.reduce_runs += 1
        fault = exit_once_spec()
        key = Columns.of(ctx.table).key
        tasks = []
        rejects: list[Reject] = []
        for chosen, only in self.chosen_groups(ctx, parent):
            rejects.extend(self.screen_held(chosen, live, key))  # here: erased subjects' events reach no worker
            frames = [self.refs[p.number - 1].events[g] for g in chosen for p in live]
            shifts = [p.first_line - 1 for _ in chosen for p in live]
            tasks.append(self.reducer.remote(self.opener, ctx.name, parent, change.batch_ids, chosen, only,
                                             self.reused, shifts, self.sequenced, fault, *frames))
        reduced: list[_Reduced] = _gathered(self.ray, ctx, tasks)
        rejects.extend(r for one in reduced for r in one.rejects)
        self._fetch_spans({self._part_of(r.line).number for r in rejects})
        self.add_rejects(rejects)
        files = [f for one in reduced for f in one.files]
        if not files and not any(one.removes for one in reduced):
            return change  # nothing changes the table
        change.removes = [e for one in reduced for e in one.removes]
        change.details["changed_keys"] = sum(one.changed_keys for one in reduced)
        change.changed = changed_keys([one.changed for one in reduced if one.files or one.removes])
        hashed = [one.hashed_locations for one in reduced if one.hashed_locations is not None]
        if hashed:
            change.hashed_locations = (np.concatenate([h[0] for h in hashed]), np.concatenate([h[1] for h in hashed]))
        change.prestaged = Candidate(candidate_id=uuid.uuid4().hex[:20], table=ctx.name, parent=parent,
                                     batch_ids=list(change.batch_ids), files=files, removes=list(change.removes))
        return change

    def _fetch_spans(self, numbers: set[int]) -> None:
        """The line spans of the parts the reduce rejected lines of (their ledger rows name them), and the
        text of a retained raw batch a worker read from its own copy (an object-store lake): read here from
        the raw store, as a local replay reads it."""
        for number in sorted(numbers):
            part, sha = self.parts[number - 1], self.raws[number - 1]
            decoded = part.batch.decoded
            if decoded.offsets.size < decoded.extracted:
                decoded.offsets, decoded.lengths = self.ray.get(self.refs[number - 1].spans)
            if sha is not None and isinstance(part.batch, FileBatch) and not part.batch.path.is_file():
                part.batch = BytesBatch(data=self.lake.raw.read_sha(sha), decoded=decoded)


def ingest_parts_on_ray(lake: LakeContext, sources: list[Source], *, table: str, publish: bool,
                        opener: Opener) -> IngestReport:
    """`parts.ingest_parts_once` on Ray (module docstring): the same parts, plan, commit and report."""
    return parts_report(*fold_on_ray(lake, sources, table=table, publish=publish, replay=False, opener=opener))


def fold_on_ray(lake: LakeContext, sources: list[Source], *, table: str, publish: bool, replay: bool,
                opener: Opener) -> tuple[_PartsPlan, WriteResult]:
    """`parts.fold_and_write` on Ray (module docstring): the sources mapped and their groups reduced by
    workers, the one commit made here; the plan and the writer's result, as the local fold returns them."""
    plan = _mapped(lake, sources, table=table, opener=opener, replay=replay)
    result = write_plan(lake, plan, table=table, publish=publish)
    publish_plan(lake, plan, result, table=table, publish=publish)
    return plan, result


@contextmanager
def folded_on_ray(lake: LakeContext, sources: list[Source], *, table: str, replay: bool = False,
                  operation: str | None = None, details: dict[str, Any] | None = None,
                  opener: Opener) -> Iterator[_PartsPlan]:
    """`parts.folded_sources` on Ray: the sources mapped by workers and their ONE plan, whose groups Ray's
    reduce tasks fold and stage when the plan is built (a release run's `stage`, which commits later: a
    HOLD's `discard` deletes what the reducers staged)."""
    yield _mapped(lake, sources, table=table, opener=opener, replay=replay, operation=operation, details=details)


def _mapped(lake: LakeContext, sources: list[Source], *, table: str, opener: Opener, replay: bool = False,
            operation: str | None = None, details: dict[str, Any] | None = None) -> _RayPartsPlan:
    """The map stage on Ray and the plan over its outputs (the reduce stage runs when the plan is built)."""
    ray = connect(lake)
    ctx = lake.table(table)
    n = ctx.table.buckets or 1
    cpus = int(ray.cluster_resources().get("CPU", 1))
    groups = max(group_count(sources, n, split=False), min(n, cpus))  # a reduce task stages whole buckets
    mapper = ray.remote(num_cpus=1, num_returns=2 + 2 * groups, max_retries=RETRIES)(_map_task)
    outs = [mapper.remote(opener, table, source, groups) for source in sources]
    waiting = {out[0]: number for number, out in enumerate(outs, start=1)}
    while waiting:  # the CLI's bar moves part by part as the maps finish (in any order)
        done, _ = ray.wait(list(waiting), num_returns=1)
        number = waiting.pop(done[0])
        progress.item(f"part {number}/{len(sources)} mapped", sources[number - 1].size)
    summaries: list[_PartSummary] = _unwrapped(ray, [out[0] for out in outs])
    parts: list[_Part] = []
    for source, s in zip(sources, summaries, strict=True):
        decoded = DecodedBatch(extracted=s.extracted, events=pl.DataFrame(), rejects=s.rejects,
                               schema_versions=s.schema_versions)
        batch = FileBatch(path=Path(s.path), sha256=s.sha256, size=s.size, decoded=decoded, offset=s.offset)
        part = next_part(parts, batch, seq=source.batch, accepted=s.accepted)
        if not part.repeat:  # in lines over the file, as the local spill holds them
            part.held = {g: f.with_columns(pl.col("line") + (part.first_line - 1)) for g, f in s.held.items()}
        parts.append(part)
    refs = [_MapRefs(spans=out[1], events=list(out[2:2 + groups]), positions=list(out[2 + groups:])) for out in outs]
    firsts = [p for p in parts if not p.repeat]  # a repeat's lines are not checked (nor applied)
    shifts = [p.first_line - 1 for p in firsts]
    finder = ray.remote(num_cpus=1, max_retries=RETRIES)(_reused_task)
    found = _unwrapped(ray, [finder.remote(shifts, *[refs[p.number - 1].positions[g] for p in firsts])
                             for g in range(groups)])
    reused = pl.concat([pl.Series("line", [], dtype=pl.Int64), *found]).sort()
    crash_point("parts.after_spill")
    return _RayPartsPlan(lake, parts, groups=groups, buckets=n, reused=reused, ray=ray, refs=refs, opener=opener,
                         raws=[s.raw for s in sources], replay=replay, operation=operation, details=details)
