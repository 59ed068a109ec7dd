"""The gate's fast per-file path (gateway/filecheck.py) gives the same answers as the reference path."""

from __future__ import annotations

import hashlib
import io
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from delta_release.external.filecheck import (
    WORKERS,
    LazyStats,
    SchemaCheck,
    footer_stats_json,
    inspect_files,
    threads_for,
)
from delta_release.stage.candidate import footer_stats
from delta_release.storage import Storage

SCHEMA = pa.schema([("sensor_id", pa.string()), ("ts_ms", pa.int64()), ("reading", pa.float64())])


def table(n: int, nulls: bool = False) -> pa.Table:
    return pa.table({"sensor_id": [None if nulls and i % 3 == 0 else f"s-{i % 7}" for i in range(n)],
                     "ts_ms": list(range(n)), "reading": [None if nulls and i % 2 else i / 3 for i in range(n)]},
                    schema=SCHEMA)


@pytest.mark.parametrize(("rows", "group", "nulls"), [(1, 10, False), (50, 7, True), (40, 10, False), (9, 3, True)])
def test_footer_stats_json_equals_the_reference(rows: int, group: int, nulls: bool) -> None:
    sink = io.BytesIO()
    pq.write_table(table(rows, nulls), sink, row_group_size=group)
    meta = pq.read_metadata(io.BytesIO(sink.getvalue()))
    assert footer_stats_json(meta, SCHEMA.names) == footer_stats(meta) is not None


@pytest.mark.parametrize("total_bytes", [None, 1 << 40])  # small files: one thread; "large": the pool
def test_inspect_files_in_order_with_hash_footer_and_errors(tmp_path: Path, total_bytes: int | None) -> None:
    paths = []
    for i in range(40):  # enough for the thread pool and several chunks
        rel = f"hour=07/f-{i:03d}.parquet"
        (tmp_path / "hour=07").mkdir(exist_ok=True)
        if i == 17:
            (tmp_path / rel).write_bytes(b"not parquet at all")
        else:
            pq.write_table(table(i + 1), tmp_path / rel)
        paths.append(rel)
    storage = Storage(str(tmp_path))
    assert threads_for(storage, len(paths), total_bytes) == (1 if total_bytes is None else WORKERS)
    facts = list(inspect_files(storage, paths, total_bytes=total_bytes))
    assert [f.path for f in facts] == paths
    for f in facts:
        data = (tmp_path / f.path).read_bytes()
        assert f.sha256 == hashlib.sha256(data).hexdigest()
    assert facts[17].meta is None and facts[17].error
    assert [f.meta.num_rows for f in facts if f.meta is not None] == [i + 1 for i in range(40) if i != 17]
    check = SchemaCheck(SCHEMA)
    assert all(check(f.meta)[0] for f in facts if f.meta is not None)
    other = io.BytesIO()
    pq.write_table(pa.table({"x": [1]}), other)
    assert check(pq.read_metadata(io.BytesIO(other.getvalue()))) == (False, ["x"])


def test_lazy_stats_computes_on_first_use_and_falls_back(tmp_path: Path) -> None:
    sink = io.BytesIO()
    pq.write_table(table(5), sink)
    meta = pq.read_metadata(io.BytesIO(sink.getvalue()))
    stats = LazyStats(SCHEMA.names, lambda path: f"fallback {path}")
    stats.keep("a.parquet", meta)
    assert "a.parquet" in stats and "b.parquet" not in stats
    assert stats["a.parquet"] == footer_stats(meta)
    no_stats = io.BytesIO()
    pq.write_table(table(5), no_stats, write_statistics=False)
    stats.keep("b.parquet", pq.read_metadata(io.BytesIO(no_stats.getvalue())))
    assert stats["b.parquet"] == "fallback b.parquet"
    with pytest.raises(KeyError):
        stats["never-gated.parquet"]


@pytest.mark.parametrize("chunk", [64, 1000, 20_000, 1 << 22])
def test_inspect_files_streams_large_files_once_and_finds_their_footer(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, chunk: int) -> None:
    """Files larger than one read chunk are hashed as they stream; the footer comes from the last two
    chunks, or (longer than them) from one read of just the footer. A truncated file, a file without
    magic and one with a corrupt footer are errors, never an abort."""
    import delta_release.external.filecheck as fc

    monkeypatch.setattr(fc, "CHUNK_BYTES", chunk)
    (tmp_path / "h").mkdir()
    pq.write_table(table(3000), tmp_path / "h/big.parquet", row_group_size=100)  # a footer of ~10 KB
    pq.write_table(table(3), tmp_path / "h/small.parquet")
    whole = (tmp_path / "h/big.parquet").read_bytes()
    (tmp_path / "h/trunc.parquet").write_bytes(whole[:-2000])
    (tmp_path / "h/nomagic.parquet").write_bytes(b"XXXX" + whole[4:])
    (tmp_path / "h/corrupt.parquet").write_bytes(b"PAR1" + bytes(range(256)) * 20 + (200).to_bytes(4, "little")
                                                 + b"PAR1")
    (tmp_path / "h/empty.parquet").write_bytes(b"")
    names = ["big", "small", "trunc", "nomagic", "corrupt", "empty"]
    facts = list(inspect_files(Storage(str(tmp_path)), [f"h/{n}.parquet" for n in names]))
    for f in facts:
        assert f.sha256 == hashlib.sha256((tmp_path / f.path).read_bytes()).hexdigest(), f.path
    by = dict(zip(names, facts, strict=True))
    assert by["big"].meta is not None and by["big"].meta.num_rows == 3000 and by["big"].meta.num_row_groups == 30
    assert by["big"].meta.to_dict() == pq.read_metadata(tmp_path / "h/big.parquet").to_dict()
    assert by["small"].meta is not None and by["small"].meta.num_rows == 3
    for bad in ("trunc", "nomagic", "corrupt", "empty"):
        assert by[bad].meta is None and by[bad].error, bad
