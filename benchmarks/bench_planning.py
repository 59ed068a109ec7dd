"""Planning a one-hour telemetry query: the gateway's cached file list (freshness check against the catalog,
then the cached Delta file list) against a broad listing of the table prefix holding the other hours.

    python -m benchmarks.bench_planning LAKE HOUR QUERIES
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Any

from ._common import emit


def build(lake_path: Path | str, hours: int, files_per_hour: int, **open_kw: Any) -> None:
    """Publish `hours` hours of telemetry, one manifest each, through the product's own publish path."""
    from delta_release.external.manifest import parse_manifest
    from delta_release.external.producer import produce_hour, upload
    from delta_release.external.publish import publish_manifest

    from ._common import create_lake

    lake = create_lake(lake_path, **open_kw)
    for hour in range(hours):
        doc, objects = produce_hour(hour, f"gen-{hour}", files=files_per_hour, rows=50)
        from delta_release.external.publish import ensure_table

        ensure_table(lake, "telemetry")
        upload(lake.table_storage("telemetry"), objects)
        report = publish_manifest(lake, parse_manifest(doc, source=f"hour-{hour}", tables=lake.tables))
        if not report.ok:
            raise RuntimeError(f"publishing hour {hour} failed: {json.dumps(report.gate.to_json())[:300]}")


def p95(xs: list[float]) -> float:
    s = sorted(xs)
    return s[min(len(s) - 1, int(round(0.95 * (len(s) - 1))))]


def main(argv: list[str]) -> None:
    from .bench_apply import open_lake_copy, warm_imports

    lake_path, hour, queries = Path(argv[0]), int(argv[1]), int(argv[2])
    warm_imports()
    lake = open_lake_copy(lake_path)
    gw = lake.gateway
    store = lake.table_storage("telemetry")

    def gateway_plan() -> list[str]:
        return [e.path for e in gw.files("telemetry") if str(e.partition_values.get("hour")) == str(hour)]

    before = gw.requests.snapshot()
    t0 = time.perf_counter()
    cold_files = gateway_plan()
    cold_s = time.perf_counter() - t0
    cold_req = gw.requests.since(before)
    warm: list[float] = []
    before = gw.requests.snapshot()
    for _ in range(queries):
        t0 = time.perf_counter()
        files = gateway_plan()
        warm.append(time.perf_counter() - t0)
    warm_req = {k: v / queries for k, v in gw.requests.since(before).items()}

    listing: list[float] = []
    listed: list[Any] = []
    for _ in range(queries):
        t0 = time.perf_counter()
        listed = [o for o in store.list("") if not o.path.startswith("_delta_log/")]
        mine = [o.path for o in listed if o.path.startswith(f"hour={hour:02d}/")]
        listing.append(time.perf_counter() - t0)
    dirs = len({o.path.split("/")[0] for o in listed})
    emit({"gateway_cold_s": cold_s, "gateway_cold_requests": cold_req, "gateway_p95_s": p95(warm),
          "gateway_requests_per_query": warm_req, "listing_p95_s": p95(listing),
          "listing_objects": len(listed), "listing_directories": dirs,
          "files_for_hour": len(files), "same_files": sorted(files) == sorted(mine) == sorted(cold_files)})


if __name__ == "__main__":
    main(sys.argv[1:])
