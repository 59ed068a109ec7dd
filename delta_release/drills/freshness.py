"""The freshness drill (seed 003, "publish telemetry with a catalog freshness gate").

In a scratch lake: 47 hourly telemetry partitions (hour 9 with 23 files, the others 3 each) published
through producer manifests. Baseline: a broad listing of the table prefix against a pruned one-hour query
through the gateway (planning time, listed objects, bytes). Then the next hour's manifest is published
with one object missing (rejected, nothing registered, the last hour still readable), completed and
published; readers whose caches name the previous generation refresh (or raise `FreshnessError`) instead
of returning zero rows; both engines read the same files; a DuckDB glob over an hour directory reports
the unregistered file it sees; a corrected generation replaces the hour in one commit; a table location
change is caught with a stale cache; p95 planning time over `runs` runs and request counts.

Request counts on local disk are the calls this code makes (catalog queries, Delta log resolutions,
object listings and reads, directories a listing walks); delta-rs's own log reads are reported as the
number of `_delta_log` objects it lists, not intercepted.
"""

from __future__ import annotations

import os
import statistics
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import polars as pl

from .. import _delta
from ..errors import FreshnessError
from ..external.manifest import gate_manifest, parse_manifest
from ..external.producer import produce_hour, upload
from ..external.publish import publish_manifest
from ..gateway.catalog import Publication
from ..lake import Lake
from ..stats import p95
from ..storage import Storage
from .scratch import prepare_scratch

TABLE = "telemetry"
HOURS = 47
WIDE_HOUR = 9
WIDE_FILES = 23
FILES_PER_HOUR = 3
ROWS_PER_FILE = 4
PREDICATE = "hour == 9"


def _ms(start: float) -> float:
    return round((time.perf_counter() - start) * 1000, 3)


def _p95(samples: list[float]) -> float:
    return round(p95(samples), 3)


def _summary(samples: list[float]) -> dict[str, Any]:
    return {"runs": len(samples), "median_ms": round(statistics.median(samples), 3), "p95_ms": _p95(samples),
            "max_ms": round(max(samples), 3)}


def _publish(lake: Lake, hour: int, generation: str, files: int, **kw: Any) -> tuple[Any, dict[str, bytes]]:
    doc, objects = produce_hour(hour, generation, files=files, rows=ROWS_PER_FILE, **kw)
    return parse_manifest(doc, source=f"<{generation}>", tables=lake.tables), objects


def _hour_rows(lake: Lake, hour: int) -> int:
    return lake.scan(TABLE).filter(pl.col("hour") == hour).collect().height


def _broad_listing(lake: Lake) -> dict[str, Any]:
    """What a reader without the catalog does: list the whole table prefix, prune by path afterwards."""
    storage = lake.table_storage(TABLE)
    start = time.perf_counter()
    objects = storage.list("")
    data = [o for o in objects if o.path.endswith(".parquet") and not o.path.startswith("_delta_log/")]
    wanted = [o for o in data if o.path.startswith(f"hour={WIDE_HOUR:02d}/")]
    elapsed = _ms(start)
    directories = len({o.path.rsplit("/", 1)[0] for o in objects}) + 1
    return {"planning_ms": elapsed, "listing_calls": 1, "directories_walked": directories,
            "listed_objects": len(objects), "data_files": len(data), "bytes_full_scan": sum(o.size for o in data),
            "files_for_predicate": len(wanted), "bytes_for_predicate": sum(o.size for o in wanted)}


def _pruned_query(lake: Lake) -> tuple[dict[str, Any], pl.LazyFrame]:
    before = lake.gateway.requests.snapshot()
    start = time.perf_counter()
    lf = lake.scan(TABLE).filter(pl.col("hour") == WIDE_HOUR)
    lf.explain()
    elapsed = _ms(start)
    cached = lake.gateway.cache[TABLE]
    files = [f for f in cached.files if str(f.partition_values.get("hour")) == str(WIDE_HOUR)]
    log_dir = Path(cached.location) / "_delta_log"
    return {"planning_ms": elapsed, "listed_objects_by_gateway": 0,
            "delta_log_objects": len(list(log_dir.iterdir())) if log_dir.is_dir() else None,
            "files_planned": len(files), "bytes_scanned": sum(f.size for f in files),
            "files_in_version": len(cached.files), "requests": lake.gateway.requests.since(before)}, lf


