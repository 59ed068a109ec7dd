"""Issue 35 item 4: progress a person can plan by (bytes, phase and ETA on one bar for ingest, the release
run and the crash drill), `drill crash --writers`, and `rollback --dry-run`."""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path

import pytest
from click.testing import CliRunner

import delta_release as dr
from delta_release import progress
from delta_release.cli.main import cli
from delta_release.contract.parts import ENV_MAX_PART
from tests.cli.conftest import pty_run
from tests.conftest import ORDERS, jsonl, up
from tests.release.conftest import write_config

ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")


def frames(tty: str) -> list[str]:
    """Each line the terminal was drawn with, colours and cursor moves left out."""
    return [f.strip() for f in ANSI.sub("", tty).replace("\r", "\n").splitlines() if f.strip()]


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_work_weighs_phases_and_items_and_never_goes_back() -> None:
    clock = Clock()
    w = progress.Work("ingest f", 1000, phases=(("read", 0.5), ("apply", 0.3), ("commit", 0.2)), clock=clock)
    assert w.completed == 0 and w.eta() is None  # nothing done: no ETA yet (not a made-up one)
    w.item("part 1/2", 400)
    w.advance(200)  # half the read of part 1: 0.5 * 200 weighted units of 1000
    assert w.completed == pytest.approx(100)
    assert w.phase("apply") and w.completed == pytest.approx(200)  # the read of part 1 is done
    assert not w.phase("read")  # an earlier phase (a retry, a writer nested in a check) is ignored
    assert not w.phase("unknown") and w.phase_name == "apply"
    w.advance(10_000)  # capped at the item's bytes
    assert w.completed == pytest.approx(320)
    assert w.phase("commit") and w.description() == "ingest f · part 1/2 · commit"
    w.item("part 2/2", 600)  # part 1 is done, whatever phase it reached
    assert w.completed == pytest.approx(400)
    clock.now = 10.0
    assert w.eta() == pytest.approx(15.0)  # 400 of 1000 in 10 s: 600 more at that rate
    w.fraction(1, 2)  # half of the read phase of part 2
    assert w.completed == pytest.approx(550)
    w.item("done", 0)
    assert w.completed == pytest.approx(1000)


def test_progress_calls_are_no_ops_without_a_work() -> None:
    progress.phase("apply")
    progress.advance(10)
    progress.item("x", 1)
    progress.note("y")
    with progress.work("off", 10) as w:  # progress is off (not a terminal): the work is counted, not drawn
        progress.advance(5)
    assert w.completed == 0


def test_ingest_in_parts_shows_bytes_parts_phases_and_an_eta(tmp_path: Path) -> None:
    batch = tmp_path / "big.jsonl"
    batch.write_bytes(jsonl([up(f"ord-{i}", i, day=i % 7) for i in range(24_000)]))  # ~2 s: past the ETA's 0.5 s
    dr.Lake.create(tmp_path / "lake")
    out, tty = pty_run(["--lake", "lake", "ingest", str(batch)], tmp_path, env={ENV_MAX_PART: "100000"})
    parts = int(re.search(r"and (\d+) more parts", out).group(1)) + 1  # type: ignore[union-attr]
    assert parts >= 6, out  # enough work for a rate to go by, even on a fast machine
    seen = frames(tty)
    assert not any("0/?" in f for f in seen)
    for part in range(1, parts + 1):
        assert any(f"ingest big.jsonl · part {part}/{parts} · read and decode" in f for f in seen), part
    for phase in ("apply", "stage", "gate", "commit"):
        assert any(f"· part {parts}/{parts} · {phase}" in f for f in seen), phase
    size = progress.human_bytes(batch.stat().st_size)
    assert any(re.search(rf"\d[\d.,]* (B|KiB|MiB)/{re.escape(size)}", f) for f in seen)  # bytes done of the file's
    assert any(re.search(r"ETA \d+:\d\d", f) for f in seen)
    assert seen[-1].startswith("✓ ingest big.jsonl") or any(f.startswith("✓ ingest big.jsonl") for f in seen)
    out, tty = pty_run(["--lake", "lake", "--json", "ingest", str(batch)], tmp_path, env={ENV_MAX_PART: "100000"})
    assert frames(tty) == [] and json.loads(out)["duplicate"] is True  # --json: no progress


def test_release_run_shows_its_phases_on_one_bar(tmp_path: Path) -> None:
    config = write_config(tmp_path)
    out, tty = pty_run(["run", str(config)], tmp_path)
    assert "decision: SHIP" in out, out
    seen = frames(tty)
    size = sum(p.stat().st_size for p in (ORDERS / n for n in ("history.jsonl", "v2.jsonl", "v3.jsonl", "bad.jsonl")))
    assert any("release run · read and decode" in f and f"/{size / 1024:,.1f} KiB" in f for f in seen)
    for phase in ("checks · pinned_query", "checks · thresholds", "commit", "publish", "report"):
        assert any(f"release run · {phase}" in f for f in seen), phase
    assert any(re.search(r"ETA \d+:\d\d", f) for f in seen)
    assert not any("0/?" in f for f in seen)


