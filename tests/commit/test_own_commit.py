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
from deltalake import DeltaTable

import delta_release as dr
from delta_release import _delta, _delta_log
from delta_release.clock import FixedClock
from delta_release.errors import StaleParentError
from delta_release.storage import Storage
from tests.conftest import jsonl, rm, up

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
    def snapshot_facts(t: DeltaTable) -> _delta.Facts:
        state = _delta._handle_state(t)
        return state.protocol, state.metadata

    for state_of in (lambda t: _delta._facts(t.table_uri, {}, 0), snapshot_facts):
        # the facts read from the log by us, and as delta-rs's snapshot gives them
        assert _delta._plain_writer(state_of(plain), [add], [])
        assert not _delta._plain_writer(state_of(append_only), [add], [])  # delta-rs refuses its removes
        assert not _delta._plain_writer(state_of(plain), [spaced], [])  # a path delta-rs would percent-encode


def test_a_commit_reads_the_facts_of_its_parent_without_moving_the_file_list(tmp_path: Path) -> None:
    """A commit on a newer parent than the cached state's (a rebase over other writers' commits) takes the
    protocol and metadata from the cached state when the commits in between are plain adds and removes; a
    commit in between that changes the metadata is read, never the stale facts."""
    lake = _lake(tmp_path / "lake")
    for batch in BATCHES:
        lake.ingest(jsonl(batch))
    uri = lake.table("orders").uri
    _delta.forget_handles()
    cached = _delta._state(uri, {}, 1)
    assert _delta._facts(uri, {}, 2) == (cached.protocol, cached.metadata)
    assert _delta._STATES[_delta._cache_key(uri, {})][1] is cached  # the file list was not moved to version 2
    DeltaTable(uri).alter.set_table_properties({"delta.appendOnly": "true"})  # version 3: a metaData action
    protocol, metadata = _delta._facts(uri, {}, 3)
    assert metadata["configuration"]["delta.appendOnly"] == "true"
    _delta.forget_handles()
    assert (protocol, metadata) == _delta._facts(uri, {}, 3)  # what a fresh read of version 3 gives
    add = _delta.FileAdd(path="event_day=1/part-0.parquet", size=1, partition_values={"event_day": "1"},
                         stats="", modification_time=1)
    assert not _delta._plain_writer((protocol, metadata), [add], [])


def test_a_commit_on_a_taken_version_writes_nothing(lake: dr.Lake, monkeypatch: pytest.MonkeyPatch) -> None:
    """A writer among many loses most attempts: when the parent's next entry exists already, the commit is
    refused as stale before any entry is written (no temp file, no fsync); the table is unchanged."""
    lake.ingest(jsonl([up("a", 1)]))
    lake.ingest(jsonl([up("b", 2)]))
    ctx = lake.table("orders")
    writes: list[str] = []
    real = Storage.write_once

    def counted(self: Storage, rel: str, data: bytes, *, mode: int | None = None, durable: bool = True) -> bool:
        writes.append(rel)
        return real(self, rel, data, mode=mode, durable=durable)

    monkeypatch.setattr(Storage, "write_once", counted)
    with pytest.raises(StaleParentError) as refused:
        _delta.commit(ctx.uri, ctx.storage_options, table="orders", parent=1, adds=[], removes=[],
                      evidence={"note": "late"}, partition_by=["event_day"])
    assert (refused.value.expected, refused.value.found) == (1, 2)
    assert writes == [] and ctx.latest_version() == 2


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


def _listing(ctx: object, version: int) -> list[tuple[str, int, object, int | None]]:
    uri, opts = ctx.uri, ctx.storage_options  # type: ignore[attr-defined]
    return [(e.path, e.size, e.partition_values["event_day"], e.num_records)
            for e in _delta.partition_entries(uri, opts, version, "event_day", [str(d) for d in range(38, 46)])]