def _planning_runs(lake: Lake, runs: int) -> dict[str, Any]:
    warm, cold, broad = [], [], []
    before = lake.gateway.requests.snapshot()
    for _ in range(runs):
        start = time.perf_counter()
        lake.scan(TABLE).filter(pl.col("hour") == WIDE_HOUR).explain()
        warm.append((time.perf_counter() - start) * 1000)
    warm_requests = lake.gateway.requests.since(before)
    before = lake.gateway.requests.snapshot()
    for _ in range(runs):
        lake.gateway.clear()
        start = time.perf_counter()
        lake.scan(TABLE).filter(pl.col("hour") == WIDE_HOUR).explain()
        cold.append((time.perf_counter() - start) * 1000)
    cold_requests = lake.gateway.requests.since(before)
    for _ in range(runs):
        broad.append(_broad_listing(lake)["planning_ms"])
    return {"predicate": PREDICATE,
            "pruned_warm_cache": {**_summary(warm), "requests_per_query": _per(warm_requests, runs)},
            "pruned_cold_cache": {**_summary(cold), "requests_per_query": _per(cold_requests, runs)},
            "broad_listing": _summary(broad)}


def _per(counts: dict[str, int], runs: int) -> dict[str, float]:
    return {k: round(v / runs, 2) for k, v in counts.items()}


@dataclass(slots=True, kw_only=True)
class _Run:
    """What the drill's steps share: the scratch lake, the two stale readers, the checks and the report."""

    root: Path
    lake: Lake
    storage: Storage
    checks: dict[str, bool] = field(default_factory=dict)
    out: dict[str, Any] = field(default_factory=dict)
    stale_refresh: Lake | None = None
    stale_error: Lake | None = None
    objects: dict[str, bytes] = field(default_factory=dict)  # the next hour's objects, as first published

    def published(self) -> Publication:
        pub = self.lake.published(TABLE)
        assert pub is not None
        return pub

    def readers(self) -> tuple[Lake, Lake]:
        assert self.stale_refresh is not None and self.stale_error is not None
        return self.stale_refresh, self.stale_error


NEXT_HOUR = HOURS  # the hour published during the drill, after the 47 of the workload


def run_freshness_drill(uri: str, *, runs: int = 20) -> dict[str, Any]:
    root = prepare_scratch(uri)
    lake = Lake.create(root)
    run = _Run(root=root, lake=lake, storage=lake.table_storage(TABLE),
               out={"lake": str(root), "table": TABLE, "predicate": PREDICATE})
    _stage_workload(run)
    _baseline(run)
    before_gen, before_version = _open_stale_readers(run)
    _publish_next_hour(run, before_gen, before_version)
    _stale_readers(run)
    _engines(run)
    _correction(run)
    _location_change(run)
    # -- p95 planning time and request counts --------------------------------------------------------
    run.out["planning"] = _planning_runs(lake, max(runs, 20))
    run.checks["p95_over_at_least_20_runs"] = run.out["planning"]["pruned_warm_cache"]["runs"] >= 20
    run.out["requests_total"] = {"publisher": lake.gateway.requests.snapshot(),
                                 "stale_refresh_reader": run.readers()[0].gateway.requests.snapshot()}
    return {"passed": all(run.checks.values()), "checks": run.checks, **run.out}


def _stage_workload(run: _Run) -> None:
    """47 hours, hour 9 with 23 files, each published through its manifest."""
    start = time.perf_counter()
    inventory: dict[str, int] = {}
    for hour in range(HOURS):
        manifest, objects = _publish(run.lake, hour, f"telemetry-{hour + 1}",
                                     WIDE_FILES if hour == WIDE_HOUR else FILES_PER_HOUR)
        upload(run.storage, objects)
        report = publish_manifest(run.lake, manifest)
        assert report.ok, report.gate.to_json()
        inventory[f"hour={hour:02d}"] = len(objects)
    pub = run.published()
    run.out["workload"] = {"hours": HOURS, "files": sum(inventory.values()), "rows_per_file": ROWS_PER_FILE,
                           "source_generation": pub.label, "catalog_generation": pub.generation,
                           "version": pub.version, "inventory": inventory, "staging_ms": _ms(start)}


def _baseline(run: _Run) -> None:
    """A broad listing of the table prefix against the gateway's pruned one-hour query."""
    broad = _broad_listing(run.lake)
    pruned, lf = _pruned_query(run.lake)
    pruned["rows"] = lf.collect().height
    run.out["baseline"] = {"broad_listing": broad, "pruned_query": pruned}
    run.checks["baseline_pruned_plans_fewer_objects"] = (
        pruned["files_planned"] == WIDE_FILES and broad["listed_objects"] > pruned["files_planned"]
        and pruned["bytes_scanned"] < broad["bytes_full_scan"])


