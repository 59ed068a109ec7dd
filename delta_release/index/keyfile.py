"""The key index's file (`.kx2`): its format, and the merge that writes one from several without
holding any of them.

A file holds `MAGIC`, a count n, the fence (every FENCE_EVERY-th prefix below), the filter (FILTER_BITS
bits per hash in one word per FILTER_KEYS hashes), the n hashes' 8-byte prefixes, then n records of the
hash's other 24 bytes and its int32 partition value (`NULL_DAY` for the null partition, `GONE` for an
order that left the table at that step), all in hash order. Nothing in it is an order id: the hashes are
keyed (index/keys.py says why they are whole).

`write_merged` makes one file from files given newest first (a hash in several takes the newest entry),
as `_encode` of the merged run would, byte for byte, in ranges of the hash space: the inputs are
memory-mapped and each range's pages leave the resident set after it, and the output is written range by
range through a file. So a merge of a 50M-key base costs a few ranges of memory (RANGE_KEYS entries
each), not two copies of the base (6 GB at 50M keys, measured; see `RANGE_KEYS`).
"""

from __future__ import annotations

import functools
import mmap
import struct
from collections.abc import Callable, Iterator
from typing import Any, BinaryIO, Literal, NamedTuple

import numpy as np
import polars as pl

from ..storage import Storage, map_file

MAGIC = b"DRKEYS02"
LEGACY_MAGIC = b"DRKEYS01"  # the previous layout (`.kx`): n hashes, then n partitions
HEADER = len(MAGIC) + 32  # the count n, FENCE_EVERY, the filter's words and FILTER_BITS
HASH = np.dtype("S32")  # the full HMAC-SHA256 (see the module docstring for why not shorter)
DAY = np.dtype("<i4")
PREFIX = np.dtype("<u8")  # a hash's first 8 bytes as a (big-endian) number, stored little-endian
RECORD = np.dtype([("rest", "S24"), ("day", DAY)])  # a hash's other 24 bytes and its partition: 28 bytes
NULL_DAY = -1  # the null partition (event days are >= 0)
GONE = -2  # the order left the table (erased) at this step

# A file holds its hashes' 8-byte prefixes apart from the rest of each hash: a lookup searches the prefixes
# (8 of every 36 bytes; every FENCE_EVERY-th of them, the fence, read whole first, names a block of 2 KiB)
# and reads a record only where a prefix matches. Before the prefixes, a filter: one 64-bit word per
# FILTER_KEYS hashes, in hash order; a hash sets FILTER_BITS bits (chosen by its bytes 8..15) of the word
# its prefix falls in. A key whose bits are not all set is not in the file (never the other way: a hash of
# the file always passes; ~3% of absent keys pass too), so most keys a file does not hold (a batch's new
# orders) touch only the filter (1 byte per hash: 50 MB at 50M). The cost of a lookup into a large
# memory-mapped file is its page faults, and a batch's keys are dense enough that it faults in most of
# what it searches (a first touch maps 64 KiB around it, or a whole large folio, up to 2 MiB, when the
# page cache holds the file in those): so the pages a batch maps are bounded by the filter (absent keys)
# and the prefix column (400 MB at 50M), not the file (1.85 GB). 35k absent keys (the bench batch's
# lookup) into a copied file: 11.5 ms at 5M hashes, 15.3 ms at 50M (2.1k page faults); hashes then
# partitions, interpolated: 44.5 and 128.9 ms (20.8k faults); the prefixes without the filter: 11.4 and
# 27.0 ms (6.4k faults).
FENCE_EVERY = 256  # a power of two: the fence is 8 bytes per 256 hashes (1.5 MB at 50M)
FILTER_KEYS, FILTER_BITS = 8, 4


Run = tuple[np.ndarray, np.ndarray]  # sorted unique hashes (S32), their partition values (int32)


