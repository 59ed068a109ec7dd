"""Footer shapes (external/footershape.py): a footer the gate answers from a learned shape is one pyarrow's
reader reads the same way (the same row count, the same schema verdict), and anything else (another
schema of the same length, a changed structure byte, truncated or garbage bytes) goes to the reader."""

from __future__ import annotations

import io
import random
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import delta_release.external.filecheck as fc
from delta_release.external import footershape
from delta_release.external.producer import FILE_SCHEMA, encode, telemetry_rows

MAGIC = b"PAR1"


def span(data: bytes) -> tuple[int, int]:
    """(start, end) of the footer thrift in a whole parquet file."""
    end = len(data) - 8
    return end - int.from_bytes(data[-8:-4], "little"), end


def with_thrift(data: bytes, thrift: bytes) -> bytes:
    """`data` with its footer thrift replaced (the length field follows)."""
    start, _ = span(data)
    return data[:start] + thrift + len(thrift).to_bytes(4, "little") + MAGIC


def reader(data: bytes, check: fc.SchemaCheck) -> tuple[Any, ...]:
    """What the gate answered before shapes: pyarrow's reader on the whole file."""
    try:
        meta = fc._metadata(data, data, len(data))
    except Exception as exc:  # noqa: BLE001 - compared
        return ("error", type(exc).__name__)
    return meta.num_rows, check(meta)


def answer(footers: fc.Footers, data: bytes) -> tuple[Any, ...]:
    try:
        rows, verdict, _ = footers(data, data, len(data))
    except Exception as exc:  # noqa: BLE001 - compared
        return ("error", type(exc).__name__)
    return rows, verdict


def parquet(table: pa.Table, **kw: Any) -> bytes:
    sink = io.BytesIO()
    pq.write_table(table, sink, **kw)
    return sink.getvalue()


def learned(data: bytes, answer: Any = "verdict") -> footershape.Shape:
    start, end = span(data)
    shape = footershape.learn(data, start, end, answer)
    assert shape is not None
    return shape


def test_a_producers_footers_share_a_shape_and_their_row_counts_are_read_from_it() -> None:
    first = encode(telemetry_rows(7, 0, 4))
    shape = learned(first)
    same = [encode(telemetry_rows(hour, i, 4)) for hour in (3, 7, 21) for i in range(12)]
    assert all(shape.rows(d, *span(d)) == 4 for d in same)
    other = [encode(telemetry_rows(7, 0, rows)) for rows in (1, 3, 5, 70, 200, 5000)]
    for data in other:  # another row count: a different footer layout, or the same one with another count
        got = shape.rows(data, *span(data))
        assert got in (None, pq.read_metadata(io.BytesIO(data)).num_rows)
    big = encode(telemetry_rows(7, 0, 70))
    assert learned(big).rows(big, *span(big)) == 70  # a 2-byte varint row count


def nullable(rows: int) -> pa.Table:
    return pa.table({"sensor_id": [None if i % 3 == 0 else f"s-{i % 7}" for i in range(rows)],
                     "ts_ms": list(range(rows)), "reading": [None if i % 2 else i / 3 for i in range(rows)]},
                    schema=FILE_SCHEMA)


@pytest.mark.parametrize("kind", ["producer", "row groups and nulls"])
def test_every_changed_byte_is_refused_or_read_by_the_reader_alike(kind: str) -> None:
    """Each byte of a learned footer changed in several ways: where the shape still answers, pyarrow's
    reader accepts the bytes with the same row count and schema verdict; a changed literal byte (any
    byte outside the row groups' values) never has the shape."""
    data = encode(telemetry_rows(7, 3, 4)) if kind == "producer" else parquet(nullable(90), row_group_size=40)
    start, end = span(data)
    thrift = data[start:end]
    check = fc.SchemaCheck(FILE_SCHEMA)
    verdict = reader(data, check)[1]
    shape = learned(data, verdict)
    walker = footershape._Walker(data, start, end)
    walker.struct(start, 0, False, top=True)
    answered = refused = 0
    for i in range(len(thrift)):
        for new in {thrift[i] ^ 0x01, thrift[i] ^ 0x80, thrift[i] ^ 0xFF, 0x00, 0x7F} - {thrift[i]}:
            changed = with_thrift(data, thrift[:i] + bytes([new]) + thrift[i + 1:])
            rows = shape.rows(changed, start, end)
            if rows is None:
                refused += 1
                continue
            answered += 1
            assert walker.mask[i] != 0xFF, f"literal byte {i} changed and still has the shape"
            assert reader(changed, check) == (rows, verdict), i
    assert answered > 200 and refused > 2000  # both kinds were exercised


