"""Ingest of a batch file: in one piece, or, past the part limit, as consecutive parts (bounded memory).

A file of at most `max_part_bytes()` (256 MiB, `DELTA_RELEASE_MAX_PART_BYTES`) is one batch, ingested by
`ingest.ingest_batch` as before. A larger file is cut at line boundaries (contract/parts.py) and each
part, in file order, is decoded, stored raw (the byte-identical slice, under its own sha256) and
reconciled as a batch of its own (its quarantine ledger); only the decoded events of one part are held
at a time. Then:

- on a bucketed table (`ingest_parts_once`), each part's events were spilled to a local temp directory
  by group of buckets; ONE plan folds all parts' events of a group at a time with their parent files
  (the groups never share a (day, bucket) file), so each (day, bucket) file is written once per ingest,
  in ONE stage, gate and strict commit (deferred) recording every part's batch id. The same-position
  check runs over the whole file (a group of positions at a time), so the counts, quarantine and table
  equal those of ingesting the whole file at once. A stale parent rebuilds the plan from the spill. The
  map of a part (`map_part`), the same-position check of a group (`reused_in`) and the reduce of a group
  (`fold_group`) are functions of their own: `distributed/` runs them as Ray tasks (`--executor ray`);
- on a table without buckets, each part is its own strict commit (deferred), in file order; the
  same-position check is per part (a position reused in a later part is judged as between batches: a
  conflict with the order's current row is quarantined).

After the last part the catalog publishes once: the version holding every part. So readers through the
gateway see the file all at once or not at all (no writer's crash recovery publishes a deferred commit;
a later ingest of another file does publish its own version, on top of what was committed); a crash
leaves the published snapshot as it was, and rerunning the same ingest finds the parts already applied
(duplicates by batch id), applies the rest and publishes, also when every part was applied and only the
publication was missing.

The report (`IngestReport.parts`) lists the parts: `batch_id`, `first_line` (the file line of the
part's line 1: a quarantined line N of the part is file line first_line + N - 1), `offset` and `size`
(bytes in the file), `extracted`, `accepted`, `quarantined`, `version`, `duplicate`. The top-level
counts are the sums, `batch_id` the first part's, `version` the last version a part committed in this
call (null when none did: on a bucketed table every part applied now has the one commit's version),
`duplicate` true when every part was. A file within the limit has `parts: []`.
"""

from __future__ import annotations

import bisect
import dataclasses
import itertools
import json
import os
import tempfile
import zlib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np
import polars as pl

from . import _delta, index, progress
from ._malloc import fix_mmap_threshold, use_system_arrow_pool
from .apply.bucketed import Stream, plan_bucketed
from .apply.fold import ApplyPlan, Columns, Conflict
from .commit.writer import Change, Plan, StagedCandidate, WriteResult, write
from .context import LakeContext, TableContext
from .contract import Reason, Reject
from .contract.decode import CONTENT, count_reasons
from .contract.parts import max_part_bytes, part_ranges
from .contract.source import FileBatch, read_batch_file
from .errors import ReconciliationError
from .faults import crash_point
from .ingest import IngestReport, _already_applied, erasure_filter, ingest_batch
from .maintenance import upkeep
from .raw.background import RawCopy
from .stage.buckets import BUCKET_COLUMN, bucket_of_path, with_buckets
from .tables import DEFAULT_TABLE


class PartsRunner(Protocol):
    """What ingests a file in parts on a bucketed table: `ingest_parts_once` (this process), or an executor
    that maps and reduces on a cluster (distributed/); same arguments, same report."""

    def __call__(self, lake: LakeContext, path: str | os.PathLike[str], ranges: list[tuple[int, int]], *,
                 table: str, publish: bool) -> IngestReport: ...


def ingest_file(lake: LakeContext, path: str | os.PathLike[str], *, table: str = DEFAULT_TABLE,
                publish: bool = True, max_part: int | None = None, in_parts: PartsRunner | None = None
                ) -> IngestReport:
    """Ingest a batch file: as one batch, or in parts past the part limit (module docstring). `in_parts`
    runs a file in parts on a bucketed table (default `ingest_parts_once`, in this process)."""
    fix_mmap_threshold()  # else glibc's heaps keep freed MiB blocks and grow part after part (_malloc.py)
    use_system_arrow_pool()  # (a lake opened by other means than Lake.open)
    ranges = part_ranges(path, max_part_bytes(max_part)) if os.path.isfile(path) else [(0, -1)]
    if len(ranges) == 1:
        return ingest_batch(lake, read_batch_file(path), table=table, publish=publish)
    if lake.table(table).table.buckets:
        return (in_parts or ingest_parts_once)(lake, path, ranges, table=table, publish=publish)
    return _ingest_each_part(lake, path, ranges, table=table, publish=publish)


