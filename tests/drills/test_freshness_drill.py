"""`drill freshness --json`: the seed's workload and evidence, end to end through the CLI."""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner

from delta_release.cli.main import cli


def test_drill_freshness_passes_with_its_evidence(tmp_path: Path) -> None:
    result = CliRunner().invoke(cli, ["--lake", str(tmp_path / "scratch"), "--json", "drill", "freshness"])
    assert result.exit_code == 0, result.output
    out = json.loads(result.stdout)
    assert out["passed"] is True and all(out["checks"].values()) and len(out["checks"]) >= 15
    work = out["workload"]
    assert (work["hours"], work["files"]) == (47, 161)
    assert (work["inventory"]["hour=09"], work["inventory"]["hour=10"]) == (23, 3)
    base = out["baseline"]
    assert base["pruned_query"]["files_planned"] == 23 and base["broad_listing"]["data_files"] == 161
    assert base["pruned_query"]["bytes_scanned"] < base["broad_listing"]["bytes_full_scan"]
    hour = out["publish_one_hour"]
    assert hour["failed_gate"]["ok"] is False and hour["failed_gate"]["missing"] == [hour["omitted"]]
    assert hour["published"]["ok"] and hour["catalog_entry"]["label"] == "telemetry-48"
    stale = out["stale_reader"]
    assert stale["rows_the_stale_file_list_would_return"] == 0 and stale["refresh_policy"]["rows"] == 12
    assert stale["error_policy"]["type"] == "FreshnessError"
    assert out["location_change"]["error_policy"]["location"] == out["location_change"]["new"]
    assert out["planning"]["pruned_warm_cache"]["runs"] >= 20 and out["planning"]["pruned_warm_cache"]["p95_ms"] > 0
    assert out["engines"]["glob_over_hour"]["mismatch"] is True


def test_drill_refuses_a_lake_that_is_not_a_scratch_lake(tmp_path: Path) -> None:
    (tmp_path / "real").mkdir()
    (tmp_path / "real" / "data.txt").write_text("keep me")
    result = CliRunner().invoke(cli, ["--lake", str(tmp_path / "real"), "--json", "drill", "freshness"])
    assert result.exit_code == 2 and (tmp_path / "real" / "data.txt").exists()
