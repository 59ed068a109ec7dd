"""Stage a candidate: new immutable parquet files under `<partition>=<value>/`, with their evidence.

Files are written with plain Arrow types (no string_view), sorted by key, in row groups small enough
that a key lookup skips most of a partition, and never one file per order. The evidence recorded for each
file (path, size, sha256, rows, min/max partition value, distinct keys, column stats) is what the gate
checks and what the commit's metadata keeps. Subject ids are never part of the evidence or the stats.
"""

from __future__ import annotations

import functools
import hashlib
import json
import uuid
from collections.abc import Iterable, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import polars as pl
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from .._delta import FileAdd, FileEntry
from ..evidence import FileRecord
from ..faults import crash_point
from ..storage import Storage
from .buckets import BUCKET_COLUMN, Hasher, tag, with_buckets

NULL_PARTITION = "__HIVE_DEFAULT_PARTITION__"
ROWS_PER_FILE = 1_000_000
ROW_GROUP_ROWS = 8_192
STAGE_THREADS = 4  # files of one group staged at once (encode, sha256 and the write release the GIL)
# Columns whose min/max go into the Delta log. Key columns (subject ids) never do.
STATS_COLUMNS = ("position", "amount_cents", "currency", "ts_ms", "reading", "sensor_id")
# Columns dictionary-encoded: the few-valued ones. A dictionary over unique values (order ids, positions,
# amounts) only costs: on the bench's 1,700-row bucket files, all-column dictionaries took 39 ms to encode
# 40 files into 33.7 kB each, this list 28 ms into 26.5 kB (pyarrow falls back to plain pages anyway).
DICTIONARY_COLUMNS = ("currency", "sensor_id")


def partition_dir(column: str, value: Any) -> str:
    return f"{column}={NULL_PARTITION if value is None else value}"


@dataclass(frozen=True, slots=True, kw_only=True)
class FileEvidence:
    path: str
    size: int
    sha256: str
    rows: int
    partition: dict[str, Any]
    min_partition: Any
    max_partition: Any
    distinct_keys: int | None
    stats: str  # the Delta stats JSON committed with the add action
    modification_time: int
    bucket: str | None = None  # "bNNofMM" when the file holds one bucket of its partition (stage/buckets.py)

    def to_add(self) -> FileAdd:
        return FileAdd(path=self.path, size=self.size,
                       partition_values={k: None if v is None else str(v) for k, v in self.partition.items()},
                       stats=self.stats, modification_time=self.modification_time)

    def record(self) -> FileRecord:
        """The file's entry in the commit evidence."""
        return FileRecord(path=self.path, size=self.size, sha256=self.sha256, rows=self.rows,
                          partition=dict(self.partition), min_partition=self.min_partition,
                          max_partition=self.max_partition, distinct_keys=self.distinct_keys,
                          bucket=self.bucket)

    def public(self) -> dict[str, Any]:
        return self.record().to_json()


@dataclass(slots=True, kw_only=True)
class Candidate:
    candidate_id: str
    table: str
    parent: int
    batch_ids: list[str]
    files: list[FileEvidence]
    removes: list[FileEntry]  # of the parent version


def stats_json(rows: int, mins: dict[str, Any], maxs: dict[str, Any], nulls: dict[str, int]) -> str:
    return json.dumps({"numRecords": rows, "minValues": mins, "maxValues": maxs, "nullCount": nulls},
                      sort_keys=True)


def file_stats(table: pa.Table, columns: list[str] | None = None) -> str:
    """Delta stats JSON: numRecords, min/max for non-key columns, nullCount for all."""
    mins: dict[str, Any] = {}
    maxs: dict[str, Any] = {}
    nulls: dict[str, int] = {}
    for name in columns or table.column_names:
        col = table[name]
        nulls[name] = col.null_count
        if name in STATS_COLUMNS and col.null_count < len(col):
            mm = pc.min_max(col).as_py()
            mins[name], maxs[name] = mm["min"], mm["max"]
    return stats_json(table.num_rows, mins, maxs, nulls)


def _summable(dtype: pl.DataType, field: pa.Field) -> bool:
    """Polars' min/max of a column of `dtype` equal pc.min_max of it cast to `field` (integers; strings,
    compared by their UTF-8 bytes in both). Floats (NaN, -0.0) and other types are left to file_stats."""
    if dtype.is_integer():
        return bool(pa.types.is_integer(field.type))
    return dtype == pl.String and bool(pa.types.is_string(field.type) or pa.types.is_large_string(field.type))


