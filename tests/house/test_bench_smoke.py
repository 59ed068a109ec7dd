"""The benchmark runner still runs end to end (at a micro scale, in a tmp dir). Nothing here is timed:
benchmarks report figures, they never assert them."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]


# `make test` runs the runner end to end over the sections that need no S3 server and few child interpreters
# (about a tenth of the full micro run's time); planning (200 timed queries, and a moto S3 server) and the
# sections with an S3 server or many writer processes (catalog, versions, writers, memory) run in
# `make test-long`.
QUICK_SECTIONS = "apply,decode,audit,gate"


def _run(tmp_path: Path, *args: str) -> tuple[dict[str, Any], str]:
    env = {**os.environ, "DELTA_RELEASE_BENCH_DATA": str(tmp_path)}
    out = tmp_path / "RESULTS.md"
    proc = subprocess.run([sys.executable, "-m", "benchmarks.run", "--scale", "micro", *args, "--results", str(out)],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return json.loads((tmp_path / "micro" / "results.json").read_text()), out.read_text()


def _check_apply(results: dict[str, Any], text: str) -> None:
    runs = results["sections"]["apply"]["runs"]
    main = runs[str(results["sections"]["apply"]["main_rows"])]
    assert main["ours"]["ok"] and main["deltalake"]["ok"], main
    assert main["deltalake"]["check"] == main["ours"]["check"]  # same rows after the same batch
    assert "| apply |" in text
    # issue 14.6: each new section prints ours beside its alternative, with its target marked
    assert "deltalake merge from the same JSONL" in text
    assert "gate/floor" in text
    # the batch committed as version 99, a checkpoint: our writer's and delta-rs's, both written
    checkpoint = results["sections"]["apply"]["checkpoint"]
    assert checkpoint["ok"] and all(r["ok"] for r in checkpoint["runs"].values()), checkpoint
    assert "of delta-rs's checkpoint" in text
    # the batch committed as version 256, where the key index folds into a new base: both merges ran
    fold = results["sections"]["apply"]["index_fold"]
    assert fold["ok"] and fold["version"] == 256 and all(r["ok"] for r in fold["runs"].values()), fold
    assert "of the in-memory merge" in text


@pytest.mark.slow  # a few child interpreters
def test_bench_runner_runs_its_local_sections_at_micro_scale(tmp_path: Path) -> None:
    results, text = _run(tmp_path, "--only", QUICK_SECTIONS, "--skip", "pyiceberg,engines")
    assert set(results["sections"]) == set(QUICK_SECTIONS.split(","))
    for section in QUICK_SECTIONS.split(","):
        assert "error" not in results["sections"][section], results["sections"][section]
    _check_apply(results, text)


@pytest.mark.long  # a dozen child interpreters and two moto S3 servers
def test_bench_runner_runs_at_micro_scale(tmp_path: Path) -> None:
    results, text = _run(tmp_path, "--skip", "pyiceberg,engines")
    for section in ("apply", "decode", "audit", "gate", "planning", "catalog", "versions", "writers", "memory"):
        assert "error" not in results["sections"][section], results["sections"][section]
    assert results["sections"]["catalog"]["result"]["same_answer"] is True
    _check_apply(results, text)
    versions = results["sections"]["versions"]["runs"]
    assert all(r["ok"] and len(r["runs"]) == 2 for r in versions.values()), versions
    writers = results["sections"]["writers"]["runs"]
    assert set(writers) == {f"{k}|{m}" for k in ("ours", "deltalake") for m in ("disjoint", "overlapping")}
    assert all(r["ok"] for r in writers.values()), writers
    memory = results["sections"]["memory"]["runs"]
    ours = next(r for k, r in memory.items() if k.startswith("backfill_") and k.endswith("|ours"))
    assert ours["ok"] and ours["accepted"] == 2_000, memory
    # issue 34.4, where the time goes: each side's reading of the same file alone, beside the whole runs
    reads = {k.split("|")[1]: r for k, r in memory.items() if k.startswith("backfill_") and k.endswith("_read")}
    assert set(reads) == {"ours_read", "polars_read"}, memory
    assert all(r["ok"] and r["accepted"] == ours["accepted"] for r in reads.values()), reads
    assert "reading alone: ours (hash + strict decode, by part) vs polars.read_ndjson" in text
    for section in ("versions", "writers", "memory"):
        assert f"| {section} |" in text


def test_large_runs_keep_the_median_time_and_the_highest_peak() -> None:
    from benchmarks.run import _median_run

    runs = [{"ok": True, "seconds": s, "maxrss_mb": m} for s, m in ((90.0, 900.0), (80.0, 950.0), (85.0, 920.0))]
    got = _median_run(runs)
    assert (got["seconds"], got["maxrss_mb"], got["rounds_s"]) == (85.0, 950.0, [90.0, 80.0, 85.0])
    failed = {"ok": False, "error": "killed"}
    assert _median_run([*runs, failed]) is failed  # a failed run is reported, never hidden by the others
    assert _median_run(runs[:1]) is runs[0]
