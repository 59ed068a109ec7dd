"""Our checkpoint (`_delta_checkpoint`: the previous checkpoint streamed through, then the entries' final
actions) holds what delta-rs's own checkpoint of the same version holds, and every reader reads the table
from it alone as from the log."""

from __future__ import annotations

import json
import shutil
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from deltalake import DeltaTable

import delta_release as dr
from delta_release import _delta, _delta_checkpoint, _delta_log
from delta_release.clock import FixedClock
from delta_release.storage import Storage
from tests.conftest import jsonl, rm, up
from tests.s3server import s3server  # noqa: F401 - the fixture

# The real time, not a fixed date: delta-rs's checkpoint drops removes older than the table's retention (a
# week) by the wall clock, ours by `now_ms`; with a fixed date the comparison broke a week after it.
NOW = datetime.now(UTC).replace(second=0, microsecond=0)


def _read(root: Path) -> _delta_log.Read:
    def read(rel: str) -> bytes | None:
        path = root / rel
        return path.read_bytes() if path.exists() else None
    return read


def _actions(path: Path) -> dict[str, Any]:
    """A checkpoint's rows by action: adds and removes by path, protocol and metaData."""
    rows = pq.read_table(path).to_pylist()
    out: dict[str, Any] = {"add": {}, "remove": {}, "protocol": [], "metaData": []}
    for row in rows:
        (kind, body), = [(k, v) for k, v in row.items() if v is not None]
        if kind in ("add", "remove"):
            out[kind][body["path"]] = body
        else:
            out[kind].append(body)
    return out


def _table_with_history(root: Path) -> tuple[dr.Lake, Path]:
    """A table whose newest checkpoint (delta-rs's, at version 2) is followed by entries that update,
    move and delete orders, re-add nothing, change a table property (metaData) and add a new day."""
    lake = dr.Lake.create(root, clock=FixedClock(NOW))
    lake.ingest(jsonl([up(f"o{i}", i + 1, amount=i, day=40 + i % 4) for i in range(60)]))  # version 1
    lake.ingest(jsonl([up(f"o{i}", 100 + i, amount=-i, day=40 + i % 4) for i in range(0, 60, 5)]))  # 2
    table = Path(lake.table("orders").uri)
    DeltaTable(str(table)).create_checkpoint()  # the previous checkpoint, written by delta-rs
    lake.ingest(jsonl([up(f"o{i}", 200 + i, amount=i, day=44) for i in range(0, 60, 7)]))  # moves: 3
    lake.ingest(jsonl([rm(f"o{i}", 300 + i) for i in range(1, 60, 9)]))  # deletes: 4
    DeltaTable(str(table)).alter.set_table_properties({"delta.checkpointInterval": "50"})  # metaData: 5
    lake.ingest(jsonl([up("new-1", 400, amount=1, day=45), up("o2", 401, amount=2, day=40)]))  # 6
    return lake, table


def test_our_checkpoint_holds_what_delta_rs_writes(tmp_path: Path) -> None:
    lake, table = _table_with_history(tmp_path / "lake")
    version = lake.latest_version("orders")
    assert version == 6
    ours, theirs = tmp_path / "ours", tmp_path / "theirs"
    shutil.copytree(table, ours)
    shutil.copytree(table, theirs)
    built = _delta_checkpoint.build(_read(ours), version, now_ms=int(NOW.timestamp() * 1000))
    assert built is not None
    data, doc = built
    (ours / _delta_log.checkpoint_path(version)).write_bytes(data)
    DeltaTable(str(theirs)).create_checkpoint()
    mine = _actions(ours / _delta_log.checkpoint_path(version))
    want = _actions(theirs / _delta_log.checkpoint_path(version))
    assert len(mine["add"]) > 20 and mine["add"] == want["add"]  # every field of every file
    assert mine["remove"].keys() == want["remove"].keys() and len(mine["remove"]) > 5
    assert mine["protocol"] == want["protocol"]
    assert mine["metaData"] == want["metaData"]
    assert dict(mine["metaData"][0]["configuration"])["delta.checkpointInterval"] == "50"
    last = json.loads((theirs / "_delta_log" / "_last_checkpoint").read_text())
    assert doc == {**last, "sizeInBytes": len(data)}  # version, rows, files: as delta-rs counts them


