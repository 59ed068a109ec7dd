"""Streaming a batch (issue 17.4): chunk boundaries change nothing, over-long lines are rejected by
length without being decoded, every reject points into the raw batch, and a file ingest stores the exact
bytes under their sha256."""

from __future__ import annotations

import hashlib
import io
import json
import tempfile
from pathlib import Path

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

import delta_release as dr
import delta_release.contract.source as source
from delta_release.contract import decode_batch
from delta_release.contract.decode import decode_stream, split_lines
from delta_release.contract.lines import BOM, ENV_MAX_LINE
from delta_release.contract.source import read_batch_file
from tests.conftest import examples
from tests.ingest.conftest import lines as event_lines


def summary(batch):  # type: ignore[no-untyped-def]
    return (batch.extracted, batch.events.to_dicts(),
            [(r.line, r.reason.value, r.detail, r.raw, r.offset, r.length) for r in batch.rejects],
            batch.schema_versions)


def streamed(data: bytes, limit: int, chunk: int):  # type: ignore[no-untyped-def]
    return decode_stream(io.BytesIO(data), lambda o, n: data[o:o + n], max_line_bytes=limit, chunk_bytes=chunk)


@settings(max_examples=examples(60))
@given(st.lists(st.one_of(event_lines(), st.binary(max_size=30).map(lambda b: b.replace(b"\n", b""))),
                min_size=0, max_size=25),
       st.sampled_from([b"\n", b"\r\n"]), st.booleans(), st.booleans(), st.integers(1, 120), st.integers(1, 300))
@example([b"{}"], b"\n", False, True, 120, 1)
@example([b"x" * 10 + b"\r"], b"\n", False, False, 10, 3)  # a '\r' that is content, then end of file
def test_chunked_equals_whole(lines: list[bytes], end: bytes, bom: bool, last_end: bool, limit: int,
                              chunk: int) -> None:
    data = (BOM if bom else b"") + end.join(lines) + (end if last_end and lines else b"")
    whole = decode_batch(data, max_line_bytes=limit)
    assert summary(streamed(data, limit, chunk)) == summary(whole)
    # a batch in memory is cut into slices of itself (lines.iter_memory_chunks): the same at any chunk size
    assert summary(decode_batch(data, max_line_bytes=limit, chunk_bytes=chunk)) == summary(whole)
    split = split_lines(data)
    assert whole.extracted == len(split)
    too_long = {i for i, ln in enumerate(split, start=1) if len(ln) > limit}
    for r in whole.rejects:
        assert data[r.offset:r.offset + r.length] == split[r.line - 1]
        if r.line in too_long:
            assert r.raw is None and r.reason.value == "bad_value" and f"{len(split[r.line - 1])} bytes" in r.detail
    assert too_long <= {r.line for r in whole.rejects}


@settings(max_examples=examples(60))
@given(st.lists(st.one_of(event_lines(), st.binary(max_size=30).map(lambda b: b.replace(b"\n", b""))),
                min_size=0, max_size=25),
       st.sampled_from([b"\n", b"\r\n"]), st.booleans(), st.integers(1, 120), st.integers(1, 300),
       st.integers(1, 40), st.binary(max_size=20), st.binary(max_size=20))
@example([b"x" * 50, b"{}"], b"\n", True, 120, 7, 3, b"\n\n", b"\n")  # a line longer than the window
def test_a_file_range_read_to_line_ends_decodes_as_the_bytes(lines: list[bytes], end: bytes, last_end: bool,
                                                             limit: int, chunk: int, window: int, before: bytes,
                                                             after: bytes) -> None:
    """A byte range of a file read in blocks that stop after a line break (`_RangeReader`, a window of any
    size, line breaks or none around the range): the same bytes, so the same decoded batch."""
    data = end.join(lines) + (end if last_end and lines else b"")
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "batch.jsonl"
        path.write_bytes(before + data + after)
        saved, source.ALIGN_WINDOW = source.ALIGN_WINDOW, window
        try:
            with open(path, "rb") as handle:
                handle.seek(len(before))
                reader = source._HashingReader(source._RangeReader(handle, len(data)))
                with reader:
                    got = decode_stream(reader, lambda o, n: data[o:o + n], max_line_bytes=limit, chunk_bytes=chunk)
                    sha = reader.sha256()
        finally:
            source.ALIGN_WINDOW = saved
    assert reader.size == len(data) and sha == hashlib.sha256(data).hexdigest()
    assert summary(got) == summary(decode_batch(data, max_line_bytes=limit))


