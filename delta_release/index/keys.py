"""Key index: "in which partition does this order live?" without scanning any other partition.

It holds no order ids: each key is the keyed hash of the erasure ledger (HMAC-SHA256 under the lake
secret, `ErasureLedger.subject_key`), stored as its 32 raw bytes. The hash is NOT truncated: the index
maps one hash to one partition, so two orders whose truncated hashes collided would share one entry and
a lookup could name the other order's partition; the caller (apply/bucketed.py `_elsewhere`,
apply/reader.py) reads only the partition named and takes "not found there" as "nowhere in the table",
so the order's old row would survive beside its new one (I10). Full hashes keep that at HMAC odds.

Storage: flat files under `<lake>/_index/<table>/<table id>/keys/` (local or S3), a log-structured merge:

    d-<A>-<B>.kx2   level 0: what commits A..B changed (one commit's own delta has A == B; a catch-up
                    of several lost commits writes one file for them all)
    r1-<A>-<B>.kx2  level 1: DELTAS_PER_RUN level-0 files merged
    r2-<A>-<B>.kx2  level 2: RUNS_PER_LEVEL level-1 runs merged
    b-<B>.kx2       base: every key -> partition at version B (no removals); RUNS_PER_LEVEL level-2
                    runs are folded into the previous base to make the next one
    complete.json   {"version": W}: every commit up to W is in some file above (atomic replace)

Every `.kx2` file is create-only (named by the versions it covers, so two writers that merge the same
inputs write the same name and bytes; the loser's create fails) and holds the hashes in hash order, each
with its int32 partition value (`NULL_DAY` for the null partition, `GONE` for an order that left the
table at that step), behind a fence and a filter (keyfile.py has the layout). The fence, filter and prefixes
are made of keyed hashes only: no order ids. A lookup takes the newest base at or below its version and the
chain of files after it, newest first, and searches each for the keys' hashes (`_find`: a key the filter
turns away is not in the file; else the fence, read whole, names a block of prefixes, and a record is read
only where a prefix matches; memory-mapped on local disk, so a key touches one to three places of the file,
released every LOOKUP_CHUNK keys; on S3 by ranged GETs of its filter and the keys' blocks, `_find_ranged`). Files
of the previous layout (`.kx`: hashes, then partitions) are converted to this one when a lookup or catch-up
finds no base (`_upgrade`), then deleted.
Writers compact in `record` (not only readers), so a lookup reads at most DELTAS_PER_RUN + 2 *
RUNS_PER_LEVEL + 1 files whatever the number of versions; a file replaced by a merge is deleted
GRACE_VERSIONS versions later (a reader that still hits a deleted file lists again). One commit writes
one file; a base is rewritten once every DELTAS_PER_RUN * RUNS_PER_LEVEL**2 commits (amortised, and the
one cost whose time grows with the table; not its memory: merges pass over their inputs a range of the
hash space at a time, keyfile.py `write_merged`; the fold at 50M orders: 8-13 s, no more memory than an ingest;
on S3 the inputs are streamed into unnamed local temp files and the output written to one, all
memory-mapped (`$TMPDIR`: file pages the kernel can drop, `Storage.read_mapped`, `storage._spooled`)).

A lookup at version P catches up first: the versions in (W, P] that no file covers (their writer crashed
after its commit, or another path committed) are rebuilt from those commits' evidence (the files each
added, key column only) into one level-0 file per gap, then W moves to P. A missing index (no
complete.json, or no base: e.g. the previous per-shard layout) is rebuilt from the table at P (one scan
of the key and partition columns, hashed and sorted in pieces, then merged). A table's first commit onto
its empty version 0 builds the index itself (an empty base, then its delta) when no lookup did, so the
writers after a bulk load do not each rebuild it from the table at once. Entries may be stale (an
order that left a partition): the caller reads that partition and does not find it; an order the index
does not name is nowhere in the table. An erasure removes its subject: every index file holding its hash
is rewritten without it (the fence and filter recomputed from the remaining hashes: the subject's bits
leave the filter), by the same merge, so a base costs a pass, not a copy in memory.
"""

