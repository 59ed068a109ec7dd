"""The writer's state read from the Delta log by us (`_delta_log.load`), checked against delta-rs.

A writer reads a table's protocol, metadata and file list from the newest classic checkpoint and the JSON
entries after it, instead of opening delta-rs's snapshot of every file's statistics. Whatever it reads must
be what delta-rs reads; whatever it cannot read (v2 or multi-part checkpoints, deletion vectors, column
mapping, other partition types, ...) it must leave to delta-rs instead of guessing. The third-party tables
(Spark, Databricks, delta-rs, delta-kernel golden tables) are the ones the register tests use.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import polars as pl
import pyarrow as pa
import pytest
from deltalake import DeltaTable
from hypothesis import given
from hypothesis import strategies as st

import delta_release as dr
from delta_release import _delta, _delta_log
from tests.conftest import jsonl, up

DATA = Path(__file__).resolve().parents[1] / "data"
TABLES = sorted(p.parent for p in [*(DATA / "golden").rglob("_delta_log"), *(DATA / "conformance").rglob("_delta_log")])


def _read(root: Path) -> _delta_log.Read:
    def read(rel: str) -> bytes | None:
        path = root / rel
        return path.read_bytes() if path.is_file() else None

    return read


def _name(root: Path) -> str:
    return root.parent.name if root.name == "delta" else root.name  # (delta-kernel's tables sit in delta/)


def _versions(root: Path) -> list[int]:
    return sorted({int(p.name.split(".")[0]) for p in (root / "_delta_log").iterdir() if p.name[:20].isdigit()})


def _theirs(root: Path, version: int) -> _delta_log.State | None:
    try:
        return _delta._handle_state(DeltaTable(str(root), version=version))
    except Exception:  # noqa: BLE001 - delta-rs refuses the version (bad protocol, gaps, ...)
        return None


def _same(ours: _delta_log.State, theirs: _delta_log.State) -> None:
    assert ours.frame.schema == theirs.frame.schema
    assert ours.frame.sort("path").equals(theirs.frame.sort("path"))
    for key in ("minReaderVersion", "minWriterVersion"):
        assert int(ours.protocol[key]) == int(theirs.protocol[key])
    assert not ours.protocol.get("writerFeatures") == bool(theirs.protocol.get("writerFeatures"))
    for key in ("id", "partitionColumns", "configuration"):
        assert ours.metadata[key] == theirs.metadata[key], key


def test_every_third_party_version_we_read_is_read_as_delta_rs_reads_it() -> None:
    read_by_us: set[str] = set()
    for root in TABLES:
        for version in _versions(root):
            ours = _delta_log.load(_read(root), version)
            if ours is None:
                continue
            theirs = _theirs(root, version)
            assert theirs is not None, f"{root.name} v{version}: we read what delta-rs refuses"
            _same(ours, theirs)
            read_by_us.add(_name(root))
    # Spark's classic checkpoint, escaped and null partition values, a plain delta-rs table, a damaged
    # `_last_checkpoint` (replayed from version 0), a multi-part checkpoint (left aside, the entries replayed)
    assert {"basic-with-inserts-deletes-checkpoint", "delta-0.8.0-null-partition", "delta-0.8.0-special-partition",
            "simple_table", "data-reader-escaped-chars", "corrupted-last-checkpoint-kernel",
            "multi-part-checkpoint"} <= read_by_us, read_by_us


@pytest.mark.parametrize("name", ["checkpoint-v2-table", "v2-checkpoint-parquet", "v2-checkpoint-json",
                                  "table-with-dv-small", "table_with_column_mapping",
                                  "deltalog-invalid-protocol-version", "versions-not-contiguous"])
def test_what_we_do_not_read_is_left_to_delta_rs(name: str) -> None:
    root = next(r for r in TABLES if _name(r) == name)
    assert _delta_log.load(_read(root), _versions(root)[-1]) is None


def test_our_lake_read_from_checkpoints_and_entries_equals_delta_rs(lake: dr.Lake,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """Versions of one of our tables before, at and after checkpoints (the interval lowered to 3)."""
    ctx = lake.table("orders")
    DeltaTable(ctx.uri).alter.set_table_properties({"delta.checkpointInterval": "3"})
    for i in range(7):
        lake.ingest(jsonl([up(f"o{i}", 10 * i + 1, day=40 + i % 3), up(f"p{i % 2}", 10 * i + 2, day=41)]))
    root = Path(ctx.uri)
    assert len(list((root / "_delta_log").glob("*.checkpoint.parquet"))) >= 2
    for version in _versions(root):
        ours = _delta_log.load(_read(root), version)
        theirs = _theirs(root, version)
        assert ours is not None and theirs is not None, version
        _same(ours, theirs)


def test_a_damaged_last_checkpoint_or_checkpoint_falls_back(lake: dr.Lake, tmp_path: Path) -> None:
    ctx = lake.table("orders")
    for i in range(3):
        lake.ingest(jsonl([up(f"o{i}", i + 1, day=40 + i)]))
    DeltaTable(ctx.uri).create_checkpoint()
    root = tmp_path / "t"
    shutil.copytree(ctx.uri, root)
    version = _versions(root)[-1]
    theirs = _theirs(root, version)
    assert theirs is not None
    (root / "_delta_log" / "_last_checkpoint").write_bytes(b"\xff\x00not json")  # replayed from version 0
    ours = _delta_log.load(_read(root), version)
    assert ours is not None
    _same(ours, theirs)
    (root / "_delta_log" / "_last_checkpoint").write_text(json.dumps({"version": version, "size": 3}))
    (root / "_delta_log" / f"{version:020d}.checkpoint.parquet").write_bytes(b"PAR1 hostile bytes PAR1")
    assert _delta_log.load(_read(root), version) is None  # the caller asks delta-rs, which says why


def test_a_checkpoint_with_a_column_named_numrecords(tmp_path: Path) -> None:
    """numRecords is read as the stats' own field, not a column's statistic of that name."""
    uri = str(tmp_path / "t")
    from deltalake import write_deltalake

    data = pa.table({"numRecords": pa.array([5, 7, 9], pa.int64()), "p": pa.array([1, 1, 2], pa.int32())})
    write_deltalake(uri, data, partition_by=["p"])
    DeltaTable(uri).create_checkpoint()
    ours = _delta_log.load(_read(Path(uri)), 0)
    theirs = _theirs(Path(uri), 0)
    assert ours is not None and theirs is not None
    _same(ours, theirs)
    assert sorted(ours.frame["num_records"].to_list()) == [1, 2]


def test_a_string_partition_with_empty_and_escaped_values(tmp_path: Path) -> None:
    uri = str(tmp_path / "t")
    from deltalake import write_deltalake

    data = pa.table({"v": pa.array([1, 2, 3, 4], pa.int64()),
                     "s": pa.array(["a b", None, "x/y%z", "plain"], pa.string())})
    write_deltalake(uri, data, partition_by=["s"])
    write_deltalake(uri, data.slice(0, 2), partition_by=["s"], mode="append")
    DeltaTable(uri).create_checkpoint()
    write_deltalake(uri, data.slice(2, 2), partition_by=["s"], mode="append")
    for version in (1, 2):
        ours = _delta_log.load(_read(Path(uri)), version)
        theirs = _theirs(Path(uri), version)
        assert ours is not None and theirs is not None
        _same(ours, theirs)
        assert ours.frame["partition.s"].null_count() == 2  # the null partition (one in each of two writes), not ""
    assert pl.Series(["a b", "x/y%z"]).is_in(ours.frame["partition.s"].implode()).all()


def test_numrecords_is_the_stats_own_field_whatever_the_key_order() -> None:
    """Our stats sort their keys: a column named numRecords has its statistics before the file's count."""
    stats = ['{"maxValues": {"numRecords": 9}, "minValues": {"numRecords": 8}, "numRecords": 2}',
             '{"numRecords": 3}', None]
    values = pa.array([[("p", "1")], [("p", "")], []], pa.map_(pa.string(), pa.string()))
    add = pa.StructArray.from_arrays([pa.array(["a", "b", "c"]), pa.array([1, 2, 3], pa.int64()), values,
                                      pa.array(stats)], names=["path", "size", "partitionValues", "stats"])
    files = _delta_log._checkpoint_files(add)
    assert files["num_records"].to_list() == [2, 3, None]
    assert files["partition.p"].to_list() == ["1", "", None]  # text; `load` reads "" as the null partition
    assert [_delta_log._num_records(s) for s in stats] == [2, 3, None]  # the JSON entries' reader