def test_drill_crash_refuses_an_unknown_writer_naming_the_valid_ones(tmp_path: Path) -> None:
    res = CliRunner().invoke(cli, ["--lake", str(tmp_path / "scratch"), "drill", "crash", "--writers", "ingest,vacum"])
    assert res.exit_code == 2, res.output
    line = res.stderr.strip()
    assert "\n" not in line and "vacum" in line
    assert "ingest, ingest-parts, replay, erase, rollback, vacuum, publish, run" in line
    assert not (tmp_path / "scratch").exists()  # refused before any work


@pytest.mark.slow
def test_drill_crash_runs_a_subset_with_kills_and_an_eta(tmp_path: Path) -> None:
    out, tty = pty_run(["--lake", "scratch", "drill", "crash", "--writers", "vacuum"], tmp_path)
    assert "drill crash: PASSED" in out, out
    checks = [line.split()[-1] for line in out.splitlines() if line.startswith("  ok ") or "FAIL" in line]
    assert checks and all(c.startswith(("vacuum:", "every_declared")) for c in checks), checks
    assert not re.search(r"\bNone\b|\bTrue\b|\bFalse\b|\[|\{", out), out  # figures in words, no Python reprs
    seen = frames(tty)
    assert any("drill crash · vacuum (1/1): set-up and reference run" in f and "0/2" in f for f in seen)
    assert any("vacuum: kill 1/1 at vacuum.after_first_remove" in f and "1/2" in f for f in seen)
    assert any(re.search(r"ETA \d+:\d\d", f) for f in seen)
    assert not any("0/?" in f for f in seen)


def _tree_digest(root: Path) -> dict[str, str]:
    return {p.relative_to(root).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file()}


def test_rollback_dry_run_shows_the_plan_and_changes_nothing(tmp_path: Path) -> None:
    root = tmp_path / "lake"
    lake = dr.Lake.create(root)
    lake.ingest(jsonl([up("ord-1", 1, day=3), up("ord-2", 2, day=4), up("ord-3", 3, day=5)]))  # version 1
    lake.ingest(jsonl([up("ord-4", 4, day=6), up("ord-1", 5, amount=7, day=3)]))  # version 2
    lake.erase("ord-2")  # version 3: version 1 now holds an erased subject
    before = _tree_digest(root)
    args = ["--lake", str(root), "rollback", "--to", "1", "--repair-forward", "--dry-run"]
    res = CliRunner().invoke(cli, args)
    assert res.exit_code == 0, res.output
    assert _tree_digest(root) == before  # the Delta log (and every other file of the lake) byte-identical
    assert "dry run" in res.stdout and "nothing was committed" in res.stdout
    assert "repair-forward of version 1 would be committed on version 3 as version 4" in res.stdout
    assert "1 row(s) of 1 erased subject(s) left out" in res.stdout and "event_day=4" in res.stdout
    plan = json.loads(CliRunner().invoke(cli, [*args, "--json"]).stdout)
    assert plan["dry_run"] is True and plan["version"] is None and plan["restored_to"] == 1
    assert plan["partitions_rewritten"] == ["event_day=4"] and plan["rows_dropped"] == 1
    assert _tree_digest(root) == before
    assert all(f"- {p}" in res.stdout for p in plan["files_removed"])
    done = dr.Lake.open(root).rollback(1, repair_forward=True).to_json()  # the plan is what the rollback does
    assert done["files_removed"] == plan["files_removed"] and done["rows_dropped"] == plan["rows_dropped"]
    assert set(plan["files_added"]) <= set(done["files_added"])  # plus the rewritten partition's new file
    assert done["version"] == 4
    refused = CliRunner().invoke(cli, ["--lake", str(root), "rollback", "--to", "1", "--dry-run"])
    assert refused.exit_code == 3  # without --repair-forward the plan is refused as the rollback would be


def test_rollback_to_the_same_files_says_nothing_to_commit(tmp_path: Path) -> None:
    """It printed "committed as version None"."""
    root = tmp_path / "lake"
    lake = dr.Lake.create(root)
    lake.ingest(jsonl([up("ord-1", 1)]))
    lake.rollback(0)  # version 2: the empty table again
    for extra in (["--dry-run"], []):
        res = CliRunner().invoke(cli, ["--lake", str(root), "rollback", "--to", "0", *extra])
        assert res.exit_code == 0, res.output
        assert "version 0 holds the same files as the latest version 2" in res.stdout and "None" not in res.stdout
    assert dr.Lake.open(root).latest_version("orders") == 2