def _checkpoint_alone(tmp_path: Path) -> tuple[Path, Path, int]:
    """(the table, a copy whose log is our checkpoint of its newest version and nothing before, that version)."""
    lake, table = _table_with_history(tmp_path / "lake")
    version = lake.latest_version("orders")
    assert version is not None
    alone = tmp_path / "alone"
    shutil.copytree(table, alone)
    assert _delta._own_checkpoint(Storage(str(alone)), str(alone), {}, version, int(NOW.timestamp() * 1000))
    assert json.loads((alone / "_delta_log" / "_last_checkpoint").read_text())["version"] == version
    for v in range(version + 1):  # the entries it replaces are gone: only the checkpoint can answer
        (alone / _delta_log.log_path(v)).unlink()
    (alone / _delta_log.checkpoint_path(2)).unlink()
    return table, alone, version


def test_readers_read_the_table_from_our_checkpoint_alone(tmp_path: Path) -> None:
    table, alone, version = _checkpoint_alone(tmp_path)
    original, copy = DeltaTable(str(table)), DeltaTable(str(alone))
    assert copy.version() == version
    adds = [pl.DataFrame(pa.table(t.get_add_actions(flatten=True))).sort("path") for t in (copy, original)]
    assert adds[0].height > 20 and adds[0].equals(adds[1])
    assert pl.read_delta(str(alone)).sort("order_id").equals(pl.read_delta(str(table)).sort("order_id"))
    mine = _delta_log.load(_read(alone), version)
    want = _delta_log.load(_read(table), version)
    assert mine is not None and want is not None
    assert mine.frame.sort("path").equals(want.frame.sort("path"))
    assert mine.protocol == want.protocol