from __future__ import annotations

import functools
import mmap
import os
import tempfile
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from contextlib import suppress
from typing import Any

import numpy as np
import polars as pl

from .. import _delta
from ..evidence import CommitEvidence
from ..stage.buckets import digests
from ..storage import Storage, map_file
from . import tiers
from .keyfile import (
    DAY,
    GONE,
    HASH,
    HEADER,
    NULL_DAY,
    PREFIX,
    RECORD,
    Gone,
    Keys,
    Layout,
    Run,
    Source,
    _argsort,
    _decode,
    _decode_legacy,
    _empty,
    _encode,
    _filter_bits,
    _keys,
    _merge,
    _prefix,
    _rest,
    hashed,
    merged_body,
    write_merged,
)
from .tiers import BASE, TierFile
from .watermark import read_watermark, write_watermark

FOLDER = "keys"
COMPLETE = f"{FOLDER}/complete.json"
EXT = ".kx2"  # this layout's files (keyfile.py)
LEGACY_EXT = ".kx"  # the previous layout's
DELTAS_PER_RUN = 16
RUNS_PER_LEVEL = 4
GRACE_VERSIONS = 8
ABSENT = -3  # in lookups only: the index names no partition for the key
REBUILD_KEYS = 1 << 21  # keys a rebuild from the table hashes and sorts at a time (a piece: ~75 MB in the file)
# Keys searched per step: the resident pages of a lookup are bounded by this, not the base (each step's pages
# leave the resident set after it): at 50M hashes, 4 MiB for 35k absent keys in 1,024-key steps (the
# previous layout: 42 MiB), 36 MiB when half of them are present (49 MiB).
LOOKUP_CHUNK = 1024


def _from_runs(runs: list[Run]) -> Run:
    """A run from (hashes, partitions) pieces in the order they happened (a later row wins)."""
    runs = [r for r in runs if len(r[0])]
    if not runs:
        return _empty()
    h = np.concatenate([r[0] for r in runs])[::-1]
    day = np.concatenate([r[1] for r in runs])[::-1]
    return _merge([(h, day)], drop_gone=False)