def _bucket_summary(split: pl.DataFrame, key: str, file_schema: pa.Schema) -> tuple[pl.DataFrame, bool]:
    """Per bucket of `split` (in its order): rows (`len`), distinct keys, and, when every stats column can
    be summed here (`_summable`: the bool), each column's null count and the stats columns' min/max: one
    Polars query over the day instead of an Arrow pass per file (file_stats gives the same JSON)."""
    names = file_schema.names
    stats_cols = [n for n in names if n in STATS_COLUMNS]
    schema = split.schema
    with_stats = (all(n in schema for n in names)  # else the cast to the file schema fails (as it did)
                  and all(_summable(schema[n], file_schema.field(n)) for n in stats_cols))
    exprs = [pl.len(), pl.col(key).n_unique().alias("\0keys")]
    if with_stats:
        exprs += [pl.col(n).null_count().alias(f"\0nulls\0{n}") for n in names]
        exprs += [e for n in stats_cols
                  for e in (pl.col(n).min().alias(f"\0min\0{n}"), pl.col(n).max().alias(f"\0max\0{n}"))]
    return split.group_by(BUCKET_COLUMN, maintain_order=True).agg(exprs), with_stats


def _summary_stats(row: dict[str, Any], names: list[str]) -> str:
    """The Delta stats JSON of one bucket's file from its `_bucket_summary` row."""
    rows = row["len"]
    nulls = {n: row[f"\0nulls\0{n}"] for n in names}
    mins = {n: row[f"\0min\0{n}"] for n in names if n in STATS_COLUMNS and nulls[n] < rows}
    maxs = {n: row[f"\0max\0{n}"] for n in mins}
    return stats_json(rows, mins, maxs, nulls)


def footer_stats(meta: pq.FileMetaData) -> str | None:
    """`file_stats` from a parquet footer's row-group statistics, without reading the data; None when a
    row group lacks statistics (the caller then reads the table)."""
    schema = meta.schema.to_arrow_schema()
    mins: dict[str, Any] = {}
    maxs: dict[str, Any] = {}
    nulls: dict[str, int] = {}
    for i, name in enumerate(schema.names):
        nulls[name] = 0
        lo: Any = None
        hi: Any = None
        for g in range(meta.num_row_groups):
            if meta.row_group(g).num_rows == 0:
                continue
            st = meta.row_group(g).column(i).statistics
            if st is None or not st.has_null_count:
                return None
            nulls[name] += st.null_count
            if name in STATS_COLUMNS and meta.row_group(g).num_rows > st.null_count:
                if not st.has_min_max:
                    return None
                lo = st.min if lo is None else min(lo, st.min)
                hi = st.max if hi is None else max(hi, st.max)
        if lo is not None:
            mins[name], maxs[name] = lo, hi
    return stats_json(meta.num_rows, mins, maxs, nulls)


def encode_parquet(table: pa.Table) -> bytes:
    """The file's bytes: the same as pq.write_table's (it opens this writer), into an Arrow buffer rather
    than a BytesIO, whose writes go through Python under the GIL (staging encodes on 4 threads)."""
    schema = table.schema
    names = schema.names
    sink = pa.BufferOutputStream()
    with pq.ParquetWriter(sink, schema, compression="snappy", write_statistics=True,
                          use_dictionary=[c for c in DICTIONARY_COLUMNS if c in names]) as writer:
        writer.write_table(table, row_group_size=ROW_GROUP_ROWS)
    data: bytes = sink.getvalue().to_pybytes()
    return data


def stage_file(storage: Storage, *, rel_path: str, table: pa.Table, partition: dict[str, Any],
               key: str | None, now_ms: int, bucket: str | None = None, stats: str | None = None,
               distinct_keys: int | None = None) -> FileEvidence:
    """Write one file, not yet durable (`stage_partitions` syncs the candidate's files at once). `stats` /
    `distinct_keys`: known already (a bucket's summary); else computed here."""
    data = encode_parquet(table)
    if not storage.write_once(rel_path, data, durable=False):  # a uuid name is never reused; refuse if it is
        raise FileExistsError(rel_path)
    (pcol, pval), = partition.items()
    return FileEvidence(
        path=rel_path, size=len(data), sha256=hashlib.sha256(data).hexdigest(), rows=table.num_rows,
        partition=partition, min_partition=pval, max_partition=pval,
        distinct_keys=(distinct_keys if distinct_keys is not None else len(pc.unique(table[key])) if key else None),
        stats=stats if stats is not None else file_stats(table),
        modification_time=now_ms, bucket=bucket)


Groups = Mapping[Any, pl.DataFrame] | Iterable[tuple[Any, pl.DataFrame]]