class Keys(NamedTuple):
    """A run as the lookup reads it (a file's columns, or a run's): prefix (uint64 in hash order) and rest
    (S24) of each hash, its partition value, every `every`-th prefix (the fence) and the filter."""
    prefix: np.ndarray
    rest: np.ndarray
    day: np.ndarray
    fence: np.ndarray
    every: int
    filter: np.ndarray
    bits: int  # set per hash in the filter

    def run(self) -> Run:
        """The hashes (S32) and partition values, copied (the file's mapping may then be released)."""
        h = np.empty(len(self.prefix), dtype=HASH)
        raw = h[:, None].view(np.uint8)
        raw[:, :8] = self.prefix.astype(">u8")[:, None].view(np.uint8)
        raw[:, 8:] = self.rest[:, None].view(np.uint8)
        return h, np.array(self.day, dtype=DAY)


def _keys(run: Run, every: int = FENCE_EVERY) -> Keys:
    h, day = run
    prefix, rest = _prefix(h), _rest(h)
    fence = np.ascontiguousarray(prefix[::every])
    return Keys(prefix, rest, day, fence, every, _filter(prefix, rest), FILTER_BITS)


def _filter_bits(prefix: np.ndarray, rest: np.ndarray, words: int,
                 count: int = FILTER_BITS) -> tuple[np.ndarray, np.ndarray]:
    """The filter word of each hash (by its prefix: in hash order) and the `count` bits it sets there
    (chosen by the first 8 bytes of its rest, the hash's bytes 8..15)."""
    at = ((prefix >> np.uint64(32)) * np.uint64(words)) >> np.uint64(32)
    more = rest[:, None].view(np.uint8)[:, :8].view("<u8")[:, 0]
    bits = np.zeros(len(prefix), dtype=np.uint64)
    step = np.empty(len(prefix), dtype=np.uint64)  # (in place: a merge computes this for every hash)
    for i in range(count):
        np.right_shift(more, np.uint64(6 * i), out=step)
        np.bitwise_and(step, np.uint64(63), out=step)
        np.left_shift(np.uint64(1), step, out=step)
        np.bitwise_or(bits, step, out=bits)
    return at.astype(np.int64), bits


def _filter_words(prefix: np.ndarray, rest: np.ndarray, words: int) -> tuple[np.ndarray, np.ndarray]:
    """The filter words that sorted hashes (a non-empty slice of a file's) set: each word's index, in
    order, and the bits the slice sets in it."""
    at, bits = _filter_bits(prefix, rest, words)
    first = np.flatnonzero(np.concatenate([[True], at[1:] != at[:-1]]))
    return at[first], np.bitwise_or.reduceat(bits, first)


