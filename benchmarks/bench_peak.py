"""Peak memory (issue 14.6g and 17.4): a backfill of N events over 365 days into an empty lake, a file of normal
event lines and a file that is one single line, each of a given size. Ours: `Lake.ingest(path)`. The
alternative: `polars.read_ndjson` of the same file, the same fold by source position (per order the event with
the highest position; a delete leaves a tombstone row) and `write_deltalake` of the result (partitioned by
day), so both sides write the same current rows (`compare` checks it, issue 34.4). Each run is a fresh
process; its peak is VmHWM. A file over the part limit (256 MiB, or $DELTA_RELEASE_MAX_PART_BYTES) is ingested
as consecutive parts, one part's events in memory at a time (delta_release/parts.py): the result records the
part size and the number of parts.

    python -m benchmarks.bench_peak build KIND(backfill|lines|long) SIZE FILE   # SIZE: events or bytes
    python -m benchmarks.bench_peak run CONTENDER(ours|polars|ours_read|polars_read) FILE WORKDIR [keep]
    python -m benchmarks.bench_peak compare OURS_WORKDIR POLARS_WORKDIR   # same current rows on both sides?
"""

from __future__ import annotations

import shutil
import sys
import time
from pathlib import Path
from typing import Any

from ._common import emit, write_long_line

BLOCK = 8 << 20


def build(kind: str, size: int, path: Path) -> int:
    """Write the file block by block; returns its line count."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".partial")
    with open(tmp, "wb") as out:
        if kind == "long":
            lines = write_long_line(out, size, block_size=BLOCK)
        else:
            lines = _event_lines(out, size, by_bytes=kind == "lines")
    tmp.rename(path)
    return lines


def _event_lines(out: Any, size: int, *, by_bytes: bool) -> int:
    """v3 upserts over 365 days, 90% new orders and 10% updates of earlier ones (by events or bytes)."""
    import polars as pl

    step, start, written = 500_000, 0, 0
    while (written if by_bytes else start) < size:
        n = min(step, (size - written) // 120 + 1) if by_bytes else min(step, size - start)  # ~125 bytes a line
        i = pl.col("i")
        df = pl.DataFrame({"i": pl.int_range(start, start + n, dtype=pl.Int64, eager=True)}).select(
            pl.lit(3).alias("schema_version"),
            pl.format("bf-{}", pl.when(i % 10 == 9).then(i // 10).otherwise(i)).alias("order_id"),
            (i + 1).alias("position"), pl.lit("upsert").alias("kind"),
            (100 + i * 7919 % 1_000_000).alias("amount_cents"),
            (i % 365).cast(pl.Int32).alias("event_day"), pl.lit("EUR").alias("currency"))
        data = df.write_ndjson().encode()
        out.write(data)
        written += len(data)
        start += n
    return start


def run_ours(path: Path, work: Path) -> dict[str, Any]:
    from ._common import create_lake
    from .bench_apply import instrument

    shutil.rmtree(work, ignore_errors=True)
    lake = create_lake(work)
    ph = instrument(lake)  # where the time goes, for a row whose target is missed (a few wrapped calls per part)
    t0, c0 = time.perf_counter(), time.process_time()
    report = lake.ingest(path)
    seconds = time.perf_counter() - t0
    return {"seconds": seconds, "cpu_s": time.process_time() - c0, "extracted": report.extracted,
            "accepted": report.accepted, "quarantined": report.quarantined, "version": report.version,
            "phases": ph.table(seconds), "files": len(report.files), **_parts(report)}


def run_ours_read(path: Path, work: Path) -> dict[str, Any]:
    """Ours' reading of the file alone, as `Lake.ingest` reads it (`bench_memory.read_parts`: each part
    hashed and strictly decoded); nothing stored, folded or written."""
    from .bench_memory import read_parts

    t0, c0 = time.perf_counter(), time.process_time()
    out = read_parts(path)
    return {"seconds": time.perf_counter() - t0, "cpu_s": time.process_time() - c0, "extracted": out["extracted"],
            "accepted": out["accepted"], "quarantined": out["rejected"]}


def run_polars_read(path: Path, work: Path) -> dict[str, Any]:
    """The alternative's reading alone: `polars.read_ndjson` of the whole file, as `run_polars` reads it."""
    t0, c0 = time.perf_counter(), time.process_time()
    df = _read_ndjson(path)
    return {"seconds": time.perf_counter() - t0, "cpu_s": time.process_time() - c0, "extracted": df.height,
            "accepted": df.height, "quarantined": 0}


def _read_ndjson(path: Path) -> Any:
    import polars as pl

    from .bench_apply import JSONL_SCHEMA

    return pl.read_ndjson(path, schema={k: getattr(pl, v) for k, v in JSONL_SCHEMA.items()})


def _parts(report: Any) -> dict[str, Any]:
    """The part size in force and how many parts the file was received as (1: one batch)."""
    try:
        from delta_release.contract.parts import max_part_bytes
    except ImportError:  # a package without parts
        return {}
    return {"max_part_bytes": max_part_bytes(), "parts": len(getattr(report, "parts", None) or []) or 1}


def run_polars(path: Path, work: Path) -> dict[str, Any]:
    import polars as pl
    from deltalake import write_deltalake

    shutil.rmtree(work, ignore_errors=True)
    t0, c0 = time.perf_counter(), time.process_time()
    try:
        df = _read_ndjson(path)
        extracted = df.height
        df = (df.sort("position").unique("order_id", keep="last")  # the fold: last event by position wins
              .with_columns((pl.col("kind") == "delete").alias("deleted")))
        write_deltalake(str(work), df.drop("schema_version", "kind").to_arrow(), partition_by=["event_day"])
    except Exception as exc:  # noqa: BLE001 - all-or-nothing: report how it failed, with its peak
        return {"seconds": time.perf_counter() - t0, "failed": f"{type(exc).__name__}: {str(exc)[:100]}"}
    return {"seconds": time.perf_counter() - t0, "cpu_s": time.process_time() - c0, "extracted": extracted,
            "accepted": extracted, "quarantined": 0, "rows": df.height}


CONTENDERS = {"ours": run_ours, "polars": run_polars, "ours_read": run_ours_read, "polars_read": run_polars_read}


COMPARED = ("order_id", "position", "amount_cents", "event_day")


def compare(ours: Path, polars_dir: Path) -> dict[str, Any]:
    """Both sides' current rows (tombstones left out), sorted by order: equal or not, and the counts."""
    import polars as pl

    from delta_release.lake import Lake

    mine = Lake.open(ours).read().select(COMPARED)
    theirs = pl.read_delta(str(polars_dir)).filter(~pl.col("deleted")).select(COMPARED)
    mine, theirs = (f.with_columns(pl.col(c).cast(pl.Int64) for c in COMPARED[1:]).sort("order_id")
                    for f in (mine, theirs))
    return {"same_rows": mine.equals(theirs), "ours_rows": mine.height, "polars_rows": theirs.height}


def main(argv: list[str]) -> None:
    if argv[0] == "build":
        print(build(argv[1], int(argv[2]), Path(argv[3])))
        return
    if argv[0] == "compare":
        emit(compare(Path(argv[1]), Path(argv[2])))
        return
    contender, path, work = argv[1], Path(argv[2]), Path(argv[3])
    from .bench_apply import warm_imports

    warm_imports()
    import delta_release  # noqa: F401

    emit(CONTENDERS[contender](path, work))
    if argv[4:] != ["keep"]:  # kept for `compare`, which the runner calls next
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main(sys.argv[1:])
