"""The command line: erase, read --version (exit 3), history, rollback, vacuum, drill erasure."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from delta_release.cli.main import cli
from tests.conftest import jsonl, rm, up

SUBJECT = "ord-subject-47"


def run(lake: Path, *args: str) -> tuple[int, Any, str]:
    result = CliRunner().invoke(cli, ["--lake", str(lake), "--json", *args])
    out = json.loads(result.stdout) if result.stdout.strip() else None
    return result.exit_code, out, result.stdout + (result.stderr or "")


@pytest.fixture
def lake_dir(tmp_path: Path) -> Path:
    root = tmp_path / "lake"
    for i, events in enumerate([[up(SUBJECT, 1), up("a", 2)], [up("b", 3, day=48)], [rm(SUBJECT, 4)]]):
        batch = tmp_path / f"b{i}.jsonl"
        batch.write_bytes(jsonl(events))
        code, out, _ = run(root, "ingest", "--create", str(batch))
        assert code == 0 and out["version"] == i + 1
    return root


def test_erase_read_history_rollback_vacuum(lake_dir: Path, tmp_path: Path) -> None:
    code, out, text = run(lake_dir, "erase", SUBJECT)
    assert code == 0 and out["version"] == 4 and out["rows_removed"] == 1
    assert out["pending"] and all(set(p) >= {"what", "until"} for p in out["pending"])
    assert SUBJECT not in text

    code, out, text = run(lake_dir, "read", "--version", "2")
    assert code == 3 and out["error"]["type"] == "ErasureExposureError" and SUBJECT not in text
    code, out, _ = run(lake_dir, "read")
    assert code == 0 and [r["order_id"] for r in out["rows"]] == ["a", "b"]

    code, out, _ = run(lake_dir, "history")
    assert [v["allowed"] for v in out["versions"]] == [True, False, False, False, True]

    code, out, text = run(lake_dir, "rollback", "--to", "2")
    assert code == 3 and out["error"]["type"] == "ErasureExposureError"
    assert "would expose an erased subject" in out["error"]["message"] and SUBJECT not in text
    code, out, _ = run(lake_dir, "rollback", "--to", "2", "--repair-forward")
    assert code == 0 and out["mode"] == "repair-forward" and out["restored_to"] == 2 and out["version"] == 5
    code, out, _ = run(lake_dir, "rollback", "--to", "0")
    assert code == 0 and out["mode"] == "restore" and out["version"] == 6
    code, out, _ = run(lake_dir, "rollback", "--to", "9")
    assert code == 2 and out["error"]["type"] == "InputError"

    code, dry, _ = run(lake_dir, "vacuum", "--retain-versions", "2", "--replay-horizon-hours", "0")
    assert code == 0 and dry["dry_run"] and dry["removed_by_reason"]["erased_subject"] >= 1
    code, applied, _ = run(lake_dir, "vacuum", "--apply", "--retain-versions", "2", "--replay-horizon-hours", "0")
    assert code == 0 and applied["applied"] and applied["removed"] == dry["removed"]
    code, again, _ = run(lake_dir, "vacuum", "--apply", "--retain-versions", "2", "--replay-horizon-hours", "0")
    assert again["removed"] == []

    newer = tmp_path / "newer.jsonl"
    newer.write_bytes(jsonl([up(SUBJECT, 99, day=49)]))
    code, out, _ = run(lake_dir, "ingest", str(newer))
    assert code == 0 and out["reasons"] == {"erased_subject": 1} and out["version"] is None


def test_erase_plain_text_output(lake_dir: Path) -> None:
    result = CliRunner().invoke(cli, ["--lake", str(lake_dir), "erase", SUBJECT])
    assert result.exit_code == 0 and "still pending" in result.stdout and SUBJECT not in result.stdout


def test_drill_erasure_passes_in_a_scratch_lake(tmp_path: Path) -> None:
    code, out, text = run(tmp_path / "scratch", "drill", "erasure")
    assert code == 0 and out["passed"] is True
    for check in ("absent_after_erase", "absent_after_replay", "new_event_blocked", "pinned_read_refused",
                  "rollback_refused"):
        assert out["checks"][check] is True
    assert out["pinned_read"]["error"] == "ErasureExposureError"
    assert "ord-erase-47" not in text


def test_drill_refuses_a_lake_that_is_not_scratch(lake_dir: Path) -> None:
    code, out, _ = run(lake_dir, "drill", "erasure")
    assert code == 2 and out["error"]["type"] == "InputError"


def test_failed_drill_exits_3(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import delta_release.drills.erasure as drill

    monkeypatch.setattr(drill, "run_erasure_drill",
                        lambda uri: {"passed": False, "checks": {"absent_after_erase": False}})
    code, out, _ = run(tmp_path / "scratch", "drill", "erasure")
    assert code == 3 and out["passed"] is False