def _find(keys: Keys, queries: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """For `queries` (S32, any order): which are in `keys` (mask) and the partition value of each found
    one. numpy compares S32 items through a generic byte-string path (about 1 us a query on 5M hashes):
    a query that passes the filter is placed among the prefixes (`_first_at_least`), and its rest
    compared only where the prefix there is its own. A smaller hash may share that prefix (odds about
    n / 2**64): such a query is searched again among the rests of every hash of its prefix."""
    n = len(keys.prefix)
    found = np.zeros(len(queries), dtype=bool)
    if not n or not len(queries):
        return found, np.zeros(0, dtype=DAY)
    qp, qr = _prefix(queries), _rest(queries)
    at, bits = _filter_bits(qp, qr, len(keys.filter), keys.bits)
    maybe = np.flatnonzero((keys.filter[at] & bits) == bits)
    idx = np.full(len(queries), n, dtype=np.int64)
    idx[maybe] = _first_at_least(keys, qp[maybe])
    same = maybe[idx[maybe] < n]
    same = same[keys.prefix[idx[same]] == qp[same]]
    hit = keys.rest[idx[same]] == qr[same]
    found[same[hit]] = True
    shared = same[~hit]
    if len(shared):  # the hashes of the query's prefix run from idx to the first of a greater prefix
        top = qp[shared]
        last = top == np.iinfo(np.uint64).max
        ends = np.where(last, n, _first_at_least(keys, np.where(last, top, top + 1)))
        for i, end in zip(shared.tolist(), ends.tolist(), strict=True):
            rests = np.ascontiguousarray(keys.rest[idx[i]:end])
            j = int(np.searchsorted(rests, qr[i]))
            if j < len(rests) and rests[j] == qr[i]:
                found[i], idx[i] = True, idx[i] + j
    return found, keys.day[idx[found]]


def _find_ranged(read: Callable[[list[tuple[int, int]]], list[bytes]], path: str,
                 queries: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """`_find` over a file read by byte ranges (`read`: e.g. ranged GETs on S3), not whole: its header,
    then its fence and filter, then only the blocks of `every` prefixes (and their records) where a query
    that passes the filter would sit. The blocks of a query: the one before the first fence entry at or
    above its prefix (j - 1; where its first place at or above lies), and every block whose fence entry
    IS its prefix (hashes sharing the prefix may run on): so all the file's hashes of that prefix are
    read, and `_find` over the rows read answers as over the file. A lookup costs the filter (1 byte per
    hash) and its keys' blocks (~9 KiB each), not the file (36 bytes per hash)."""
    found = np.zeros(len(queries), dtype=bool)
    (head,) = read([(0, HEADER)])
    at = Layout.read(head, path)
    if not at.n or not len(queries):
        return found, np.zeros(0, dtype=DAY)
    (meta,) = read([(HEADER, at.prefix_at)])
    fence = np.frombuffer(meta, dtype=PREFIX, count=at.blocks)
    fltr = np.frombuffer(meta, dtype=PREFIX, count=at.words, offset=fence.nbytes)
    qp, qr = _prefix(queries), _rest(queries)
    word, want = _filter_bits(qp, qr, at.words, at.bits)
    maybe = np.flatnonzero((fltr[word] & want) == want)
    if not len(maybe):
        return found, np.zeros(0, dtype=DAY)
    first = np.searchsorted(fence, qp[maybe])
    upto = np.maximum(np.searchsorted(fence, qp[maybe], side="right"), first)
    lo = np.maximum(first - 1, 0)
    many = upto - lo > 1
    chosen = [lo[~many & (upto > lo)]]
    chosen += [np.arange(a, b) for a, b in zip(lo[many].tolist(), upto[many].tolist(), strict=True)]
    chosen_blocks = np.unique(np.concatenate(chosen))
    if not len(chosen_blocks):
        return found, np.zeros(0, dtype=DAY)
    # consecutive blocks read as one range of prefixes and one of records
    cut = np.flatnonzero(np.diff(chosen_blocks) != 1) + 1
    runs = [(int(r[0]) * at.every, min((int(r[-1]) + 1) * at.every, at.n)) for r in np.split(chosen_blocks, cut)]
    ranges = [(at.prefix_at + PREFIX.itemsize * a, at.prefix_at + PREFIX.itemsize * b) for a, b in runs]
    ranges += [(at.record_at + RECORD.itemsize * a, at.record_at + RECORD.itemsize * b) for a, b in runs]
    data = read(ranges)
    rows = sum(b - a for a, b in runs)
    if [len(x) for x in data] != [e - s for s, e in ranges]:
        raise ValueError(f"key index file cut short: {path}")
    prefix = np.frombuffer(b"".join(data[:len(runs)]), dtype=PREFIX, count=rows)
    records = np.frombuffer(b"".join(data[len(runs):]), dtype=RECORD, count=rows)
    read_rows = Keys(prefix, records["rest"], records["day"], fence, at.every, fltr, at.bits).run()
    hit, days = _find(_keys(read_rows), queries[maybe])
    found[maybe[hit]] = True
    return found, days


def _first_at_least(keys: Keys, qp: np.ndarray) -> np.ndarray:
    """For each prefix in `qp` (uint64): the first position whose prefix in `keys` is >= it, or n. The
    fence (in memory) names the block: fence[j - 1] < p <= fence[j], so the answer is in (j - 1) x every
    + 1 .. j x every; a branch-free binary search of those `every` places finishes it (a place past the
    end reads as the last prefix: when even that is smaller, the search ends past the end, at n or
    beyond). Touches one block of the prefixes (2 KiB) per query."""
    prefix, every = keys.prefix, keys.every
    n = len(prefix)
    base = np.maximum(np.searchsorted(keys.fence, qp).astype(np.int64) * every - (every - 1), 0)
    half = every // 2
    while half:
        base += (prefix.take(base + (half - 1), mode="clip") < qp) * half
        half //= 2
    return np.minimum(base, n)


def _day_out(d: int) -> int | None:
    return None if d == NULL_DAY else d


def _day_in(d: Any) -> int:
    return NULL_DAY if d is None else int(d)


class Premerge:
    """The key index file of a fold's sorted runs alone (a file in parts: `record` with `hashed_locations`
    as a list and nothing else), written on a thread into a temp file on the index's
    disk (`Storage.write_ahead`) while the candidate is still being staged, gated and committed; `record`
    then links it in under the commit's version (`link`) instead of merging after the commit. Its content
    does not depend on the version. The 20M-event backfill's merge was 3-3.5 s on one core after its
    commit. Whoever starts one `discard`s it when done (a temp file not linked in is removed; a killed
    writer's is swept with the temp folder)."""

    def __init__(self, storage: Storage, runs: list[Source]) -> None:
        self.runs = runs
        self._storage = storage
        self._discarded = False
        pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="key-premerge")
        self._file = pool.submit(storage.write_ahead, FOLDER, merged_body(list(reversed(runs))))
        pool.shutdown(wait=False)

    def link(self, rel: str) -> bool | None:
        """Take `rel` with the file (write-once: False when it existed); None when it cannot serve (its write
        failed, another filesystem, discarded): the caller writes `rel` itself."""
        if self._discarded:
            return None
        try:
            tmp = self._file.result()
        except Exception:  # noqa: BLE001 - the caller's own write then meets the same error, if any
            return None
        return self._storage.link_ahead(tmp, rel)

    def discard(self) -> None:
        """Wait for the write; remove its file unless it was linked in (a later `link` then writes anew: a
        release run commits after its plan is gone)."""
        self._discarded = True
        try:
            tmp = self._file.result()
        except Exception:  # noqa: BLE001,S110 - nothing was left (`write_ahead` removes a failed write)
            return
        with suppress(FileNotFoundError):
            os.unlink(tmp)


class KeyIndex:
    def __init__(self, index: Storage, table: Storage, *, uri: str, options: dict[str, str], key: str,
                 partition: str, hasher: Callable[[str], str]) -> None:
        self.index, self.table, self.uri, self.options = index, table, uri, options
        self.key, self.partition, self.hasher = key, partition, hasher
        self.files_read = 0  # index files opened by this object (tests and benchmarks watch it)

    # -- files ------------------------------------------------------------------------------------
    def _files(self) -> list[TierFile]:
        return [f for o in self.index.list(FOLDER, recursive=False) if (f := tiers.parse(o.path, EXT)) is not None]

    def _open(self, f: TierFile) -> tuple[Keys, mmap.mmap | None]:
        """The file's columns (and its memory map on local disk); FileNotFoundError when a compaction
        deleted it since it was listed."""
        self.files_read += 1
        data, mapped = tiers.read(self.index, f.path)
        return _decode(data, f.path), mapped

    def _merge_files(self, name: str, files: list[TierFile], gone: Gone, *, exclude: np.ndarray | None = None,
                     replace: bool = False) -> None:
        """`files` (newest first) merged into the file `name` (keyfile.write_merged: a range at a time,
        none of them read whole)."""
        sources = [Source(*self._open(f)) for f in files]
        write_merged(self.index, name, sources, gone=gone, exclude=exclude, replace=replace)

    def _write(self, level: int, first: int, last: int, run: Run) -> None:
        self.index.write_once(tiers.name(FOLDER, EXT, level, first, last), _encode(run))

    def _watermark(self) -> int | None:
        return read_watermark(self.index, COMPLETE, self.uri, self.options)

    def _set_watermark(self, version: int) -> None:
        write_watermark(self.index, COMPLETE, self.uri, self.options, version)

    # -- writing ----------------------------------------------------------------------------------
    def _hash(self, keys: list[str] | pl.Series) -> np.ndarray:
        return hashed(digests(keys, self.hasher))

    def _run_of(self, keys: list[str] | pl.Series, days: Iterable[Any]) -> Run:
        return self._hash(keys), np.fromiter((_day_in(d) for d in days), dtype=DAY, count=len(keys))

    def premerge(self, runs: list[Source]) -> Premerge | None:
        """The file `record` would write for `runs` (a fold's sorted runs, no hash in two) alone, started now
        on a thread (`Premerge`); None on an object store."""
        return Premerge(self.index, runs) if self.index.is_local and runs else None

    def record(self, version: int, locations: dict[str, int | None], gone: Iterable[str] = (),
               *, files: Iterable[str] = (), hashed_locations: Run | list[Source] | None = None,
               premerged: Premerge | None = None) -> None:
        """Commit `version` put each order of `locations` (and every order of the data files `files`, and
        each hash of `hashed_locations`: (S32 hashes, int32 partitions, NULL_DAY for null)) in that
        partition and removed `gone`. One file write, then the writer's share of compaction.
        `hashed_locations` as a list: sorted runs (keyfile `spilled`: memory-mapped) with no hash in two
        (a file in parts, a run per group of its fold), merged into the file a range at a time
        (`write_merged`), never held together (a 20M-event backfill's 18M hashes are 655 MB; a sort of
        them in one run peaked at 3 GB). `premerged`: that file written ahead for these runs (`premerge`),
        linked in when the runs are the whole record."""
        if self._watermark() is None:
            if version != 1 or _delta.file_entries(self.uri, self.options, 0):
                return  # no index yet: the next lookup builds it from the table, this commit included
            # The first commit onto an empty table, by a writer that looked nothing up (a plan's bulk load,
            # a backfill into an empty table): an empty base and this commit's delta, as an ingest's first
            # lookup would have left. Else every writer that came next would rebuild the whole index from
            # the table at once (8 writers on 2 cores: 0.71 s each, 14x a lone writer's lookup).
            self.rebuild(0)
        runs = [self._run_of(list(locations), locations.values())]
        if isinstance(hashed_locations, tuple):
            runs.append(hashed_locations)
        gone = list(gone)
        later = [*self._locations_of_files(list(files)), (self._hash(gone), np.full(len(gone), GONE, dtype=DAY))]
        if isinstance(hashed_locations, list):  # newest first: the files and gone, the sorted runs, `locations`
            newer, older = _from_runs(later), _from_runs(runs)
            head = [Source(_keys(newer), None)] if len(newer[0]) else []
            tail = [Source(_keys(older), None)] if len(older[0]) or not hashed_locations else []
            # the runs hold no hash in two: alone (a first load), the file's size is their sum
            name = tiers.name(FOLDER, EXT, 0, version, version)
            alone = not head and not tail
            if not (alone and premerged is not None and premerged.runs is hashed_locations
                    and premerged.link(name) is not None):
                write_merged(self.index, name, [*head, *reversed(hashed_locations), *tail], disjoint=alone)
        else:
            self._write(0, version, version, _from_runs(runs + later))
        self.maintain()

    def _locations_of_files(self, paths: list[str]) -> list[Run]:
        runs: list[Run] = []
        for path in paths:
            frame = self._read_file(path)
            runs.append(self._run_of(frame[self.key], frame[self.partition].to_list()))
        return runs

    def _read_file(self, path: str) -> pl.DataFrame:
        import pyarrow.parquet as pq

        with self.table.open_input(path) as handle:
            data = pl.from_arrow(pq.read_table(handle, columns=[self.key]))
        assert isinstance(data, pl.DataFrame)
        value = _partition_of(path, self.partition)
        return data.with_columns(pl.lit(value, dtype=pl.Int32).alias(self.partition))

    def maintain(self) -> None:
        """Merge full tiers (DELTAS_PER_RUN level-0 files -> a level-1 run, RUNS_PER_LEVEL runs -> the
        next level, RUNS_PER_LEVEL level-2 runs + the base -> a new base), then delete what merges
        replaced more than GRACE_VERSIONS versions ago."""
        tiers.retry_listing(self._maintain)

    def _maintain(self) -> None:
        files = self._files()
        for level in (0, 1, 2):
            bases = [f for f in files if f.level == BASE]
            if not bases:
                return
            above = max(f.last for f in files if f.level > level)
            units = tiers.chain(files, above, max(f.last for f in files), level)
            fan = DELTAS_PER_RUN if level == 0 else RUNS_PER_LEVEL
            if len(units) < fan:
                continue
            units = units[:fan]
            newest_first = list(reversed(units))
            if level < 2:  # (GONE entries stay: they hide the older files' entries)
                self._merge_files(tiers.name(FOLDER, EXT, level + 1, units[0].first, units[-1].last),
                                  newest_first, "keep")
            else:  # the runs folded into the base: a new base
                base = max((b for b in bases if b.last == above), key=lambda b: b.last)
                self._merge_files(tiers.name(FOLDER, EXT, BASE, 0, units[-1].last), [*newest_first, base], "fold")
            files = self._files()
        self._tidy(files)

    def _tidy(self, files: list[TierFile]) -> None:
        for f in tiers.superseded(files, GRACE_VERSIONS):
            self.index.delete(f.path)

    def catch_up(self, upto: int) -> None:
        """Make the index valid for `upto`: build it when missing, rebuild lost commits when behind."""
        start = self._watermark()
        if start is None:
            self.rebuild(upto)
            return
        if start >= upto:
            return
        files = self._files()
        if not any(f.level == BASE for f in files) and self._upgrade():
            files = self._files()
        if not any(f.level == BASE for f in files):
            self.rebuild(upto)
            return
        covered = np.zeros(upto - start, dtype=bool)  # versions start+1 .. upto
        for f in files:
            lo, hi = max(f.first, start + 1), min(f.last, upto)
            if lo <= hi:
                covered[lo - start - 1:hi - start] = True
        gaps: list[tuple[int, int]] = []
        for offset in np.nonzero(~covered)[0].tolist():
            v = start + 1 + offset
            if gaps and gaps[-1][1] == v - 1:
                gaps[-1] = (gaps[-1][0], v)
            else:
                gaps.append((v, v))
        for first, last in gaps:  # one file per gap, not one per version
            runs: list[Run] = []
            for version in range(first, last + 1):
                raw = _delta.version_evidence(self.uri, self.options, version)
                if raw is None:  # not a commit of ours (or its log entry is gone): rebuild from the table
                    self.rebuild(upto)
                    return
                evidence = CommitEvidence.from_json(raw)
                runs += self._locations_of_files([f.path for f in evidence.files])
            self._write(0, first, last, _from_runs(runs))
        self._set_watermark(upto)
        if gaps:
            self.maintain()

    def rebuild(self, version: int) -> None:
        """The whole index from the table at `version` (a missing index). Deletes no file of this layout:
        writers may be rebuilding at the same time; a base hides every file up to its version. The keys
        are hashed and sorted REBUILD_KEYS at a time into pieces (memory-mapped temp files), which one
        merge makes the base: memory does not grow with the table."""
        paths = [e.path for e in _delta.file_entries(self.uri, self.options, version)] if version > 0 else []
        pieces: list[Source] = []
        temps: list[str] = []
        try:
            runs: list[Run] = []
            held = 0
            for path in paths:
                runs += self._locations_of_files([path])
                held += len(runs[-1][0])
                if held >= REBUILD_KEYS:
                    pieces.append(self._piece(_from_runs(runs), temps))
                    runs, held = [], 0
            if runs or not pieces:
                pieces.append(self._piece(_from_runs(runs), temps))
            # newest first: a key in two pieces (a table with a repeated key) takes the later file's row
            write_merged(self.index, tiers.name(FOLDER, EXT, BASE, 0, version), pieces[::-1], gone="drop")
        finally:
            for temp in temps:
                with suppress(FileNotFoundError):
                    os.unlink(temp)
        self._set_watermark(version)
        self._drop_legacy()

    def _piece(self, run: Run, temps: list[str]) -> Source:
        """A sorted run as a merge input, written to a temp file and memory-mapped, so a rebuild holds one
        piece at a time: on local disk in the lake's temp folder (named in `temps`), on an object store an
        unnamed file in the system temp folder (`$TMPDIR`)."""
        if self.index.is_local:
            path = self.index.temp_path()
            temps.append(path)
            opened = open(path, "w+b")  # noqa: SIM115 - closed by the `with` below
        else:
            path, opened = "rebuild piece", tempfile.TemporaryFile(prefix="delta-release-")
        with opened as handle:
            handle.write(_encode(run))
            handle.flush()
            data, mapped = map_file(handle)
        return Source(_decode(data, path), mapped)

    def _legacy(self) -> list[str]:
        """Files of a previous layout: per shard (`keys/<shard>/...`, `keys/v/...`; ignored, deleted once
        the index is rebuilt) or whole hashes then partitions (`.kx`: converted by `_upgrade`)."""
        cut = len(FOLDER) + 1
        return [o.path for o in self.index.list(FOLDER, recursive=True)
                if "/" in o.path[cut:] or o.path.endswith(LEGACY_EXT)]

    def _upgrade(self) -> bool:
        """Each `.kx` file of the previous layout written again in this one, under the same name (`.kx2`,
        create-only: the same bytes whoever converts it), then the old files deleted: one pass over each
        file instead of a rebuild from the table (a scan of every key). True when a file was converted."""
        converted = False
        for o in self.index.list(FOLDER, recursive=False):
            if tiers.parse(o.path, LEGACY_EXT) is None:
                continue
            try:
                data, mapped = tiers.read(self.index, o.path)
                run = _decode_legacy(data, o.path)
            except (FileNotFoundError, ValueError):  # (converted by another writer; or not a file of ours)
                continue
            self.index.write_once(o.path[:-len(LEGACY_EXT)] + EXT, _encode(run))
            if mapped is not None:
                mapped.madvise(mmap.MADV_DONTNEED)
            converted = True
        if converted:
            self._drop_legacy()
        return converted

    def _drop_legacy(self) -> None:
        for path in self._legacy():
            self.index.delete(path)

    # -- reading ----------------------------------------------------------------------------------
    def _view(self, files: list[TierFile], upto: int) -> list[TierFile] | None:
        """The files a lookup at `upto` reads, newest first (the base last); None without a base."""
        bases = [f for f in files if f.level == BASE]
        if not bases:
            return None
        below = [b for b in bases if b.last <= upto]
        if below:
            base = max(below, key=lambda b: b.last)
            chain = tiers.chain(files, base.last, upto)
            if (chain[-1].last if chain else base.last) >= upto:
                return [*reversed(chain), base]
        # The files for `upto` are gone (a reader far behind the writers): answer at the newest state,
        # which a stale-parent check makes safe (the writer's commit fails and is rebuilt).
        base = max(bases, key=lambda b: b.last)
        return [*reversed(tiers.chain(files, base.last, max(f.last for f in files))), base]

    def locate(self, keys: Iterable[str], *, upto: int, hashes: np.ndarray | None = None) -> dict[str, int | None]:
        """order id -> the partition value the index names for it at `upto` (absent: in no partition).
        `hashes`: the keys' keyed hashes (S32, in order) when the caller has them already."""
        keys = list(keys)
        days = self.locate_hashed(self._hash(keys) if hashes is None else hashes, upto=upto)
        return {k: _day_out(d) for k, d in zip(keys, days.tolist(), strict=True) if d != ABSENT}

    def locate_hashed(self, hashes: np.ndarray, *, upto: int) -> np.ndarray:
        """`locate` by keyed hashes (S32), without order ids: the partition value of each (int32, in order;
        NULL_DAY for the null partition, ABSENT where the index names none)."""
        self.catch_up(upto)
        h = np.ascontiguousarray(hashes, dtype=HASH)
        out = np.full(len(h), ABSENT, dtype=DAY)
        if not len(h):
            return out
        order = _argsort(h)  # (by 8-byte prefixes: numpy sorts S32 items through a generic compare)
        queries = np.ascontiguousarray(h[order])
        for attempt in range(5):
            try:
                out[order] = self._locate(queries, upto)
                return out
            except FileNotFoundError:  # a compaction deleted a file we listed: list again
                if attempt == 4:
                    raise
        raise AssertionError("unreachable")

    def _locate(self, queries: np.ndarray, upto: int) -> np.ndarray:
        """The partition value of each of the SORTED `queries` (ABSENT: none, or the order left the table)."""
        view = self._view(self._files(), upto)
        if view is None and self._upgrade():
            view = self._view(self._files(), upto)
        if view is None:  # no base: a layout this version does not read
            self.rebuild(upto)
            view = self._view(self._files(), upto)
            assert view is not None
        out = np.full(len(queries), ABSENT, dtype=DAY)
        pending = np.arange(len(queries))
        for f in view:  # newest first: a hash's first hit is its current entry
            if not len(pending):
                break
            if not self.index.is_local:  # an object store: the filter and the keys' blocks, not the file
                hit, days = self._find_by_ranges(f, queries[pending])
                out[pending[hit]] = days
                pending = pending[~hit]
                continue
            keys, mapped = self._open(f)
            found = np.zeros(len(pending), dtype=bool)
            for lo in range(0, len(pending), LOOKUP_CHUNK):
                part = pending[lo:lo + LOOKUP_CHUNK]
                hit, days = _find(keys, queries[part])
                out[part[hit]] = days
                found[lo:lo + len(part)] = hit
                if mapped is not None:  # the pages this chunk touched leave our resident set (a large
                    mapped.madvise(mmap.MADV_DONTNEED)  # batch would otherwise map in most of the base)
            pending = pending[~found]
        out[out == GONE] = ABSENT
        return out

    def forget(self, subject_id: str, version: int) -> None:
        """After an erasure commit at `version`: the subject's hash leaves every index file (each file
        holding it is replaced by a copy without it; a base copy costs a pass over the base)."""
        self.catch_up(version)
        subject = np.frombuffer(bytes.fromhex(self.hasher(subject_id)), dtype=HASH)
        for _ in range(3):  # a writer merging files it read before us may re-create it: look again
            rewrote = False
            for f in self._files():
                try:
                    held = self._has(f, subject)
                except FileNotFoundError:
                    continue
                if held:
                    self._merge_files(f.path, [f], "keep", exclude=subject, replace=True)
                    rewrote = True
            if not rewrote:
                break
        self._drop_legacy()

    def _find_by_ranges(self, f: TierFile, queries: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """`_find` in the file `f` by ranged reads (an object store): its filter and the queries' blocks."""
        self.files_read += 1
        return _find_ranged(functools.partial(self.index.read_ranges, f.path), f.path, queries)

    def _has(self, f: TierFile, subject: np.ndarray) -> bool:
        """Whether the file `f` holds the hash `subject` (FileNotFoundError when a merge deleted it): on an
        object store by ranged reads, so an erasure reads whole only the files it rewrites."""
        if not self.index.is_local:
            return bool(self._find_by_ranges(f, subject)[0][0])
        return bool(_find(self._open(f)[0], subject)[0][0])

    def holds(self, subject_hash: str) -> bool:
        """True when any index file names `subject_hash` (for tests and audits)."""
        subject = np.frombuffer(bytes.fromhex(subject_hash), dtype=HASH)
        for f in self._files():
            if self._has(f, subject):
                return True
        return any(needle in self.index.read_bytes(p) for p in self._legacy()
                   for needle in (subject_hash.encode(), subject.tobytes()))


def _partition_of(path: str, column: str) -> int | None:
    prefix = f"{column}="
    for part in path.split("/")[:-1]:
        if part.startswith(prefix):
            value = part[len(prefix):]
            return None if value == "__HIVE_DEFAULT_PARTITION__" else int(value)
    return None
