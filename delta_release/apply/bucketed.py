"""The bucketed, bounded apply of one batch (issue 14.2): only the (partition, bucket) files that hold the
batch's keys are read and rewritten, a partition at a time.

1. Prior rows: the current row of each batch key is looked up in the files of the days the batch touches
   that can hold it (tagged with the key's bucket, or untagged), a chunk of files at a time, keeping only
   the rows of batch keys; keys not found there are located by the key index (day) and their bucket (a
   keyed hash), never by scanning other files. Memory: the batch plus one chunk of files.
2. The fold of the batch over those rows (`fold.fold`): batch-sized.
3. The files to replace: in each affected day, the files tagged with an affected bucket and every
   untagged file (a legacy file holds any bucket; it is read whole and split into bucket files).
4. The new content, one day at a time, as a lazy stream of (day, rows): that day's replaced files minus
   the winning keys, plus the winners. The writer stages each day's files as they come (one group in
   memory) and commits them all in one strict commit; a stale parent discards them and rebuilds.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np
import polars as pl
import pyarrow as pa
import pyarrow.dataset as ds

from .. import _delta, index
from ..context import TableContext
from ..index.keyfile import DAY, NULL_DAY
from ..index.keys import ABSENT
from ..stage.buckets import (
    BUCKET_COLUMN,
    HASH_COLUMN,
    Hasher,
    KnownDigests,
    bucket_of_path,
    buckets_of_digests,
    hash_array,
    keyed,
    with_buckets,
)
from ..storage import Storage
from ..views import partition_filter
from .fold import (
    ApplyPlan,
    Columns,
    Conflict,
    day_order,
    dedupe_events,
    fold,
    fold_in_order,
    fold_joined,
    prior_columns,
    read_rows_from,
)

READ_CHUNK_FILES = 64  # files read at once while looking up the prior rows of the batch's keys

# Rows of parent files kept between the prior-row lookup and the rewrite: the batch's row count, at least
# KEPT_MIN_ROWS (about 6 MB: an hourly batch of 1,000 events into days of a few thousand rows reads them in
# one scan, where a budget of its own size sent it file by file, 2-3x slower) and at most KEPT_MAX_ROWS
# (about 30 MB), so a large part of a backfill does not raise the ingest's peak memory much.
KEPT_MIN_ROWS = 100_000
KEPT_MAX_ROWS = 500_000
PREFETCH_KEYS_PER_BUCKET = 64  # events per bucket from which a batch's days' files are read while hashing

MANY_KEYS = 20_000  # unresolved keys from which listing the parent's files beats locating them

Stream = Iterator[tuple[Any, pl.DataFrame]]
DAY_COLUMN = "__day"  # in memory only: the partition the key index names (int32, NULL_DAY for null)
FOUND_COLUMN = "__found"  # in memory only: the key has a row in the frame it was joined with
PATH_COLUMN = "__path"  # in memory only: the file a kept row was read from (its lake-relative path)
ROW_COLUMN = "__row"  # in memory only: a row's position in the kept frame (`_Kept.whole`)


def read_entries(ctx: TableContext, cols: Columns, entries: list[_delta.FileEntry]) -> pl.DataFrame:
    """Every row (tombstones included) of the given files, their partition value from the path."""
    if not entries:
        return cols.empty()
    storage = ctx.storage
    column = cols.partition
    ptype = ctx.table.arrow_schema().field(column).type
    dataset = ds.dataset([storage.full_path(e.path) for e in entries], filesystem=storage.fs, format="parquet",
                         partitioning=ds.partitioning(pa.schema([(column, ptype)]), flavor="hive"),
                         partition_base_dir=storage.full_path(""))
    frame = pl.from_arrow(dataset.to_table())
    assert isinstance(frame, pl.DataFrame)
    return frame.select(cols.row_columns).cast(cols.row_schema)  # type: ignore[arg-type]


def read_entry(ctx: TableContext, cols: Columns, entry: _delta.FileEntry) -> pl.DataFrame:
    """Every row of one file (`read_entries` of one file, without a dataset's per-call set-up)."""
    import pyarrow.parquet as pq

    if ctx.storage.is_local:  # Polars' own reader: about 1.6x faster on small files than pyarrow + conversion
        frame = pl.read_parquet(ctx.storage.local_path(entry.path))
    else:
        with ctx.storage.open_input(entry.path) as handle:
            table = pl.from_arrow(pq.read_table(handle))
        assert isinstance(table, pl.DataFrame)
        frame = table
    ptype = cols.row_schema[cols.partition]
    text = entry.partition_values.get(cols.partition)
    value = pl.Series([None if text is None else str(text)], dtype=pl.String).cast(ptype)
    out = frame.with_columns(pl.lit(value[0], dtype=ptype).alias(cols.partition)).select(cols.row_columns)
    return out.cast(cols.row_schema)  # type: ignore[arg-type]


def scan_tagged(ctx: TableContext, cols: Columns, entries: list[_delta.FileEntry], buckets: int
                ) -> pl.DataFrame | None:
    """Every row of `entries` in one scan (the files are read in parallel; a read per file costs ~2 ms of
    dispatch on a few-thousand-row file, and on an object store a round trip or two): the row columns,
    BUCKET_COLUMN from each file's tag under `buckets` (null: untagged) and PATH_COLUMN. None where the
    files cannot be scanned together (a path listed twice, files of differing schemas): the caller reads
    them one by one."""
    if not entries:
        return None
    part, ptype = cols.partition, cols.row_schema[cols.partition]
    storage = ctx.storage
    full = [str(storage.local_path(e.path)) if storage.is_local else storage.full_path(e.path) for e in entries]
    if len(set(full)) < len(full):
        return None
    values = [c for c in cols.row_columns if c != part]
    files = pl.DataFrame({
        PATH_COLUMN: [e.path for e in entries],
        part: pl.Series([None if (t := e.partition_values.get(part)) is None else str(t) for e in entries],
                        dtype=pl.String).cast(ptype),
        BUCKET_COLUMN: pl.Series([bucket_of_path(e.path, buckets) for e in entries], dtype=pl.Int32)})
    # Each row's file as its place in `full`, then the file's values gathered by it: a join of the rows
    # with the file table on the path string cost ~7 ms more at 70k rows.
    try:
        rows = _scan_local(full) if storage.is_local else _scan_dataset(storage, full, values)
        return (rows.select(*values, *[pl.lit(files[c]).gather(pl.col(FILE_COLUMN)).alias(c) for c in files.columns])
                .select(*cols.row_columns, BUCKET_COLUMN, PATH_COLUMN)
                .cast(cols.row_schema)  # type: ignore[arg-type]
                .collect())
    except (pl.exceptions.PolarsError, pa.ArrowException, OSError, KeyError):  # e.g. differing schemas
        return None


FILE_COLUMN = "__file"  # in memory only: a scanned row's file, as its place in the list scanned


def _scan_local(full: list[str]) -> pl.LazyFrame:
    return (pl.scan_parquet(full, include_file_paths=FILE_COLUMN, hive_partitioning=False)
            .with_columns(pl.col(FILE_COLUMN).cast(pl.Enum(full)).to_physical()))


def _scan_dataset(storage: Storage, full: list[str], values: list[str]) -> pl.LazyFrame:
    """The files (an object store's paths) through one pyarrow dataset scan: its fragments are fetched
    concurrently, and each batch says which file it came from."""
    place = {path: i for i, path in enumerate(full)}
    scanner = ds.dataset(full, filesystem=storage.fs, format="parquet").scanner(columns=values)
    batches, where = [], []
    for tagged in scanner.scan_batches():
        batches.append(tagged.record_batch)
        where.append(np.full(tagged.record_batch.num_rows, place[tagged.fragment.path], dtype=np.uint32))
    frame = pl.from_arrow(pa.Table.from_batches(batches, schema=scanner.projected_schema))
    assert isinstance(frame, pl.DataFrame)
    index = np.concatenate(where) if where else np.zeros(0, dtype=np.uint32)
    return frame.with_columns(pl.Series(FILE_COLUMN, index)).lazy()


class _Kept:
    """Rows of parent files the lookup of prior rows read, kept for the rewrite of the same files (so a
    replaced file is read once), up to `budget` rows in all: memory stays bounded by the batch.

    A large batch's days are read in one Polars scan when they fit the budget (`whole`: the row columns,
    BUCKET_COLUMN from each file's tag, null for an untagged file, and PATH_COLUMN): Polars reads the files
    in parallel, and the frame is filtered a day at a time instead of one small frame per file (each
    eager Polars operation on a 2k-row file costs more in dispatch than in work)."""

    def __init__(self, budget: int) -> None:
        self.budget = budget
        self.rows: dict[str, pl.DataFrame] = {}
        self.whole: pl.DataFrame | None = None
        self.in_whole: set[str] = set()
        self.pruned = False  # `whole` has lost the prior row of every winning key (`drop_rows`)

    def keep(self, path: str, frame: pl.DataFrame) -> None:
        if frame.height <= self.budget:
            self.rows[path] = frame
            self.budget -= frame.height

    def take(self, ctx: TableContext, cols: Columns, entry: _delta.FileEntry) -> pl.DataFrame:
        frame = self.rows.pop(entry.path, None)
        return read_entry(ctx, cols, entry) if frame is None else frame

    def prefetch(self, ctx: TableContext, cols: Columns, entries: list[_delta.FileEntry], buckets: int) -> None:
        """Read `entries` ahead in one scan when they all fit the budget (`whole`); else nothing here: the
        lookup reads them a chunk at a time, keeping what fits (`read_tagged`)."""
        self._read_whole(ctx, cols, entries, buckets)

    def _read_whole(self, ctx: TableContext, cols: Columns, entries: list[_delta.FileEntry], buckets: int) -> bool:
        counts = [e.num_records for e in entries]
        if None in counts or sum(c or 0 for c in counts) > self.budget:
            return False
        whole = scan_tagged(ctx, cols, entries, buckets) if entries else _tagged(cols.empty(), None).with_columns(
            pl.lit(None, dtype=pl.String).alias(PATH_COLUMN))
        if whole is None:
            return False
        self.whole = whole
        self.in_whole = {e.path for e in entries}
        self.budget -= whole.height
        return True

    def drop_rows(self, positions: np.ndarray) -> None:
        """Drop the rows at `positions` of `whole` (the prior rows of the winning keys, as the plan found
        them): the rewrite then keeps the rest without a join on keys."""
        assert self.whole is not None
        keep = np.ones(self.whole.height, dtype=bool)
        keep[positions] = False
        self.whole = self.whole.filter(pl.Series(keep))
        self.pruned = True

    def covers(self, entries: list[_delta.FileEntry]) -> bool:
        return self.whole is not None and all(e.path in self.in_whole for e in entries)

    def only(self, paths: set[str]) -> None:
        """Drop the kept rows of every file but `paths` (the ones the rewrite reads)."""
        self.rows = {p: f for p, f in self.rows.items() if p in paths}
        if self.whole is not None and not self.in_whole <= paths:  # (a large batch replaces all it read)
            self.whole = self.whole.filter(pl.col(PATH_COLUMN).is_in(pl.Series(sorted(paths), dtype=pl.String)
                                                                     .implode()))
            self.in_whole &= paths

    def take_tagged(self, ctx: TableContext, cols: Columns, entries: list[_delta.FileEntry], n: int,
                    hasher: Hasher) -> pl.DataFrame:
        """Every row of `entries` with its BUCKET_COLUMN (from the file's tag, or hashed for an untagged
        file), read from what is kept where possible."""
        parts = [_tagged(cols.empty(), None)]
        inside = [e.path for e in entries if e.path in self.in_whole]
        if inside and self.whole is not None:
            rows = self.whole.filter(pl.col(PATH_COLUMN).is_in(pl.Series(inside, dtype=pl.String).implode()))
            parts.append(_bucketed(rows.drop(PATH_COLUMN), cols.key, n, hasher))
        rest = [e for e in entries if e.path not in self.in_whole]
        unread = [e for e in rest if e.path not in self.rows]
        scanned = scan_tagged(ctx, cols, unread, n) if len(unread) > 1 else None
        for e in rest if scanned is None else [e for e in rest if e.path in self.rows]:  # the kept, or all
            b = bucket_of_path(e.path, n)
            rows = self.take(ctx, cols, e)
            parts.append(with_buckets(rows, cols.key, n, hasher) if b is None else _tagged(rows, b))
        if scanned is not None:
            parts.append(_bucketed(scanned.drop(PATH_COLUMN), cols.key, n, hasher))
        return pl.concat(parts)

    def read_tagged(self, ctx: TableContext, cols: Columns, entries: list[_delta.FileEntry], n: int
                    ) -> pl.DataFrame:
        """Every row of `entries` with BUCKET_COLUMN from its file's tag (null: untagged): the kept files from
        memory, the others in one scan (kept, file by file, when they fit the budget)."""
        parts = [_tagged(cols.empty(), None)]
        unread = [e for e in entries if e.path not in self.rows]
        scanned = scan_tagged(ctx, cols, unread, n)
        for e in entries if scanned is None else [e for e in entries if e.path in self.rows]:  # the kept, or all
            parts.append(_tagged(self.read(ctx, cols, e), bucket_of_path(e.path, n)))
        if scanned is not None:
            if scanned.height <= self.budget:
                for (path,), frame in scanned.partition_by(PATH_COLUMN, as_dict=True).items():
                    self.rows[str(path)] = frame.drop(PATH_COLUMN, BUCKET_COLUMN)
                self.budget -= scanned.height
            parts.append(scanned.drop(PATH_COLUMN))
        return pl.concat(parts)

    def read(self, ctx: TableContext, cols: Columns, entry: _delta.FileEntry) -> pl.DataFrame:
        """The file's rows: prefetched (and still kept for the rewrite), or read now and kept if they fit."""
        frame = self.rows.get(entry.path)
        if frame is None:
            frame = read_entry(ctx, cols, entry)
            self.keep(entry.path, frame)
        return frame


class _Files:
    """The parent's file list for the days asked, listed once per day."""

    def __init__(self, ctx: TableContext, parent: int, cols: Columns) -> None:
        self.ctx, self.parent, self.cols = ctx, parent, cols
        self.by_day: dict[Any, list[_delta.FileEntry]] = {}

    def load(self, days: list[Any]) -> None:
        missing = [d for d in days if d not in self.by_day]
        if not missing:
            return
        entries = _delta.partition_entries(self.ctx.uri, self.ctx.storage_options, self.parent, self.cols.partition,
                                           [None if d is None else str(d) for d in missing])
        for d in missing:
            self.by_day[d] = []
        for e in entries:
            text = e.partition_values.get(self.cols.partition)
            day = None if text is None else pl.Series([text]).cast(self.cols.row_schema[self.cols.partition])[0]
            self.by_day.setdefault(day, []).append(e)

    def holding(self, day: Any, buckets: set[int] | None, n: int) -> list[_delta.FileEntry]:
        """The files of `day` that may hold a key of `buckets` (None: any): tagged with one, or untagged."""
        self.load([day])
        out = []
        for e in self.by_day.get(day, []):
            b = bucket_of_path(e.path, n)
            if b is None or buckets is None or b in buckets:
                out.append(e)
        return out


def _rows_of_keys(ctx: TableContext, cols: Columns, files: list[_delta.FileEntry], keys: pl.DataFrame,
                  kept: _Kept | None = None, *, tag_buckets: int | None = None) -> pl.DataFrame:
    """The rows of `keys` in `files`, reading a chunk of files at a time. With `tag_buckets` each row carries
    BUCKET_COLUMN: the bucket its file's name carries under that count (every row of a tagged file hashes
    to it), null for an untagged file; and the files' rows are kept in `kept` while its budget lasts."""
    if tag_buckets is not None and kept is not None and kept.covers(files) and kept.whole is not None:
        return kept.whole.join(keys, on=cols.key, how="semi").drop(PATH_COLUMN)
    found = [cols.empty() if tag_buckets is None else _tagged(cols.empty(), None)]
    for start in range(0, len(files), READ_CHUNK_FILES):
        entries = files[start:start + READ_CHUNK_FILES]
        if tag_buckets is not None:  # in one scan, kept (file by file) while the budget lasts
            chunk = (kept if kept is not None else _Kept(budget=0)).read_tagged(ctx, cols, entries, tag_buckets)
        else:
            chunk = read_entries(ctx, cols, entries)
        found.append(chunk.join(keys, on=cols.key, how="semi"))
    return pl.concat(found)


def _tagged(frame: pl.DataFrame, bucket: int | None) -> pl.DataFrame:
    return frame.with_columns(pl.lit(bucket, dtype=pl.Int32).alias(BUCKET_COLUMN))


def _bucketed(rows: pl.DataFrame, key: str, n: int, hasher: Hasher) -> pl.DataFrame:
    """`rows` (with BUCKET_COLUMN from their files' tags) with the rows of untagged files (null) given the
    bucket of their key's hash."""
    untagged = rows.filter(pl.col(BUCKET_COLUMN).is_null())
    if not untagged.height:
        return rows
    return pl.concat([rows.filter(pl.col(BUCKET_COLUMN).is_not_null()),
                      with_buckets(untagged.drop(BUCKET_COLUMN), key, n, hasher)])


Planned = tuple[ApplyPlan, list[_delta.FileEntry], Stream | None]
LINE = "line"  # an event's line (over the sources of a fold): what `KnownDigests` knows a key's hash by


def plan_bucketed(ctx: TableContext, parent: int, events: pl.DataFrame, *, only_buckets: set[int] | None = None,
                  sequence: str | None = None, known: KnownDigests | None = None) -> Planned:
    """The batch's plan (conflicts, changed keys, locations), the parent files it replaces and the lazy
    stream of their new content. No stream: nothing to commit. `only_buckets`: every key of `events` hashes
    to one of these buckets and the parent has no untagged file (a file in parts, planned a group of
    buckets at a time: parts.py), so only those buckets' files are read. `sequence`: the column of `events`
    that numbers their batch (several batches in one plan, applied in that order as if committed one
    after the other: `fold_in_order`). `known`: the keyed hashes of `events`' keys by line, computed before
    (a file in parts): a first load takes its winners' from there."""
    folded = _fold_rows(ctx, parent, events, only_buckets=only_buckets, sequence=sequence, known=known)
    if folded.rows is None:
        return folded.plan, [], None
    cols, n = Columns.of(ctx.table), ctx.table.buckets or 1
    locations = None if folded.hashes is None else _moved_locations(
        folded.rows, cols.key, cols.partition, n, ctx.erasures.subject_key, folded.hashes)
    return _replace(ctx, cols, folded.plan, folded.files, folded.kept, folded.rows, n, locations=locations)


Locations = tuple[np.ndarray, np.ndarray]  # keyed hashes (S32) and their partitions: what the key index learns
GroupRows = tuple[list[Conflict], pl.DataFrame | None, Locations | None]


def fold_group_rows(ctx: TableContext, parent: int, events: pl.DataFrame, *, only_buckets: set[int],
                    sequence: str | None = None, known: KnownDigests | None = None) -> GroupRows:
    """`plan_bucketed` of a group of events too large to fold with the rest of its buckets (a sub-group of
    a bucket: a file in parts, parts.py), up to the files it replaces: every key of `events` hashes to
    `only_buckets` and no other group holds it. Its conflicts, its new row of each winning key in the
    columns `_replace` reads (None: nothing changes) and what the key index learns of them
    (`_moved_locations`, taken here so the rows drop their 32-byte hashes: 48 bytes a row in a Polars
    column, 32 in the array). Groups hold distinct keys, so several may be folded at once (parts.py folds
    a bucket's sub-groups two at a time); `replace_groups` writes their winners together."""
    cols = Columns.of(ctx.table)
    folded = _fold_rows(ctx, parent, events, only_buckets=only_buckets, sequence=sequence, known=known)
    if folded.rows is None:
        return folded.plan.conflicts, None, None
    rows = folded.rows
    locations = _moved_locations(rows, cols.key, cols.partition, ctx.table.buckets or 1, ctx.erasures.subject_key,
                                 folded.hashes)
    return (folded.plan.conflicts, rows.select(*cols.row_columns, BUCKET_COLUMN, "prior_day", "had_prior"),
            locations)


def replace_groups(ctx: TableContext, parent: int, folds: Iterable[GroupRows]) -> Planned:
    """The groups' folds (`fold_group_rows`, in group order) as one plan: every conflict, and the winners of
    all of them replacing the buckets' files once (each (day, bucket) file written once, whatever the
    number of groups). Memory: the new rows of the buckets (one row per changed key), and what `folds`
    holds while it folds."""
    cols = Columns.of(ctx.table)
    plan = ApplyPlan()
    rows: list[pl.DataFrame] = []
    hashes: list[np.ndarray] = []
    days: list[np.ndarray] = []
    for conflicts, folded, locations in folds:
        plan.conflicts.extend(conflicts)
        if folded is not None and locations is not None:
            rows.append(folded)
            hashes.append(locations[0])
            days.append(locations[1])
        del folded, locations
    if not rows:
        return plan, [], None
    every = pl.concat(rows, how="vertical_relaxed")
    del rows
    moved = (np.concatenate(hashes), np.concatenate(days))
    del hashes, days
    return _replace(ctx, cols, plan, _Files(ctx, parent, cols), _Kept(budget=KEPT_MAX_ROWS), every,
                    ctx.table.buckets or 1, prefetch=True, locations=moved)


@dataclass(slots=True)
class _Folded:
    """A batch folded on a parent: the plan so far (conflicts), the parent's file list and the rows kept
    from reading it, and the fold's new row of each winning key (None: nothing changes) with its
    HASH_COLUMN (or null) and BUCKET_COLUMN: what `_replace` takes."""

    plan: ApplyPlan
    files: _Files
    kept: _Kept
    rows: pl.DataFrame | None
    hashes: np.ndarray | None = None  # every row's keyed hash (S32), when `rows` carry no HASH_COLUMN


def _fold_rows(ctx: TableContext, parent: int, events: pl.DataFrame, *, only_buckets: set[int] | None,
               sequence: str | None, known: KnownDigests | None = None) -> _Folded:
    """`plan_bucketed` up to the files it replaces: the prior rows of the batch's keys, and the fold."""
    tdef = ctx.table
    n = tdef.buckets or 1
    cols = Columns.of(tdef)
    key, part = cols.key, cols.partition
    hasher = ctx.erasures.subject_key
    plan = ApplyPlan()
    files = _Files(ctx, parent, cols)
    kept = _Kept(budget=min(max(events.height, KEPT_MIN_ROWS), KEPT_MAX_ROWS))
    if events.height == 0:
        return _Folded(plan, files, kept, None)
    batches: pl.Series | None = None
    if sequence is not None:
        if events[sequence].n_unique() > 1:
            batches = events[sequence]
        events = events.drop(sequence)
    first_load = _delta.file_count(ctx.uri, ctx.storage_options, parent) == 0
    events, unique_keys, several, distinct = _batch_keys(events, cols, batches, lookup=not first_load)
    touched: list[Any] = events[part].drop_nulls().unique().to_list()
    files.load(touched)
    keys: pl.DataFrame | None = None  # each key's hash and bucket (None: the winners are hashed after the fold)
    # (`kept`: rows of the touched days' files, usually the ones rewritten, kept for the rewrite within its budget)
    if distinct is None:
        # A first load (a table without files): no prior row or bucket to look up; the winners are hashed
        # after the fold, or looked up in `known` (`_with_keys`): hashing the keys first and joining them
        # back cost 60-90 ms of CPU per 400k keys (a sub-group of the 20M-event backfill; 48 of them).
        found, unresolved = cols.empty(), None
    elif events.height >= PREFETCH_KEYS_PER_BUCKET * n:
        # A batch with many keys per bucket holds every bucket of its days (the chance that a bucket has
        # none of k keys is ((n-1)/n)^k): all their files are read first, and a key found in a tagged file
        # takes its bucket from the file's name. Only the keys found nowhere there (or in an untagged file)
        # are hashed now, so the keyed hash (Python, about 1.3 us a key) runs on the new keys, not the batch.
        day_files = [e for d in touched for e in files.holding(d, only_buckets, n)]
        kept.prefetch(ctx, cols, day_files, n)
        if unique_keys and kept.covers(day_files) and kept.whole is not None:  # the days' rows in one frame
            joined = _joined_in_frame(cols, kept.whole, events, n, hasher)
            unresolved = joined.filter(pl.col(ROW_COLUMN).is_null()).select(key, HASH_COLUMN, BUCKET_COLUMN)
            elsewhere = _elsewhere(ctx, parent, cols, files, unresolved, touched, n) if unresolved.height else None
            if elsewhere is None or elsewhere.height == 0:  # every prior row is in the frame: one join did
                return _folded_joined(cols, plan, files, kept, joined)  # the lookup and the fold's join
            keys, found = joined.select(key, HASH_COLUMN, BUCKET_COLUMN), kept.whole.select(cols.row_columns)
            unresolved = unresolved.head(0)  # located above: the lookup after these branches has nothing left
            found = pl.concat([found, elsewhere])
        elif kept.covers(day_files) and kept.whole is not None:  # the days' rows in one frame
            keys, found, unresolved = _keys_in_frame(cols, kept.whole, distinct, n, hasher)
        else:
            found = _rows_of_keys(ctx, cols, day_files, distinct, kept, tag_buckets=n)
            tagged = found.select(key, BUCKET_COLUMN).filter(pl.col(BUCKET_COLUMN).is_not_null())
            keys = pl.concat([keyed(distinct.join(tagged, on=key, how="anti")[key], n, hasher),
                              tagged.select(key, pl.lit(None, dtype=pl.Binary).alias(HASH_COLUMN), BUCKET_COLUMN)])
            found = found.drop(BUCKET_COLUMN)
            unresolved = keys.join(found.select(key), on=key, how="anti")  # never found: all of them hashed above
    else:  # a small batch: its keys' buckets first, then only those buckets' files
        keys = keyed(events[key], n, hasher)  # key, its keyed hash, its bucket: each key hashed once
        wanted = set(keys[BUCKET_COLUMN].unique().to_list())
        found = _rows_of_keys(ctx, cols, [e for d in touched for e in files.holding(d, wanted, n)], distinct, kept,
                              tag_buckets=n).drop(BUCKET_COLUMN)  # (read in scans, kept file by file)
        unresolved = keys.join(found.select(key), on=key, how="anti")  # never found: all of them hashed above
    prior = found
    if unresolved is not None and unresolved.height:
        prior = pl.concat([found, _elsewhere(ctx, parent, cols, files, unresolved, touched, n)])

    if batches is not None and not unique_keys:
        folded = fold_in_order(events, batches, prior, cols)
    else:  # (a first load whose keys' hashes are known: the winners keep their line, to look theirs up)
        carried = (LINE,) if keys is None and known is not None else ()
        folded = fold(events, prior, cols, unique_keys=unique_keys, several=several, keep=carried)
    plan.conflicts = folded.conflicts
    if folded.rows.height == 0:
        return _Folded(plan, files, kept, None)
    return _Folded(plan, files, kept, *_with_keys(folded.rows, keys, key, n, hasher, known))


def _batch_keys(events: pl.DataFrame, cols: Columns, batches: pl.Series | None, *, lookup: bool
                ) -> tuple[pl.DataFrame, bool, pl.Series | None, pl.DataFrame | None]:
    """The batch without exact repeats (several batches: each deduplicated by the fold on its own), whether
    its keys are distinct, a mask of its events holding at least those that share their key (the fold's
    split; None: the fold finds them) and, when `lookup` (a first load looks nothing up), its distinct keys."""
    key = cols.key
    # Which events may share their key, from a 64-bit hash of each key (416k keys: 22 ms; n_unique 20 ms, and
    # the strings' own repeat mask 40 ms more). A collision only flags an event that does not: the fold then
    # decides its key by the sequence fold, which decides any key, and the repeat screen hashes it too.
    flagged = events[key].hash().is_duplicated()
    if not flagged.any():  # one event a key, whatever its batch: nothing to dedupe
        return events, True, None, events.select(key) if lookup else None
    several: pl.Series | None = None  # (several batches: the fold takes each on its own)
    if batches is None:  # an exact repeat repeats its key: only the flagged events are screened
        deduped = dedupe_events(events, cols, candidates=flagged)
        several = flagged if deduped.height == events.height else None
        events = deduped
    return events, False, several, events.select(key).unique() if lookup else None


def _with_keys(rows: pl.DataFrame, keys: pl.DataFrame | None, key: str, n: int, hasher: Hasher,
               known: KnownDigests | None = None) -> tuple[pl.DataFrame, np.ndarray | None]:
    """The fold's winners with each key's BUCKET_COLUMN and hash: HASH_COLUMN joined from `keys`, or (None:
    a first load) hashed here, in the winners' order (one row per key); or looked up in `known` by the
    winner's LINE (kept by the fold), then returned beside the rows as an array (S32): a first load's
    18.2M hashes (20M-event backfill) were copied five times on their way through a Polars column and back
    to the key index's array."""
    if keys is not None:
        return rows.join(keys, on=key, how="left"), None
    if known is not None and LINE in rows.columns:
        hashes = known.lookup(rows[LINE], rows[key], hasher)
        return rows.drop(LINE).with_columns(pl.Series(BUCKET_COLUMN, buckets_of_digests(hashes, n))), hashes
    hashed = keyed(rows[key], n, hasher, distinct=True)
    return rows.with_columns(hashed[HASH_COLUMN], hashed[BUCKET_COLUMN]), None


def _folded_joined(cols: Columns, plan: ApplyPlan, files: _Files, kept: _Kept, joined: pl.DataFrame) -> _Folded:
    """The fold of `_joined_in_frame`'s events (distinct keys) when every prior row is in the kept
    frame: the fold decides on that join, its rows keep their key's hash and bucket, and the kept frame
    loses the prior row of every winning key by its position (no join on keys to find them)."""
    folded = fold_joined(joined, cols, keep=(HASH_COLUMN, BUCKET_COLUMN, ROW_COLUMN))
    plan.conflicts = folded.conflicts
    if folded.rows.height == 0:
        return _Folded(plan, files, kept, None)
    kept.drop_rows(folded.rows[ROW_COLUMN].drop_nulls().to_numpy())
    return _Folded(plan, files, kept, folded.rows.drop(ROW_COLUMN))


def _replace(ctx: TableContext, cols: Columns, plan: ApplyPlan, files: _Files, kept: _Kept, rows: pl.DataFrame,
             n: int, *, prefetch: bool = False, locations: Locations | None = None) -> Planned:
    """The files to replace and the stream of their new content, from `rows` (the fold's new row of each
    winning key, with its HASH_COLUMN or null and its BUCKET_COLUMN; without HASH_COLUMN when `locations`
    gives what the key index learns of them, `_moved_locations` taken group by group). `prefetch`: `kept`
    holds nothing yet; the replaced files are read in one scan if they fit its budget (none: an empty
    frame), so the days' content is computed at once."""
    key, part = cols.key, cols.partition
    groups: dict[Any, set[int]] = {}  # (day, bucket) of every new row and of every row it replaces: one
    pairs = pl.concat([rows.lazy().select(part, BUCKET_COLUMN),  # query (two eager uniques cost ~3x)
                       rows.lazy().filter(pl.col("had_prior")).select(pl.col("prior_day").alias(part), BUCKET_COLUMN)])
    for d, b in pairs.unique().collect().iter_rows():
        groups.setdefault(d, set()).add(b)
    days = sorted(groups, key=day_order)
    files.load(days)
    replaced = {d: files.holding(d, groups[d], n) for d in days}
    removes = [e for d in days for e in replaced[d]]
    new_rows = rows.select(*cols.row_columns, BUCKET_COLUMN, "prior_day", "had_prior")
    plan.changed_keys = new_rows.height
    plan.changed = rows[key]
    plan.hashed_locations = locations if locations is not None else _moved_locations(rows, key, part, n,
                                                                                      ctx.erasures.subject_key)
    if prefetch:
        kept.prefetch(ctx, cols, removes, n)
    kept.only({e.path for e in removes})  # the others go now
    return plan, removes, _stream(ctx, cols, days, replaced, new_rows, n, kept)


def _joined_in_frame(cols: Columns, whole: pl.DataFrame, events: pl.DataFrame, n: int, hasher: Hasher
                     ) -> pl.DataFrame:
    """`events` (one per key) left-joined with `whole`, every row of their days (BUCKET_COLUMN: the file's
    tag, null for an untagged file): each event with its key's prior row there (`prior_columns`, and
    ROW_COLUMN: the row's position in `whole`; null: not there), HASH_COLUMN (null for a key found in a
    tagged file: it takes the file's bucket) and BUCKET_COLUMN. Only the keys found in no tagged file are
    hashed. The same join serves the bucket lookup and the fold (`fold_joined`)."""
    prior = prior_columns(whole, cols).with_columns(whole[BUCKET_COLUMN]).with_row_index(ROW_COLUMN)
    joined = events.join(prior, on=cols.key, how="left")
    bucketed = joined[BUCKET_COLUMN].is_not_null()
    rest = joined.filter(bucketed.not_())  # new keys, and keys of untagged files
    hashed = keyed(rest[cols.key], n, hasher, distinct=True)  # in the order of `rest`
    return pl.concat([joined.filter(bucketed).with_columns(pl.lit(None, dtype=pl.Binary).alias(HASH_COLUMN)),
                      rest.with_columns(hashed[BUCKET_COLUMN], hashed[HASH_COLUMN])])


def _keys_in_frame(cols: Columns, whole: pl.DataFrame, distinct: pl.DataFrame, n: int, hasher: Hasher
                   ) -> tuple[pl.DataFrame, pl.DataFrame, pl.DataFrame]:
    """The batch's keys against `whole`, every row of its days (BUCKET_COLUMN: the file's tag, null for an
    untagged file), in one join: `keys` (each batch key, its keyed hash or null, its bucket), the prior
    rows (`whole` itself: the fold joins from the events, so the days' other rows cost nothing) and the
    keys found nowhere there (with their hash, for the key index). A key found in a tagged file takes the
    file's bucket; only the others are hashed (`distinct` holds each key once)."""
    key = cols.key
    where = distinct.join(whole.select(key, BUCKET_COLUMN, pl.lit(True).alias(FOUND_COLUMN)), on=key, how="left")
    tagged = where.filter(pl.col(BUCKET_COLUMN).is_not_null())
    rest = where.filter(pl.col(BUCKET_COLUMN).is_null())  # new keys, and keys of untagged files
    hashed = keyed(rest[key], n, hasher, distinct=True)  # in the order of `rest`
    keys = pl.concat([hashed, tagged.select(key, pl.lit(None, dtype=pl.Binary).alias(HASH_COLUMN), BUCKET_COLUMN)])
    return keys, whole.select(cols.row_columns), hashed.filter(rest[FOUND_COLUMN].is_null())


def _moved_locations(rows: pl.DataFrame, key: str, part: str, n: int, hasher: Hasher,
                     hashes: np.ndarray | None = None) -> tuple[Any, Any]:
    """What the key index must learn from `rows` (the new row of each changed key): the partition of every
    key that is new to the table or left its partition. A key that stays where the parent has it is already
    named there by the index (found in a touched day's file, whose bucket gave it no hash): left out.
    Keys that move without a hash yet are hashed here. Only the four columns read are filtered: a backfill
    part moves nearly every key, and a copy of all of `rows`' columns is ~100 MB at 1M keys. `hashes`:
    every row's hash (`_Folded.hashes`), so every row is learnt."""
    if hashes is not None:
        return hashes, rows[part].fill_null(NULL_DAY).to_numpy().astype(DAY)
    record = rows.select(key, part, "prior_day", HASH_COLUMN).filter(
        pl.col(HASH_COLUMN).is_not_null() | pl.col(part).ne_missing(pl.col("prior_day")))
    missing = record.filter(pl.col(HASH_COLUMN).is_null())
    if missing.height:
        hashed = keyed(missing[key], n, hasher).select(key, pl.col(HASH_COLUMN).alias("__h"))
        record = record.join(hashed, on=key, how="left").with_columns(
            pl.coalesce(HASH_COLUMN, "__h").alias(HASH_COLUMN))
    return hash_array(record[HASH_COLUMN]), record[part].fill_null(NULL_DAY).to_numpy().astype(DAY)


def _elsewhere(ctx: TableContext, parent: int, cols: Columns, files: _Files, keys: pl.DataFrame,
               touched: list[Any], n: int) -> pl.DataFrame:
    """The rows of `keys` (key, bucket) outside the touched days: located by the key index, then read
    from the files of their (day, bucket) only; without the index, a scan of the key column."""
    key = cols.key
    if keys.height >= MANY_KEYS:  # a backfill: when every file of the parent is in the touched days (an
        # empty table, a year backfilled), no key lives elsewhere; the file list is cheaper than hashing them
        in_touched = sum(len(files.by_day.get(d, [])) for d in touched)
        if _delta.file_count(ctx.uri, ctx.storage_options, parent) == in_touched:
            return cols.empty()
    keys_index = index.key_index(ctx)
    if keys_index is None:
        rows = read_rows_from(_delta.scan(ctx.uri, ctx.storage_options, parent), cols)(
            keys=keys[key].to_list(), exclude_days=touched)
        return rows
    where = keys_index.locate_hashed(hash_array(keys[HASH_COLUMN]), upto=parent)
    found = where != ABSENT
    if not found.any():
        return cols.empty()
    located = keys.select(key, BUCKET_COLUMN).filter(pl.Series(found)).with_columns(
        pl.Series(DAY_COLUMN, where[found]))
    excluded = {NULL_DAY if d is None else d for d in touched}
    wanted: dict[Any, set[int]] = {}
    for d, b in located.select(DAY_COLUMN, BUCKET_COLUMN).unique().iter_rows():
        if d not in excluded:
            wanted.setdefault(None if d == NULL_DAY else d, set()).add(b)
    days = sorted(wanted, key=day_order)
    files.load(days)
    return _rows_of_keys(ctx, cols, [e for d in days for e in files.holding(d, wanted[d], n)], located.select(key))


def _stream(ctx: TableContext, cols: Columns, days: list[Any], replaced: dict[Any, list[_delta.FileEntry]],
            new_rows: pl.DataFrame, n: int, read: _Kept) -> Stream:
    key, part = cols.key, cols.partition
    hasher = ctx.erasures.subject_key
    covered = [d for d in days if read.covers(replaced[d])]
    at_once = _content_at_once(cols, covered, len(covered) < len(days), new_rows, n, read, hasher) if covered else {}
    by_day: dict[Any, pl.DataFrame] = {}
    leaving: dict[Any, pl.DataFrame] = {}
    if len(covered) < len(days):
        by_day = new_rows.partition_by(part, as_dict=True)
        # The old row of a winning key is in its prior day (one row per key): a day's replaced files lose the
        # winners that were there or arrive there, not the whole batch (that would be O(days x batch)).
        leaving = new_rows.filter(pl.col("had_prior")).select(key, "prior_day").partition_by("prior_day",
                                                                                             as_dict=True)
    del new_rows  # the generator holds the per-day pieces only, and drops each day's once it is staged
    for day in days:
        if day in at_once:
            yield day, at_once.pop(day)
            continue
        kept = read.take_tagged(ctx, cols, replaced[day], n, hasher)
        new = by_day.pop((day,), None)
        winners = [f.select(key) for f in (leaving.pop((day,), None), new) if f is not None]
        if winners:
            kept = kept.join(pl.concat(winners), on=key, how="anti")
        content = pl.concat([kept, new.select(kept.columns).cast(kept.schema)]) if new is not None else kept
        yield day, content  # staging sorts by (bucket, key)


def _content_at_once(cols: Columns, days: list[Any], others: bool, new_rows: pl.DataFrame, n: int, read: _Kept,
                     hasher: Hasher) -> dict[Any, pl.DataFrame]:
    """The new content of `days`, whose replaced files are all in the kept frame (`read.whole`), computed in
    one pass instead of a filter, a join and a concat per day (each eager Polars call on a day's 14k rows
    costs about as much as on the 5 days' 70k): the kept rows lose every (key, day) a winner leaves or
    arrives in, the winners join them, and one `partition_by` gives the days. `others`: the kept frame and
    `new_rows` also hold other days (left for the per-day path)."""
    key, part = cols.key, cols.partition
    assert read.whole is not None
    rows = read.whole.drop(PATH_COLUMN)
    mine = new_rows
    if others:
        rows, mine = rows.filter(partition_filter(part, days)), new_rows.filter(partition_filter(part, days))
    if rows[BUCKET_COLUMN].null_count():  # rows of untagged files: split by their keys' hash
        rows = pl.concat([rows.filter(pl.col(BUCKET_COLUMN).is_not_null()),
                          with_buckets(rows.filter(pl.col(BUCKET_COLUMN).is_null()).drop(BUCKET_COLUMN), key, n,
                                       hasher)])
    if not read.pruned:
        winners = pl.concat([new_rows.select(key, part),
                             new_rows.filter(pl.col("had_prior")).select(key, pl.col("prior_day").alias(part))])
        rows = rows.join(winners, on=[key, part], how="anti", nulls_equal=True)
    content = pl.concat([rows, mine.select(rows.columns).cast(rows.schema)])
    parts = content.partition_by(part, as_dict=True)
    return {d: parts.get((d,), content.clear()) for d in days}