def _ingest_each_part(lake: LakeContext, path: str | os.PathLike[str], ranges: list[tuple[int, int]], *,
                      table: str, publish: bool) -> IngestReport:
    """A table without buckets: each part its own batch and strict commit (deferred), published once."""
    reports: list[IngestReport] = []
    lists: list[bytes] = []  # each part's `files` and `removed`, packed until the total (_pack)
    parts: list[dict[str, Any]] = []
    first_line = 1
    for number, (offset, size) in enumerate(ranges, start=1):
        progress.item(f"part {number}/{len(ranges)}", size)  # the bar of the CLI's `progress.work`, if any
        batch = read_batch_file(path, offset=offset, length=size)  # this part only: hashed and decoded
        report = ingest_batch(lake, batch, table=table, publish=False)
        del batch
        lists.append(_pack(report))
        reports.append(report)
        parts.append({"batch_id": report.batch_id, "first_line": first_line, "offset": offset, "size": size,
                      "extracted": report.extracted, "accepted": report.accepted,
                      "quarantined": report.quarantined, "version": report.version,
                      "duplicate": report.duplicate})
        first_line += report.extracted
    if publish:
        publish_parts(lake, table, [r.batch_id for r in reports], [r.version for r in reports])
    return _total(reports, parts, lists)


def _pack(report: IngestReport) -> bytes:
    """The part's `files` and `removed`, moved out of its report as compressed JSON until the total is
    built. A part that rewrites every (day, bucket) file lists ~2,900 of each: ~2.5 MiB of dicts and
    strings, 0.2 MiB packed, which each later part's peak would otherwise carry (9 parts: ~20 MiB)."""
    packed = zlib.compress(json.dumps([report.files, report.removed], separators=(",", ":")).encode(), 1)
    report.files, report.removed = [], []
    return packed


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


def _total(reports: list[IngestReport], parts: list[dict[str, Any]], lists: list[bytes]) -> IngestReport:
    unpacked = [json.loads(zlib.decompress(packed)) for packed in lists]
    reasons: dict[str, int] = {}
    for r in reports:
        for code, n in r.reasons.items():
            reasons[code] = reasons.get(code, 0) + n
    versions = [r.version for r in reports if r.version is not None]
    return IngestReport(
        batch_id=reports[0].batch_id, extracted=sum(r.extracted for r in reports),
        accepted=sum(r.accepted for r in reports), quarantined=sum(r.quarantined for r in reports),
        reasons=dict(sorted(reasons.items())),
        schema_versions=sorted({v for r in reports for v in r.schema_versions}),
        version=versions[-1] if versions else None, duplicate=all(r.duplicate for r in reports),
        attempts=sum(r.attempts for r in reports), stale_parents=[s for r in reports for s in r.stale_parents],
        files=[f for files, _ in unpacked for f in files], removed=[p for _, removed in unpacked for p in removed],
        parts=parts)


# -- a file in parts on a bucketed table: each (day, bucket) file folded and written once ----------------
GROUP_COLUMN = "__group"  # in memory only: the group of buckets an event's key hashes to


@dataclass(slots=True, kw_only=True)
class _Part:
    """One part of the file while the file is planned: its batch (for its lines' text; its decoded events
    are spilled, not held), where it sits in the file, and what the plan decided for it."""

    number: int
    batch: FileBatch
    first_line: int
    offset: int
    size: int
    accepted: int  # accepted by the decoder (before the erasure filter and the position checks)
    duplicate: bool = False
    rejects: list[Reject] = field(default_factory=list)  # the plan's: erased subjects, position conflicts

    @property
    def batch_id(self) -> str:
        return self.batch.batch_id

    def local(self, line: int) -> int:
        return line - self.first_line + 1


