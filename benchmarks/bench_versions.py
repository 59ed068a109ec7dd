"""Ingest cost against the table's history (issue 14.6a): the same fixed-size `Lake.ingest` timed at
versions 10, 1,000 and 5,000 of one lake.

The lake's history is written with the writer's own steps (stage + gate + evidence, a strict commit
carrying that evidence, publish, index bookkeeping), one small commit per version: each replaces one
day of `days` with `rows_per_day` orders and carries its own batch id, with the raw batch kept as an
ingest would. It skips decoding, the apply fold and re-opening the table per version, which is what
makes thousands of versions affordable; each checkpoint version itself is a real `Lake.ingest`, and
the timed steps are full `Lake.ingest`s. A copy of the lake is
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
    """Commit versions 1..max(checkpoints); copy the lake at each checkpoint.

    Version 1 writes every one of `days` days, so the table has its full size at every checkpoint and the
    checkpoints differ only in history (table size is row (b)'s measure, not this one's).

    Each version is the writer's own steps: `stage` (the plan's files written and gated, the evidence
    record), one strict commit with that evidence on the parent, `publish`, and the writer's index
    bookkeeping where the package has it (`record_indexes`). What it skips is the per-commit re-reading of
    the table: the Delta handle stays open (advanced by reading only the new commit) and the file a version
    replaces is known from the previous one. After the last version of each checkpoint one real
    `Lake.ingest` runs (untimed), so any index the package keeps has caught up as after hourly ingests."""
    import json as _json

    from deltalake import CommitProperties, DeltaTable
    from deltalake.transaction import AddAction, RemoveAction

    from delta_release import _delta
    from delta_release.commit import writer
    from delta_release.commit.writer import Change, Plan
    from delta_release.raw import batch_id_of

    from ._common import create_lake

    lake = create_lake(lake_path)
    ctx = lake.table("orders")
    handle = DeltaTable(ctx.uri, storage_options=ctx.storage_options or None)
    by_day = _files_by_day(ctx, int(handle.version()))
    record_indexes = getattr(writer, "record_indexes", None)
    commit_s: dict[int, float] = {}

    class HistoryCommit(Plan):
        def __init__(self, partitions: dict[int, Any], batch_id: str, removes: list[Any]) -> None:
            self.partitions, self.batch_id, self.removes = partitions, batch_id, removes

        def build(self, c: Any, parent: int) -> Any:
            return Change(operation="ingest", partitions=self.partitions, removes=self.removes,
                          batch_ids=[self.batch_id],
                          details={"changed_keys": sum(f.height for f in self.partitions.values())})

    version = int(handle.version())
    t_start = time.perf_counter()
    i = version
    for target in sorted(checkpoints):
        while version < target - 1 or (version < target and target == 1):
            i += 1
            day = i % days
            if version == 0:  # version 1 holds every day: later versions differ in history, not table size
                partitions = {d: history_frame(d - days, d, rows) for d in range(days)}  # positions below v2's
            else:
                partitions = {day: history_frame(i, day, rows)}
            data = b"".join(f.write_ndjson().encode() for f in partitions.values())
            batch_id = batch_id_of(data)
            t0 = time.perf_counter()
            lake.raw.put(data, extracted=rows * len(partitions), schema_versions=[3], received=lake.clock.now())
            removes = [e for d in partitions for e in by_day.get(str(d), [])]
            staged = writer.stage(ctx, HistoryCommit(partitions, batch_id, removes), version)
            actions: list[Any] = [AddAction(path=a.path, size=a.size, partition_values=a.partition_values,
                                            modification_time=a.modification_time, data_change=True, stats=a.stats)
                                  for a in staged.adds]
            actions += [RemoveAction(path=r.path, data_change=True, deletion_timestamp=staged.adds[0].modification_time,
                                     size=r.size, partition_values={k: None if v is None else str(v)
                                                                    for k, v in r.partition_values.items()})
                        for r in staged.removes]
            props = CommitProperties(max_commit_retries=0, custom_metadata={
                _delta.METADATA_KEY: _json.dumps(staged.evidence.to_json(), sort_keys=True)})
            handle.create_write_transaction(actions, mode="append", schema=handle.schema(),
                                            partition_by=[ctx.table.partition], commit_properties=props,
                                            post_commithook_properties=getattr(_delta, "POST_COMMIT", None))
            version += 1
            handle.update_incremental()  # reads the one new commit
            if int(handle.version()) != version:
                raise RuntimeError(f"the handle is at {handle.version()}, expected {version}")
            writer.publish(ctx, version, staged.evidence)
            if record_indexes is not None:
                record_indexes(ctx, version, staged)
            # every file the version added (one per bucket the day's rows fall in) is what the next
            # rewrite of the day removes: remembering only the first one left 7 of 8 bucket files live, so
            # the table's file count (and its duplicate rows) grew with the version count
            for d in partitions:
                by_day[str(d)] = [_delta.FileEntry(path=a.path, size=a.size, partition_values=a.partition_values,
                                                   num_records=None) for a in staged.adds
                                  if str(a.partition_values.get(ctx.table.partition)) == str(d)]
            if version % 250 == 0:
                commit_s[version] = round(time.perf_counter() - t0, 4)
                print(f"  history v{version} {commit_s[version]:.3f}s", file=sys.stderr, flush=True)
        # the checkpoint's last version: a real ingest, as every hourly one is
        t0 = time.perf_counter()
        report = lake.ingest(timed_batch(-1 - target, 20, days, 2, rows))
        version = int(report.version)
        commit_s[version] = round(time.perf_counter() - t0, 4)
        handle = DeltaTable(ctx.uri, storage_options=ctx.storage_options or None)
        by_day = _files_by_day(ctx, version)
        i = version
        link_copy(lake_path, lake_path.parent / f"{lake_path.name}@{version}")
    return {"versions": version, "build_seconds": round(time.perf_counter() - t_start, 1), "commit_s": commit_s}


def _files_by_day(ctx: Any, version: int) -> dict[str, list[Any]]:
    """The files of `version` by partition value (as the log writes it): what rewriting a day removes."""
    from delta_release import _delta

    out: dict[str, list[Any]] = {}
    for e in _delta.file_entries(ctx.uri, ctx.storage_options, version):
        value = e.partition_values.get(ctx.table.partition)
        out.setdefault(str(value), []).append(e)
    return out


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
