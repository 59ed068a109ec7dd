"""Our own Delta log entry (`_delta._commit_entry`): for a table whose protocol asks nothing of a writer beyond
add and remove actions, the commit is one atomic create of the log entry we write, not delta-rs's
create_write_transaction (which replays every file of the table after each commit). The table must read
the same through delta-rs, Polars and our own history as one committed by delta-rs; anything else goes
through delta-rs."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

import polars as pl
import pyarrow as pa
import pytest
from conftest import jsonl, rm, up
from deltalake import DeltaTable

import delta_release as dr
from delta_release import _delta
from delta_release.clock import FixedClock
from delta_release.errors import StaleParentError
from delta_release.storage import Storage

BATCHES = [
    [up("a", 1, amount=10, day=47), up("b", 2, amount=20, day=47), up("c", 3, amount=30, day=48, version=3,
                                                                      currency="EUR")],
    [up("a", 4, amount=11, day=48), rm("b", 5, day=47), up("d", 6, amount=40, day=49), up("c", 2, amount=99)],
]


def _lake(root: Path) -> dr.Lake:
    return dr.Lake.create(root, clock=FixedClock(datetime(2026, 11, 29, 12, 0, tzinfo=UTC)))


def _entry(lake: dr.Lake, version: int) -> list[dict[str, object]]:
    path = Path(lake.storage.root) / "orders" / "_delta_log" / f"{version:020d}.json"
    return [json.loads(line) for line in path.read_text().splitlines()]


def _rows_per_day(lake: dr.Lake, version: int) -> dict[object, int]:
    """Rows per partition as the log's add actions count them (the files differ: each lake buckets its
    keys under its own secret)."""
    ctx = lake.table("orders")
    out: dict[object, int] = {}
    for e in _delta.file_entries(ctx.uri, ctx.storage_options, version):
        out[e.partition_values["event_day"]] = out.get(e.partition_values["event_day"], 0) + (e.num_records or 0)
    return out


def test_our_entry_reads_as_the_delta_rs_commit_of_the_same_batches(tmp_path: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    ours = _lake(tmp_path / "ours")
    for batch in BATCHES:
        ours.ingest(jsonl(batch))
    monkeypatch.setattr(_delta, "_plain_writer", lambda *a: False)  # every commit through delta-rs
    theirs = _lake(tmp_path / "theirs")
    for batch in BATCHES:
        theirs.ingest(jsonl(batch))
    for lake, engine in ((ours, "delta-release/"), (theirs, "delta-rs")):
        info = _entry(lake, 2)[0]["commitInfo"]
        assert isinstance(info, dict) and str(info["clientVersion"]).startswith(engine)
        assert [list(a)[0] for a in _entry(lake, 2)[1:]].count("remove") >= 1  # the batch moved rows
    _delta.forget_handles()  # a new process: both tables from their logs alone
    for version in (1, 2):
        assert _rows_per_day(ours, version) == _rows_per_day(theirs, version)
        assert ours.read(version=version).sort("order_id").equals(theirs.read(version=version).sort("order_id"))
        # delta-rs's own scan of the entry we wrote, and Polars reading the log directly
        ctx = ours.table("orders")
        rows = pl.from_arrow(_delta.query_all(ctx.uri, ctx.storage_options, version))
        assert isinstance(rows, pl.DataFrame)
        direct = pl.read_delta(ctx.uri, version=version)
        assert rows.sort("order_id").equals(direct.select(rows.columns).sort("order_id"))
    ev_ours = _delta.version_evidence(ours.table("orders").uri, {}, 2)
    ev_theirs = _delta.version_evidence(theirs.table("orders").uri, {}, 2)
    assert ev_ours is not None and ev_theirs is not None and ev_ours["operation"] == ev_theirs["operation"]
    assert [(h["version"], h["operation"]) for h in ours.history()] == \
        [(h["version"], h["operation"]) for h in theirs.history()]
    current = ours.read().sort("order_id")
    assert current["order_id"].to_list() == ["a", "c", "d"] and current["amount_cents"].to_list() == [11, 30, 40]


def test_only_plain_tables_and_paths_take_our_entry(tmp_path: Path) -> None:
    schema = pa.schema([("k", pa.string()), ("day", pa.int32())])
    plain = DeltaTable.create(str(tmp_path / "plain"), schema, partition_by=["day"])
    append_only = DeltaTable.create(str(tmp_path / "ao"), schema, partition_by=["day"],
                                    configuration={"delta.appendOnly": "true"})
    add = _delta.FileAdd(path="day=1/part-0.parquet", size=1, partition_values={"day": "1"}, stats="",
                         modification_time=1)
    spaced = _delta.FileAdd(path="day=1/part 0.parquet", size=1, partition_values={"day": "1"}, stats="",
                            modification_time=1)
    assert _delta._plain_writer(plain, [add], [])
    assert not _delta._plain_writer(append_only, [add], [])  # delta-rs refuses its removes
    assert not _delta._plain_writer(plain, [spaced], [])  # a path delta-rs would percent-encode


def test_a_refused_create_is_ours_only_when_the_entry_holds_our_bytes(lake: dr.Lake,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """On S3 a PUT retried after a lost response is refused as a second create of the entry it made: the
    commit is ours when the entry holds our bytes, and a stale parent when it holds another writer's."""
    lake.ingest(jsonl([up("a", 1)]))
    ctx = lake.table("orders")
    real = Storage.write_once

    def landed_then_refused(self: Storage, rel: str, data: bytes, **kw: object) -> bool:
        real(self, rel, data)
        return False

    monkeypatch.setattr(Storage, "write_once", landed_then_refused)
    assert _delta.commit(ctx.uri, ctx.storage_options, table="orders", parent=1, adds=[], removes=[],
                         evidence={"note": "mine"}, partition_by=["event_day"]) == 2
    monkeypatch.setattr(Storage, "write_once", lambda self, rel, data, **kw: False)  # someone else's entry
    with pytest.raises(StaleParentError):
        _delta.commit(ctx.uri, ctx.storage_options, table="orders", parent=1, adds=[], removes=[],
                      evidence={"note": "late"}, partition_by=["event_day"])
    assert _delta.version_evidence(ctx.uri, ctx.storage_options, 2) == {"note": "mine"}


def test_a_commit_of_many_actions_is_checkpointed(lake: dr.Lake, monkeypatch: pytest.MonkeyPatch) -> None:
    """A backfill's commit adds thousands of files: a checkpoint right after it spares every later open the
    parse of that JSON entry (the threshold lowered here, so a small batch counts as large)."""
    log = Path(lake.storage.root) / "orders" / "_delta_log"
    lake.ingest(jsonl([up("a", 1, day=40), up("b", 2, day=41)]))
    assert not list(log.glob("*.checkpoint.parquet"))  # two files: below the threshold
    monkeypatch.setattr(_delta, "CHECKPOINT_ACTIONS", 3)
    lake.ingest(jsonl([up("c", 3, day=42), up("d", 4, day=43), up("e", 5, day=44)]))
    assert [p.name for p in log.glob("*.checkpoint.parquet")] == [f"{2:020d}.checkpoint.parquet"]
    _delta.forget_handles()
    assert sorted(lake.read(version=2)["order_id"].to_list()) == ["a", "b", "c", "d", "e"]
