"""The conflict drill from the seed: snapshot 41, a stale writer, a rebuilt candidate (issue 3)."""

from __future__ import annotations

import json

from click.testing import CliRunner

from delta_release.cli.main import cli


def test_conflict_drill_passes_with_the_contract_fields(tmp_path) -> None:  # type: ignore[no-untyped-def]
    res = CliRunner().invoke(cli, ["--lake", str(tmp_path / "scratch"), "--json", "drill", "conflict"])
    out = json.loads(res.stdout)
    assert res.exit_code == 0 and out["passed"] is True, out["checks"]
    assert out["parent"] == 41
    assert out["committed"] == {"writer": "B", "version": 42}
    assert (out["stale"]["writer"], out["stale"]["error"], out["stale"]["expected"], out["stale"]["found"]) == (
        "A", "StaleParentError", 41, 42)
    assert (out["rebuilt"]["parent"], out["rebuilt"]["version"]) == (42, 43)
    assert out["order_present"] is False
    assert out["higher_position_case"]["order_present"] is True
    # a release run staged on the same parent loses the race: refused, held, nothing of it in the log
    run = out["release_run_case"]
    assert run["ship"] == {"error": "StaleParentError", "expected": run["parent"], "found": run["parent"] + 1}
    assert run["latest"] == run["parent"] + 1 and run["log_unchanged_by_hold"] is True
    assert run["discarded_files"] >= 1 and run["order_present"] is False
    assert run["staged_files_referenced"] == [] and run["staged_files_left_on_storage"] == []
    # a second run wipes its own scratch lake and passes again
    again = CliRunner().invoke(cli, ["--lake", str(tmp_path / "scratch"), "--json", "drill", "conflict"])
    assert again.exit_code == 0


def test_drill_refuses_a_lake_that_is_not_scratch(tmp_path) -> None:  # type: ignore[no-untyped-def]
    (tmp_path / "real").mkdir()
    (tmp_path / "real" / "precious.txt").write_text("x")
    res = CliRunner().invoke(cli, ["--lake", str(tmp_path / "real"), "drill", "conflict"])
    assert res.exit_code == 2 and (tmp_path / "real" / "precious.txt").exists()
