"""The release run's and the gate's history reads (issue 14 item 1), before and after the file index, on a
copy of a lake with thousands of versions (e.g. bench_versions' lake@5000, copied: the run writes to it).

    python -m benchmarks.bench_file_index LAKE_COPY [NEW_COMMITS]

Times, each the median of 3 in this process: the whole-history answers (`_delta.history`, what
registered_files, recorded_checksums and cost did before), the index built once from that history (a
lake indexed for the first time), the warm index (nothing new), and the catch-up after NEW_COMMITS real
ingests; each lookup asks for every file of the current snapshot (the release checksums check's paths).
"""

from __future__ import annotations

import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ._common import emit


def _time(fn: Callable[[], Any], n: int = 3) -> tuple[float, Any]:
    times, out = [], None
    for _ in range(n):
        t = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times), out


def main(lake_path: str, new_commits: int = 3) -> dict[str, Any]:
    import shutil

    import delta_release as dr
    from delta_release import _delta
    from delta_release.index import files as fidx

    lake = dr.Lake.open(lake_path)
    uri, opts = lake.table_uri("orders"), lake.options
    version = lake.latest_version("orders")
    assert version is not None
    paths = [e.path for e in _delta.file_entries(uri, opts, version)]

    def whole_history() -> tuple[dict[str, str | None], fidx.Totals]:
        return fidx.history_files(uri, opts), fidx.history_totals(uri, opts)

    before, (reference, ref_totals) = _time(whole_history)

    def index_dir() -> Path:
        return lake.storage.local_path(f"_index/orders/{_delta.table_id(uri, opts)}/files")

    def rebuild() -> Any:
        shutil.rmtree(index_dir(), ignore_errors=True)
        index = fidx.file_index(lake, "orders")
        assert index is not None
        return index.lookup(paths), index.catch_up()

    cold, _ = _time(rebuild)

    def warm() -> Any:
        index = fidx.file_index(lake, "orders")
        assert index is not None
        return index.lookup(paths), index.catch_up()

    warm_s, (got, totals) = _time(warm, 5)
    assert {p: r.sha256 for p, r in got.items()} == {p: reference[p] for p in paths if p in reference}
    assert (totals.bytes_added, totals.first_ts, totals.last_ts) == (
        ref_totals.bytes_added, ref_totals.first_ts, ref_totals.last_ts)
    catch: list[float] = []
    for i in range(new_commits):
        lake.ingest(("\n".join(
            f'{{"schema_version": 2, "order_id": "fi-{i}-{k}", "position": {10**13 + i * 100 + k}, '
            f'"kind": "upsert", "amount_cents": 100, "event_day": {k % 5}}}' for k in range(20)) + "\n").encode())
        t = time.perf_counter()
        warm()
        catch.append(time.perf_counter() - t)
    index = fidx.file_index(lake, "orders")
    assert index is not None
    files = sorted(p.name for p in index_dir().iterdir())
    result = {"bench": "file_index", "version": version, "snapshot_files": len(paths),
              "registered_paths": len(reference), "history_s": round(before, 4),
              "index_rebuild_s": round(cold, 4), "index_warm_s": round(warm_s, 4),
              "catch_up_after_one_commit_s": round(statistics.median(catch), 4) if catch else None,
              "speedup_warm": round(before / warm_s, 1), "index_files": len(files),
              "index_bytes": sum((index_dir() / f).stat().st_size for f in files)}
    emit(result)
    return result


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 3)
