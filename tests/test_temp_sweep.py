"""The writer-start temp sweep is bounded (issue 14): the hot folders every time, the whole lake at most
once per FULL_EVERY_SECONDS; vacuum and erasure keep their full walks (tests/test_quarantine_text.py)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import jsonl, up

import delta_release as dr
from delta_release import storage as storage_mod
from delta_release.quarantine import temp_sweep
from delta_release.storage import HOST_TAG


def _dead_pid() -> int:
    done = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True,
                          text=True, check=True)
    return int(done.stdout)


def _plant(folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f".tmp-{HOST_TAG}-{_dead_pid()}-{'c' * 32}"
    path.write_bytes(b"payload")
    return path


def test_writer_start_walks_the_hot_folders_and_the_whole_lake_only_now_and_then(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root = tmp_path / "lake"
    lake = dr.Lake.create(root)
    lake.ingest(jsonl([up("a", 1, day=3)]))  # first writer start: a full walk, its time recorded
    assert (root / temp_sweep.MARK).exists()
    deep = _plant(root / "orders" / "event_day=3")
    hot = _plant(root / "_raw")
    walked: list[str] = []
    real = os.scandir

    def counting(path: str) -> object:
        walked.append(str(path))
        return real(path)

    monkeypatch.setattr(storage_mod.os, "scandir", counting)
    removed = temp_sweep.sweep_at_writer_start(lake.storage)
    assert [t.path for t in removed] == [hot.relative_to(root).as_posix()]
    assert not hot.exists() and deep.exists()  # the deep one waits for the next full walk
    assert walked and all(Path(p).relative_to(root).parts[0] in temp_sweep.HOT for p in walked)

    walked.clear()
    later = float(temp_sweep._last_full(lake.storage) or 0) + temp_sweep.FULL_EVERY_SECONDS + 1
    removed = temp_sweep.sweep_at_writer_start(lake.storage, now=later)
    assert [t.path for t in removed] == [deep.relative_to(root).as_posix()] and not deep.exists()
    assert any(Path(p).relative_to(root).parts[:1] == ("orders",) for p in walked if p != str(root))
    monkeypatch.undo()
    # an ingest started after a full walk still removes a killed write's temp file in the hot folders
    hot = _plant(root / "_quarantine")
    lake.ingest(jsonl([up("b", 2, day=4)]))
    assert not hot.exists()