def test_an_empty_partition_value_in_a_checkpoint_is_the_null_partition(lake: dr.Lake) -> None:
    lake.ingest(jsonl([up("a", 1, day=40)]))
    ctx = lake.table("orders")
    root = Path(ctx.uri)
    first = next(root.glob("event_day=40/*.parquet"))
    (first.parent / "copy.parquet").write_bytes(first.read_bytes())
    add = {"path": "event_day=40/copy.parquet", "partitionValues": {"event_day": ""},
           "size": first.stat().st_size, "modificationTime": 1, "dataChange": True, "stats": None}
    (root / "_delta_log" / f"{2:020d}.json").write_text(
        json.dumps({"commitInfo": {"operation": "WRITE"}}) + "\n" + json.dumps({"add": add}) + "\n")
    DeltaTable(ctx.uri).create_checkpoint()
    ours, theirs = _delta_log.load(_read(root), 2), _theirs(root, 2)
    assert ours is not None and theirs is not None
    _same(ours, theirs)
    assert ours.frame["partition.event_day"].null_count() == 1


def test_a_long_replay_without_a_checkpoint_is_left_to_delta_rs(lake: dr.Lake,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    for i in range(3):
        lake.ingest(jsonl([up(f"o{i}", i + 1, day=40)]))
    root = Path(lake.table("orders").uri)
    assert _delta_log.load(_read(root), 3) is not None
    monkeypatch.setattr(_delta_log, "MAX_REPLAY", 3)  # versions 0..3 are 4 entries to replay
    assert _delta_log.load(_read(root), 3) is None and _delta_log.load(_read(root), 2) is not None


@pytest.mark.parametrize("odd", ["stats as bytes", "partitionValues as a struct", "no metaData row"])
def test_a_checkpoint_of_an_unexpected_shape_is_left_to_delta_rs(tmp_path: Path, odd: str) -> None:
    """Another writer's checkpoint that is not what the protocol describes: `load` declines (the caller
    opens delta-rs's snapshot, which reads it or says what is wrong), it never raises its own error."""
    root = tmp_path / "t"
    (root / "_delta_log").mkdir(parents=True)
    schema = json.dumps({"type": "struct", "fields": [{"name": "p", "type": "integer", "nullable": True,
                                                       "metadata": {}}]})
    values = (pa.array([{"p": "1"}, None, None]) if odd == "partitionValues as a struct"
              else pa.array([[("p", "1")], None, None], pa.map_(pa.string(), pa.string())))
    stats = pa.array([b'{"numRecords": 1}', None, None]) if odd == "stats as bytes" \
        else pa.array(['{"numRecords": 1}', None, None])
    add = pa.StructArray.from_arrays([pa.array(["p=1/a.parquet", None, None]), pa.array([1, None, None], pa.int64()),
                                      values, stats], names=["path", "size", "partitionValues", "stats"],
                                     mask=pa.array([False, True, True]))
    meta = pa.array([None, None if odd == "no metaData row" else
                     {"id": "x", "schemaString": schema, "partitionColumns": ["p"], "configuration": []}, None],
                    pa.struct([("id", pa.string()), ("schemaString", pa.string()),
                               ("partitionColumns", pa.list_(pa.string())),
                               ("configuration", pa.map_(pa.string(), pa.string()))]))
    protocol = pa.array([None, None, {"minReaderVersion": 1, "minWriterVersion": 2}],
                        pa.struct([("minReaderVersion", pa.int32()), ("minWriterVersion", pa.int32())]))
    import pyarrow.parquet as pq

    pq.write_table(pa.table({"add": add, "metaData": meta, "protocol": protocol}),
                   root / "_delta_log" / f"{0:020d}.checkpoint.parquet")
    (root / "_delta_log" / "_last_checkpoint").write_text(json.dumps({"version": 0, "size": 3}))
    (root / "_delta_log" / f"{0:020d}.json").write_text("{}\n")
    assert _delta_log.load(_read(root), 0) is None


def test_removed_paths_match_the_listed_paths_of_an_encoded_partition(tmp_path: Path) -> None:
    """delta-rs lists add paths as the log holds them (URI-encoded); a commit's removed paths are given the
    same way, so a file removed and a file listed compare equal (the release packet's retained bytes)."""
    from deltalake import write_deltalake

    uri = str(tmp_path / "t")
    write_deltalake(uri, pa.table({"v": [1], "s": ["a b"]}), partition_by=["s"])
    write_deltalake(uri, pa.table({"v": [2], "s": ["a b"]}), partition_by=["s"], mode="overwrite")
    listed = [e.path for e in _delta.file_entries(uri, {}, 0)]
    removed = _delta.removed_files(uri, {}, 1)
    assert removed is not None and [p for p, _ in removed] == listed and "%2520" in listed[0]


_PATHS = st.sampled_from([f"day=1/p{i}.parquet" for i in range(6)])
_ADD = st.builds(lambda path, size, rows, day: {"path": path, "size_bytes": size, "num_records": rows,
                                                "partition": {"day": day}},
                 _PATHS, st.integers(0, 9), st.none() | st.integers(0, 9), st.sampled_from(["1", "2", "", "x"]))
_STEP = st.builds(lambda adds, removes: _delta_log.Actions(
    adds=adds, removes=[r for r in removes if r not in {a["path"] for a in adds}]),
    st.lists(_ADD, max_size=3), st.lists(_PATHS, max_size=3))


@given(st.lists(_PATHS, max_size=4, unique=True), st.lists(_STEP, max_size=5))
def test_advancing_over_many_commits_at_once_equals_one_commit_at_a_time(base: list[str],
                                                                          steps: list[_delta_log.Actions]) -> None:
    """`advance` moves a file frame over all the commits since in one filter and one concat: the rows (and
    their order) of applying the commits one at a time, each dropping the paths it removes or adds again and
    appending its adds (a path added twice by one commit stays twice), and it refuses a partition value
    that does not cast, as a commit applied alone would."""
    schema = {"path": pl.String, "size_bytes": pl.Int64, "num_records": pl.Int64, "partition.day": pl.Int32}
    frame = pl.DataFrame([(p, 1, None, 7) for p in base], schema=schema, orient="row")
    rows: list[tuple[str, int, int | None, int | None]] = [(p, 1, None, 7) for p in base]
    for step in steps:
        gone = {*step.removes, *(a["path"] for a in step.adds)}
        rows = [r for r in rows if r[0] not in gone]
        rows += [(a["path"], a["size_bytes"], a["num_records"], int(a["partition"]["day"] or 0) or None)
                 for a in step.adds if a["partition"]["day"] != "x"]
    if any(a["partition"]["day"] == "x" for step in steps for a in step.adds):
        with pytest.raises(pl.exceptions.PolarsError):
            _delta_log.advance(frame, steps)
        return
    moved = _delta_log.advance(frame, steps)
    assert moved is not None and moved.equals(pl.DataFrame(rows, schema=schema, orient="row"))
