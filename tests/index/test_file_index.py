"""The file index (issue 14 item 1): path -> recorded sha256/size and the history's running totals, kept by
catch-up from its state file instead of a replay of every commit. Every answer is compared with the
whole-history reference (`history_files`, `history_totals`)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

import delta_release as dr
from delta_release import _delta, index
from delta_release.index import files as fidx
from delta_release.release.checks import recorded_checksums
from tests.conftest import jsonl, up


def build(tmp_path: Path, ingests: int = 5) -> dr.Lake:
    """A lake with several ingests (new files, rewritten partitions), an erasure (a rewrite of the erased
    subject's partition) and a repair-forward rollback."""
    lake = dr.Lake.create(tmp_path / "lake")
    for i in range(ingests):
        lake.ingest(jsonl([up(f"o{i}", 10 + 3 * i, day=i % 3), up("keep", 11 + 3 * i, day=7),
                           up("gone", 12 + 3 * i, day=i % 2)]))
    lake.erase("gone")
    lake.rollback(2, repair_forward=True)
    return lake


def every_path(lake: dr.Lake) -> list[str]:
    uri = lake.table_uri("orders")
    return sorted(fidx.history_files(uri, lake.options)) + ["event_day=1/never-registered.parquet"]


def fi(lake: dr.Lake) -> fidx.FileIndex:
    out = fidx.file_index(lake, "orders")
    assert out is not None
    return out


def assert_equal_to_history(lake: dr.Lake, index_: fidx.FileIndex | None = None) -> None:
    uri = lake.table_uri("orders")
    reference = fidx.history_files(uri, lake.options)
    got = (index_ or fi(lake)).lookup(every_path(lake))
    assert {p: r.sha256 for p, r in got.items()} == reference
    assert len(reference) >= 5
    totals = (index_ or fi(lake)).catch_up()
    want = fidx.history_totals(uri, lake.options)
    assert (totals.version, totals.bytes_added, totals.first_ts, totals.last_ts) == (
        want.version, want.bytes_added, want.first_ts, want.last_ts)
    assert want.bytes_added > 0 and want.last_ts > want.first_ts > 0


def index_dir(lake: dr.Lake) -> Path:
    table_id = _delta.table_id(lake.table_uri("orders"), lake.options)
    return lake.storage.local_path(f"_index/orders/{table_id}/files")


def no_history(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(*_: Any, **__: Any) -> Any:
        raise AssertionError("the whole history was read")

    monkeypatch.setattr(_delta, "history", refuse)


def test_lookups_and_totals_equal_the_whole_history(tmp_path: Path) -> None:
    lake = build(tmp_path)
    assert_equal_to_history(lake)
    # sizes and versions too: each path's newest registering commit
    newest: dict[str, tuple[int, int]] = {}
    for rec in _delta.history(lake.table_uri("orders"), lake.options):
        for f in (rec.evidence or {}).get("files", []):
            newest.setdefault(f["path"], (f["size"], rec.version))
    got = fi(lake).lookup(newest)
    assert {p: (r.size, r.version) for p, r in got.items()} == newest


def test_catch_up_reads_only_the_new_versions(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    lake = build(tmp_path, ingests=3)
    first = fi(lake)
    first.catch_up()
    assert first.rebuilds == 1
    before = lake.latest_version("orders")
    for i in range(3):
        lake.ingest(jsonl([up(f"n{i}", 100 + i, day=4)]))
    after = lake.latest_version("orders")
    assert before is not None and after == before + 3
    with monkeypatch.context() as m:
        no_history(m)
        again = fi(lake)
        again.catch_up()
        assert (again.rebuilds, again.versions_read) == (0, 3)
    assert_equal_to_history(lake)


def test_a_missing_index_is_rebuilt(tmp_path: Path) -> None:
    lake = build(tmp_path)
    fi(lake).catch_up()
    shutil.rmtree(index_dir(lake))
    fresh = fi(lake)
    assert_equal_to_history(lake, fresh)
    assert fresh.rebuilds == 1
    assert (index_dir(lake) / "state.json").is_file()


def test_a_stale_state_only_causes_more_work(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A racing writer that writes an older state after a newer one: the next catch-up re-reads the versions
    since that state (its files already cover them: nothing is counted twice), never the whole history."""
    lake = build(tmp_path, ingests=3)
    old = fi(lake)
    old_totals = old.catch_up()
    old_state = (index_dir(lake) / "state.json").read_bytes()
    for i in range(2):
        lake.ingest(jsonl([up(f"n{i}", 100 + i, day=4)]))
    fi(lake).catch_up()
    (index_dir(lake) / "state.json").write_bytes(old_state)  # the slow writer lands last
    assert fi(lake).state() == old_totals
    with monkeypatch.context() as m:
        no_history(m)
        again = fi(lake)
        again.catch_up()
        assert again.versions_read == 2
    assert_equal_to_history(lake)


def test_a_corrupt_state_or_file_is_rebuilt(tmp_path: Path) -> None:
    lake = build(tmp_path, ingests=3)
    fi(lake).catch_up()
    lake.ingest(jsonl([up("n", 100, day=4)]))
    fi(lake).catch_up()
    level0 = sorted(index_dir(lake).glob("d-*.fx"))
    assert level0
    level0[-1].write_bytes(b"DRFILES1 truncated")
    assert_equal_to_history(lake)
    (index_dir(lake) / "state.json").write_text("{not json")
    assert_equal_to_history(lake)
    for base in index_dir(lake).glob("b-*.fx"):
        base.write_bytes(b"")
    assert_equal_to_history(lake)


def test_merges_keep_the_answers_and_bound_the_files_read(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(fidx, "FAN", 2)
    monkeypatch.setattr(fidx, "GRACE_VERSIONS", 1)
    lake = build(tmp_path, ingests=2)
    fi(lake).catch_up()
    first_base = {p.name for p in index_dir(lake).glob("b-*.fx")}
    for i in range(12):  # one catch-up per commit, as after hourly ingests
        lake.ingest(jsonl([up(f"n{i % 4}", 100 + i, day=i % 5)]))
        fi(lake).catch_up()
    names = {p.name.split("-")[0] for p in index_dir(lake).glob("*.fx")}
    assert {"b", "d"} <= names
    assert {p.name for p in index_dir(lake).glob("b-*.fx")} - first_base  # level-2 files folded into a new base
    reader = fi(lake)
    assert_equal_to_history(lake, reader)
    reader.files_read = 0
    reader.lookup(every_path(lake))
    assert reader.files_read <= 3 * (2 - 1) + 1


def test_two_racing_index_objects_agree(tmp_path: Path) -> None:
    lake = build(tmp_path, ingests=3)
    a, b = fi(lake), fi(lake)
    a.catch_up()
    lake.ingest(jsonl([up("n", 100, day=4)]))
    v = lake.latest_version("orders")
    assert v is not None
    b.catch_up(v)  # b writes d-v-v and the state at v
    a.catch_up(v)  # a finds it done
    lake.ingest(jsonl([up("m", 101, day=5)]))
    a.catch_up(v + 1)
    assert b.state() is not None
    assert_equal_to_history(lake, b)


def test_the_index_holds_no_subject_id(tmp_path: Path) -> None:
    lake = build(tmp_path)
    fi(lake).catch_up()
    for path in index_dir(lake).iterdir():
        data = path.read_bytes()
        assert b"gone" not in data and b"keep" not in data


def test_results_equal_with_indexes_off(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    lake = build(tmp_path)
    paths = every_path(lake)
    with_index = recorded_checksums(lake, "orders", paths)
    growth = fidx.history_growth(lake, "orders")
    monkeypatch.setenv(index.ENV_OFF, "1")
    assert fidx.file_index(lake, "orders") is None
    assert recorded_checksums(lake, "orders", paths) == with_index
    assert fidx.history_growth(lake, "orders") == growth
    assert len(with_index) == len(paths) - 1


def test_release_cost_uses_the_index_not_the_history(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from delta_release.release.packet import cost

    lake = build(tmp_path, ingests=3)
    v = lake.latest_version("orders")
    assert v is not None

    class Config:
        retained_snapshots = 2

    monkeypatch.setenv(index.ENV_OFF, "1")
    reference = cost(lake, Config(), v)  # type: ignore[arg-type]
    monkeypatch.delenv(index.ENV_OFF)
    fi(lake).catch_up()
    with monkeypatch.context() as m:
        no_history(m)
        assert cost(lake, Config(), v) == reference  # type: ignore[arg-type]
    assert reference["growth_per_day_bytes"] > 0


def test_the_state_names_the_table_it_was_built_for(tmp_path: Path) -> None:
    lake = build(tmp_path, ingests=2)
    fi(lake).catch_up()
    state = json.loads((index_dir(lake) / "state.json").read_text())
    assert state["table_id"] == _delta.table_id(lake.table_uri("orders"), lake.options)
    state["table_id"] = "another"
    (index_dir(lake) / "state.json").write_text(json.dumps(state))
    assert fi(lake).state() is None
    assert_equal_to_history(lake)


def test_retained_snapshot_bytes_equal_a_read_of_every_retained_snapshot(tmp_path: Path) -> None:
    from delta_release.release.packet import _retained_bytes

    lake = build(tmp_path)
    uri = lake.table_uri("orders")
    v = lake.latest_version("orders")
    assert v is not None
    for n in (1, 2, 4, v + 1):
        retained = range(max(0, v - n + 1), v + 1)
        want: dict[str, int] = {}
        for old in retained:
            want.update({e.path: e.size for e in _delta.file_entries(uri, lake.options, old)})
        got = _retained_bytes(uri, lake.options, retained, _delta.file_entries(uri, lake.options, v))
        assert got == want
    assert len(want) > len(_delta.file_entries(uri, lake.options, v))  # removes were counted


@pytest.mark.parametrize("text", [b"", b"[]", b"7", b'{"version": "x"}', b"\xff\xfe"])
def test_an_unreadable_watermark_reads_as_missing(tmp_path, text):
    """A watermark is written without fsync: after a power cut it may be empty or torn. Any such mark
    reads as missing (the index is rebuilt), never as an error or a version."""
    from delta_release.index.watermark import read_watermark
    from delta_release.storage import Storage

    store = Storage(str(tmp_path))
    store.write_bytes("mark.json", text)
    assert read_watermark(store, "mark.json", str(tmp_path / "no-table"), {}) is None
