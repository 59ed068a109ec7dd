"""Temp files live in one `_tmp` folder per storage root, and the writer start lists those folders only
(issue 14): never a walk of the lake. vacuum and erasure keep their full walks (tests/ingest/test_quarantine_text.py),
which also find the temp files an earlier version left next to their final names."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

import delta_release as dr
from delta_release import storage as storage_mod
from delta_release.quarantine import temp_sweep
from delta_release.storage import TEMP_DIR, Storage
from tests.conftest import jsonl, up
from tests.storage.conftest import ingest_killed_at, plant_temp


def _temps(root: Path) -> list[str]:
    return sorted(p.relative_to(root).as_posix() for p in root.rglob(".tmp-*"))


def test_writer_start_lists_the_temp_folders_and_never_walks_the_lake(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root = tmp_path / "lake"
    lake = dr.Lake.create(root)
    lake.ingest(jsonl([up("a", 1, day=3)]))
    lake_tmp = plant_temp(root / TEMP_DIR)
    table_tmp = plant_temp(root / "orders" / TEMP_DIR)
    legacy = [plant_temp(root / "orders" / "event_day=3"), plant_temp(root / "_raw")]  # an earlier version's places
    walked: list[str] = []
    real = os.scandir

    def counting(path: str) -> object:
        walked.append(str(path))
        return real(path)

    monkeypatch.setattr(storage_mod.os, "scandir", counting)
    ctx = lake.table("orders")
    removed = temp_sweep.sweep_at_writer_start(lake.storage, tables=[ctx.uri, lake.table_uri("telemetry")])
    assert sorted(t.path for t in removed) == [lake_tmp.relative_to(root).as_posix(),
                                                 table_tmp.relative_to(root).as_posix()]
    assert not lake_tmp.exists() and not table_tmp.exists() and all(p.exists() for p in legacy)
    base = root.resolve()
    # the lake root and `_index` listed (one level: a folder on another device would have its `_tmp`
    # listed too, tests/storage/test_temp_devices.py), then `_tmp` folders only: no day, bucket, index or ledger folder
    assert sorted(walked) == sorted([str(base), str(base / "_index"), str(base / TEMP_DIR),
                                     str(base / "orders" / TEMP_DIR), str(base / "telemetry" / TEMP_DIR)])
    monkeypatch.undo()

    # an ingest does the same through its writer start; vacuum walks the lake and removes the legacy ones
    lake_tmp, table_tmp = plant_temp(root / TEMP_DIR), plant_temp(root / "telemetry" / TEMP_DIR)
    lake.ingest(jsonl([up("b", 2, day=4)]))
    left = sorted(p.relative_to(root).as_posix() for p in legacy)
    assert _temps(root) == left
    report = lake.vacuum("orders", apply=True)
    assert sorted(t["path"] for t in report.temp_files) == left and _temps(root) == []


def test_a_table_outside_the_lake_has_its_own_temp_folder(tmp_path: Path) -> None:
    lake = Storage(str(tmp_path / "lake"))
    outside = tmp_path / "elsewhere" / "t"
    planted = plant_temp(outside / TEMP_DIR)
    removed = temp_sweep.sweep_at_writer_start(lake, tables=[str(outside)])
    assert [t.path for t in removed] == [str(planted)] and not planted.exists()


def test_every_write_goes_through_the_temp_folder_of_its_root(tmp_path: Path,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    lake = Storage(str(tmp_path / "lake"))
    index = lake.child("_index/orders/abc")
    table = Storage(str(tmp_path / "lake" / "orders"))
    moved: list[tuple[str, str]] = []
    for name in ("replace", "link"):
        real = getattr(os, name)

        def spy(src: str, dst: str, _real: object = real) -> None:
            moved.append((str(src), str(dst)))
            _real(src, dst)  # type: ignore[operator]

        monkeypatch.setattr(storage_mod.os, name, spy)
    lake.write_bytes("_upkeep/a.json", b"1")
    assert lake.write_once("_raw/b", b"2")
    tag = lake.read_tagged("_raw/b")
    assert tag is not None and lake.replace_if("_raw/b", b"3", tag[1])
    index.write_bytes("keys/c", b"4")
    table.put("event_day=1/d.parquet", b"5")
    temp_dirs = [src.rsplit("/", 1)[0] for src, _ in moved]
    lake_tmp, table_tmp = str(tmp_path / "lake" / TEMP_DIR), str(tmp_path / "lake" / "orders" / TEMP_DIR)
    assert temp_dirs == [lake_tmp] * 4 + [table_tmp]  # the index shares the lake's temp folder
    assert [dst.removeprefix(str(tmp_path / "lake") + "/") for _, dst in moved] == [
        "_upkeep/a.json", "_raw/b", "_raw/b", "_index/orders/abc/keys/c", "orders/event_day=1/d.parquet"]
    assert os.listdir(lake_tmp) == [] and os.listdir(table_tmp) == []
    assert (tmp_path / "lake" / "_raw" / "b").read_bytes() == b"3"


def test_a_stage_file_killed_in_its_temp_file_is_swept_by_the_next_writer(tmp_path: Path) -> None:
    root = tmp_path / "lake"
    dr.Lake.create(root).ingest(jsonl([up("first", 0, day=5)]))
    batch = tmp_path / "b.jsonl"
    batch.write_bytes(jsonl([up("second", 1, day=5)]))
    ingest_killed_at(root, batch, "storage.after_temp:event_day=5")
    (left,) = _temps(root)
    assert left.startswith("orders/_tmp/.tmp-")  # the table root's temp folder, not the day directory
    dr.Lake.open(root).ingest(jsonl([up("third", 2, day=6)]))
    assert _temps(root) == []