def ingest_parts_once(lake: LakeContext, path: str | os.PathLike[str], ranges: list[tuple[int, int]], *,
                      table: str, publish: bool) -> IngestReport:
    """Every part decoded, stored raw and spilled (its events, by group of buckets, to a local temp file),
    one part at a time; then ONE plan over all parts (a group of buckets at a time: all parts' events of
    those buckets folded once with their parent files), ONE stage and gate, ONE strict commit recording
    every part's batch id (deferred), then one publication."""
    ctx = lake.table(table)
    n = ctx.table.buckets or 1
    groups = min(len(ranges), n)
    grouping = Grouping(key=ctx.table.keyed().key, buckets=n, groups=groups)
    hasher = ctx.erasures.subject_key
    with tempfile.TemporaryDirectory(prefix="delta-release-parts-") as spill:
        parts: list[_Part] = []
        first_line = 1
        for number, (offset, size) in enumerate(ranges, start=1):
            progress.item(f"part {number}/{len(ranges)}", size)  # the bar of the CLI's `progress.work`, if any
            batch = read_batch_file(path, offset=offset, length=size)  # this part only: hashed and decoded
            with RawCopy(batch, lake.raw, received=lake.clock.now(), size=batch.size) as raw:
                by_group, by_position = map_part(batch, grouping, hasher, line_shift=first_line - 1)  # file lines
                for g, frame in by_group.items():
                    frame.write_parquet(_spill_path(spill, g, number))
                for g, frame in by_position.items():
                    frame.write_parquet(_spill_path(spill, g, number, "q"))
                del by_group, by_position
                raw.kept()
            decoded = batch.decoded
            parts.append(_Part(number=number, batch=batch, first_line=first_line, offset=offset, size=size,
                               accepted=decoded.events.height))
            decoded.events = decoded.events.clear()  # spilled: only the rejects stay on the heap
            for name in ("offsets", "lengths"):  # 16 bytes a line: read back mapped, for a conflict's text
                np.save(spans := os.path.join(spill, f"{name}-p{number:06d}.npy"), getattr(decoded, name))
                setattr(decoded, name, np.load(spans, mmap_mode="r"))
            first_line += decoded.extracted
        reused = _reused_positions(spill, parts, groups)
        crash_point("parts.after_spill")
        upkeep.before_work(ctx)
        plan = _PartsPlan(lake, parts, spill, groups=groups, buckets=n, reused=reused)
        result = write(ctx, plan, publish_now=False)
    return parts_report(lake, table, parts, plan, result, publish=publish)


def parts_report(lake: LakeContext, table: str, parts: list[_Part], plan: _PartsPlan, result: WriteResult, *,
                 publish: bool) -> IngestReport:
    """After the one commit of a file in parts (whichever executor ran it): publish, and the report."""
    version = committed = result.version
    if publish:
        publish_parts(lake, table, [p.batch_id for p in parts],
                      [None if p.duplicate else version for p in parts])
    rows: list[dict[str, Any]] = [
        {"batch_id": p.batch_id, "first_line": p.first_line, "offset": p.offset, "size": p.size,
         "extracted": p.batch.decoded.extracted, "accepted": plan.accepted(p), "quarantined": len(plan.all_rejects(p)),
         "version": None if p.duplicate else version, "duplicate": p.duplicate} for p in parts]
    reasons: dict[str, int] = {}
    for p in parts:
        for code, count in count_reasons(plan.all_rejects(p)).items():
            reasons[code] = reasons.get(code, 0) + count
    staged = result.staged
    return IngestReport(
        batch_id=parts[0].batch_id, extracted=sum(r["extracted"] for r in rows),
        accepted=sum(r["accepted"] for r in rows), quarantined=sum(r["quarantined"] for r in rows),
        reasons=dict(sorted(reasons.items())),
        schema_versions=sorted({v for p in parts for v in p.batch.decoded.schema_versions}),
        version=version, duplicate=all(p.duplicate for p in parts), attempts=result.attempts,
        stale_parents=[s.to_json() for s in result.stale_parents],
        files=[f.public() for f in staged.staged_files] if committed is not None else [],
        removed=[r.path for r in staged.removes] if committed is not None else [], parts=rows)


@dataclass(frozen=True, slots=True, kw_only=True)
class Grouping:
    """How a file's events are split between the plan's groups: `groups` groups of the table's `buckets`
    buckets (bucket % groups) by the keyed hash of `key`, and as many groups of positions."""

    key: str
    buckets: int
    groups: int


