"""Concurrent writers (issue 14.6f): N processes ingest N different batches into one lake at the same
moment, on disjoint days (writer i alone on its days) and on overlapping days (every writer on the same
days and the same orders). Every process must exit 0, and the table must equal the reference fold of the
base rows and every batch (per order the event with the highest position wins; a delete leaves a
tombstone). The alternative: the same N processes each running deltalake merge from the same JSONL file
on a plain Delta table holding the same base rows.

    python -m benchmarks.bench_writers run KIND(ours|deltalake) MODE(disjoint|overlapping) WORK N EVENTS
    python -m benchmarks.bench_writers worker KIND LAKE BATCH GATE_DIR      # one writer (internal)
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from ._common import RESULT_TAG, ROOT, emit

BASE_PER_DAY = 200
BASE_POSITION = 1_000
BATCH_POSITION = 10**9


def days_for(mode: str, n: int) -> int:
    return 2 * n if mode == "disjoint" else 4


def base_frame(days: int) -> Any:
    import polars as pl

    i = pl.int_range(0, days * BASE_PER_DAY, dtype=pl.Int64)
    return pl.select(
        pl.format("b-{}", i).alias("order_id"), (BASE_POSITION + i).alias("position"),
        (100 + i % 1000).alias("amount_cents"), pl.lit("USD").alias("currency"), pl.lit(False).alias("deleted"),
        (i // BASE_PER_DAY).cast(pl.Int32).alias("event_day"))


def batch(mode: str, w: int, n: int, events: int) -> bytes:
    """Writer `w`'s batch: 60% updates and 20% deletes of base orders on its days, 20% new orders. In the
    overlapping mode all writers pick from the same orders, with interleaved positions, so which writer
    wins an order depends on positions, not on commit order."""
    import random

    rng = random.Random(1000 + w)
    my_days = [2 * w, 2 * w + 1] if mode == "disjoint" else [0, 1, 2, 3]
    base_ids = [d * BASE_PER_DAY + k for d in my_days for k in range(BASE_PER_DAY)]
    picks = rng.sample(base_ids, min(len(base_ids), int(events * 0.8)))
    lines = []
    for e in range(events):
        pos = BATCH_POSITION + e * n + w
        if e < len(picks):
            oid, day = f"b-{picks[e]}", picks[e] // BASE_PER_DAY
            kind = "delete" if e % 4 == 3 else "upsert"
        else:
            oid, day, kind = f"w{w}-{e}", my_days[e % len(my_days)], "upsert"
        ev: dict[str, Any] = {"schema_version": 3, "order_id": oid, "position": pos, "kind": kind, "event_day": day}
        if kind == "upsert":
            ev["amount_cents"] = 100 + (e * 31 + w) % 100_000
            ev["currency"] = "EUR"
        lines.append(json.dumps(ev, separators=(",", ":")))
    return ("\n".join(lines) + "\n").encode()


def reference(days: int, batches: list[bytes]) -> Any:
    """The fold every writer's result must add up to: current rows (no tombstones), sorted."""
    import polars as pl

    from .bench_apply import jsonl_to_source

    rows = pl.concat([base_frame(days), *[pl.from_arrow(jsonl_to_source(b)) for b in batches]], how="vertical_relaxed")
    return current(rows.sort("position").group_by("order_id").last())


def current(df: Any) -> Any:
    import polars as pl

    return (df.filter(~pl.col("deleted")).select("order_id", "position", "amount_cents", "currency")
            .with_columns(pl.col("position").cast(pl.Int64), pl.col("amount_cents").cast(pl.Int64))
            .sort("order_id"))


# -- one writer process -----------------------------------------------------------------------------

def worker(kind: str, lake: Path, batch_path: Path, gate: Path) -> int:
    """Import, say ready, wait for the common start, write."""
    from .bench_apply import warm_imports

    warm_imports()
    if kind == "ours":
        import delta_release  # noqa: F401
        from delta_release.lake import Lake
    (gate / f"ready-{os.getpid()}").touch()
    while not (gate / "go").exists():
        time.sleep(0.005)
    t0 = time.time()
    try:
        if kind == "ours":
            report = Lake.open(lake).ingest(batch_path)
            out = {"version": report.version, "attempts": report.attempts,
                   "stale_parents": len(report.stale_parents),
                   "rebased": sum(bool(s.get("rebased")) for s in report.stale_parents)}
        else:
            from deltalake import DeltaTable

            from .bench_apply import clauses, jsonl_to_source, merge_on

            src = jsonl_to_source(batch_path)
            days = sorted(set(src.column("event_day").to_pylist()))
            on = merge_on(days)
            metrics = clauses(DeltaTable(str(lake)).merge(src, on, source_alias="s", target_alias="t")).execute()
            out = {"rows_updated": metrics.get("num_target_rows_updated")}
    except Exception as exc:  # noqa: BLE001 - the exit code and one line are the result
        print(f"{type(exc).__name__}: {str(exc).splitlines()[0][:200] if str(exc) else ''}", file=sys.stderr)
        return 3
    emit({**out, "start": t0, "end": time.time()})
    return 0


