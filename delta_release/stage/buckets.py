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

import polars as pl

BUCKET_COLUMN = "__bucket"  # added in memory only, dropped before a file is written
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


def bucket_of_keys(keys: Iterable[str], buckets: int, hasher: Hasher) -> list[int]:
    """Bucket of each key (in order)."""
    return [int(hasher(k)[-8:], 16) % buckets for k in keys]


def with_buckets(frame: pl.DataFrame, key: str, buckets: int, hasher: Hasher) -> pl.DataFrame:
    """`frame` with its rows' bucket in BUCKET_COLUMN (computed once per distinct key)."""
    if BUCKET_COLUMN in frame.columns:
        return frame
    if frame.height == 0:
        return frame.with_columns(pl.lit(None, dtype=pl.Int32).alias(BUCKET_COLUMN))
    keys = frame[key].unique()
    out: list[pl.Series] = []
    for start in range(0, len(keys), HASH_CHUNK):  # a chunk of Python strings at a time, not the whole batch
        chunk = keys.slice(start, HASH_CHUNK).to_list()
        out.append(pl.Series(bucket_of_keys(chunk, buckets, hasher), dtype=pl.Int32))
    mapping = pl.DataFrame({key: keys, BUCKET_COLUMN: pl.concat(out)})
    return frame.join(mapping, on=key, how="left", maintain_order="left")