def map_part(batch: FileBatch, grouping: Grouping, hasher: Callable[[str], str], *, line_shift: int
             ) -> tuple[dict[int, pl.DataFrame], dict[int, pl.DataFrame]]:
    """The map of one decoded part: its events by group of buckets, and each event's (position, line,
    content hash) by group of positions (`_positions`); lines moved by `line_shift` (the part's first file
    line - 1, or 0 to keep the part's own lines). Groups without events are absent."""
    events = batch.decoded.events.with_columns(pl.col("line") + line_shift)
    grouped = with_buckets(events, grouping.key, grouping.buckets, hasher).with_columns(
        (pl.col(BUCKET_COLUMN) % grouping.groups).alias(GROUP_COLUMN)).drop(BUCKET_COLUMN)
    by_group = {int(g): frame.drop(GROUP_COLUMN)
                for (g,), frame in grouped.partition_by(GROUP_COLUMN, as_dict=True).items()}
    del grouped
    by_position = {int(g): frame.drop(GROUP_COLUMN)
                   for (g,), frame in _positions(events, grouping.groups).partition_by(GROUP_COLUMN, as_dict=True)
                   .items()}
    return by_group, by_position


def _spill_path(spill: str, group: int, number: int, kind: str = "g") -> str:
    return os.path.join(spill, f"{kind}{group:04d}-p{number:06d}.parquet")


CONTENT_COLUMN = "__content"  # in memory and in the spill only: a 64-bit hash of an event's content


def _positions(events: pl.DataFrame, groups: int) -> pl.DataFrame:
    """Each event's position, file line and content hash (`differing_repeats`' content), with the group
    of positions it is checked in."""
    return events.select("position", "line", pl.struct(CONTENT).hash().alias(CONTENT_COLUMN),
                         (pl.col("position") % groups).cast(pl.Int32).alias(GROUP_COLUMN))


def _reused_positions(spill: str, parts: list[_Part], groups: int) -> pl.Series:
    """The file lines whose position an earlier line of another part holds with other content: what the
    one-part ingest's batch-wide check (`differing_repeats`: the first line of a position stands) rejects
    beyond each part's own check. A group of positions at a time (24 bytes an event): every line of a
    position is in the same group."""
    bad: list[pl.Series] = [pl.Series("line", [], dtype=pl.Int64)]
    for g in range(groups):
        frames = [pl.read_parquet(s) for p in parts if os.path.exists(s := _spill_path(spill, g, p.number, "q"))]
        if frames:
            bad.append(reused_in(frames))
    return pl.concat(bad).sort()


def reused_in(frames: list[pl.DataFrame]) -> pl.Series:
    """Of one group of positions (every part's (position, line, content hash) of it, in file lines): the
    lines whose position an earlier line holds with other content."""
    seen = pl.concat(frames)
    first = pl.col(CONTENT_COLUMN).sort_by("line").first().over("position")
    return seen.filter((pl.len().over("position") > 1) & (pl.col(CONTENT_COLUMN) != first))["line"].cast(pl.Int64)


