"""Buckets within a partition: the files of a day are split by a keyed hash of the key, so a batch
rewrites only the (day, bucket) files that hold its keys.

The bucket of a key is derived from the key index's keyed hash (HMAC-SHA256 under the lake secret,
`ErasureLedger.subject_key`), never from plain key values, so neither the bucket nor the file name says
anything about which ids a file holds. The bucket lives in the file NAME
(`event_day=47/part-b07of08-<candidate>-<n>.parquet`) and in the file evidence (`bucket: "b07of08"`), not
in the Delta schema: readers (Polars, DuckDB, Spark) see the same columns as before. The count is part of
the tag, so a file written under another bucket count, or with no tag at all (lakes written before
buckets, files a rollback re-adds from such a version), counts as holding every bucket of its day: the
first batch that touches that day reads it whole and splits it into bucket files.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass

import numpy as np
import polars as pl
import pyarrow as pa

BUCKET_COLUMN = "__bucket"  # added in memory only, dropped before a file is written
HASH_COLUMN = "__hash"  # the keyed hash of the key (32 bytes), in memory only
_TAG = re.compile(r"^part-b(\d{2,})of(\d{2,})-")

HASH_CHUNK = 100_000
Hasher = Callable[[str], str]


def tag(bucket: int, buckets: int) -> str:
    return f"b{bucket:02d}of{buckets:02d}"


def bucket_of_path(path: str, buckets: int | None) -> int | None:
    """The bucket a file's name carries under a table of `buckets` buckets; None: untagged (or tagged
    under another count), i.e. it may hold any bucket of its day."""
    if not buckets:
        return None
    m = _TAG.match(path.rsplit("/", 1)[-1])
    if m is None or int(m.group(2)) != buckets:
        return None
    return int(m.group(1))


def bucket_of_hash(h: str, buckets: int) -> int:
    return int(h[-8:], 16) % buckets


def digests(keys: list[str] | pl.Series, hasher: Hasher) -> bytes:
    """The 32-byte keyed hash of each key, concatenated in order. A hasher bound to an object with a bulk
    `subject_digests` (the erasure ledger) hashes all at once (a Polars column in Rust where it can); any
    other is called per key."""
    bulk = getattr(getattr(hasher, "__self__", None), "subject_digests", None)
    if bulk is not None:
        return bytes(bulk(keys))
    return b"".join(bytes.fromhex(hasher(k)) for k in (keys.to_list() if isinstance(keys, pl.Series) else keys))


def buckets_of_digests(raw: bytes | np.ndarray, buckets: int) -> np.ndarray:
    """The bucket of each 32-byte hash in `raw` (bytes, or S32 items; int32): its last 4 bytes, big-endian,
    mod `buckets` (the same as `bucket_of_hash` on its hex form)."""
    tail = np.frombuffer(raw, dtype=">u4").reshape(-1, 8)[:, 7]
    return (tail % buckets).astype(np.int32)


def groups_of(hashes: np.ndarray, buckets: int, groups: int) -> np.ndarray:
    """The group of each keyed hash (S32 items) when a table of `buckets` buckets is planned in `groups`
    groups (int32). At most `buckets` groups: a group of whole buckets, the bucket % `groups`. More (a
    multiple of `buckets`): each bucket split in `groups // buckets` sub-groups, on a word of the hash the
    bucket does not use: bucket + buckets x (the hash's 7th big-endian 4-byte word % sub-groups), so
    group g holds keys of bucket g % `buckets` only."""
    words = np.ascontiguousarray(hashes).view(">u4").reshape(-1, 8)
    bucket = words[:, 7] % buckets
    group: np.ndarray = bucket % groups if groups <= buckets else bucket + buckets * (words[:, 6] % (groups // buckets))
    return group.astype(np.int32)


def bucket_of_keys(keys: Iterable[str], buckets: int, hasher: Hasher) -> list[int]:
    """Bucket of each key (in order)."""
    return [int(b) for b in buckets_of_digests(digests(list(keys), hasher), buckets)]


def digest_array(keys: pl.Series, hasher: Hasher) -> np.ndarray:
    """The keyed hash of every value of `keys`, in order (a repeated key hashed again: on a file's part,
    whose keys rarely repeat, cheaper than `keyed`'s distinct keys joined back, 0.45 s of 1.5 s per 2M
    events), as S32 items, a chunk at a time."""
    raw = _chunked_digests(keys, hasher)
    return np.frombuffer(raw, dtype="S32") if raw else np.zeros(0, dtype="S32")


def _chunked_digests(keys: pl.Series, hasher: Hasher) -> bytes:
    """`digests` of `keys`, HASH_CHUNK keys at a time (a bounded intermediate), concatenated in order."""
    return b"".join(digests(keys.slice(start, HASH_CHUNK), hasher) for start in range(0, len(keys), HASH_CHUNK))


def keyed(keys: pl.Series, buckets: int, hasher: Hasher, *, distinct: bool = False) -> pl.DataFrame:
    """Distinct `keys` with their keyed hash (HASH_COLUMN, 32 bytes) and bucket (BUCKET_COLUMN): each key
    hashed once, a chunk at a time. `distinct`: the caller's keys are distinct already;
    the rows are then in their order."""
    if not distinct:
        keys = keys.unique()
    joined = _chunked_digests(keys, hasher)
    return pl.DataFrame({keys.name: keys, HASH_COLUMN: hash_series(joined, len(keys)),
                         BUCKET_COLUMN: pl.Series(BUCKET_COLUMN, buckets_of_digests(joined, buckets))})


def hash_series(joined: bytes, count: int) -> pl.Series:
    """`count` 32-byte hashes, concatenated in `joined`, as a HASH_COLUMN series."""
    hashes = pa.FixedSizeBinaryArray.from_buffers(pa.binary(32), count, [None, pa.py_buffer(joined)])
    return pl.Series(HASH_COLUMN, hashes.cast(pa.binary()), dtype=pl.Binary)


@dataclass(frozen=True, slots=True)
class KnownDigests:
    """Keyed hashes computed before, by event line: the map of a file in parts (parts.py) hashes every
    event's key to find its group, and the fold of the group looks its winners' hashes up by their line
    instead of hashing them again (18.2M of the 20M-event backfill's keys, about 0.5 us a key with the
    hex round trip of the Rust HMAC). `lines` ascending and distinct, `hashes` (S32) aligned with them."""

    lines: np.ndarray
    hashes: np.ndarray

    @classmethod
    def of(cls, lines: np.ndarray, hashes: np.ndarray) -> KnownDigests:
        """From lines in any order (several groups planned as one interleave their parts' lines)."""
        if len(lines) != len(hashes):
            raise ValueError(f"known digests: {len(hashes)} hashes for {len(lines)} lines")
        if len(lines) > 1 and not (lines[1:] > lines[:-1]).all():
            order = np.argsort(lines, kind="stable")
            lines, hashes = lines[order], hashes[order]
        return cls(lines, hashes)

    def lookup(self, lines: pl.Series, keys: pl.Series, hasher: Hasher) -> np.ndarray:
        """The hash of each of `keys` (the event at the same place of `lines` holds it), in order (S32):
        looked up by line; a key whose line is null or not known hashed now (the fold keeps every winner's
        line, the sequence fold's too: none of the 20M-event backfill's)."""
        at = lines.fill_null(-1).to_numpy()
        if not len(self.lines):
            return digest_array(keys, hasher)
        idx = np.searchsorted(self.lines, at).clip(0, len(self.lines) - 1)
        out = take_hashes(self.hashes, idx)
        missing = np.flatnonzero(self.lines[idx] != at)
        if len(missing):
            out[missing] = digest_array(keys.gather(missing), hasher)
        return out


def take_hashes(hashes: np.ndarray, idx: np.ndarray) -> np.ndarray:
    """`hashes[idx]` (S32 items): taken as rows of four 64-bit words, which numpy copies whole (an S32
    fancy index copies item by item: 51 against 26 ms per 1.8M)."""
    if not len(hashes):
        empty: np.ndarray = hashes[idx]
        return empty
    words = np.ascontiguousarray(hashes).view(np.uint64).reshape(-1, 4)
    taken: np.ndarray = np.take(words, idx, axis=0).view("S32").reshape(-1)
    return taken


def hash_array(hashes: pl.Series) -> np.ndarray:
    """A HASH_COLUMN series as a numpy array of 32-byte items (S32), without a per-row Python object."""
    arr = hashes.to_arrow().cast(pa.binary(32))
    if not len(arr):
        return np.zeros(0, dtype="S32")
    return np.frombuffer(arr.buffers()[1], dtype="S32", count=len(arr), offset=32 * arr.offset)


def with_buckets(frame: pl.DataFrame, key: str, buckets: int, hasher: Hasher) -> pl.DataFrame:
    """`frame` with its rows' bucket in BUCKET_COLUMN (computed once per distinct key)."""
    if BUCKET_COLUMN in frame.columns:
        return frame
    if frame.height == 0:
        return frame.with_columns(pl.lit(None, dtype=pl.Int32).alias(BUCKET_COLUMN))
    mapping = keyed(frame[key], buckets, hasher).drop(HASH_COLUMN)
    return frame.join(mapping, on=key, how="left", maintain_order="left")
