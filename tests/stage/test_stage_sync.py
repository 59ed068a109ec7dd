"""Staged files are made durable in one batch before the gate and the commit: staging writes every file of
the candidate without an fsync, then fsyncs each file and each partition folder once (Storage.sync); a
kill between the writes and the syncs leaves nothing visible, and the rerun completes."""

from __future__ import annotations

import os
from pathlib import Path

import polars as pl
import pytest

import delta_release as dr
import delta_release.commit.writer as writer_mod
import delta_release.stage.candidate as cand_mod
import delta_release.storage as storage_mod
from delta_release.drills.crash import run_crash_drill
from delta_release.erasure.ledger import ErasureLedger
from delta_release.storage import Storage
from delta_release.tables import DEFAULT_TABLE, load_table_defs
from tests.conftest import jsonl, up
from tests.s3server import S3Server, s3server  # noqa: F401 - the fixture


def _groups(days: tuple[int, ...] = (1, 2)) -> list[tuple[int, pl.DataFrame]]:
    return [(day, pl.DataFrame({"order_id": [f"o{day}-{i}" for i in range(200)], "position": list(range(200)),
                                "amount_cents": [7] * 200, "currency": ["INR"] * 200, "deleted": [False] * 200,
                                "event_day": [day] * 200}, schema_overrides={"event_day": pl.Int32}))
            for day in days]


def _stage(root: Path) -> cand_mod.Candidate:
    storage = Storage(str(root))
    return cand_mod.stage_partitions(storage, table="orders", parent=0, batch_ids=["b"], partition_column="event_day",
                                     key="order_id", file_schema=load_table_defs()[DEFAULT_TABLE].file_schema(),
                                     partitions=_groups(), removes=[], now_ms=0, buckets=8,
                                     hasher=ErasureLedger(storage, b"k").subject_key)


def _record_fsyncs(monkeypatch: pytest.MonkeyPatch, events: list[tuple[str, str]], root: Path) -> None:
    """Every fsync of the process as ("fsync", path, parquet files under `root` at that moment)."""
    real = os.fsync

    def fsync(fd: int) -> None:
        path = os.readlink(f"/proc/self/fd/{fd}")
        events.append(("fsync", path))
        events.append(("on_disk", str(len(list(root.rglob("*.parquet"))))))
        real(fd)

    monkeypatch.setattr(os, "fsync", fsync)


@pytest.mark.skipif(not Path("/proc/self/fd").is_dir(), reason="names an fsynced descriptor through /proc")
def test_every_file_is_written_before_any_sync_then_each_file_and_folder_is_synced_once(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    events: list[tuple[str, str]] = []
    _record_fsyncs(monkeypatch, events, tmp_path)
    candidate = _stage(tmp_path)
    synced = [path for kind, path in events if kind == "fsync" and "/_tmp/" not in path]
    assert not any(kind == "fsync" and "/_tmp/" in path for kind, path in events)  # no fsync at each write
    files = {str(tmp_path / f.path) for f in candidate.files}
    folders = {str(tmp_path / "event_day=1"), str(tmp_path / "event_day=2")}
    assert len(files) == 16 and sorted(synced) == sorted([*files, *folders])  # each exactly once
    assert set(synced[:len(files)]) == files and set(synced[len(files):]) == folders  # files, then folders
    assert {n for kind, n in events if kind == "on_disk"} == {str(len(files))}  # all written before the first


def test_a_failed_sync_removes_every_staged_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    real = storage_mod._fsync

    def failing(path: str) -> None:
        if path.endswith("event_day=2"):
            raise OSError(5, "Input/output error")
        real(path)

    monkeypatch.setattr(storage_mod, "_fsync", failing)
    with pytest.raises(OSError, match="Input/output"):
        _stage(tmp_path)
    assert list(tmp_path.rglob("*.parquet")) == []


def test_the_writer_gates_and_commits_only_after_the_sync(lake: dr.Lake, monkeypatch: pytest.MonkeyPatch) -> None:
    events: list[str] = []
    real_sync, real_gate, real_commit = Storage.sync, writer_mod.gate_candidate, writer_mod._delta.commit

    def sync(self: Storage, rels: list[str]) -> None:
        events.append(f"sync {len(rels)}")
        real_sync(self, rels)

    monkeypatch.setattr(Storage, "sync", sync)
    monkeypatch.setattr(writer_mod, "gate_candidate", lambda *a, **kw: (events.append("gate"), real_gate(*a, **kw))[1])
    monkeypatch.setattr(writer_mod._delta, "commit",
                        lambda *a, **kw: (events.append("commit"), real_commit(*a, **kw))[1])
    report = lake.ingest(jsonl([up(f"o{i}", i + 1, day=40 + i % 3) for i in range(60)]))
    assert events == [f"sync {len(report.files)}", "gate", "commit"] and len(report.files) > 3


def test_a_kill_before_or_during_the_sync_leaves_nothing_visible_and_the_rerun_completes(tmp_path: Path) -> None:
    points = {"stage.before_sync", "storage.sync.after_files"}
    result = run_crash_drill(str(tmp_path / "scratch"), writers=("ingest", "ingest-parts"),
                             labels={"ingest": points, "ingest-parts": {"stage.before_sync"}})
    assert result["matrix"] == {"ingest": ["stage.before_sync", "storage.sync.after_files"],
                                "ingest-parts": ["stage.before_sync"]}
    assert result["passed"], [k for k, ok in result["checks"].items() if not ok]


@pytest.mark.integration
def test_on_an_object_store_staging_syncs_nothing(s3server: S3Server, tmp_path: Path,  # noqa: F811
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """A PUT is durable when it returns: the staged objects are committed with no fsync of anything."""
    from delta_release.gateway.catalog import SqliteCatalog

    lake = dr.Lake.create(f"s3://{s3server.new_bucket()}/lake", storage_options=s3server.options,
                          catalog=SqliteCatalog(tmp_path / "catalog.sqlite"))
    monkeypatch.setattr(storage_mod, "_fsync", lambda path: pytest.fail(f"fsync of {path} on an object store"))
    report = lake.ingest(jsonl([up(f"o{i}", i + 1, day=40 + i % 3) for i in range(30)]))
    assert report.version is not None and len(report.files) > 3 and len(lake.read()) == 30
