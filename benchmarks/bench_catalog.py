"""Resolving the published version from a cold reader on the S3-compatible server (moto on 127.0.0.1).

Three ways a reader on another machine can learn "which version of orders may I read, and where":
- the lake-resident catalog (`_catalog/` objects: pointer GET + one start-after LIST, + a GET when the
  pointer lags), with PUBLICATIONS generations of history behind it;
- the SQLite catalog (a file on the writer's disk: no S3 request, but unreachable from another machine,
  which is why it cannot serve this reader; measured for the local cost only);
- opening the Delta log (DeltaTable at its latest version: LIST + the commits since the last checkpoint;
  it names the latest commit, not the published one, so a held release would be read).

A cold reader is a new client with no cache (new Storage/object-store client, new catalog handle or
DeltaTable) in a process whose imports are warm. S3 requests are counted from moto's own access log.

    python -m benchmarks.bench_catalog WORKDIR PUBLICATIONS COMMITS READS
"""

from __future__ import annotations

import re
import sys
import time
from pathlib import Path
from typing import Any

from ._common import create_lake, emit
from .bench_planning import p95
from .bench_planning_s3 import RequestLog, start_moto

_ANSI = re.compile(r"\x1b\[[0-9;]*m")


class Requests(RequestLog):
    """moto colours some access-log lines (206 ranged GETs) with ANSI codes; strip them before counting."""

    def since(self) -> dict[str, int]:
        text = _ANSI.sub("", self.path.read_bytes()[self.offset:].decode(errors="replace"))
        counts: dict[str, int] = {}
        for method, url in re.findall(r'"(GET|PUT|POST|HEAD|DELETE) (\S+)', text):
            if "/moto-api/" not in url:
                kind = "LIST" if method == "GET" and ("list-type" in url or "prefix=" in url) else method
                counts[kind] = counts.get(kind, 0) + 1
        return dict(sorted(counts.items()))


def _measure(fn: Any, reads: int, requests: Requests) -> dict[str, Any]:
    times: list[float] = []
    requests.mark()
    answer = None
    for _ in range(reads):
        t0 = time.perf_counter()
        answer = fn()
        times.append(time.perf_counter() - t0)
    time.sleep(0.3)  # let moto flush its access log
    counts = requests.since()
    return {"p50_s": sorted(times)[len(times) // 2], "p95_s": p95(times),
            "requests_per_read": {k: round(v / reads, 2) for k, v in counts.items()},
            "requests_total_per_read": round(sum(counts.values()) / reads, 2), "answer": answer}


def main(argv: list[str]) -> None:
    import boto3

    from delta_release import _delta
    from delta_release.clock import iso
    from delta_release.gateway.catalog import SqliteCatalog
    from delta_release.gateway.lake_catalog import LakeCatalog
    from delta_release.storage import Storage

    from .bench_apply import warm_imports

    work, publications, commits, reads = Path(argv[0]), int(argv[1]), int(argv[2]), int(argv[3])
    work.mkdir(parents=True, exist_ok=True)
    warm_imports()
    proc, endpoint, log = start_moto(work)
    try:
        options = {"AWS_ENDPOINT_URL": endpoint, "AWS_ALLOW_HTTP": "true", "AWS_ACCESS_KEY_ID": "bench",
                   "AWS_SECRET_ACCESS_KEY": "bench", "AWS_REGION": "us-east-1"}
        boto3.client("s3", endpoint_url=endpoint, aws_access_key_id="bench", aws_secret_access_key="bench",
                     region_name="us-east-1").create_bucket(Bucket="bench")
        uri = "s3://bench/lake"
        t0 = time.perf_counter()
        lake = create_lake(uri, storage_options=options)  # the lake-resident catalog (the s3:// default)
        assert isinstance(lake.catalog, LakeCatalog)
        sqlite = SqliteCatalog(work / "catalog.sqlite")
        sqlite.register("orders", location="orders", kind="delta")
        for c in range(commits):  # real commits: the Delta log a reader would otherwise open
            lake.ingest(b'{"schema_version": 2, "order_id": "ord-%d", "position": %d, "kind": "upsert", '
                        b'"amount_cents": 100, "event_day": 47}\n' % (c, c))
        version = lake.latest_version("orders") or 0
        while True:  # more publications (labelled releases of the same version): history to not scan
            cur = lake.catalog.current("orders")
            assert cur is not None
            if cur.generation >= publications:
                break
            lake.catalog.publish("orders", expected_generation=cur.generation, version=version,
                                 digest="bench", completed=iso(lake.clock.now()), label=f"r{cur.generation}")
        for pub in lake.catalog.publications("orders"):
            sqlite.publish("orders", expected_generation=pub.generation - 1 or None, version=pub.version,
                           digest=pub.digest, completed=pub.completed, label=pub.label)
        build_s = time.perf_counter() - t0
        requests = Requests(log)

        def lake_catalog() -> tuple[int, int, str]:
            cat = LakeCatalog(Storage(uri, options))
            pub, entry = cat.current("orders"), cat.table("orders")
            assert pub is not None and entry is not None
            return pub.generation, pub.version, entry.location

        def lake_catalog_publication_only() -> tuple[int, int]:
            pub = LakeCatalog(Storage(uri, options)).current("orders")
            assert pub is not None
            return pub.generation, pub.version

        def sqlite_catalog() -> tuple[int, int, str]:
            cat = SqliteCatalog(work / "catalog.sqlite")
            pub, entry = cat.current("orders"), cat.table("orders")
            assert pub is not None and entry is not None
            return pub.generation, pub.version, entry.location

        def delta_log() -> int | None:
            return _delta.latest_version(f"{uri}/orders", options)

        results = {"lake_catalog": _measure(lake_catalog, reads, requests),
                   "lake_catalog_publication_only": _measure(lake_catalog_publication_only, reads, requests),
                   "sqlite_catalog": _measure(sqlite_catalog, reads, requests),
                   "delta_log": _measure(delta_log, reads, requests)}
        # the pointer lags by 5 generations (a slow publisher's late hint write): one more GET, same answer
        lagging = lake.storage.read_bytes(f"_catalog/publications/orders/{publications - 5:020d}.json")
        lake.storage.put("_catalog/current/orders.json", lagging)
        results["lake_catalog_lagging_pointer"] = _measure(lake_catalog_publication_only, reads, requests)
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    same = (results["lake_catalog"]["answer"] == results["sqlite_catalog"]["answer"]
            and results["lake_catalog_lagging_pointer"]["answer"] == results["lake_catalog_publication_only"]["answer"]
            and results["delta_log"]["answer"] == version)
    emit({"build_s": build_s, "same_answer": same, "publications": publications, "commits": commits + 1, "reads": reads,
          "version": version, **results})


if __name__ == "__main__":
    main(sys.argv[1:])
