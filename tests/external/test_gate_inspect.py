"""The gate's per-file inspection (external/filecheck.py `inspect`): every kind of file a listing can name
(other schemas, no magic, truncated, empty, gone, a FIFO, a directory, corrupt thrift, a large footer)
gets its digest, size, row count, schema verdict or footer error, whether it was read in one read or
streamed; and the manifest's fast parse accepts and refuses as the entry-by-entry one."""

from __future__ import annotations

import hashlib
import io
import json
import os
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import delta_release as dr
import delta_release.external.filecheck as fc
from delta_release.external import gate_manifest, load_manifest
from delta_release.external.producer import encode, produce_hour, upload, write_manifest
from delta_release.storage import Storage

SCHEMA = pa.schema([("sensor_id", pa.string()), ("ts_ms", pa.int64()), ("reading", pa.float64())])
CORRUPT = b"PAR1" + bytes(range(256)) * 20 + (200).to_bytes(4, "little") + b"PAR1"  # thrift garbage

def table(n: int) -> pa.Table:
    return pa.table({"sensor_id": [f"s-{i % 7}" for i in range(n)], "ts_ms": list(range(n)),
                     "reading": [i / 3 for i in range(n)]}, schema=SCHEMA)


def parquet(t: pa.Table, **kw: Any) -> bytes:
    sink = io.BytesIO()
    pq.write_table(t, sink, **kw)
    return sink.getvalue()


def hour(tmp: Path, *, corrupt: bool) -> list[str]:
    """40 names under h/: good files of 1..n rows, and every kind of bad one."""
    (tmp / "h").mkdir()
    whole = parquet(table(3000), row_group_size=100)
    special: dict[int, bytes | None] = {
        3: parquet(pa.table({"x": [1, 2]})),  # another schema
        5: parquet(table(4), store_schema=False),  # no ARROW:schema: other key-value metadata
        7: b"XXXX" + whole[4:],  # no magic
        9: whole[:-2000],  # truncated
        11: b"",
        13: None,  # listed, not on storage
        15: whole,  # large, footer of ~10 KB
        17: parquet(pa.table({"sensor_id": ["a"], "ts_ms": pa.array([1], pa.int32()), "reading": [1.0]})),
    }
    if corrupt:
        special[21] = CORRUPT
    names = []
    for i in range(40):
        rel = f"h/f-{i:03d}.parquet"
        data = special[i] if i in special else parquet(table(i + 1))
        if data is not None:
            (tmp / rel).write_bytes(data)
        names.append(rel)
    os.mkfifo(tmp / "h/fifo.parquet")  # must not block the gate
    (tmp / "h/dir.parquet").mkdir()
    return [*names, "h/fifo.parquet", "h/dir.parquet"]


def answers(storage: Storage, names: list[str]) -> list[Any]:
    assert fc.pool_for(storage, len(names), 1000 * len(names))[0] == "none"
    check = fc.SchemaCheck(SCHEMA)
    with fc.inspect(storage, names, check=check, total_bytes=1000 * len(names)) as found:
        out = list(found)
    return [(d, rows, verdict, error, None if footer is None else fc.FileFacts("", (d, rows, verdict, footer, error,
                                                                                      None, size)).meta.to_dict(), size)
            for d, rows, verdict, footer, error, _, size in out]


@pytest.mark.parametrize("corrupt", [False, True])
def test_every_kind_of_file_gets_its_answer(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, corrupt: bool) -> None:
    names = hour(tmp_path, corrupt=corrupt)
    monkeypatch.setattr(fc, "FILES_CHUNK", 16)  # several chunks of reads, then hashes and footers
    here = answers(Storage(str(tmp_path)), names)
    by = dict(zip(names, here, strict=True))
    for i in range(40):
        data = (tmp_path / names[i]).read_bytes() if (tmp_path / names[i]).exists() else None
        assert by[names[i]][0] == ("" if data is None else hashlib.sha256(data).hexdigest())
        assert by[names[i]][5] == (None if data is None else len(data))  # the size of the bytes hashed
    assert by["h/f-000.parquet"][1:4] == (1, (True, []), None)
    assert by["h/f-005.parquet"][1:4] == (4, (True, []), None)  # the other key-value metadata: full reader
    assert by["h/f-015.parquet"][1] == 3000
    assert by["h/f-003.parquet"][2] == (False, ["x"])
    assert by["h/f-017.parquet"][2] == (False, ["sensor_id", "ts_ms", "reading"])  # int32, not int64
    bad = ["h/f-007.parquet", "h/f-009.parquet", "h/f-011.parquet"] + (["h/f-021.parquet"] if corrupt else [])
    for rel in bad:
        assert by[rel][0] and by[rel][1] is None and by[rel][3], rel
    for rel in ("h/f-013.parquet", "h/fifo.parquet", "h/dir.parquet"):
        assert by[rel] == ("", None, None, None, None, None), rel


def stage_hour(lake: dr.Lake, tmp: Path, files: int) -> tuple[Path, list[str]]:
    doc, objects = produce_hour(9, "telemetry-48", files=files, rows=4)
    upload(lake.table_storage("telemetry"), objects)
    return write_manifest(tmp / "m.json", doc), sorted(objects)


