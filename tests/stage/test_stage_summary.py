"""Bucketed staging takes each file's Delta stats and distinct-key count from one per-bucket summary of the
day instead of recomputing them per file: the evidence must equal what file_stats and pc.unique give on
the file as written, for nulls, a column null in a whole bucket, negative and large integers, strings
whose order is by their bytes, repeated keys, a float stats column (left to file_stats) and a bucket
split over several files."""

from __future__ import annotations

import io
from pathlib import Path

import polars as pl
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

import delta_release.stage.candidate as cand_mod
from delta_release.erasure.ledger import ErasureLedger
from delta_release.storage import Storage

SCHEMA = pa.schema([("order_id", pa.string()), ("position", pa.int64()), ("amount_cents", pa.int64()),
                    ("currency", pa.string()), ("deleted", pa.bool_())])
WORDS = ["EUR", "Zz", "zz", "é", "e\u0301", "\U0001f600", "", "USD"]


def _day(day: int, n: int) -> pl.DataFrame:
    keys = [f"o{day}-{i % (n - 7)}" for i in range(n)]  # 7 keys twice: distinct keys < rows
    return pl.DataFrame({
        "order_id": keys,
        "position": [(-1) ** i * (i * 7_919 + 2**62 // (i + 1)) for i in range(n)],
        "amount_cents": [None if i % 5 == 0 else i - n // 2 for i in range(n)],
        "currency": [None if i % 3 == 0 else WORDS[i % len(WORDS)] for i in range(n)],
        "deleted": [None if i % 4 == 0 else i % 2 == 0 for i in range(n)],
        "event_day": [day] * n}, schema_overrides={"event_day": pl.Int32})


def _stage(root: Path, groups: list[tuple[int, pl.DataFrame]], schema: pa.Schema) -> tuple[Storage, list]:
    storage = Storage(str(root))
    candidate = cand_mod.stage_partitions(storage, table="orders", parent=0, batch_ids=["b"],
                                          partition_column="event_day", key="order_id", file_schema=schema,
                                          partitions=groups, removes=[], now_ms=0, buckets=4,
                                          hasher=ErasureLedger(storage, b"k").subject_key)
    return storage, candidate.files


def _check(storage: Storage, files: list) -> None:
    assert files
    for f in files:
        table = pq.read_table(io.BytesIO(storage.read_bytes(f.path)))
        assert f.rows == table.num_rows
        assert f.stats == cand_mod.file_stats(table)
        assert f.distinct_keys == len(pc.unique(table["order_id"]))


def test_summary_evidence_equals_per_file_stats(tmp_path: Path) -> None:
    groups = [(1, _day(1, 300)), (2, _day(2, 41))]
    # a bucket where amount_cents is null throughout: no min/max for it in that file
    groups.append((3, _day(3, 30).with_columns(pl.lit(None, dtype=pl.Int64).alias("amount_cents"))))
    storage, files = _stage(tmp_path, groups, SCHEMA)
    _check(storage, files)
    assert any(f.distinct_keys < f.rows for f in files)
    assert any('"amount_cents"' not in f.stats.split('"minValues"')[1].split("}")[0] for f in files)


def test_float_stats_column_falls_back(tmp_path: Path) -> None:
    # Polars and Arrow differ on min/max over 0.0 and -0.0 (one keeps the first, the other the last)
    schema = SCHEMA.append(pa.field("reading", pa.float64()))
    frame = _day(1, 300).with_columns(
        pl.Series("reading", [float("nan") if i % 11 == 0 else None if i % 13 == 0 else 0.0 if i % 2 else -0.0
                              for i in range(300)])).select([*schema.names, "event_day"])
    storage, files = _stage(tmp_path, [(1, frame)], schema)
    _check(storage, files)


def test_a_bucket_split_over_files_gets_per_file_evidence(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cand_mod, "ROWS_PER_FILE", 20)  # every bucket of the 300-row day spans several files
    storage, files = _stage(tmp_path, [(1, _day(1, 300))], SCHEMA)
    _check(storage, files)
    assert len(files) > 4 and max(f.rows for f in files) == 20