def test_a_footer_of_another_schema_of_the_same_length_goes_to_the_reader() -> None:
    data = encode(telemetry_rows(7, 0, 4))
    start, end = span(data)
    thrift = data[start:end]
    at = thrift.index(b"reading")  # the parquet schema's column name (the first occurrence)
    renamed = with_thrift(data, thrift[:at] + b"readinX" + thrift[at + 7:])
    assert len(renamed) == len(data)
    check = fc.SchemaCheck(FILE_SCHEMA)
    footers = fc.Footers(check)
    assert answer(footers, data) == reader(data, check) == (4, (True, []))
    assert learned(data).rows(renamed, start, end) is None
    expected = reader(renamed, check)
    assert expected[0] == 4 and expected[1] != (True, [])  # the reader sees the other name
    assert answer(footers, renamed) == expected
    retyped = encode(pa.table({"sensor_id": ["s"] * 4, "ts_ms": pa.array([1.5] * 4), "reading": [1.0] * 4}))
    assert answer(footers, retyped) == reader(retyped, check) and reader(retyped, check)[1][0] is False


def test_truncated_and_garbage_footers_have_no_shape_and_never_raise_from_it() -> None:
    data = encode(telemetry_rows(7, 0, 4))
    start, end = span(data)
    shape = learned(data)
    for cut in range(start, end):  # every truncation of the thrift: no shape learned, none matched
        assert footershape.learn(data, start, cut, None) is None
        assert shape.rows(data, start, cut) is None
    rng = random.Random(14)
    for n in (0, 1, 12, 200, len(data[start:end]), 5000):
        for _ in range(40):
            junk = bytes(rng.getrandbits(8) for _ in range(n))
            footershape.learn(junk, 0, n, None)  # no exception whatever the bytes
            assert shape.rows(junk, 0, n) is None
    deep = b"\x1c" * 5000 + b"\x00" * 5000  # nested structs past MAX_DEPTH
    assert footershape.learn(deep, 0, len(deep), None) is None


def test_footers_answer_as_the_reader_for_every_kind_of_file(monkeypatch: pytest.MonkeyPatch) -> None:
    """`Footers` (shapes learned on the way) against the reader alone, over files of one producer, other
    schemas, other key-value metadata, row-group layouts, and broken footers, in an order where each
    kind follows a learned shape; the reader runs only for footers no shape answers."""
    table = pa.table({"sensor_id": [f"s-{i % 7}" for i in range(300)], "ts_ms": list(range(300)),
                      "reading": [i / 3 for i in range(300)]}, schema=FILE_SCHEMA)
    whole = parquet(table, row_group_size=100)
    good = [encode(telemetry_rows(9, i, 4)) for i in range(20)]
    files = [
        *good,
        parquet(pa.table({"x": [1, 2]})),
        parquet(table.slice(0, 4), store_schema=False),
        whole, parquet(table, row_group_size=100), parquet(table.slice(0, 250), row_group_size=50),
        parquet(pa.table({"sensor_id": ["a"], "ts_ms": pa.array([1], pa.int32()), "reading": [1.0]})),
        whole[:-2000], b"XXXX" + whole[4:], b"", MAGIC + bytes(range(256)) * 20 + (200).to_bytes(4, "little") + MAGIC,
        with_thrift(good[0], good[0][span(good[0])[0]:span(good[0])[1] - 1]),  # the thrift one byte short
        *good,
    ]
    check = fc.SchemaCheck(FILE_SCHEMA)
    expected = [reader(d, check) for d in files]
    calls: list[int] = []
    real = fc._metadata
    monkeypatch.setattr(fc, "_metadata", lambda *a: calls.append(1) or real(*a))
    footers = fc.Footers(check)
    assert [answer(footers, d) for d in files] == expected
    assert len(calls) < len(files) - 2 * len(good) + 2  # the producer's files: the reader once
    assert footers.learned >= 3