@pytest.mark.parametrize("corrupt", [False, True])
def test_gate_reports_each_mismatch_once(lake: dr.Lake, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                         corrupt: bool) -> None:
    path, names = stage_hour(lake, tmp_path, 30)
    doc = json.loads(path.read_text())
    storage = lake.table_storage("telemetry")
    by_path = {f["path"]: f for f in doc["files"]}
    storage.delete(names[0])
    by_path[names[1]]["size_bytes"] += 1
    by_path[names[2]]["records"] += 1
    by_path[names[3]]["sha256"] = "f" * 64
    wrong = encode(pa.table({"sensor_id": ["a"], "ts_ms": pa.array([1], pa.int32()), "reading": [1.0]}))
    storage.write_bytes(names[4], wrong)
    by_path[names[4]].update(size_bytes=len(wrong), records=1, sha256=hashlib.sha256(wrong).hexdigest())
    if corrupt:
        storage.write_bytes(names[5], CORRUPT)
        by_path[names[5]].update(size_bytes=len(CORRUPT), sha256=hashlib.sha256(CORRUPT).hexdigest())
    storage.write_bytes("hour=09/stray.parquet", b"stray")
    manifest = load_manifest(write_manifest(path, doc), lake.tables)

    monkeypatch.setattr(fc, "FILES_CHUNK", 16)
    report = gate_manifest(lake, manifest)
    here = report.to_json()
    here_stats = {f.path: report.stats[f.path] for f in manifest.files if f.path in report.stats}
    assert here["missing"] == [names[0]] and here["size_mismatch"] == [names[1]]
    assert here["checksum_mismatch"] == [names[3]] and here["schema_mismatch"] == [names[4]]
    assert here["count_mismatch"] == [names[2]] + ([names[5]] if corrupt else [])
    assert here["unexpected"] == ["hour=09/stray.parquet"]
    assert len(here_stats) == 30 - 2 - corrupt  # not the missing, the other schema, the corrupt footer
    assert all(json.loads(stats)["numRecords"] == 4 for stats in here_stats.values())


def _entry(i: int, **over: Any) -> dict[str, Any]:
    return {"path": f"hour=09/f-{i}.parquet", "size_bytes": 10 + i, "records": i, "sha256": f"{i:064x}", **over}


@pytest.mark.parametrize("bad", [
    None, {"sha256": "A" * 64}, {"sha256": "0" * 63}, {"size_bytes": True}, {"records": -1}, {"size_bytes": 1.0},
    {"path": "hour=09/f-1.parquet"}, {"path": "hour=09/f-9.parquet\n"}, {"path": "hour=10/f-9.parquet"},
    {"path": "hour=09/x/f-9.parquet"}, {"path": 7}, {"extra": 1}, {"sha256": f"{9:064x}\n"},
    {"sha256": "\u0663" * 64}, {"sha256": "\ud800" + "0" * 63}, {"sha256": "0" * 65}, {"sha256": "g" * 64},
])
def test_manifest_fast_path_accepts_and_refuses_as_the_entry_by_entry_parse(
        lake: dr.Lake, monkeypatch: pytest.MonkeyPatch, bad: dict[str, Any] | None) -> None:
    """`_well_formed` checks whole columns at once; whatever it accepts, the entry-by-entry parse accepts
    with the same result, and a manifest it passes on gets the same answer or the same error."""
    import delta_release.external.manifest as mf

    files = [_entry(i) for i in range(12)]
    if bad is not None:
        files[9] = _entry(9, **bad)
    doc = {"table": "telemetry", "partition": {"hour": 9}, "generation": "g-1", "files": files}

    def parse() -> Any:
        try:
            return mf.parse_manifest(doc, source="m.json", tables=lake.tables)
        except Exception as exc:  # noqa: BLE001 - compared below
            return str(exc)

    fast = parse()
    monkeypatch.setattr(mf, "_well_formed", lambda raw, directory: None)
    assert fast == parse()
    if bad is None:
        assert not isinstance(fast, str) and len(fast.files) == 12


def test_files_larger_than_a_read_stream_to_the_same_answers(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Files of a read chunk or more leave the inline read for the streaming reader; the answers (digest,
    size, footer, errors) stay those of one read per file."""
    names = hour(tmp_path, corrupt=False)
    storage = Storage(str(tmp_path))
    whole = answers(storage, names)
    monkeypatch.setattr(fc, "CHUNK_BYTES", 700)  # most files now span several reads
    monkeypatch.setattr(fc, "FILES_CHUNK", 16)
    streamed = answers(storage, names)
    assert streamed == whole
    assert streamed[15][1] == 3000 and streamed[15][5] == (tmp_path / names[15]).stat().st_size > 700


def test_a_digest_with_a_trailing_newline_is_refused(lake: dr.Lake) -> None:
    """`^...$` lets a final newline through; a manifest digest is exactly 64 lower-case hex digits."""
    import delta_release.external.manifest as mf

    files = [_entry(i) for i in range(3)]
    files[1] = _entry(1, sha256=f"{1:064x}\n")
    doc = {"table": "telemetry", "partition": {"hour": 9}, "generation": "g-1", "files": files}
    with pytest.raises(Exception, match=r"files\[1\]\.sha256.*must be 64 lower-case hex digits"):
        mf.parse_manifest(doc, source="m.json", tables=lake.tables)