def _filter(prefix: np.ndarray, rest: np.ndarray, step: int = 1 << 20) -> np.ndarray:
    """The filter of sorted hashes (their prefixes and rests; built a slice at a time: a base holds tens
    of millions)."""
    words = np.zeros(-(-len(prefix) // FILTER_KEYS), dtype=np.uint64)
    for lo in range(0, len(prefix), step):
        index, value = _filter_words(prefix[lo:lo + step], rest[lo:lo + step], len(words))
        words[index] |= value
    return words


class Layout(NamedTuple):
    """A file's header (`MAGIC`, then n, the fence's spacing, the filter's words and bits per hash) and
    where each part of the file starts."""
    n: int
    every: int
    words: int
    bits: int

    @classmethod
    def of(cls, n: int, every: int = FENCE_EVERY) -> Layout:
        return cls(n, every, -(-n // FILTER_KEYS), FILTER_BITS)

    @classmethod
    def read(cls, head: Any, path: str) -> Layout:
        """The layout a file's first HEADER bytes state; ValueError when they are not a key index file's."""
        if len(head) < HEADER or bytes(head[:len(MAGIC)]) != MAGIC:
            raise ValueError(f"not a key index file: {path}")
        layout = cls(*struct.unpack("<QQQQ", bytes(head[len(MAGIC):HEADER])))
        if layout.every < 1 or layout.words != -(-layout.n // FILTER_KEYS):
            raise ValueError(f"key index file with a bad header: {path}")
        return layout

    def head(self) -> bytes:
        return MAGIC + struct.pack("<QQQQ", *self)

    @property
    def blocks(self) -> int:  # fence entries
        return -(-self.n // self.every)

    @property
    def filter_at(self) -> int:
        return HEADER + PREFIX.itemsize * self.blocks

    @property
    def prefix_at(self) -> int:
        return self.filter_at + PREFIX.itemsize * self.words

    @property
    def record_at(self) -> int:
        return self.prefix_at + PREFIX.itemsize * self.n

    @property
    def size(self) -> int:
        return self.record_at + RECORD.itemsize * self.n


def _encode(run: Run, every: int = FENCE_EVERY) -> bytearray:
    """MAGIC, n, FENCE_EVERY, the filter's word count and FILTER_BITS, the fence (ceil(n / FENCE_EVERY)
    prefixes), the filter (ceil(n / FILTER_KEYS) words), the n prefixes, then n records (the hash's other
    24 bytes, int32 partition), in hash order. One copy into the result (a base is large: no
    intermediate bytes objects). `every`: the fence's spacing (tests use small ones)."""
    keys = _keys(run, every)
    layout = Layout.of(len(keys.prefix), every)
    out = bytearray(layout.size)
    out[:layout.prefix_at] = b"".join((layout.head(), keys.fence.astype(PREFIX).tobytes(),
                                       keys.filter.astype(PREFIX).tobytes()))
    np.frombuffer(out, dtype=PREFIX, count=layout.n, offset=layout.prefix_at)[:] = keys.prefix
    records = np.frombuffer(out, dtype=RECORD, count=layout.n, offset=layout.record_at)
    records["rest"], records["day"] = keys.rest, keys.day
    return out


def _decode(buf: Any, path: str) -> Keys:
    """A file's columns: views of its bytes, no copy."""
    at = Layout.read(buf[:HEADER], path)
    if len(buf) < at.size:
        raise ValueError(f"key index file cut short: {path}")
    fence = np.frombuffer(buf, dtype=PREFIX, count=at.blocks, offset=HEADER)
    fltr = np.frombuffer(buf, dtype=PREFIX, count=at.words, offset=at.filter_at)
    prefix = np.frombuffer(buf, dtype=PREFIX, count=at.n, offset=at.prefix_at)
    records = np.frombuffer(buf, dtype=RECORD, count=at.n, offset=at.record_at)
    return Keys(prefix, records["rest"], records["day"], fence, at.every, fltr, at.bits)


def _decode_legacy(buf: Any, path: str) -> Run:
    if bytes(buf[:len(LEGACY_MAGIC)]) != LEGACY_MAGIC:
        raise ValueError(f"not a key index file: {path}")
    (n,) = struct.unpack("<Q", bytes(buf[len(LEGACY_MAGIC):len(LEGACY_MAGIC) + 8]))
    start = len(LEGACY_MAGIC) + 8
    return (np.frombuffer(buf, dtype=HASH, count=n, offset=start),
            np.frombuffer(buf, dtype=DAY, count=n, offset=start + HASH.itemsize * n))


def _empty() -> Run:
    return np.zeros(0, dtype=HASH), np.zeros(0, dtype=DAY)


def hashed(raw: bytes) -> np.ndarray:
    """Concatenated 32-byte keyed hashes as the index's hash column."""
    return np.frombuffer(raw, dtype=HASH)


def _prefix(h: np.ndarray) -> np.ndarray:
    """The first 8 bytes of each 32-byte hash as an integer (uint64, in the same order as the hashes)."""
    return h[:, None].view(np.uint8)[:, :8].view(">u8")[:, 0].astype(np.uint64)


def _rest(h: np.ndarray) -> np.ndarray:
    """The other 24 bytes of each hash (S24: a view, no copy)."""
    return h[:, None].view(np.uint8)[:, 8:].view("S24")[:, 0]


# What a merge does with GONE entries: keep them ("keep": a run, whose GONE hides older files), drop them
# ("drop"), or, for a fold into a base (the last input), drop them when the newer inputs' merge holds one
# (exactly what folding that merge into the base did: a base holds no GONE entries).
Gone = Literal["keep", "drop", "fold"]


def _merge(runs: list[Run], *, drop_gone: bool) -> Run:
    """One run from `runs` given NEWEST FIRST: for a hash in several, the newest entry wins."""
    runs = [r for r in runs if len(r[0])]
    if not runs:
        return _empty()
    h = np.concatenate([r[0] for r in runs]) if len(runs) > 1 else runs[0][0]
    day = np.concatenate([r[1] for r in runs]) if len(runs) > 1 else runs[0][1]
    order = _argsort(h)  # equal hashes keep their newest-first order
    # `take`: numpy's fancy index copies S32 items through a generic loop, 2-5x slower on 2M hashes
    h, day = np.take(h, order), np.take(day, order)
    keep = np.ones(len(h), dtype=bool)
    keep[1:] = h[1:] != h[:-1]
    if not keep.all():
        h, day = h[keep], day[keep]
    if drop_gone:
        alive = day != GONE
        h, day = h[alive], day[alive]
    return np.ascontiguousarray(h), np.ascontiguousarray(day)


def sorted_run(run: Run) -> Run:
    """`run` (hashes and partition values, in the order they happened: a later entry wins) sorted by hash,
    one entry per hash: a piece of a large commit's locations, ready for `write_merged`."""
    return _merge([(run[0][::-1], run[1][::-1])], drop_gone=False)


def spilled(run: Run, path: str) -> Source:
    """A sorted run (`sorted_run`) written to the local file `path` as a key index file and read back
    memory-mapped: what `write_merged` takes, its pages the page cache's (released range by range as the
    merge goes), not the heap's; the mapping outlives the file's name (a spill removed before the
    commit's record)."""
    with open(path, "w+b") as handle:
        handle.write(_encode(run))
        handle.flush()
        data, mapped = map_file(handle)
    return Source(_decode(data, path), mapped)


def _argsort(h: np.ndarray) -> np.ndarray:
    """`np.argsort(h, kind="stable")`, by the hashes' 8-byte prefixes as integers (numpy sorts S32 items
    through a generic compare, several times slower). The prefixes' top bits and each hash's index share
    one 64-bit word, and the words are sorted, not argsorted (2.3M of them: Polars' sort on one thread 40-60
    ms, numpy's 130-140 ms, numpy's argsort of the prefixes 250-280 ms): that orders the hashes by those top
    bits, ties by index (stably).
    Hashes whose top bits tie (a few among millions of keyed hashes; every repeat of a hash in a merge) are
    put in full hash order within their tie, stably; with more such ties than `_TIES`, the full stable
    sort of the hashes."""
    n = len(h)
    if n < 2:
        return np.arange(n)
    bits = (n - 1).bit_length()
    low = np.uint64((1 << bits) - 1)
    words = _prefix(h)
    np.bitwise_and(words, ~low, out=words)
    np.bitwise_or(words, np.arange(n, dtype=np.uint64), out=words)
    words = pl.Series(words).sort(multithreaded=False).to_numpy()  # one thread: the pool has the folds
    order = (words & low).astype(np.intp)
    top = words >> np.uint64(bits)
    ties = np.flatnonzero(top[1:] == top[:-1])  # order[i] and order[i + 1] share their top bits
    if not len(ties):
        return order
    if len(ties) > _TIES:
        return np.argsort(h, kind="stable")
    starts = ties[np.concatenate(([True], ties[1:] != ties[:-1] + 1))]  # each run of ties: its first pair
    ends = ties[np.concatenate((ties[1:] != ties[:-1] + 1, [True]))] + 2  # and past its last hash
    for a, b in zip(starts.tolist(), ends.tolist(), strict=True):
        tie = order[a:b]  # in index order (the words broke the tie by index)
        order[a:b] = tie[np.argsort(h[tie], kind="stable")]
    return order


_TIES = 4096  # hashes sharing their top bits that `_argsort` orders tie by tie


def _fold(base: Run, change: Run) -> Run:
    """`change` (newer) folded into the large `base`: a search and one copy, no sort of the base."""
    h, day = base
    ch, cd = change
    if not len(ch):
        return base
    idx = np.searchsorted(h, ch)
    inside = idx < len(h)
    same = np.zeros(len(ch), dtype=bool)
    same[inside] = h[idx[inside]] == ch[inside]
    day = np.array(day, dtype=DAY)  # a writable copy (the base may be memory-mapped)
    day[idx[same]] = cd[same]
    if not same.all():
        h = np.insert(h, idx[~same], ch[~same])
        day = np.insert(day, idx[~same], cd[~same])
    if (cd == GONE).any():
        alive = day != GONE
        h, day = h[alive], day[alive]
    return np.ascontiguousarray(h), np.ascontiguousarray(day)


def merge_in_memory(runs: list[Run], gone: Gone = "keep", exclude: np.ndarray | None = None) -> Run:
    """What `write_merged` writes for `runs` (newest first), computed with every input whole in memory (as
    the index did before: about 2 x 36 bytes an entry, 6-8 GB for a 50M-entry base): the model the tests
    compare the streaming merge with byte for byte, and the alternative the benchmarks time it against."""
    if gone == "fold":
        merged = _fold(runs[-1], _merge(runs[:-1], drop_gone=False))
    else:
        merged = _merge(runs, drop_gone=gone == "drop")
    if exclude is not None:
        keep = ~np.isin(merged[0], exclude)
        merged = merged[0][keep], merged[1][keep]
    return merged


# -- merging files ---------------------------------------------------------------------------------------
# Entries (summed over the inputs) per range of the hash space a merge takes at a time. The hashes are
# keyed, so uniform: the space is cut into equal ranges of about this many entries. A range costs ~110
# bytes an entry while merged (its columns, their sort order and the output's records): ~7 MiB. Smaller
# ranges are faster too, as far as 32k: the fold of a 50M-key run (4 runs and a base, all in the page cache)
# took 10.8 s at 262,144 entries (3.4 s of it in the kernel, mostly zeroing the fresh huge pages of each
# range's arrays), 7.5-7.8 s at 65,536 (1.8 s), 7.4 s at 32,768, 8.2 s at 16,384.
RANGE_KEYS = 1 << 16


class Source(NamedTuple):
    keys: Keys
    mapped: mmap.mmap | None  # its memory map: the file, or a local spool of an S3 object (pages released by range)


class _Range(NamedTuple):
    prefix: np.ndarray  # uint64, in hash order, unique hashes
    rest: np.ndarray  # S24, contiguous
    day: np.ndarray
    newer_gone: bool  # an entry taken from an input other than the last one is GONE


def _repeats(p: np.ndarray, r: np.ndarray, order: np.ndarray, *, whole: bool = False) -> np.ndarray | None:
    """Where, in `order`, an entry repeats the hash before it: the positions i whose entry at i + 1 has
    the same hash. Compared by prefix, then the rests of those few only. None when two hashes there share
    a prefix but not their rest (`order` is by prefix alone, so a repeated hash may not be adjacent);
    with `whole` (`order` by the whole hash), such pairs are simply not repeats."""
    ps = p[order]
    pairs = np.flatnonzero(ps[1:] == ps[:-1])
    equal = r[order[pairs]] == r[order[pairs + 1]]
    if not whole and not equal.all():
        return None
    repeats: np.ndarray = pairs[equal]
    return repeats


def _merge_range(sources: list[Keys], lo: np.ndarray, hi: np.ndarray, exclude: np.ndarray | None) -> _Range:
    """The merged entries of `sources` (newest first) between positions lo[i] and hi[i] of each: for a
    hash in several, the newest entry; without the hashes of `exclude` (S32)."""
    parts = [i for i in range(len(sources)) if hi[i] > lo[i]]
    last = len(sources) - 1
    if len(parts) <= 1:
        i = parts[0] if parts else last
        k, a, b = sources[i], int(lo[i]), int(hi[i])
        p, r, d = np.array(k.prefix[a:b]), np.ascontiguousarray(k.rest[a:b]), np.array(k.day[a:b])
        newer_gone = i != last and bool((d == GONE).any())
    else:
        p = np.concatenate([sources[i].prefix[lo[i]:hi[i]] for i in parts])
        r = np.concatenate([sources[i].rest[lo[i]:hi[i]] for i in parts])
        d = np.concatenate([sources[i].day[lo[i]:hi[i]] for i in parts])
        order = np.argsort(p, kind="stable")  # equal hashes keep their newest-first order
        same = _repeats(p, r, order)
        if same is None:  # hashes that share a prefix: order by the whole hash (stable too: ties newest first)
            order = np.lexsort((r, p))
            same = _repeats(p, r, order, whole=True)
            assert same is not None
        first = np.ones(len(order), dtype=bool)
        first[same + 1] = False  # a repeated hash: only its first (newest) entry
        take = order[first]
        p, r, d = p[take], r[take], d[take]
        # (the last input's entries are the last of the concatenation, when it has any here)
        older = len(order) - int(hi[last] - lo[last]) if parts[-1] == last else len(order)
        newer_gone = bool(((d == GONE) & (take < older)).any())
    if exclude is not None and len(p):
        keep = np.ones(len(p), dtype=bool)
        for prefix, rest in zip(_prefix(exclude).tolist(), _rest(exclude), strict=True):
            keep &= ~((p == np.uint64(prefix)) & (r == rest))
        p, r, d = p[keep], r[keep], d[keep]
    return _Range(p, np.ascontiguousarray(r), d, newer_gone)


class _Plan(NamedTuple):
    edges: np.ndarray  # per range boundary (the last: the end), per source: its first position there
    n: int  # entries the output holds
    drop: bool  # GONE entries are dropped
    only: _Range | None  # the merge itself, when it is one range (not done twice)


def _positions(sources: list[Source]) -> np.ndarray:
    """For each range boundary of the hash space, each source's first position at or above it (ranges
    of about RANGE_KEYS entries in all; the last boundary is the end). The searches' pages are released
    every few boundaries: a touch of a mapped file may map up to 2 MiB around it (a large folio)."""
    total = sum(len(s.keys.prefix) for s in sources)
    count = max(1, -(-total // RANGE_KEYS))
    cuts = np.array([(i << 64) // count for i in range(1, count)], dtype=np.uint64)
    out = np.empty((count + 1, len(sources)), dtype=np.int64)
    out[0], out[count] = 0, [len(s.keys.prefix) for s in sources]
    for j, s in enumerate(sources):
        for lo in range(0, len(cuts), 16):
            part = cuts[lo:lo + 16]
            out[1 + lo:1 + lo + len(part), j] = np.searchsorted(s.keys.prefix, part)
            if s.mapped is not None:
                s.mapped.madvise(mmap.MADV_DONTNEED)
    return out


def _ranges(sources: list[Source], edges: np.ndarray, exclude: np.ndarray | None) -> Iterator[_Range]:
    keys = [s.keys for s in sources]
    for lo, hi in zip(edges[:-1], edges[1:], strict=True):
        merged = _merge_range(keys, lo, hi, exclude)
        for s in sources:  # the range's pages leave our resident set (the inputs may be whole bases)
            if s.mapped is not None:
                s.mapped.madvise(mmap.MADV_DONTNEED)
        yield merged


def _plan(sources: list[Source], gone: Gone, exclude: np.ndarray | None) -> _Plan:
    """One pass over the inputs: the output's size (the file's layout depends on it) and whether GONE
    entries go."""
    edges = _positions(sources)
    every = alive = 0
    newer_gone = False
    last: _Range | None = None
    for merged in _ranges(sources, edges, exclude):
        every += len(merged.prefix)
        alive += int((merged.day != GONE).sum())
        newer_gone |= merged.newer_gone
        last = merged
    drop = gone == "drop" or (gone == "fold" and newer_gone)
    return _Plan(edges, alive if drop else every, drop, last if len(edges) == 2 else None)


def _write(out: BinaryIO, sources: list[Source], plan: _Plan, exclude: np.ndarray | None) -> None:
    """The file `_encode` writes for the merged run, through `out` (seekable), a range at a time: the
    prefixes and records go to their places as each range is merged; the fence (8 bytes per FENCE_EVERY
    entries) is held until the end; the filter is written as its words are complete."""
    at = Layout.of(plan.n)
    fence = np.zeros(at.blocks, dtype=PREFIX)
    out.write(at.head())
    done = 0
    carry = (-1, np.uint64(0))  # the last filter word of the previous range (the next may add to it)
    merged_ranges = [plan.only] if plan.only is not None else _ranges(sources, plan.edges, exclude)
    for merged in merged_ranges:
        p, r, d = merged.prefix, merged.rest, merged.day
        if plan.drop:
            alive = d != GONE
            p, r, d = p[alive], r[alive], d[alive]
        m = len(p)
        if not m:
            continue
        out.seek(at.prefix_at + PREFIX.itemsize * done)
        out.write(p.astype(PREFIX, copy=False).data)
        records = np.empty(m, dtype=RECORD)
        records["rest"], records["day"] = r, d
        out.seek(at.record_at + RECORD.itemsize * done)
        out.write(records.data)
        start = -(-done // FENCE_EVERY) * FENCE_EVERY  # the first fence entry in this range
        fence[start // FENCE_EVERY:(done + m + FENCE_EVERY - 1) // FENCE_EVERY] = p[start - done::FENCE_EVERY]
        index, value = _filter_words(p, r, at.words)
        if index[0] == carry[0]:
            value[0] |= carry[1]
        elif carry[0] >= 0:
            _put_words(out, at, carry[0], np.array([carry[1]], dtype=np.uint64))
        block = np.zeros(int(index[-1] - index[0]), dtype=np.uint64)  # words up to the last (it may grow)
        block[index[:-1] - index[0]] = value[:-1]
        _put_words(out, at, int(index[0]), block)
        carry = (int(index[-1]), value[-1])
        done += m
    if carry[0] >= 0:
        _put_words(out, at, carry[0], np.array([carry[1]], dtype=np.uint64))
    out.seek(HEADER)
    out.write(fence.data)
    if done != at.n:
        raise AssertionError(f"key index merge wrote {done} entries of {at.n}")


def _put_words(out: BinaryIO, at: Layout, index: int, words: np.ndarray) -> None:
    if len(words):
        out.seek(at.filter_at + PREFIX.itemsize * index)
        out.write(words.astype(PREFIX, copy=False).data)


def merged_body(sources: list[Source]) -> Callable[[BinaryIO], None]:
    """What writes the merge of `sources` that hold no hash in two (sorted runs of one fold), to a seekable
    file: every entry kept, so the size is their sum and one pass writes it (the write checks the count)."""
    plan = _Plan(_positions(sources), sum(len(s.keys.prefix) for s in sources), False, None)

    def body(out: BinaryIO) -> None:
        _write(out, sources, plan, None)

    return body


def write_merged(storage: Storage, rel: str, sources: list[Source], *, gone: Gone = "keep",
                 exclude: np.ndarray | None = None, replace: bool = False, disjoint: bool = False) -> bool:
    """Write the merge of `sources` (newest first), without the hashes of `exclude`, to `rel`: create-only
    (False when it exists), or with `replace` in place of the file there. Two passes over the inputs, a
    range at a time: the first sizes the output, the second writes it. `disjoint`: no hash is in two
    sources, so the output holds every entry (GONE ones kept) and its size is known without the first
    pass (a file in parts' runs, one per group of its fold: 0.8 s of the 20M-event file's 2.5 s record);
    the write checks that count."""
    if disjoint and gone == "keep" and exclude is None:
        body = merged_body(sources)
    else:
        body = functools.partial(_write, sources=sources, plan=_plan(sources, gone, exclude), exclude=exclude)
    if replace:
        storage.write_bytes(rel, body)
        return True
    return storage.write_once(rel, body)
