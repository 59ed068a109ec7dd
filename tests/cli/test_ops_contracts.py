"""Issue 15 items 2, 5 and 6: progress only on a terminal, API argument checks, erase of a never-seen id,
the nearest readable version in refusals, the drills' common JSON keys and figures, the analyst example."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

import delta_release as dr
from delta_release.cli.main import cli
from delta_release.errors import ErasureExposureError, InputError
from tests.cli.conftest import ENV, pty_run
from tests.conftest import ORDERS, ROOT, jsonl, up


def test_api_validates_argument_types(lake: dr.Lake) -> None:
    lake.ingest(jsonl([up("a", 1)]))
    with pytest.raises(InputError, match="version must be an int"):
        lake.scan(version="2")  # type: ignore[arg-type]
    with pytest.raises(InputError, match="version=3"):
        lake.read(3)  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        lake.read("orders", 1)  # type: ignore[misc]  # version is keyword-only
    with pytest.raises(InputError, match=">= 0"):
        lake.scan("orders", -1)
    assert lake.read(version=1)["order_id"].to_list() == ["a"]


def test_erase_of_an_id_never_seen_needs_force(tmp_path: Path) -> None:
    lake = str(tmp_path / "lake")
    dr.Lake.open(lake, create=True).ingest(jsonl([up("ord-1", 1)]))
    res = CliRunner().invoke(cli, ["--lake", lake, "erase", "ord-typo"])
    assert res.exit_code == 3 and "never saw" in res.stderr and "--force" in res.stderr
    assert "ord-typo" not in res.output and len(res.stderr.strip().splitlines()) == 1
    assert dr.Lake.open(lake).erasures.entries() == []
    assert CliRunner().invoke(cli, ["--lake", lake, "erase", "ord-typo", "--force"]).exit_code == 0
    assert CliRunner().invoke(cli, ["--lake", lake, "erase", "ord-1"]).exit_code == 0  # seen: no --force needed


def test_refusals_name_the_nearest_readable_version(lake: dr.Lake) -> None:
    lake.ingest(jsonl([up("ord-1", 1)]))          # v1 holds ord-1
    lake.ingest(jsonl([up("ord-2", 2)]))          # v2 holds it too
    lake.erase("ord-1")                           # v3 without it
    with pytest.raises(ErasureExposureError, match="nearest readable version is 3"):
        lake.read(version=2)
    with pytest.raises(ErasureExposureError, match="nearest readable version is 0"):
        lake.read(version=1)  # 0 and 2... 2 is exposed too, so 0 is nearest
    with pytest.raises(ErasureExposureError, match="nearest readable version"):
        lake.rollback(1)


def test_drills_share_top_level_keys_and_print_figures(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    res = CliRunner().invoke(cli, ["--lake", "scratch", "--json", "drill", "erasure"])  # a relative lake
    assert res.exit_code == 0, res.output
    out = json.loads(res.stdout)
    assert list(out)[:4] == ["drill", "lake", "passed", "checks"]
    assert out["drill"] == "erasure" and out["lake"] == str(tmp_path / "scratch")
    text = CliRunner().invoke(cli, ["--lake", "scratch", "drill", "erasure"]).output
    assert "figures:" in text and ": " in text.split("figures:")[1]


def test_emit_drill_adds_the_keys_crash_lacked(capsys: pytest.CaptureFixture[str]) -> None:
    from delta_release.cli.base import Options
    from delta_release.cli.drills import emit_drill

    with pytest.raises(SystemExit) as info:  # a failed drill exits 3; its JSON still has every key
        emit_drill(Options(lake="rel", json=True), {"passed": False, "checks": {"x": False}, "points": [1]}, "crash")
    assert info.value.code == 3
    out = json.loads(capsys.readouterr().out)
    assert out["drill"] == "crash" and out["lake"] == os.path.abspath("rel") and out["points"] == [1]


def test_progress_on_a_terminal_only(tmp_path: Path) -> None:
    batch = str(ORDERS / "history.jsonl")
    out, tty = pty_run(["--lake", "l1", "ingest", "--create", batch], tmp_path)
    assert "ingest history.jsonl" in tty and "extracted 1209" in out  # progress on the terminal
    out, tty = pty_run(["--lake", "l2", "--json", "ingest", "--create", batch], tmp_path)
    quiet = [line for line in tty.splitlines() if line.strip() and not line.startswith("note: created a new lake")]
    assert quiet == [] and json.loads(out)["extracted"] == 1209  # --json: no progress (the creation note stays)
    piped = subprocess.run([sys.executable, "-m", "delta_release", "--lake", "l3", "ingest", "--create", batch],
                           cwd=tmp_path, env=ENV, capture_output=True, text=True, timeout=120)
    assert piped.returncode == 0 and "ingest history.jsonl" not in piped.stderr  # not a terminal: no progress
    assert all(line.startswith("note: ") for line in piped.stderr.splitlines())


def test_analyst_example(tmp_path: Path) -> None:
    lake = dr.Lake.open(tmp_path / "lake", create=True)
    for name in ("history.jsonl", "v2.jsonl", "v3.jsonl"):
        lake.ingest(ORDERS / name)
    chart = tmp_path / "chart.svg"
    res = subprocess.run([sys.executable, str(ROOT / "examples" / "analyst.py"), "--lake", str(tmp_path / "lake"),
                          "--out", str(chart), "--pinned", "1"], env=ENV, capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    published, pinned = lake.read(), lake.read(version=1)
    assert (f"published version 3: {published.height} orders; pinned version 1: {pinned.height} orders"
            in res.stdout)
    svg = chart.read_text()
    assert svg.startswith("<svg") and svg.count("<rect") > 10 and "published v3" in svg and "pinned v1" in svg