def _open_stale_readers(run: _Run) -> tuple[int, int | None]:
    """Readers opened before the next publication, caches warm at the current generation."""
    run.stale_refresh = Lake.open(run.root)
    run.stale_error = Lake.open(run.root, freshness="error")
    for reader in run.readers():
        _hour_rows(reader, HOURS - 1)
    return run.stale_refresh.gateway.cache[TABLE].generation, run.lake.latest_version(TABLE)


def _publish_next_hour(run: _Run, before_gen: int, before_version: int | None) -> None:
    """The next hour, first with one object omitted (rejected, nothing registered), then completed."""
    lake, storage, checks = run.lake, run.storage, run.checks
    manifest, objects = _publish(lake, NEXT_HOUR, f"telemetry-{NEXT_HOUR + 1}", FILES_PER_HOUR)
    run.objects = objects
    omitted = sorted(objects)[-1]
    upload(storage, objects, skip={omitted})
    failed = publish_manifest(lake, manifest)
    after_fail = lake.published(TABLE)
    checks["partial_hour_rejected"] = not failed.ok and failed.gate.missing == [omitted]
    checks["nothing_registered_on_reject"] = (lake.latest_version(TABLE) == before_version and after_fail is not None
                                              and after_fail.generation == before_gen)
    last_hour_rows = _hour_rows(lake, HOURS - 1)
    checks["last_published_hour_readable"] = last_hour_rows == FILES_PER_HOUR * ROWS_PER_FILE
    upload(storage, {omitted: objects[omitted]})
    regate = gate_manifest(lake, manifest)
    published = publish_manifest(lake, manifest)
    pub = run.published()
    cache = lake.gateway.cache[TABLE]
    checks["completed_hour_published"] = (regate.ok and published.ok and published.version == pub.version
                                          and _hour_rows(lake, NEXT_HOUR) == FILES_PER_HOUR * ROWS_PER_FILE)
    checks["cache_records_completed_refresh"] = (cache.generation == pub.generation
                                                 and cache.refresh_completed >= cache.refresh_started)
    run.out["publish_one_hour"] = {
        "omitted": omitted, "failed_gate": failed.to_json(), "last_hour_rows_after_reject": last_hour_rows,
        "gate_after_fix": regate.to_json(), "published": published.to_json(),
        "inventory_diff": {"manifest_only_before_fix": failed.gate.missing, "unexpected": failed.gate.unexpected},
        "catalog_entry": {"table": asdict(lake.catalog.table(TABLE)),  # type: ignore[arg-type]
                          "generation": pub.generation,
                          "version": pub.version, "label": pub.label, "completed": pub.completed,
                          "digest": pub.digest},
        "cache": cache.to_json()}


def _stale_readers(run: _Run) -> None:
    """Readers whose caches name the previous generation refresh, or raise under the error policy."""
    stale_refresh, stale_error = run.readers()
    pub = run.published()
    stale_cached = stale_refresh.gateway.cache[TABLE]
    stale_rows_if_trusted = (_delta.scan(stale_cached.location, {}, stale_cached.version)
                             .filter(pl.col("hour") == NEXT_HOUR).collect().height)
    before = stale_refresh.gateway.requests.snapshot()
    refreshed_rows = _hour_rows(stale_refresh, NEXT_HOUR)
    refreshed = stale_refresh.gateway.cache[TABLE]
    error = _freshness_error(stale_error, NEXT_HOUR)
    run.checks["stale_reader_refreshes_not_zero_rows"] = (refreshed_rows == FILES_PER_HOUR * ROWS_PER_FILE
                                                          and refreshed.generation == pub.generation)
    run.checks["stale_reader_error_policy_raises"] = (error is not None
                                                      and error["published_generation"] == pub.generation)
    run.out["stale_reader"] = {"cached_generation": stale_cached.generation, "published_generation": pub.generation,
                               "rows_the_stale_file_list_would_return": stale_rows_if_trusted,
                               "refresh_policy": {"rows": refreshed_rows, "cache": refreshed.to_json(),
                                                  "requests": stale_refresh.gateway.requests.since(before)},
                               "error_policy": error}


def _freshness_error(reader: Lake, hour: int) -> dict[str, Any] | None:
    """The `FreshnessError` a reader under the error policy raises for `hour`, or None when it reads."""
    try:
        _hour_rows(reader, hour)
    except FreshnessError as exc:
        return exc.to_json()
    return None


