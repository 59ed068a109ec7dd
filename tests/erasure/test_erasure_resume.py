"""Issue 13, item 4: an erasure killed between its ledger entry and its commit completes itself.

The erase runs in a separate interpreter SIGKILLed at `erase.after_ledger` (and at the writer's
`ingest.after_gate`, which an erase passes through too). Until a writer runs, a read of the published
version is refused with a message naming the command that completes it; the next ingest completes it
before its own work; the subject is then gone from the latest version and its events stay blocked.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import polars as pl
import pytest
from click.testing import CliRunner

import delta_release as dr
from delta_release import faults
from delta_release.cli.main import cli
from tests.conftest import ROOT, jsonl, up

SUBJECT = "ord-gone"


def _killed_erase(root: Path, point: str) -> None:
    env = {**os.environ, faults.CRASH_ENV: point, "PYTHONPATH": str(ROOT)}
    proc = subprocess.run([sys.executable, "-m", "delta_release", "--lake", str(root), "erase", SUBJECT],
                          env=env, capture_output=True, text=True, check=False)
    assert proc.returncode == -signal.SIGKILL, proc.stderr


@pytest.mark.parametrize("point", ["erase.after_ledger", "ingest.after_gate"])
def test_a_sigkilled_erase_is_completed_by_the_next_ingest(tmp_path: Path, point: str) -> None:
    root = tmp_path / "lake"
    lake = dr.Lake.create(root)
    lake.ingest(jsonl([up(SUBJECT, 1, day=40), up("ord-keep", 2, day=40), up("ord-other", 3, day=41)]))
    published = lake.published("orders").version
    _killed_erase(root, point)

    lake = dr.Lake.open(root)
    entry = lake.erasures.entries()[0]
    assert entry.state == "pending" and lake.latest_version("orders") == published  # nothing committed
    with pytest.raises(dr.ErasureExposureError) as err:
        lake.read()
    message = str(err.value)
    assert f"delta-release --lake {root} erase --resume" in message and SUBJECT not in message
    res = CliRunner().invoke(cli, ["--lake", str(root), "--json", "read"])
    assert res.exit_code == 3 and "erase --resume" in json.loads(res.stdout)["error"]["message"]

    report = lake.ingest(jsonl([up("ord-new", 10, day=42), up(SUBJECT, 11, day=42)]))
    assert report.reasons.get("erased_subject") == 1
    entry = lake.erasures.entries()[0]
    assert entry.done and entry.version is not None and entry.version < report.version
    rows = lake.read()
    assert set(rows["order_id"].to_list()) == {"ord-keep", "ord-other", "ord-new"}
    ids = pl.scan_delta(lake.table_uri("orders")).select("order_id").collect()["order_id"].to_list()
    assert SUBJECT not in ids
    # the old version stays refused, no resume hint
    with pytest.raises(dr.ErasureExposureError,
                       match=r"would expose an erased subject .*; the nearest readable version is \d+") as err:
        lake.read(version=published)
    assert "--resume" not in str(err.value)


def test_erase_resume_command_completes_it(tmp_path: Path) -> None:
    root = tmp_path / "lake"
    lake = dr.Lake.create(root)
    lake.ingest(jsonl([up(SUBJECT, 1, day=40), up("ord-keep", 2, day=40)]))
    _killed_erase(root, "erase.after_ledger")
    res = CliRunner().invoke(cli, ["--lake", str(root), "--json", "erase", "--resume"])
    assert res.exit_code == 0 and json.loads(res.stdout)["erasures_completed"] == 1
    lake = dr.Lake.open(root)
    assert lake.read()["order_id"].to_list() == ["ord-keep"] and lake.erasures.entries()[0].done
    res = CliRunner().invoke(cli, ["--lake", str(root), "erase"])
    assert res.exit_code == 2
