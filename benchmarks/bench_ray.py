"""One process against Ray on the same file in parts: where the time goes, engine start apart.

    python -m benchmarks.bench_ray [--events 50000] [--days 30] [--parts 4] [--workers 2] [--repeats 1]

Builds a backfill-like file (`--events` upserts and deletes over `--days` days, a key seen ~4 times), seeds two
copies of one lake (same secret, so the same buckets) with a first day of orders, and ingests the file
into each, cut into `--parts` parts (DELTA_RELEASE_MAX_PART_BYTES):

- `local`: `Lake.ingest(path)`, the one-process loop (parts.py `ingest_parts_once`);
- `ray`: `Lake.ingest(path, executor="ray")` on a local cluster of `--workers` CPUs, started first and
  timed apart (`engine_start_s`). Inside the ingest: `map_s` (submit to the last map and same-position
  task), `reduce_s` (the reduce tasks: fold and stage), `commit_s` (the driver alone: upkeep, gate of the
  union, quarantine, the one commit, indexes, publication).

Per-worker throughput = file MB / (map_s + reduce_s) / workers: what a worker sustains while sharing the
machine with the others; `commit_s` is the committer's cost that does not shrink with more workers.
Prints one JSON object. On a shared 2-core machine the workers compete with each other and with other
load: read the figures as the shape of the cost, not a speed-up.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any


def history(events: int, seed: int = 7, days: int = 30) -> bytes:
    rnd = random.Random(seed)
    keys = max(1, events // 4)
    out = []
    for pos in range(1, events + 1):
        oid = f"ord-{rnd.randrange(keys):07d}"
        day = 1 + rnd.randrange(days)
        if rnd.random() < 0.05:
            ev: dict[str, Any] = {"schema_version": 2, "order_id": oid, "position": pos, "kind": "delete",
                                  "event_day": day}
        else:
            ev = {"schema_version": 2, "order_id": oid, "position": pos, "kind": "upsert",
                  "amount_cents": rnd.randrange(100_000), "event_day": day}
        out.append(json.dumps(ev).encode() + b"\n")
    return b"".join(out)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--events", type=int, default=50_000)
    ap.add_argument("--parts", type=int, default=4)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=1)
    ap.add_argument("--days", type=int, default=30, help="event days (files: days x 8 buckets)")
    a = ap.parse_args()

    import delta_release as dr
    from delta_release.distributed import ray_executor

    work = Path(tempfile.mkdtemp(prefix="bench-ray-"))
    try:
        path = work / "backfill.jsonl"
        path.write_bytes(history(a.events, days=a.days))
        size = path.stat().st_size
        os.environ["DELTA_RELEASE_MAX_PART_BYTES"] = str(size // a.parts + 1)
        base = dr.Lake.create(work / "base")
        base.ingest(history(2_000, seed=1))  # parent files for the fold
        res: dict[str, Any] = {"events": a.events, "file_mb": round(size / 2**20, 2), "workers": a.workers,
                               "local_s": [], "ray": []}

        import ray

        t0 = time.perf_counter()
        ray.init(num_cpus=a.workers, include_dashboard=False, log_to_driver=False)
        res["engine_start_s"] = round(time.perf_counter() - t0, 2)

        marks: dict[str, float] = {}
        real_build = ray_executor._RayPartsPlan.build

        def build(self: Any, ctx: Any, parent: int) -> Any:
            marks.setdefault("reduce_start", time.perf_counter())
            change = real_build(self, ctx, parent)
            marks["reduce_end"] = time.perf_counter()
            return change

        ray_executor._RayPartsPlan.build = build  # type: ignore[method-assign]
        for i in range(a.repeats):
            for name in ("local", "ray"):
                target = work / f"{name}-{i}"
                shutil.copytree(work / "base", target)
                lake = dr.Lake.open(target)
                marks.clear()
                t = time.perf_counter()
                report = lake.ingest(path, executor=name)
                total = time.perf_counter() - t
                if name == "local":
                    res["local_s"].append(round(total, 2))
                    res["parts"] = len(report.parts)
                    continue
                map_s = marks["reduce_start"] - t
                reduce_s = marks["reduce_end"] - marks["reduce_start"]
                commit_s = total - map_s - reduce_s
                res["ray"].append({"total_s": round(total, 2), "map_s": round(map_s, 2),
                                   "reduce_s": round(reduce_s, 2), "commit_s": round(commit_s, 2),
                                   "files": len(report.files),
                                   "per_worker_mb_s": round(size / 2**20 / (map_s + reduce_s) / a.workers, 2)})
        ray.shutdown()
        res["load_avg"] = os.getloadavg()
        print(json.dumps(res))
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