class _PartsPlan(Plan):
    """All parts of a file as one change: on every attempt, the parts already applied on the parent are
    left out; the others' events are read back a group of buckets at a time (every part's events of those
    buckets, in file order), filtered for erased subjects, checked for a position reused with other
    content by the same order in an earlier part (quarantined, as the one-part ingest's batch-wide check
    does), and planned on the parent by `plan_bucketed` restricted to those buckets. Each group's new
    (day, bucket) files stream to staging; the groups never share a file."""

    def __init__(self, lake: LakeContext, parts: list[_Part], spill: str, *, groups: int, buckets: int,
                 reused: pl.Series) -> None:
        self.lake, self.parts, self.spill, self.groups, self.buckets = lake, parts, spill, groups, buckets
        self.reused = reused  # file lines of positions reused with other content (`_reused_positions`)
        self.starts = [p.first_line for p in parts]

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
        """An attempt on `parent`: the parts not yet applied there (each part's plan-made rejects cleared),
        and the empty change that will apply them."""
        for part in self.parts:
            part.duplicate = _already_applied(self.lake, ctx, part.batch_id, parent)
            part.rejects = []
        live = [p for p in self.parts if not p.duplicate]
        return live, Change(operation="ingest", batch_ids=[p.batch_id for p in live], removes=[], locations={},
                            details={"changed_keys": 0})

    def chosen_groups(self, ctx: TableContext, parent: int) -> list[tuple[list[int], set[int] | None]]:
        """The groups planned together, each with the buckets it may touch (None: any). An untagged
        (pre-bucket) file holds any bucket and is rewritten whole by whoever touches its day: with one in the
        parent, the groups are planned as one (correct; memory then the file's, not a part's)."""
        everything = list(range(self.groups))
        if any(bucket_of_path(e.path, self.buckets) is None
               for e in _delta.file_entries(ctx.uri, ctx.storage_options, parent)):
            return [(everything, None)]
        return [([g], {b for b in range(self.buckets) if b % self.groups == g}) for g in everything]

    def add_rejects(self, rejects: list[Reject]) -> None:
        """The plan's rejects (file lines), by part, with the line's span (the ledger then reads no raw batch)."""
        for r in rejects:
            part = self._part_of(r.line)
            line = part.local(r.line)
            raw = None if r.reason == Reason.ERASED_SUBJECT else part.batch.line_text(line)
            offset, length = part.batch.decoded.span(line)
            part.rejects.append(dataclasses.replace(r, line=line, raw=raw, offset=offset, length=length))

    def _stream(self, ctx: TableContext, parent: int, live: list[_Part], change: Change) -> Stream:
        hashes: list[Any] = []
        days: list[Any] = []
        cols = Columns.of(ctx.table)
        for chosen, only in self.chosen_groups(ctx, parent):
            paths = [_spill_path(self.spill, g, p.number) for g in chosen for p in live]
            frames = [pl.read_parquet(s) for s in paths if os.path.exists(s)]
            if not frames:
                continue
            events = pl.concat(frames) if len(chosen) == 1 else pl.concat(frames).sort("line")  # file order
            del frames
            fold = fold_group(self.lake, ctx, parent, events, reused=self.reused, key=cols.key, only=only)
            del events
            self.add_rejects(fold.rejects)
            if fold.stream is None:
                continue
            change.removes.extend(fold.removes)
            change.details["changed_keys"] += fold.applied.changed_keys
            if fold.applied.hashed_locations is not None:
                hashes.append(fold.applied.hashed_locations[0])
                days.append(fold.applied.hashed_locations[1])
            yield from fold.stream
            crash_point("parts.after_group")
        if hashes:
            change.hashed_locations = (np.concatenate(hashes), np.concatenate(days))

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


@dataclass(slots=True, kw_only=True)
class GroupFold:
    """The reduce of one group of buckets on a parent: its plan, the parent files it replaces, the lazy
    stream of their new content (None: nothing to commit) and its rejects (file lines; no text, no span)."""

    applied: ApplyPlan
    removes: list[_delta.FileEntry]
    stream: Stream | None
    rejects: list[Reject]


def fold_group(lake: LakeContext, ctx: TableContext, parent: int, events: pl.DataFrame, *, reused: pl.Series,
               key: str, only: set[int] | None) -> GroupFold:
    """The reduce of one group: every part's events of its buckets (file lines, file order) without the lines
    whose position an earlier line holds with other content (`reused`), filtered for erased subjects,
    planned on `parent` by `plan_bucketed` restricted to the group's buckets (`only`; None: any)."""
    events, repeats = _without_lines(events, reused, key)
    events, blocked = erasure_filter(lake, events)
    applied, removes, stream = plan_bucketed(ctx, parent, events, only_buckets=only)
    conflicts = [Reject(line=c.line, reason=Reason.POSITION_CONFLICT, detail=c.detail, raw=None,
                        order_id=c.order_id) for c in [*repeats, *applied.conflicts]]
    return GroupFold(applied=applied, removes=removes, stream=stream, rejects=[*blocked, *conflicts])


def _without_lines(events: pl.DataFrame, lines: pl.Series, key: str) -> tuple[pl.DataFrame, list[Conflict]]:
    """`events` without those at `lines` (positions reused with other content), and their conflicts."""
    if events.height == 0 or lines.len() == 0:
        return events, []
    mask = pl.col("line").is_in(lines.implode())
    conflicts = [Conflict(line=line, order_id=oid, detail=f"position {pos} already holds a different event in "
                          "this batch") for line, pos, oid in events.filter(mask).select("line", "position", key)
                 .sort("line").iter_rows()]
    return events.filter(mask.not_()), conflicts
