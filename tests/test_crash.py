"""Crash drill: SIGKILL a separate interpreter at every ingest/publish step (delta_release.faults)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import jsonl, up

import delta_release as dr
from delta_release import faults
from delta_release.drills.crash import POINTS, find_orphans, remove_orphans


def test_crash_point_is_a_no_op_when_not_armed() -> None:
    assert faults.armed() is None
    faults.crash_point("ingest.after_raw")
    with faults.crash_window("commit.during"):
        pass


def test_armed_crash_point_sigkills_the_process() -> None:
    code = ("from delta_release.faults import crash_point; crash_point('other'); print('alive', flush=True);"
            " crash_point('here'); print('not reached')")
    env = {**os.environ, faults.CRASH_ENV: "here"}
    proc = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=False)
    assert proc.returncode == -signal.SIGKILL
    assert proc.stdout == "alive\n"


def test_crash_window_kills_by_the_end_of_the_block() -> None:
    code = ("import time; from delta_release.faults import crash_window\n"
            "with crash_window('w'):\n    print('inside', flush=True)\nprint('not reached')")
    env = {**os.environ, faults.CRASH_ENV: "w", faults.DELAY_ENV: "30"}
    proc = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=False)
    assert proc.returncode == -signal.SIGKILL and proc.stdout == "inside\n"


def test_staged_file_is_invisible_and_found_as_orphan(lake: dr.Lake) -> None:
    lake.ingest(jsonl([up("a", 1, day=3), up("b", 2, day=4)]))
    before = lake.read().to_dicts()
    data = (Path(lake.table_uri("orders")) / "event_day=3")
    stray = next(data.glob("*.parquet")).read_bytes()
    (data / "part-killed-run-0000.parquet").write_bytes(stray)  # a staged file a killed run left behind
    assert lake.read().to_dicts() == before
    assert find_orphans(lake) == ["event_day=3/part-killed-run-0000.parquet"]
    _, removed = remove_orphans(lake)
    assert removed == ["event_day=3/part-killed-run-0000.parquet"] and find_orphans(lake) == []
    assert lake.read().to_dicts() == before


def test_drill_covers_every_step() -> None:
    names = {p.name for p in POINTS}
    assert len(names) >= 7
    assert {"ingest.after_raw", "stage.after_first_file", "ingest.after_staging", "ingest.after_gate",
            "commit.during", "ingest.after_commit", "publish.before_swap", "catalog.in_transaction"} <= names


@pytest.mark.slow
def test_drill_crash_cli(tmp_path: Path) -> None:
    proc = subprocess.run([sys.executable, "-m", "delta_release", "--lake", str(tmp_path / "scratch"), "drill",
                           "crash", "--json"], capture_output=True, text=True, timeout=600, check=False)
    result = json.loads(proc.stdout)
    failed = {p["step"]: [k for k, ok in p["checks"].items() if not ok] for p in result.get("points", [])
              if not p["passed"]}
    assert proc.returncode == 0 and result["passed"], (failed, result.get("error"))
    assert len(result["points"]) >= 7
    assert all(p["observed"]["returncode"] == -signal.SIGKILL for p in result["points"])
    states = {p["point"]: p["observed"]["state"] for p in result["points"]}
    assert states["ingest.after_gate"] == "before" and states["ingest.after_commit"] == "before"
    assert states["ingest.after_publish"] == "completed"
    staged = next(p for p in result["points"] if p["point"] == "stage.after_first_file")
    assert staged["observed"]["staged_orphans"] == 1 and len(staged["cleanup"]["removed"]) == 1
