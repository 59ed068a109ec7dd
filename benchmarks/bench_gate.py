"""The telemetry manifest gate against a bare listing of the same prefix, at growing file counts.

One hour holding N tiny files (4 records each) written by the simulated producer, and its manifest. The
gate (`delta_release.external.manifest.gate_manifest`: inventory listing, size, sha256, parquet footer, record
count and schema per file) against two references: `Storage.list` of the hour's prefix (the bare
listing), and the hashing floor: read and sha256 every file of the manifest, one process, one thread,
sequentially (issue 14 item 5: the gate, which may use every core, is to stay within 2x of it). Runs are
interleaved, so a machine that is busy with other work slows all three alike; the ratios are the figures
to read.

    python -m benchmarks.bench_gate LAKE MANIFEST
    python -m benchmarks.bench_gate build LAKE FILES ROWS
"""

from __future__ import annotations

import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

from ._common import emit


def build(lake_path: Path, files: int, hour: int = 7, rows: int = 4) -> Path:
    """A lake whose telemetry table holds one hour of `files` files of `rows` records; returns the
    manifest path. (`python -m benchmarks.bench_gate build LAKE FILES ROWS` builds one by hand, e.g.
    large files: 40 files of 500,000 rows.)"""
    from delta_release.external.producer import produce_hour, upload, write_manifest
    from delta_release.external.publish import ensure_table

    from ._common import create_lake

    lake = create_lake(lake_path)
    ensure_table(lake, "telemetry")
    manifest, objects = produce_hour(hour, f"bench-{files}", files=files, rows=rows)
    upload(lake.table_storage("telemetry"), objects)
    return write_manifest(lake_path / "manifest.json", manifest)


def main(argv: list[str]) -> None:
    from delta_release.external.manifest import gate_manifest, load_manifest

    from .bench_apply import open_lake_copy, warm_imports

    lake_path, manifest_path = Path(argv[0]), Path(argv[1])
    warm_imports()
    lake = open_lake_copy(lake_path)
    store = lake.table_storage("telemetry")
    prefix = json.loads(manifest_path.read_text())["files"][0]["path"].split("/")[0]
    reps = 5 if len(json.loads(manifest_path.read_text())["files"]) <= 10_000 else 1
    paths = [str(store.local_path(f["path"])) for f in json.loads(manifest_path.read_text())["files"]]
    list_ts, gate_ts, floor_ts = [], [], []
    report: Any = None
    for _ in range(reps):
        t0 = time.perf_counter()
        listed = store.list(prefix)
        list_ts.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        hash_floor(paths)
        floor_ts.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        report = gate_manifest(lake, load_manifest(manifest_path, lake.tables))
        gate_ts.append(time.perf_counter() - t0)
    emit({"files": len(listed), "listing_s": statistics.median(list_ts), "gate_s": statistics.median(gate_ts),
          "hash_floor_s": statistics.median(floor_ts),
          **_workers(store, json.loads(manifest_path.read_text())["files"]),
          "ratio": statistics.median(gate_ts) / statistics.median(floor_ts), "target": 2.0, "gate_ok": report.ok,
          "listing_runs": list_ts, "floor_runs": floor_ts, "gate_runs": gate_ts})


def _workers(store: Any, files: list[dict[str, Any]]) -> dict[str, Any]:
    """How the gate's per-file pass spreads these files (filecheck.pool_for): gate_pool is "threads" or
    "none" (the calling thread), gate_workers how many."""
    from delta_release.external.filecheck import pool_for

    pool, workers = pool_for(store, len(files), sum(int(f["size_bytes"]) for f in files))
    return {"gate_workers": workers, "gate_pool": pool}


def hash_floor(paths: list[str]) -> list[str]:
    """The floor the gate is measured against: read and sha256 every file, one process, one thread, in
    manifest order (the plain loop a reviewer would write; no pool, no chunking)."""
    import hashlib

    out = []
    for path in paths:
        with open(path, "rb") as handle:
            out.append(hashlib.sha256(handle.read()).hexdigest())
    return out


if __name__ == "__main__":
    if sys.argv[1:2] == ["build"]:
        print(build(Path(sys.argv[2]), int(sys.argv[3]), rows=int(sys.argv[4])))
    else:
        main(sys.argv[1:])