def _engines(run: _Run) -> None:
    """Both engines read the same files and rows; a glob over an hour sees what the catalog does not."""
    lake, storage = run.lake, run.storage
    polars_hour = lake.scan(TABLE).filter(pl.col("hour") == NEXT_HOUR).collect().sort(pl.all())
    duck_all = lake.gateway.read_duckdb(TABLE)
    duck_hour = duck_all.filter(pl.col("hour") == NEXT_HOUR).sort(pl.all())
    file_sets = lake.gateway.engine_files(TABLE)
    run.checks["engines_read_same_files_and_rows"] = (
        not file_sets.mismatch and polars_hour.equals(duck_hour)
        and lake.read(TABLE).sort(pl.all()).equals(duck_all.sort(pl.all())))
    stray_hour = HOURS - 1
    stray_doc, stray_objects = produce_hour(stray_hour, "telemetry-stray", files=1, rows=ROWS_PER_FILE)
    upload(storage, stray_objects)
    glob = lake.gateway.glob_partition(TABLE, stray_hour)
    stray_path = storage.uri(next(iter(stray_objects)))
    run.checks["glob_unregistered_file_reported"] = (glob.mismatch
                                                     and glob.unexpected["duckdb_glob"] == [stray_path])
    run.out["engines"] = {"version": run.published().version,
                          "file_sets": file_sets.to_json(), "hour_rows": {"polars": polars_hour.height,
                                                                         "duckdb": duck_hour.height},
                          "glob_over_hour": {"hour": stray_hour, **glob.to_json()}}


def _correction(run: _Run) -> None:
    """A corrected generation replaces the hour in one commit; readers move as a unit."""
    lake, objects = run.lake, run.objects
    old_version = run.published().version
    old_rows = lake.scan(TABLE, old_version).filter(pl.col("hour") == NEXT_HOUR).collect().sort(pl.all())
    fix, fix_objects = _publish(lake, NEXT_HOUR, f"telemetry-{NEXT_HOUR + 2}", FILES_PER_HOUR, corrected=True)
    upload(run.storage, fix_objects)
    corrected = publish_manifest(lake, fix)
    new_rows = _hour_rows_frame(run.readers()[0], NEXT_HOUR)
    new_files = [f.path for f in lake.gateway.cache[TABLE].files if f.path.startswith(f"hour={NEXT_HOUR:02d}/")]
    changed = old_rows.join(new_rows, on=["sensor_id", "ts_ms", "reading"], how="anti").height
    run.checks["correction_one_commit"] = (corrected.ok and corrected.version == old_version + 1
                                           and sorted(corrected.removed) == sorted(objects)
                                           and sorted(corrected.added) == sorted(fix_objects))
    run.checks["readers_move_as_unit"] = (sorted(new_files) == sorted(fix_objects) and changed == 1
                                          and new_rows.height == old_rows.height
                                          and lake.scan(TABLE, old_version).filter(pl.col("hour") == NEXT_HOUR)
                                          .collect().sort(pl.all()).equals(old_rows))
    run.checks["old_generation_retained"] = all(run.storage.exists(p) for p in objects)
    glob_corrected = lake.gateway.glob_partition(TABLE, NEXT_HOUR)
    run.out["correction"] = {"published": corrected.to_json(), "records_changed": changed,
                             "glob_over_corrected_hour": glob_corrected.to_json()}


def _location_change(run: _Run) -> None:
    """The table location changes while the readers' caches name the old one."""
    stale_refresh, stale_error = run.readers()
    for reader in (stale_refresh, stale_error):
        reader.gateway.refresh(TABLE)
    old_location = run.lake.table_uri(TABLE)
    new_location = str(run.root / "telemetry-relocated")
    os.rename(old_location, new_location)
    run.lake.catalog.set_location(TABLE, new_location)
    relocated_rows = _hour_rows(stale_refresh, NEXT_HOUR)
    location_error = _freshness_error(stale_error, NEXT_HOUR)
    run.checks["location_change_refreshed"] = (stale_refresh.gateway.cache[TABLE].location == new_location
                                               and relocated_rows == FILES_PER_HOUR * ROWS_PER_FILE)
    run.checks["location_change_error_policy_raises"] = (location_error is not None
                                                         and location_error["cached_location"] == old_location
                                                         and location_error["location"] == new_location)
    run.out["location_change"] = {"old": old_location, "new": new_location,
                                  "old_exists": os.path.exists(old_location),
                                  "refresh_policy": {"rows": relocated_rows,
                                                     "cache": stale_refresh.gateway.cache[TABLE].to_json()},
                                  "error_policy": location_error}


def _hour_rows_frame(lake: Lake, hour: int) -> pl.DataFrame:
    return lake.scan(TABLE).filter(pl.col("hour") == hour).collect().sort(pl.all())
