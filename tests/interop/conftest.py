"""What every engine must read the same: the current rows' SQL and a multiset comparison of frames."""

from __future__ import annotations

import polars as pl
from polars.testing import assert_frame_equal

CURRENT_SQL = {
    "orders": "SELECT order_id, amount_cents, currency, event_day, position FROM t WHERE NOT deleted",
    "telemetry": "SELECT sensor_id, ts_ms, reading, hour FROM t",
}


def normalize(frame: pl.DataFrame, like: pl.DataFrame) -> pl.DataFrame:
    """`frame` in `like`'s column order and types, rows sorted: a multiset comparison of rows."""
    frame = frame.select(like.columns).cast(dict(like.schema))
    return frame.sort(frame.columns, nulls_last=True)


def assert_same_rows(found: pl.DataFrame, reference: pl.DataFrame) -> None:
    assert sorted(found.columns) == sorted(reference.columns)
    assert found.height == reference.height
    assert_frame_equal(normalize(found, reference), normalize(reference, reference))