def test_a_large_read_stops_after_a_line_break(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """So `iter_chunks` takes the block whole (no join with the next): the cut is after the window's last
    line break; without one in the window, or at the range's end, the read is as asked."""
    monkeypatch.setattr(source, "ALIGN_WINDOW", 16)
    path = tmp_path / "b.jsonl"
    path.write_bytes(b"123456789\n" * 10 + b"x" * 40)
    with open(path, "rb") as handle:
        reader = source._RangeReader(handle, 140)
        assert reader.read(35) == b"123456789\n" * 3  # 30 bytes: the break at 29, in the last 16 of 35
        assert reader.read(17) == b"123456789\n"  # 30..46 asked: the break at 39
        assert reader.read(70) == b"123456789\n" * 6  # 40..109 asked: the break at 99
        assert reader.read(20) == b"x" * 20  # no break in 104..119: as asked
        assert reader.read(100) == b"x" * 20  # the rest of the range


def _ev(i: int, **over: object) -> bytes:
    ev = {"schema_version": 2, "order_id": f"ord-{i}", "position": i, "kind": "upsert", "amount_cents": i,
          "event_day": 3, **over}
    return json.dumps(ev).encode()


def test_file_ingest_streams_and_stores_the_exact_bytes(tmp_path: Path, lake: dr.Lake,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(ENV_MAX_LINE, "200")
    data = b"\n".join([_ev(1), _ev(2, order_id="x" * 300), _ev(3), b"{}"]) + b"\n"
    path = tmp_path / "batch.jsonl"
    path.write_bytes(data)
    report = lake.ingest(path)
    assert (report.extracted, report.accepted, report.quarantined) == (4, 2, 2)
    assert report.batch_id == hashlib.sha256(data).hexdigest()[:16]
    assert lake.raw.read(report.batch_id) == data
    rows = lake.quarantine.rows(report.batch_id).to_dicts()
    assert [(r["line"], r["reason"]) for r in rows] == [(2, "bad_value"), (4, "missing_field")]
    assert "raw" not in rows[0] and "over the 200-byte line limit" in rows[0]["detail"]  # no text column
    assert lake.ingest(data).duplicate  # the same bytes from memory are the same batch
    assert sorted(lake.read()["order_id"].to_list()) == ["ord-1", "ord-3"]


def test_file_batch_matches_bytes_decode(tmp_path: Path) -> None:
    data = BOM + b"\r\n".join(_ev(i) for i in range(50)) + b"\r\n" + b"[" * 5000
    path = tmp_path / "b.jsonl"
    path.write_bytes(data)
    batch = read_batch_file(path, max_line_bytes=1000)
    assert batch.sha256 == hashlib.sha256(data).hexdigest() and batch.size == len(data)
    assert summary(batch.decoded) == summary(decode_batch(data, max_line_bytes=1000))
    assert batch.decoded.rejects[0].length == 5000 and batch.decoded.rejects[0].raw is None


def test_a_bad_limit_is_an_input_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(ENV_MAX_LINE, "lots")
    with pytest.raises(dr.errors.InputError, match=ENV_MAX_LINE):
        decode_batch(b"{}\n")


@settings(max_examples=examples(200), deadline=None)
@given(data=st.binary(max_size=300), block=st.integers(1, 40))
def test_block_scans_equal_whole_array_scans(data: bytes, block: int) -> None:
    """line_starts, positions and count_byte scan SCAN_BLOCK bytes at a time (no chunk-sized temporary):
    the same answers as one comparison over the whole array, for blocks that cut anywhere."""
    import numpy as np

    from delta_release.contract import lines

    arr = np.frombuffer(data, dtype=np.uint8)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(lines, "SCAN_BLOCK", block)
        for byte in (10, ord(":"), 0):
            assert lines.positions(arr, byte).tolist() == np.flatnonzero(arr == byte).tolist()
            assert lines.count_byte(arr, byte) == data.count(bytes([byte]))
        assert lines.line_starts(data).tolist() == [0, *[i + 1 for i, b in enumerate(data) if b == 10]]