def _count_opens(monkeypatch: pytest.MonkeyPatch) -> list[object]:
    """Record every delta-rs snapshot `_delta` opens from now on (the argument: its version, or None)."""
    opened: list[object] = []

    class Counted(DeltaTable):
        def __init__(self, *args: object, **kwargs: object) -> None:
            opened.append(kwargs.get("version"))
            super().__init__(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(_delta, "DeltaTable", Counted)
    return opened


def test_the_next_ingest_reads_the_commits_since_not_a_snapshot(lake: dr.Lake,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """In one process, a writer's view (newest version, files of the touched partitions, the protocol facts
    of its commit) is read from the log once and moves forward by the entries since: no delta-rs snapshot
    is opened (but the parent of delta-rs's own commit), nothing is read again from the checkpoint or
    version 0, and every listing equals the one a new process reads from the log."""
    lake.ingest(jsonl([up(f"o{i}", i, day=40 + i % 5) for i in range(20)]))
    ctx = lake.table("orders")
    opened = _count_opens(monkeypatch)
    loads: list[int] = []
    real_load = _delta_log.load
    monkeypatch.setattr(_delta_log, "load", lambda read, v: loads.append(v) or real_load(read, v))
    warm = []
    for step in range(4):  # moves across days, deletes, one batch through delta-rs's commit (step 2)
        if step == 2:
            monkeypatch.setattr(_delta, "_plain_writer", lambda *a: False)
        lake.ingest(jsonl([up(f"o{i}", 100 + 10 * step + i, day=44 - (i + step) % 5) for i in range(0, 20, 3)]
                          + [rm(f"o{step + 5}", 200 + step)]))
        monkeypatch.setattr(_delta, "_plain_writer", _PLAIN_WRITER)
        version = ctx.latest_version()
        assert version == 2 + step
        warm.append(_listing(ctx, version))
        assert opened == ([3] if step == 2 else []), step  # delta-rs commits on its snapshot of the parent
        assert loads == [], step
        opened.clear()
    _delta.forget_handles()  # a new process
    assert [_listing(ctx, v) for v in range(2, 6)] == warm
    assert all(w for w in warm)
    assert opened == [] and loads == [2]  # read from the log once, then moved forward by the entries


def test_a_metadata_change_since_falls_back_to_the_snapshot(lake: dr.Lake) -> None:
    """A commit that is not only adds and removes (here another writer sets a table property) is not
    replayed by us: the listing and the next commits come from delta-rs's snapshot, and stay right (the
    commits see the new checkpoint interval)."""
    lake.ingest(jsonl([up("a", 1, day=40), up("b", 2, day=41)]))
    ctx = lake.table("orders")
    assert _listing(ctx, 1)  # the cached file frame, at version 1
    DeltaTable(ctx.uri).alter.set_table_properties({"delta.checkpointInterval": "4"})  # version 2: metaData
    warm = _listing(ctx, 2)
    version = 2
    while version < 7:  # commits on parents 2..6; with the new interval the checkpoint goes to 7
        version = _delta.commit(ctx.uri, ctx.storage_options, table="orders", parent=version, adds=[],
                                removes=[], evidence={}, partition_by=["event_day"])
    log = Path(ctx.uri) / "_delta_log"
    assert (log / f"{7:020d}.checkpoint.parquet").exists()
    assert not (log / f"{99:020d}.checkpoint.parquet").exists()
    _delta.forget_handles()
    assert _listing(ctx, 2) == warm and _listing(ctx, 7) == warm
    assert sorted(_delta.query_all(ctx.uri, ctx.storage_options, 7).column("order_id").to_pylist()) == ["a", "b"]


_PLAIN_WRITER = _delta._plain_writer


def test_a_failed_checkpoint_does_not_fail_the_commit_it_follows(lake: dr.Lake,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """The entry exists before the checkpoint is written: a checkpoint that fails (a full disk, a refused
    PUT) must not report the commit as failed, or its writer would redo work already committed."""
    lake.ingest(jsonl([up("a", 1, day=40)]))
    monkeypatch.setattr(_delta, "CHECKPOINT_ACTIONS", 1)

    def refuse(self: DeltaTable) -> None:
        raise OSError("no space left on device")

    monkeypatch.setattr(DeltaTable, "create_checkpoint", refuse)
    report = lake.ingest(jsonl([up("b", 2, day=41)]))
    assert report.version == 2
    assert not list((Path(lake.storage.root) / "orders" / "_delta_log").glob("*.checkpoint.parquet"))
    assert sorted(lake.read()["order_id"].to_list()) == ["a", "b"]


def test_an_empty_partition_value_since_is_the_null_partition(lake: dr.Lake) -> None:
    """Another writer's add whose partition value is "" (the null partition, as delta-rs reads it, not an
    integer's text): the listing moved forward by that entry equals delta-rs's, and is not an error."""
    lake.ingest(jsonl([up("a", 1, day=40)]))
    ctx = lake.table("orders")
    before = _listing(ctx, 1)
    src = Path(ctx.uri) / before[0][0]
    (src.parent / "copy.parquet").write_bytes(src.read_bytes())
    add = {"path": "event_day=40/copy.parquet", "partitionValues": {"event_day": ""},
           "size": src.stat().st_size, "modificationTime": 1, "dataChange": True, "stats": None}
    entry = json.dumps({"commitInfo": {"operation": "WRITE"}}) + "\n" + json.dumps({"add": add}) + "\n"
    (Path(ctx.uri) / "_delta_log" / f"{2:020d}.json").write_text(entry)
    uri, opts = ctx.uri, ctx.storage_options
    warm = _delta.partition_entries(uri, opts, 2, "event_day", ["40", None])
    _delta.forget_handles()
    cold = _delta.partition_entries(uri, opts, 2, "event_day", ["40", None])
    assert warm == cold and len(cold) == len(before) + 1


def test_plain_actions_leave_what_delta_rs_must_read_to_it() -> None:
    def entry(*actions: dict[str, object]) -> list[str]:
        return [json.dumps(a) for a in actions]

    add = {"path": "event_day=1/a%20b.parquet", "size": 3, "partitionValues": {"event_day": "1"},
           "stats": json.dumps({"numRecords": 7})}
    plain = _delta_log.plain_actions(entry({"commitInfo": {}}, {"add": add}, {"remove": {"path": "x/y.parquet"}}))
    assert plain is not None and plain.removes == ["x/y.parquet"]
    # the path as the log holds it, as delta-rs lists it (get_add_actions does not decode it)
    assert [(a["path"], a["num_records"]) for a in plain.adds] == [("event_day=1/a%20b.parquet", 7)]
    for other in ({"metaData": {}}, {"protocol": {}}, {"txn": {}}, {"domainMetadata": {}},
                  {"add": {**add, "deletionVector": {"storageType": "u"}}},
                  {"add": {**add, "path": "s3://bucket/t/event_day=1/a.parquet"}},
                  {"remove": {"path": "/abs/t/event_day=1/a.parquet"}},
                  {"remove": {"path": add["path"]}}):  # removed and added in one commit
        assert _delta_log.plain_actions(entry({"add": add}, other)) is None, other


def test_an_unreadable_entry_since_gets_delta_rs_error_not_a_parse_traceback(lake: dr.Lake) -> None:
    """Hostile bytes as the next log entry (not JSON): the listing and a commit on it report what delta-rs
    reports (a one-line NotFoundError naming the version), not our JSON parser's exception."""
    from delta_release.errors import NotFoundError

    lake.ingest(jsonl([up("a", 1, day=40)]))
    ctx = lake.table("orders")
    assert _listing(ctx, 1)
    (Path(ctx.uri) / "_delta_log" / f"{2:020d}.json").write_bytes(b"\x00\xffnot json\n")
    with pytest.raises(NotFoundError, match="version 2"):
        _listing(ctx, 2)
    with pytest.raises(NotFoundError, match="version 2"):
        _delta.commit(ctx.uri, ctx.storage_options, table="orders", parent=2, adds=[], removes=[],
                      evidence={}, partition_by=["event_day"])
    assert not (Path(ctx.uri) / "_delta_log" / f"{3:020d}.json").exists()
