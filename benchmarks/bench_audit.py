"""Audit pruning: a 2-day audit over a 365-day orders table. Figures from `delta_release.audit.audit_days`
(Delta log + parquet footers, cross-checked with Polars), plus the time of the audit query through the
gateway against a full scan.

    python -m benchmarks.bench_audit LAKE FIRST_DAY LAST_DAY
"""

from __future__ import annotations

import statistics
import sys
import time
from pathlib import Path
from typing import Any

from ._common import emit


def fallback_audit(lake: Any, first: int, last: int) -> dict[str, Any]:
    """The same figures from get_add_actions + parquet footers, for a tree without delta_release.audit."""
    import pyarrow.parquet as pq

    from delta_release import _delta

    uri = lake.table_uri("orders")
    version = lake.published("orders").version
    store = lake.table_storage("orders")
    files = rg = rg_c = 0
    total = scanned = 0
    cand = 0
    for e in _delta.file_entries(uri, lake.options, version):
        meta = pq.read_metadata(store.open_input(e.path))
        files += 1
        total += e.size
        rg += meta.num_row_groups
        day = e.partition_values.get("event_day")
        if day is not None and first <= int(day) <= last:
            cand += 1
            scanned += e.size
            rg_c += meta.num_row_groups
    return {"files": {"candidate": cand, "total": files}, "row_groups": {"candidate": rg_c, "total": rg},
            "bytes": {"scanned": scanned, "full_scan": total}, "rows": None}


def timed(fn: Any, reps: int = 5) -> float:
    ts = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t0)
    return statistics.median(ts)


def main(argv: list[str]) -> None:
    import polars as pl

    from .bench_apply import open_lake_copy, warm_imports

    path, first, last = Path(argv[0]), int(argv[1]), int(argv[2])
    warm_imports()
    lake = open_lake_copy(path)
    try:
        from delta_release.audit import audit_days

        t0 = time.perf_counter()
        res = audit_days(lake, "orders", first, last)
        source = "delta_release.audit.audit_days"
    except ImportError:
        t0 = time.perf_counter()
        res = fallback_audit(lake, first, last)
        source = "benchmark fallback (get_add_actions + footers)"
    audit_s = time.perf_counter() - t0
    days_total = len({e.partition_values.get("event_day") for e in lake.gateway.files("orders")})

    def audit_query() -> Any:
        return lake.scan("orders").filter(pl.col("event_day").is_between(first, last)) \
            .select(pl.len(), pl.col("amount_cents").sum()).collect()

    def full_query() -> Any:
        return lake.scan("orders").select(pl.len(), pl.col("amount_cents").sum()).collect()

    emit({"source": source, "audit": res, "audit_seconds": audit_s, "days_total": days_total,
          "audit_query_s": timed(audit_query), "full_query_s": timed(full_query)})


if __name__ == "__main__":
    main(sys.argv[1:])
