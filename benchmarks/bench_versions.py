"""Ingest cost against the table's history (issue 14.6a): the same fixed-size `Lake.ingest` timed at
versions 10, 1,000 and 5,000 of one lake.

The lake's history is written through our own writer path (`commit.write`: stage, gate, strict commit,
publish, and whatever the writer records besides, e.g. indexes), one small commit per version: each
replaces one day of `days` with `rows_per_day` orders and carries its own batch id, with the raw batch
kept as an ingest would. That skips decoding and the apply fold per version, which is what makes
thousands of versions affordable; the timed step is the full `Lake.ingest`. A copy of the lake is
kept at each checkpoint (parquet hard-linked), so later runs reuse it.

    python -m benchmarks.bench_versions build LAKE CHECKPOINTS DAYS ROWS_PER_DAY   # -> LAKE@<version>
    python -m benchmarks.bench_versions time WORK EVENTS TOUCHED_DAYS INGESTS
"""

from __future__ import annotations

import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

from ._common import emit, link_copy

HISTORY_POSITION = 1_000_000
TIMED_POSITION = 10**12


def history_frame(i: int, day: int, rows: int) -> Any:
    import polars as pl

    return pl.DataFrame({
        "order_id": [f"h-{day:03d}-{k:04d}" for k in range(rows)],
        "position": [HISTORY_POSITION + i * rows + k for k in range(rows)],
        "amount_cents": [100 + (i * 7 + k) % 9_000 for k in range(rows)],
        "currency": ["USD"] * rows, "deleted": [False] * rows, "event_day": [day] * rows,
    }, schema={"order_id": pl.String, "position": pl.Int64, "amount_cents": pl.Int64, "currency": pl.String,
               "deleted": pl.Boolean, "event_day": pl.Int32})


def build(lake_path: Path, checkpoints: list[int], days: int, rows: int) -> dict[str, Any]:
    """Commit versions 1..max(checkpoints) through the writer; copy the lake at each checkpoint."""
    from delta_release.commit import Plan, replace_partitions, write
    from delta_release.raw import batch_id_of

    from ._common import create_lake

    lake = create_lake(lake_path)
    ctx = lake.table("orders")
    commit_s: dict[int, float] = {}

    class HistoryCommit(Plan):
        def __init__(self, i: int, frame: Any, batch_id: str) -> None:
            self.i, self.frame, self.batch_id = i, frame, batch_id

        def build(self, c: Any, parent: int) -> Any:
            day = self.i % days
            return replace_partitions(c, parent, {day: self.frame}, operation="ingest", batch_ids=[self.batch_id],
                                      details={"changed_keys": rows})

    version = ctx.latest_version() or 0
    t_start = time.perf_counter()
    i = version
    for target in sorted(checkpoints):
        while version < target:
            i += 1
            frame = history_frame(i, i % days, rows)
            data = frame.write_ndjson().encode()
            batch_id = batch_id_of(data)
            t0 = time.perf_counter()
            lake.raw.put(data, extracted=rows, schema_versions=[3], received=lake.clock.now())
            result = write(ctx, HistoryCommit(i, frame, batch_id))
            version = int(result.version)
            if version % 100 == 0 or version in checkpoints:
                commit_s[version] = round(time.perf_counter() - t0, 4)
                print(f"  history v{version} {commit_s[version]:.3f}s", file=sys.stderr, flush=True)
        link_copy(lake_path, lake_path.parent / f"{lake_path.name}@{target}")
    return {"versions": version, "build_seconds": round(time.perf_counter() - t_start, 1), "commit_s": commit_s}


def timed_batch(w: int, events: int, days: int, touched: int, rows: int) -> bytes:
    """Ingest number `w` of the timed series: `events` events over `touched` days spread across the
    year, half updates of stored orders, half new orders; positions above every stored one."""
    lines = []
    tdays = [(days * (j + 1)) // (touched + 1) for j in range(touched)]
    for e in range(events):
        day = tdays[e % touched]
        oid = f"h-{day:03d}-{(e // touched) % rows:04d}" if e % 2 == 0 else f"n-{w}-{e}"
        lines.append(json.dumps({"schema_version": 3, "order_id": oid, "position": TIMED_POSITION + w * 10**6 + e,
                                 "kind": "upsert", "amount_cents": 100 + e % 5000, "event_day": day,
                                 "currency": "EUR"}, separators=(",", ":")))
    return ("\n".join(lines) + "\n").encode()


def time_ingests(work: Path, events: int, touched: int, ingests: int, days: int, rows: int) -> dict[str, Any]:
    """In this fresh process: open the lake copy, then `ingests` ingests; each is timed (the first one
    pays what a new hourly process pays: cold handles, index catch-up)."""
    from .bench_apply import open_lake_copy, warm_imports

    warm_imports()
    t0 = time.perf_counter()
    lake = open_lake_copy(work)
    open_s = time.perf_counter() - t0
    start = lake.table("orders").latest_version()
    times = []
    for w in range(ingests):
        data = timed_batch(w, events, days, touched, rows)
        t0 = time.perf_counter()
        report = lake.ingest(data)
        times.append(time.perf_counter() - t0)
        assert report.version is not None and not report.duplicate, report
    return {"start_version": start, "open_s": open_s, "runs": [round(t, 4) for t in times],
            "first_s": times[0], "median_s": statistics.median(times)}


def main(argv: list[str]) -> None:
    if argv[0] == "build":
        lake, cps, days, rows = Path(argv[1]), [int(v) for v in argv[2].split(",")], int(argv[3]), int(argv[4])
        emit(build(lake, cps, days, rows))
    else:
        work, events, touched, ingests, days, rows = Path(argv[1]), *map(int, argv[2:7])
        emit(time_ingests(work, events, touched, ingests, days, rows))


if __name__ == "__main__":
    main(sys.argv[1:])