# -- the orchestration --------------------------------------------------------------------------------

def run(kind: str, mode: str, work: Path, n: int, events: int) -> dict[str, Any]:
    import shutil

    import polars as pl

    from ._common import create_lake

    days = days_for(mode, n)
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    frame = base_frame(days)
    lake_path = work / "lake"
    if kind == "ours":
        from delta_release.commit import Plan, replace_partitions, write

        lake = create_lake(lake_path)
        parts = {k[0]: df for k, df in frame.partition_by("event_day", as_dict=True).items()}

        class Base(Plan):
            def build(self, ctx: Any, parent: int) -> Any:
                return replace_partitions(ctx, parent, parts, operation="bench-base", batch_ids=["bench-base"],
                                          details={"changed_keys": frame.height})

        write(lake.table("orders"), Base())  # (the table's first commit: it leaves the key index built)
        del lake
    else:
        from deltalake import write_deltalake

        write_deltalake(str(lake_path), frame.to_arrow(), partition_by=["event_day"])
    batches = [batch(mode, w, n, events) for w in range(n)]
    paths = []
    for w, data in enumerate(batches):
        p = work / f"batch-{w}.jsonl"
        p.write_bytes(data)
        paths.append(p)
    gate = work / "gate"
    gate.mkdir()
    procs = [subprocess.Popen([sys.executable, "-m", "benchmarks.bench_writers", "worker", kind, str(lake_path),
                               str(p), str(gate)], cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True, env=os.environ.copy()) for p in paths]
    deadline = time.time() + 900
    while len(list(gate.glob("ready-*"))) < n and time.time() < deadline and all(p.poll() is None for p in procs):
        time.sleep(0.05)
    start_at = time.time()  # every process has imported and waits
    (gate / "go").touch()
    results = []
    for proc in procs:
        out, err = proc.communicate(timeout=3600)
        data = next((json.loads(ln[len(RESULT_TAG):]) for ln in reversed(out.splitlines())
                     if ln.startswith(RESULT_TAG)), None)
        results.append({"exit": proc.returncode, "result": data,
                        "error": None if proc.returncode == 0 else (err.strip().splitlines() or [""])[-1][:200]})
    ok = [r for r in results if r["exit"] == 0 and r["result"]]
    late_start = max((r["result"]["start"] for r in ok), default=start_at) - start_at
    wall = max((r["result"]["end"] for r in ok), default=start_at) - start_at
    if kind == "ours":
        table = pl.scan_delta(str(lake_path / "orders")).collect()
    else:
        table = pl.scan_delta(str(lake_path)).collect()
    equal = current(table).equals(reference(days, batches))
    return {"kind": kind, "mode": mode, "writers": n, "events": events, "exit_codes": [r["exit"] for r in results],
            "exit0": sum(r["exit"] == 0 for r in results),
            "errors": sorted({r["error"] for r in results if r["error"]}),
            "wall_s": wall, "latest_start_s": late_start, "commits_per_s": len(ok) / wall if wall > 0 else None,
            "equals_reference": equal,
            "max_attempts": max((r["result"].get("attempts") or 0 for r in ok), default=None),
            "stale_parents": sum(r["result"].get("stale_parents") or 0 for r in ok),
            "rebased": sum(r["result"].get("rebased") or 0 for r in ok)}


def main(argv: list[str]) -> None:
    if argv[0] == "worker":
        raise SystemExit(worker(argv[1], Path(argv[2]), Path(argv[3]), Path(argv[4])))
    kind, mode, work, n, events = argv[1], argv[2], Path(argv[3]), int(argv[4]), int(argv[5])
    emit(run(kind, mode, work, n, events))


if __name__ == "__main__":
    main(sys.argv[1:])
