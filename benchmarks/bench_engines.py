"""A pinned read of one orders version with Polars, DuckDB (delta extension) and Sail, side by side.

    python benchmarks/bench_engines.py --rows 5000000

Builds a lake in a temporary folder: the orders table gets `--rows` rows in version 1 (partitioned by
event_day, plain Arrow types as our writer produces, about 3% tombstones) and a small append in version 2,
so the read is a real time-travel read of an older version. Each engine reads version 1 in full and runs
the current-view aggregate (tombstones excluded, sum per day); results are checked equal across engines.
Times are the best of `--repeat` runs after one warm-up; the first (cold) run is shown too.
Needs `pip install -e '.[interop]'` for DuckDB's delta extension and Sail; a missing engine is reported.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import polars as pl
import pyarrow as pa

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import delta_release as dr  # noqa: E402

AGG_SQL = ("SELECT event_day, count(*) AS n, sum(amount_cents) AS amount FROM t WHERE NOT deleted "
           "GROUP BY event_day ORDER BY event_day")
_SAIL: Any = None  # keep the server referenced: a collected SparkConnectServer shuts down


def build(root: Path, rows: int, days: int) -> tuple[dr.Lake, str]:
    from deltalake import write_deltalake

    lake = dr.Lake.create(root / "lake")
    uri = lake.table_uri("orders")
    schema = lake.tables["orders"].arrow_schema()
    i = pl.col("i")
    frame = pl.DataFrame({"i": pl.int_range(0, rows, eager=True, dtype=pl.Int64)}).select(
        order_id=pl.format("ord-{}", i.cast(pl.String).str.zfill(9)),
        position=i,
        amount_cents=(i * 7919) % 100_000,
        currency=pl.when(i % 3 == 0).then(pl.lit("INR")).when(i % 3 == 1).then(pl.lit("USD")).otherwise(pl.lit("EUR")),
        deleted=(i % 33) == 0,
        event_day=(i % days).cast(pl.Int32),
    )
    frame = frame.with_columns(pl.when(pl.col("deleted")).then(None).otherwise(pl.col(c)).alias(c)
                               for c in ("amount_cents", "currency"))
    write_deltalake(uri, frame.to_arrow().cast(schema), mode="append", partition_by=["event_day"])
    lake.publish_version("orders", 1, digest="bench")
    extra = frame.head(1000).with_columns(pl.col("position") + rows)
    write_deltalake(uri, extra.to_arrow().cast(schema), mode="append", partition_by=["event_day"])
    lake.publish_version("orders", 2, digest="bench")
    return lake, uri


def duckdb_reader(uri: str, version: int) -> tuple[Callable[[], pa.Table], Callable[[], pa.Table]]:
    import duckdb
    import duckdb_ext

    con = duckdb.connect(config={"autoinstall_known_extensions": "false", "autoload_known_extensions": "false"})
    con.execute(f"SET extension_directory = '{list(duckdb_ext.__path__)[0]}/extensions'")
    con.execute("LOAD delta")
    con.execute(f"ATTACH '{uri}' AS t (TYPE delta, VERSION {version})")

    def run(sql: str) -> pa.Table:
        result = con.sql(sql).arrow()
        return result.read_all() if hasattr(result, "read_all") else result

    return (lambda: run("SELECT * FROM t")), (lambda: run(AGG_SQL))


def sail_reader(uri: str, version: int) -> tuple[Callable[[], pa.Table], Callable[[], pa.Table]]:
    global _SAIL
    from pysail.spark import SparkConnectServer
    from pyspark.sql import SparkSession

    _SAIL = SparkConnectServer(ip="127.0.0.1", port=0)
    _SAIL.start(background=True)
    spark = SparkSession.builder.remote(f"sc://127.0.0.1:{_SAIL.listening_address[1]}").getOrCreate()

    def frame() -> Any:
        return spark.read.format("delta").option("versionAsOf", version).load(uri)

    def agg() -> pa.Table:
        frame().createOrReplaceTempView("t")
        return spark.sql(AGG_SQL).toArrow()

    return (lambda: frame().toArrow()), agg


def polars_reader(lake: dr.Lake, uri: str, version: int) -> tuple[Callable[[], pa.Table], Callable[[], pa.Table]]:
    def full() -> pa.Table:
        return lake.scan("orders", version, include_tombstones=True).collect().to_arrow()

    def agg() -> pa.Table:
        lf = lake.scan("orders", version, include_tombstones=True)
        return pl.SQLContext(t=lf).execute(AGG_SQL).collect().to_arrow()

    return full, agg


def timed(fn: Callable[[], pa.Table], repeat: int) -> tuple[float, float, pa.Table]:
    start = time.perf_counter()
    result = fn()
    cold = time.perf_counter() - start
    best = cold
    for _ in range(repeat):
        start = time.perf_counter()
        result = fn()
        best = min(best, time.perf_counter() - start)
    return cold, best, result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=5_000_000)
    parser.add_argument("--days", type=int, default=30)
    parser.add_argument("--repeat", type=int, default=2)
    parser.add_argument("--engines", default="polars,duckdb,sail")
    args = parser.parse_args(argv)
    root = Path(tempfile.mkdtemp(prefix="bench-engines-"))
    try:
        t0 = time.perf_counter()
        lake, uri = build(root, args.rows, args.days)
        print(f"built {args.rows:,} rows in version 1 (+1,000 in version 2) in {time.perf_counter() - t0:.1f} s",
              file=sys.stderr)
        version = 1
        factories = {"polars": lambda: polars_reader(lake, uri, version),
                     "duckdb": lambda: duckdb_reader(uri, version), "sail": lambda: sail_reader(uri, version)}
        rows: list[dict[str, Any]] = []
        reference: tuple[int, pl.DataFrame] | None = None
        for engine in args.engines.split(","):
            try:
                full, agg = factories[engine]()
            except ImportError as exc:
                rows.append({"engine": engine, "error": f"not installed: {exc}"})
                continue
            cold, best, table = timed(full, args.repeat)
            agg_cold, agg_best, agg_table = timed(agg, args.repeat)
            summary = pl.DataFrame(pl.from_arrow(agg_table)).cast({"event_day": pl.Int32, "n": pl.Int64,
                                                                    "amount": pl.Int64}).sort("event_day")
            if reference is None:
                reference = (table.num_rows, summary)
            same = table.num_rows == reference[0] and summary.equals(reference[1])
            rows.append({"engine": engine, "rows": table.num_rows, "cold_s": cold, "read_s": best,
                         "agg_cold_s": agg_cold, "agg_s": agg_best, "same_result": same})
        base = next((r for r in rows if r["engine"] == "polars" and "read_s" in r), None)
        print(f"\npinned read of orders version {version} ({args.rows:,} rows, {args.days} day partitions), "
              f"best of {args.repeat} after a cold run")
        print(f"{'engine':<8} {'rows':>10} {'cold s':>8} {'read s':>8} {'x polars':>9} {'agg cold':>9} "
              f"{'agg s':>7} {'x polars':>9}  same")
        for r in rows:
            if "error" in r:
                print(f"{r['engine']:<8} {r['error']}")
                continue
            ratio = f"{r['read_s'] / base['read_s']:.2f}" if base else "-"
            agg_ratio = f"{r['agg_s'] / base['agg_s']:.2f}" if base else "-"
            print(f"{r['engine']:<8} {r['rows']:>10,} {r['cold_s']:>8.3f} {r['read_s']:>8.3f} {ratio:>9} "
                  f"{r['agg_cold_s']:>9.3f} {r['agg_s']:>7.3f} {agg_ratio:>9}  {r['same_result']}")
        return 0 if all(r.get("same_result", True) for r in rows) else 1
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
