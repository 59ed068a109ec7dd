"""Ingest cost against table history: time `Lake.ingest` of a small batch at growing versions of one lake.

The lake is built with many small ingests (each a fresh batch of `--events` events over 365 days: half
updates of orders already stored, half new orders), and every ingest is timed. The report gives the
median time of `--window` ingests around each checkpoint version and the ratio last/first (target:
<= 1.2x, issue 14).

    python -m benchmarks.bench_history --lake /tmp/h --versions 10,1000,5000 [--events 200] [--window 10]
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import statistics
import time
from pathlib import Path


def batch(rng: random.Random, serial: int, events: int, known: list[str], days: int) -> bytes:
    lines = []
    for i in range(events):
        pos = serial * 1_000_000 + i
        if known and i % 2 == 0:
            oid = rng.choice(known)
        else:
            oid = f"o-{serial}-{i}"
            known.append(oid)
        lines.append(json.dumps({"schema_version": 3, "order_id": oid, "position": pos, "kind": "upsert",
                                 "amount_cents": rng.randrange(100, 100_000), "event_day": rng.randrange(days),
                                 "currency": "USD"}))
    return ("\n".join(lines) + "\n").encode()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--lake", required=True)
    ap.add_argument("--versions", default="10,1000,5000")
    ap.add_argument("--events", type=int, default=200)
    ap.add_argument("--days", type=int, default=365)
    ap.add_argument("--window", type=int, default=10)
    ap.add_argument("--seed", type=int, default=14)
    args = ap.parse_args()
    import delta_release as dr

    checkpoints = sorted(int(v) for v in args.versions.split(","))
    shutil.rmtree(args.lake, ignore_errors=True)
    lake = dr.Lake.create(args.lake)
    rng = random.Random(args.seed)
    known: list[str] = []
    times: dict[int, float] = {}
    serial = 0
    t_start = time.perf_counter()
    last = checkpoints[-1] + args.window // 2
    while True:
        serial += 1
        data = batch(rng, serial, args.events, known, args.days)
        t0 = time.perf_counter()
        report = lake.ingest(data)
        times[int(report.version)] = time.perf_counter() - t0
        if report.version >= last:
            break
    out = {"events_per_ingest": args.events, "days": args.days, "ingests": serial,
           "build_seconds": round(time.perf_counter() - t_start, 1), "at": {}}
    for v in checkpoints:
        lo, hi = max(1, v - args.window // 2), v + (args.window + 1) // 2
        window = [t for ver, t in times.items() if lo <= ver < hi]
        out["at"][str(v)] = round(statistics.median(window), 4)
    first, final = out["at"][str(checkpoints[0])], out["at"][str(checkpoints[-1])]
    out["ratio_last_first"] = round(final / first, 2)
    print(json.dumps(out))
    Path(args.lake + ".times.json").write_text(json.dumps(times))


if __name__ == "__main__":
    main()
