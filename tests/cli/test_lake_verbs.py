"""Every user verb is a `Lake` method (#38 item 3): the Python API answers what the command prints."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from click.testing import CliRunner

import delta_release as dr
from delta_release.cli.main import cli
from tests.conftest import jsonl, up


def _cli(lake: Path, *args: str) -> Any:
    res = CliRunner().invoke(cli, ["--lake", str(lake), "--json", *args])
    assert res.exit_code == 0, res.output
    return json.loads(res.stdout)


def test_the_inspection_verbs_answer_as_the_cli(lake: dr.Lake, tmp_path: Path) -> None:
    report = lake.ingest(jsonl([up("a", 1), up("b", 2, day=48)]) + b'{"order_id": "broken"\n')
    assert report.quarantined == 1
    root = tmp_path / "lake"
    listing = lake.quarantined(show=True)
    assert listing.to_json() == _cli(root, "quarantine", "--show")
    assert listing.records[0]["text_state"] == "shown" and "1 quarantine record(s)" in listing.text()
    assert lake.audit("47:48") == lake.audit((47, 48)) == _cli(root, "audit", "--days", "47:48")
    assert lake.audit("47")["days"] == [47, 47]
    status = lake.status().to_json()
    assert status == _cli(root, "status")
    assert [t["table"] for t in status["tables"]] == sorted(lake.tables)
    assert lake.resume_erasures().to_json()["erasures_completed"] == 0
    assert dr.Lake.exists(root) and not dr.Lake.exists(tmp_path / "elsewhere")
    frame, engine = lake.read_with("duckdb")
    assert engine == "duckdb" and sorted(frame["order_id"].to_list()) == ["a", "b"]
