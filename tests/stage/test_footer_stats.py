"""Stats read from a parquet footer equal stats computed from the data (the manifest gate relies on it)."""

from __future__ import annotations

import io
import json

import pyarrow as pa
import pyarrow.parquet as pq
from hypothesis import given, settings
from hypothesis import strategies as st

from delta_release.stage.candidate import encode_parquet, file_stats, footer_stats


@settings(max_examples=40, deadline=None)
@given(rows=st.lists(st.tuples(st.one_of(st.none(), st.text(max_size=5)),
                               st.one_of(st.none(), st.integers(-(2**40), 2**40)),
                               st.one_of(st.none(), st.floats(allow_nan=False, width=64))), max_size=20000))
def test_footer_stats_equal_data_stats(rows) -> None:  # type: ignore[no-untyped-def]
    table = pa.table({"sensor_id": [r[0] for r in rows], "ts_ms": [r[1] for r in rows],
                      "reading": [r[2] for r in rows]},
                     schema=pa.schema([("sensor_id", pa.string()), ("ts_ms", pa.int64()), ("reading", pa.float64())]))
    meta = pq.read_metadata(io.BytesIO(encode_parquet(table)))
    got = footer_stats(meta)
    assert got is not None
    assert json.loads(got) == json.loads(file_stats(table))  # parsed: parquet stores -0.0 as 0.0, equal values
