"""N concurrent writer processes (the real CLI) ingest one batch each into one lake, all started together.

    python -m benchmarks.bench_writers --lake /tmp/w --writers 16 --kind disjoint|overlapping

Reports every exit code, commits, retries, wall seconds, commits/s, and whether the result equals the
reference fold of all batches (none lost, none applied twice).
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import time
from pathlib import Path

CHILD = """
import os, sys, time
go = sys.argv[1]
from delta_release.cli.main import cli
while not os.path.exists(go):
    time.sleep(0.005)
cli(args=sys.argv[2:], prog_name="delta-release")
"""


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--lake", required=True)
    ap.add_argument("--writers", type=int, default=16)
    ap.add_argument("--kind", choices=["disjoint", "overlapping"], default="disjoint")
    args = ap.parse_args()
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
    from test_concurrency import current, disjoint_batches, expected, make_batches  # the tests' generators

    import delta_release as dr

    lake_dir = Path(args.lake)
    shutil.rmtree(lake_dir, ignore_errors=True)
    dr.Lake.create(lake_dir)
    batches = (disjoint_batches if args.kind == "disjoint" else make_batches)(args.writers, seed=16)
    files = []
    for i, b in enumerate(batches):
        f = lake_dir.parent / f"{lake_dir.name}-b{i}.jsonl"
        f.write_bytes(b)
        files.append(f)
    go = lake_dir.parent / f"{lake_dir.name}.go"
    go.unlink(missing_ok=True)
    procs = [subprocess.Popen([sys.executable, "-c", CHILD, str(go), "--lake", str(lake_dir), "--json", "ingest",
                               str(f)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for f in files]
    time.sleep(3.0)  # imports done before the start signal
    t0 = time.perf_counter()
    go.write_text("go")
    outs = [p.communicate(timeout=1800) for p in procs]
    wall = time.perf_counter() - t0
    codes = [p.returncode for p in procs]
    reports = [json.loads(o) for o, _ in outs if o.strip()]
    lake = dr.Lake.open(lake_dir)
    print(json.dumps({
        "writers": args.writers, "kind": args.kind, "exit_codes": codes, "all_exit_0": all(c == 0 for c in codes),
        "commits": lake.latest_version("orders"), "wall_seconds": round(wall, 2),
        "commits_per_second": round((lake.latest_version("orders") or 0) / wall, 3),
        "stale_parent_retries": sum(len(r.get("stale_parents", [])) for r in reports),
        "max_attempts_used": max((r.get("attempts", 0) for r in reports), default=0),
        "equals_reference_fold": current(lake) == expected(batches),
    }))


if __name__ == "__main__":
    main()