def _bucket_pieces(frame: pl.DataFrame, key: str, buckets: int, hasher: Hasher, partition_column: str,
                   file_schema: pa.Schema) -> list[tuple[str | None, pa.Table, dict[str, Any]]]:
    """A group's rows split by bucket: (bucket tag, rows, what is known of them: for a bucket that fits in
    one file, its distinct keys and, when the summary has them, its stats)."""
    # By key, then stably by bucket: Polars sorts one string column much faster than the pair
    # (bucket, key), whose ties it breaks by a generic compare, and a group's ~20k rows sort
    # faster on one thread than on a pool that the encoding threads are using.
    split = (with_buckets(frame, key, buckets, hasher).sort(key, multithreaded=False)
             .sort(BUCKET_COLUMN, maintain_order=True, multithreaded=False))
    summary, with_stats = _bucket_summary(split.drop(partition_column), key, file_schema)
    data = split.drop(partition_column, BUCKET_COLUMN).to_arrow().cast(file_schema)
    pieces: list[tuple[str | None, pa.Table, dict[str, Any]]] = []
    offset = 0
    for row in summary.iter_rows(named=True):
        count = row["len"]
        known: dict[str, Any] = {}
        if count <= ROWS_PER_FILE:  # one file: its stats and distinct keys are the bucket's
            known["distinct_keys"] = row["\0keys"]
            if with_stats:
                known["stats"] = _summary_stats(row, file_schema.names)
        pieces.append((tag(row[BUCKET_COLUMN], buckets), data.slice(offset, count), known))
        offset += count
    return pieces


def stage_partitions(storage: Storage, *, table: str, parent: int, batch_ids: list[str],
                     partition_column: str, key: str | None, file_schema: pa.Schema,
                     partitions: Groups, removes: list[FileEntry], now_ms: int,
                     buckets: int | None = None, hasher: Hasher | None = None) -> Candidate:
    """Write every partition's new content as fresh files; nothing is visible until the commit.

    `partitions` is a mapping value -> rows or an iterable of (value, rows) pairs, consumed one at a time
    (a caller that computes groups lazily holds one group in memory). With `buckets` each value's rows
    are split by the keyed hash of the key (stage/buckets.py) into `part-bNNofMM-...` files. If anything
    fails, the files written here are removed before the error propagates."""
    candidate_id = uuid.uuid4().hex[:20]
    files: list[FileEvidence] = []
    jobs: list[Future[FileEvidence]] = []  # the files of the groups in flight, in name order
    groups = partitions.items() if isinstance(partitions, Mapping) else partitions
    pool = ThreadPoolExecutor(max_workers=STAGE_THREADS, thread_name_prefix="stage")
    try:
        for value, frame in groups:
            pieces: list[tuple[str | None, pa.Table, dict[str, Any]]]  # (bucket, rows, what is known of them)
            if buckets and key:  # one sort by (bucket, key) and one Arrow conversion per group, then slices
                assert hasher is not None, "bucketed staging needs the keyed hasher"
                pieces = _bucket_pieces(frame, key, buckets, hasher, partition_column, file_schema)
            else:
                rows = frame.drop(partition_column, BUCKET_COLUMN, strict=False)
                pieces = [(None, rows.to_arrow().cast(file_schema), {})]
            del frame
            # The group's files are encoded, hashed and written on threads (all release the GIL)
            # while this thread builds the next group; before a third group is built, the first one's
            # files are done, so at most two groups are in memory. The candidate's very first file is
            # staged alone (the crash point after it sees exactly one).
            previous = len(jobs)
            data: pa.Table | None = None  # (a group of no rows has no pieces)
            for bucket, data, known in pieces:
                for start in range(0, data.num_rows, ROWS_PER_FILE):
                    name = f"part-{bucket}-{candidate_id}" if bucket else f"part-{candidate_id}"
                    rel = f"{partition_dir(partition_column, value)}/{name}-{len(files) + len(jobs):04d}.parquet"
                    job = functools.partial(stage_file, storage, rel_path=rel, table=data.slice(start, ROWS_PER_FILE),
                                            partition={partition_column: value}, key=key, now_ms=now_ms,
                                            bucket=bucket, **known)
                    if files or jobs:
                        jobs.append(pool.submit(job))
                    else:
                        files.append(job())
                        crash_point("stage.after_first_file")
            del pieces, data
            for future in jobs[:previous]:
                files.append(future.result())
            jobs = jobs[previous:]
        for future in jobs:
            files.append(future.result())
        jobs = []
        # Every file written, none known durable: each file and each partition folder is fsynced once
        # here, before the candidate goes to the gate and the commit (Storage.sync; docs/architecture.md,
        # decision 12).
        crash_point("stage.before_sync")
        storage.sync([f.path for f in files])
    except BaseException:
        for future in jobs:  # the groups' other files: wait for them, then remove what they wrote
            try:
                staged = future.result()
            except BaseException:  # noqa: BLE001,S112 - the first error is the one raised
                continue
            if staged not in files:
                files.append(staged)
        for f in files:
            storage.delete(f.path)
        raise
    finally:
        pool.shutdown(wait=True)
    return Candidate(candidate_id=candidate_id, table=table, parent=parent, batch_ids=batch_ids,
                     files=files, removes=removes)
