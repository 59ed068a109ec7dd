"""Planning a one-hour telemetry query on the S3-compatible server (moto on 127.0.0.1): the gateway's cached
file list against a broad listing of the table prefix, with wall time and the S3 requests each one makes.

Requests are counted from moto's own access log (one line per HTTP request), so they include everything
delta-rs, pyarrow and our code send, not only the calls we make ourselves.

    python -m benchmarks.bench_planning_s3 WORKDIR HOURS FILES_PER_HOUR QUERIES
"""

from __future__ import annotations

import re
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from collections import Counter
from pathlib import Path
from typing import Any

from ._common import emit
from .bench_planning import p95

_REQUEST = re.compile(r'"(GET|PUT|POST|HEAD|DELETE) (\S+)')


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start_moto(work: Path) -> tuple[subprocess.Popen[bytes], str, Path]:
    port = _free_port()
    exe = shutil.which("moto_server", path=str(Path(sys.executable).parent)) or shutil.which("moto_server")
    cmd = [exe, "-H", "127.0.0.1", "-p", str(port)] if exe else [sys.executable, "-m", "moto.server", "-H",
                                                                  "127.0.0.1", "-p", str(port)]
    log = work / "moto.log"
    proc = subprocess.Popen(cmd, stdout=open(log, "wb"), stderr=subprocess.STDOUT)  # noqa: SIM115
    endpoint = f"http://127.0.0.1:{port}"
    for _ in range(200):
        try:
            urllib.request.urlopen(f"{endpoint}/moto-api/", timeout=1).read()
            return proc, endpoint, log
        except OSError:
            time.sleep(0.05)
    proc.kill()
    raise RuntimeError("moto_server did not start")


def bench_bucket(endpoint: str) -> tuple[dict[str, str], str]:
    """Create the `bench` bucket on the moto server at `endpoint`: its storage options and a lake URI in it."""
    import boto3

    options = {"AWS_ENDPOINT_URL": endpoint, "AWS_ALLOW_HTTP": "true", "AWS_ACCESS_KEY_ID": "bench",
               "AWS_SECRET_ACCESS_KEY": "bench", "AWS_REGION": "us-east-1"}
    boto3.client("s3", endpoint_url=endpoint, aws_access_key_id="bench", aws_secret_access_key="bench",
                 region_name="us-east-1").create_bucket(Bucket="bench")
    return options, "s3://bench/lake"



class RequestLog:
    """Counts the requests moto logged since the last mark, by kind (LIST, GET, PUT, ...)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.offset = 0

    def mark(self) -> None:
        self.offset = self.path.stat().st_size

    def since(self) -> dict[str, int]:
        with open(self.path, "rb") as f:
            f.seek(self.offset)
            text = f.read().decode(errors="replace")
        counts: Counter[str] = Counter()
        for method, url in _REQUEST.findall(text):
            if "/moto-api/" in url:
                continue
            kind = "LIST" if method == "GET" and ("list-type" in url or "prefix=" in url) else method
            counts[kind] += 1
        return dict(sorted(counts.items()))


def main(argv: list[str]) -> None:
    from delta_release.gateway.catalog import SqliteCatalog
    from delta_release.lake import Lake

    from .bench_apply import warm_imports
    from .bench_planning import build

    work, hours, files_per_hour, queries = Path(argv[0]), int(argv[1]), int(argv[2]), int(argv[3])
    work.mkdir(parents=True, exist_ok=True)
    warm_imports()
    proc, endpoint, log = start_moto(work)
    try:
        options, uri = bench_bucket(endpoint)
        catalog = work / "catalog.sqlite"
        t0 = time.perf_counter()
        build(uri, hours, files_per_hour, storage_options=options, catalog=SqliteCatalog(catalog))
        build_s = time.perf_counter() - t0
        lake = Lake.open(uri, storage_options=options, catalog=SqliteCatalog(catalog))
        gw = lake.gateway
        store = lake.table_storage("telemetry")
        hour = hours - 1
        requests = RequestLog(log)

        def gateway_plan() -> list[str]:
            return [e.path for e in gw.files("telemetry") if str(e.partition_values.get("hour")) == str(hour)]

        requests.mark()
        t0 = time.perf_counter()
        cold_files = gateway_plan()
        cold_s = time.perf_counter() - t0
        time.sleep(0.2)  # let moto flush its access log
        cold_req = requests.since()
        warm: list[float] = []
        requests.mark()
        for _ in range(queries):
            t0 = time.perf_counter()
            files = gateway_plan()
            warm.append(time.perf_counter() - t0)
        time.sleep(0.2)
        warm_req = {k: v / queries for k, v in requests.since().items()}
        listing: list[float] = []
        listed: list[Any] = []
        requests.mark()
        for _ in range(queries):
            t0 = time.perf_counter()
            listed = [o for o in store.list("") if not o.path.startswith("_delta_log/")]
            mine = [o.path for o in listed if o.path.startswith(f"hour={hour:02d}/")]
            listing.append(time.perf_counter() - t0)
        time.sleep(0.2)
        list_req = {k: v / queries for k, v in requests.since().items()}
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    emit({"build_s": build_s, "gateway_cold_s": cold_s, "gateway_cold_requests": cold_req,
          "gateway_p95_s": p95(warm), "gateway_requests_per_query": warm_req, "listing_p95_s": p95(listing),
          "listing_requests_per_query": list_req, "listing_objects": len(listed),
          "files_for_hour": len(files), "same_files": sorted(files) == sorted(mine) == sorted(cold_files)})


if __name__ == "__main__":
    main(sys.argv[1:])
