"""Rows of a parent version for `plan_apply`, read from the files of the partitions asked for only.

Whole partitions come from the parent snapshot's file list (the cached, incrementally updated handle),
read together with pyarrow's threads. "Where do these orders live outside the partitions I read?" is
answered by the key index (`delta_release.index.keys`), so no other partition is scanned; without the
index (DELTA_RELEASE_NO_INDEX=1) it falls back to a scan of the key column of the whole version.
"""

from __future__ import annotations

from typing import Any

import polars as pl
import pyarrow as pa
import pyarrow.dataset as ds

from .. import _delta, index
from ..context import TableContext
from .fold import ROW_COLUMNS, ROW_SCHEMA, ReadRows, read_rows_from


def read_partitions(ctx: TableContext, parent: int, days: list[Any]) -> pl.DataFrame:
    """Every row (tombstones included) of the partitions `days` at `parent`."""
    column = ctx.table.partition
    if not days:
        return pl.DataFrame(schema=ROW_SCHEMA)
    entries = _delta.partition_entries(ctx.uri, ctx.storage_options, parent, column,
                                       [None if d is None else str(d) for d in days])
    if not entries:
        return pl.DataFrame(schema=ROW_SCHEMA)
    storage = ctx.storage
    base = storage.full_path("")
    dataset = ds.dataset([storage.full_path(e.path) for e in entries], filesystem=storage.fs, format="parquet",
                         partitioning=ds.partitioning(pa.schema([(column, pa.int32())]), flavor="hive"),
                         partition_base_dir=base)
    frame = pl.from_arrow(dataset.to_table())
    assert isinstance(frame, pl.DataFrame)
    return frame.select(ROW_COLUMNS).cast(ROW_SCHEMA)  # type: ignore[arg-type]


def parent_reader(ctx: TableContext, parent: int) -> ReadRows:
    keys_index = index.key_index(ctx)
    fallback: ReadRows | None = None

    def scan() -> ReadRows:
        nonlocal fallback
        if fallback is None:
            fallback = read_rows_from(_delta.scan(ctx.uri, ctx.storage_options, parent))
        return fallback

    def read(*, days: list[Any] | None = None, keys: list[str] | None = None,
             exclude_days: list[Any] | None = None) -> pl.DataFrame:
        if keys is None:
            if days is None:
                return scan()(days=days)
            return read_partitions(ctx, parent, days)
        if keys_index is None:
            return scan()(days=days, keys=keys, exclude_days=exclude_days)
        where = keys_index.locate(keys, upto=parent)
        excluded = set(exclude_days or [])
        wanted = sorted({d for d in where.values() if d not in excluded and (days is None or d in days)},
                        key=lambda d: (d is None, d or 0))
        rows = read_partitions(ctx, parent, wanted)
        return rows.filter(pl.col("order_id").is_in(pl.Series(keys, dtype=pl.String).implode()))

    return read