def test_the_writer_checkpoints_without_delta_rs_when_a_previous_checkpoint_exists(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Interval 4: the checkpoint at 3 has no predecessor (delta-rs writes it); the one at 7 is ours."""
    lake = dr.Lake.create(tmp_path / "lake", clock=FixedClock(NOW))
    table = Path(lake.table("orders").uri)
    DeltaTable(str(table)).alter.set_table_properties({"delta.checkpointInterval": "4"})  # version 1
    lake.ingest(jsonl([up("a", 1, day=40)]))
    lake.ingest(jsonl([up("b", 2, day=41)]))  # version 3: delta-rs's checkpoint
    assert (table / _delta_log.checkpoint_path(3)).exists()
    called: list[int] = []

    def refuse(self: DeltaTable) -> None:
        called.append(self.version())
        raise OSError("delta-rs was asked to write a checkpoint")

    monkeypatch.setattr(DeltaTable, "create_checkpoint", refuse)
    for i, day in enumerate((40, 42, 43, 41)):  # versions 4..7
        lake.ingest(jsonl([up(f"c{i}", 10 + i, day=day), up("a", 20 + i, day=day)]))
    assert called == [] and (table / _delta_log.checkpoint_path(7)).exists()
    assert json.loads((table / "_delta_log" / "_last_checkpoint").read_text())["version"] == 7
    _delta.forget_handles()
    rows = lake.read().sort("order_id")
    assert rows["order_id"].to_list() == ["a", "b", "c0", "c1", "c2", "c3"]
    assert rows.filter(pl.col("order_id") == "a")["event_day"].to_list() == [41]


def test_what_it_does_not_know_is_left_to_delta_rs(tmp_path: Path) -> None:
    """No previous checkpoint, a txn action since, a retention it cannot read: no bytes, delta-rs writes."""
    lake, table = _table_with_history(tmp_path / "lake")
    now = int(NOW.timestamp() * 1000)
    assert _delta_checkpoint.build(_read(table), 2, now_ms=now) is None  # the checkpoint's own version
    no_previous = tmp_path / "no-previous"
    shutil.copytree(table, no_previous)
    (no_previous / "_delta_log" / "_last_checkpoint").unlink()
    assert _delta_checkpoint.build(_read(no_previous), 6, now_ms=now) is None
    with_txn = tmp_path / "txn"
    shutil.copytree(table, with_txn)
    entry = with_txn / _delta_log.log_path(6)
    entry.write_text(entry.read_text() + json.dumps({"txn": {"appId": "x", "version": 1}}) + "\n")
    assert _delta_checkpoint.build(_read(with_txn), 6, now_ms=now) is None
    odd = tmp_path / "odd-retention"
    shutil.copytree(table, odd)
    DeltaTable(str(odd)).alter.set_table_properties({"delta.deletedFileRetentionDuration": "a fortnight"})
    assert _delta_checkpoint.build(_read(odd), 7, now_ms=now) is None
    for name, junk in (("not-json", b"{not json\n"), ("not-utf8", b"\xff\xfe\n"),
                       ("two-actions", b'{"add":{},"remove":{}}\n'), ("no-path", b'{"add":{"size":1}}\n'),
                       ("beyond-int64", b'{"add":{"path":"x","partitionValues":{},"size":' + b"9" * 40
                        + b',"modificationTime":1,"dataChange":true}}\n')):
        hostile = tmp_path / name  # another writer's entry since the checkpoint holds these bytes
        shutil.copytree(table, hostile)
        entry = hostile / _delta_log.log_path(6)
        entry.write_bytes(entry.read_bytes() + junk)
        assert _delta_checkpoint.build(_read(hostile), 6, now_ms=now) is None, name
    assert _delta_checkpoint.build(_read(table), 6, now_ms=now) is not None


@pytest.mark.parametrize("cap", ["MAX_ENTRIES", "MAX_ENTRY_BYTES"])
def test_a_long_replay_since_is_left_to_delta_rs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                 cap: str) -> None:
    """Entries since the previous checkpoint are held as their final actions: past the caps, delta-rs."""
    _, table = _table_with_history(tmp_path / "lake")
    now = int(NOW.timestamp() * 1000)
    first = len((table / _delta_log.log_path(3)).read_bytes())  # the first entry after the checkpoint at 2
    monkeypatch.setattr(_delta_checkpoint, cap, 3 if cap == "MAX_ENTRIES" else first)
    assert _delta_checkpoint.build(_read(table), 6, now_ms=now) is None  # 4 entries, more bytes than the first
    assert _delta_checkpoint.build(_read(table), 5 if cap == "MAX_ENTRIES" else 3, now_ms=now) is not None


def test_expired_tombstones_are_dropped(tmp_path: Path) -> None:
    """A remove older than delta.deletedFileRetentionDuration leaves the checkpoint, as in delta-rs's."""
    lake, table = _table_with_history(tmp_path / "lake")
    now = int(NOW.timestamp() * 1000)
    fresh = _delta_checkpoint.build(_read(table), 6, now_ms=now)
    later = _delta_checkpoint.build(_read(table), 6, now_ms=now + 8 * 86_400_000)  # past one week
    assert fresh is not None and later is not None
    assert fresh[1]["numOfAddFiles"] == later[1]["numOfAddFiles"]
    assert later[1]["size"] < fresh[1]["size"]
    out = tmp_path / "later.parquet"
    out.write_bytes(later[0])
    assert _actions(out)["remove"] == {}


@pytest.mark.interop
def test_other_engines_read_the_table_from_our_checkpoint_alone(tmp_path: Path) -> None:
    """DuckDB's delta extension and Sail (Spark's reader) see the same rows through our checkpoint as
    Polars through the log."""
    from tests.interop_engines import run_engine

    table, alone, version = _checkpoint_alone(tmp_path)
    want = pl.read_delta(str(table)).sort("order_id")
    for engine in ("duckdb", "sail"):
        run = run_engine(engine, [{"id": "t", "uri": str(alone), "version": version}], tmp_path / engine)
        if not run.installed:
            pytest.skip(f"{engine} is not installed: {run.error}")
        got = pl.DataFrame(run.table("t")).select(want.columns).sort("order_id")
        assert got.height == want.height > 40
        assert got.cast(want.schema).equals(want), engine



def test_on_s3_the_checkpoint_is_ours_and_is_read_alone(s3server: Any, tmp_path: Path,  # noqa: F811
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """On an object store the checkpoint is a create-only PUT and `_last_checkpoint` a PUT after it; with
    the entries it covers deleted, delta-rs reads the table from it."""
    from delta_release.gateway.catalog import SqliteCatalog

    bucket = s3server.new_bucket()
    lake = dr.Lake.create(f"s3://{bucket}/lake", storage_options=s3server.options,
                          catalog=SqliteCatalog(tmp_path / "catalog.sqlite"), clock=FixedClock(NOW))
    ctx = lake.table("orders")
    DeltaTable(ctx.uri, storage_options=ctx.storage_options).alter.set_table_properties(
        {"delta.checkpointInterval": "4"})  # version 1
    lake.ingest(jsonl([up("a", 1, day=40)]))
    lake.ingest(jsonl([up("b", 2, day=41)]))  # version 3: delta-rs's checkpoint (no previous one)

    def refuse(self: DeltaTable) -> None:
        raise OSError("delta-rs was asked to write a checkpoint")

    monkeypatch.setattr(DeltaTable, "create_checkpoint", refuse)
    for i, day in enumerate((40, 42, 43, 41)):  # versions 4..7: ours at 7
        lake.ingest(jsonl([up(f"c{i}", 10 + i, day=day), up("a", 20 + i, day=day)]))
    storage = Storage(ctx.uri, ctx.storage_options)
    assert storage.exists(_delta_log.checkpoint_path(7))
    assert json.loads(storage.read_bytes("_delta_log/_last_checkpoint"))["version"] == 7
    for v in range(8):
        storage.delete(_delta_log.log_path(v))
    storage.delete(_delta_log.checkpoint_path(3))
    alone = DeltaTable(ctx.uri, storage_options=ctx.storage_options)
    assert alone.version() == 7
    rows = pl.DataFrame(alone.to_pyarrow_table()).sort("order_id")
    assert rows["order_id"].to_list() == ["a", "b", "c0", "c1", "c2", "c3"]
    assert rows.filter(pl.col("order_id") == "a")["event_day"].to_list() == [41]


def _set(actions: dict[str, Any]) -> dict[str, Any]:
    """Adds by path without their null fields (each checkpoint keeps its own writer's schema)."""
    return {p: {k: v for k, v in a.items() if v is not None} for p, a in actions["add"].items()}


def test_a_spark_checkpoint_is_continued_in_its_own_schema(tmp_path: Path) -> None:
    """A table Spark wrote (checkpoint at 10, entries to 13): our checkpoint of 13 keeps Spark's schema,
    holds what delta-rs's holds, and delta-rs reads the table from it alone."""
    golden = Path(__file__).parents[1] / "data" / "golden" / "basic-with-inserts-deletes-checkpoint"
    ours, theirs = tmp_path / "ours", tmp_path / "theirs"
    shutil.copytree(golden, ours)
    shutil.copytree(golden, theirs)
    assert _delta_log.last_checkpoint(_read(ours)) == 10
    assert _delta._own_checkpoint(Storage(str(ours)), str(ours), {}, 13, 1_900_000_000_000)
    DeltaTable(str(theirs)).create_checkpoint()
    mine = _actions(ours / _delta_log.checkpoint_path(13))
    assert _set(mine) == _set(_actions(theirs / _delta_log.checkpoint_path(13))) and len(mine["add"]) == 7
    assert (pq.read_schema(ours / _delta_log.checkpoint_path(13))
            == pq.read_schema(golden / _delta_log.checkpoint_path(10)))
    for v in range(14):
        (ours / _delta_log.log_path(v)).unlink()
    (ours / _delta_log.checkpoint_path(10)).unlink()
    assert DeltaTable(str(ours)).version() == 13
    assert pl.read_delta(str(ours)).sort("id").equals(pl.read_delta(str(golden)).sort("id"))


def test_after_an_erasure_our_checkpoint_holds_no_trace_of_the_subject(tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """The erasure's commit is a checkpoint version (interval 4: 7): our checkpoint drops the removed files'
    rows and holds no id, so after a vacuum no file outside the raw store names the subject."""
    subject = "ord-erase-me-4711"
    lake = dr.Lake.create(tmp_path / "lake", clock=FixedClock(NOW))
    table = Path(lake.table("orders").uri)
    DeltaTable(str(table)).alter.set_table_properties({"delta.checkpointInterval": "4"})  # version 1
    lake.ingest(jsonl([up(subject, 1, day=40), up("a", 2, day=40)]))
    lake.ingest(jsonl([up("b", 3, day=41)]))  # version 3: delta-rs's checkpoint (no previous one)

    def refuse(self: DeltaTable) -> None:
        raise OSError("delta-rs was asked to write a checkpoint")

    monkeypatch.setattr(DeltaTable, "create_checkpoint", refuse)
    lake.ingest(jsonl([up(subject, 10, amount=5, day=42)]))  # 4: the subject moves to day 42
    lake.ingest(jsonl([up("c", 11, day=40)]))  # 5
    lake.ingest(jsonl([up("d", 12, day=43)]))  # 6
    lake.erase(subject)  # 7
    assert lake.latest_version("orders") == 7
    ours = table / _delta_log.checkpoint_path(7)
    assert pq.ParquetFile(ours).metadata.created_by.startswith("parquet-cpp-arrow")  # pyarrow: ours
    lake.vacuum(apply=True, retain_versions=2, replay_horizon_hours=0)
    root, needle = tmp_path / "lake", subject.encode()
    held = [p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file() and needle in p.read_bytes()]
    assert [p for p in held if not p.startswith("_raw/")] == []  # the raw batches stay (reported as pending)
    assert ours.exists() and sorted(lake.read()["order_id"].to_list()) == ["a", "b", "c", "d"]
