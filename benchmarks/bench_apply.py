"""Apply a 100k-event batch touching 5 days: ours against deltalake merge, Polars merge, pyiceberg upsert and
a pyarrow floor. Each run happens in its own process (peak memory is that process's ru_maxrss) on a fresh
copy of the base table; the copy, imports and loading the pre-decoded source are not timed.

    python -m benchmarks.bench_apply CONTENDER WORKDIR SOURCE.parquet BATCH.jsonl DAYS(comma-separated)
    python -m benchmarks.bench_apply advance WORKDIR PARENT FIRST   (see `advance`)
"""

from __future__ import annotations

import functools
import shutil
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ._common import emit, maxrss_mb

CONTENDERS = ("ours", "deltalake_jsonl", "deltalake", "polars", "pyiceberg", "floor")
LABELS = {
    "ours": "ours: Lake.ingest (decode+raw+quarantine+apply+gate+commit)",
    "deltalake_jsonl": "deltalake merge from the same JSONL (polars.read_ndjson inside the timed step)",
    "deltalake": "deltalake merge (position+tombstone predicates, days IN-list in ON)",
    "polars": "polars write_delta(mode='merge'), same clauses",
    "pyiceberg": "pyiceberg upsert (SQLite catalog, join on order_id)",
    "floor": "floor: pyarrow reads + rewrites the 5 partitions",
}

UPD = {"position": "s.position", "amount_cents": "s.amount_cents", "currency": "s.currency", "deleted": "false"}
TOMB = {"position": "s.position", "amount_cents": "s.amount_cents", "currency": "s.currency", "deleted": "true"}
INS = {c: f"s.{c}" for c in ("order_id", "position", "amount_cents", "currency", "deleted", "event_day")}


def merge_on(days: list[int]) -> str:
    return f"t.order_id = s.order_id AND t.event_day = s.event_day AND t.event_day IN ({', '.join(map(str, days))})"


def clauses(merger: Any) -> Any:
    return (merger.when_matched_update(updates=UPD, predicate="s.position > t.position AND NOT s.deleted")
            .when_matched_update(updates=TOMB, predicate="s.position > t.position AND s.deleted")
            .when_not_matched_insert(updates=INS, predicate="NOT s.deleted"))


# -- phase timing of our pipeline (wraps the functions Lake.ingest calls; adds microseconds) ----------

OTHER = "other (outside the named phases)"
STAGE_PHASE = "stage (encode + write files + evidence)"
OVERLAPPED = " (on its thread, overlapped: not in the total)"


class Phases:
    """Exclusive seconds per named phase on the ingest's thread: a phase called inside another (the parent
    file list inside the plan) counts in its own row only, so the rows add up to the ingest's time and the
    rest shows as OTHER. A wrapped function called on another thread (the raw copy) gets a row of its own,
    marked overlapped, outside the sum."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = {}
        self._thread = threading.get_ident()
        self._inner: list[list[float]] = []  # per open phase: seconds of the phases nested in it

    def add(self, name: str, seconds: float) -> None:
        self.seconds[name] = self.seconds.get(name, 0.0) + seconds

    def wrap(self, name: str, fn: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(fn)
        def timed(*args: Any, **kwargs: Any) -> Any:
            if threading.get_ident() != self._thread:
                t0 = time.perf_counter()
                try:
                    return fn(*args, **kwargs)
                finally:
                    self.add(name + OVERLAPPED, time.perf_counter() - t0)
            inner = [0.0]
            self._inner.append(inner)
            t0 = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                elapsed = time.perf_counter() - t0
                self._inner.pop()
                self.add(name, elapsed - inner[0])
                if self._inner:
                    self._inner[-1][0] += elapsed
        return timed

    def iterate(self, name: str, items: Any) -> Any:
        """`items` (an iterable) with the time of producing each item counted as `name`."""
        step = self.wrap(name, next)
        it = iter(items)
        while True:
            try:
                item = step(it)
            except StopIteration:
                return
            yield item

    def table(self, total: float) -> dict[str, float]:
        """The rows, rounded, with OTHER: the total minus every row on the ingest's thread."""
        named = sum(v for k, v in self.seconds.items() if not k.endswith(OVERLAPPED))
        return {k: round(v, 4) for k, v in {**self.seconds, OTHER: total - named}.items()}


def open_lake_copy(path: Path) -> Any:
    """Open a copied lake and point its catalog at the copy's own tables (the catalog stores absolute
    locations, so a copied lake would otherwise write to the original's tables)."""
    from delta_release.lake import Lake

    lake = Lake.open(path)
    for tdef in lake.tables.values():
        lake.catalog.set_location(tdef.name, lake.default_location(tdef))
    return lake


def instrument(lake: Any) -> Phases:
    """Wrap the writer path's steps of this process (and `lake`'s stores) with phase timers. A step a
    package version does not have is skipped, so older and newer trees are measured alike."""
    import delta_release.apply.bucketed as bk
    import delta_release.commit.writer as wr
    import delta_release.ingest as ing
    import delta_release.maintenance.upkeep as up
    import delta_release.parts as parts_mod
    import delta_release.stage.buckets as buckets
    from delta_release import _delta
    from delta_release.index.keys import KeyIndex
    from delta_release.raw.background import RawCopy

    ph = Phases()

    def wrap(owners: tuple[Any, ...], name: str, phase: str) -> None:
        for owner in owners:
            if hasattr(owner, name):
                setattr(owner, name, ph.wrap(phase, getattr(owner, name)))

    wrap((parts_mod,), "read_batch_file", "decode")  # hash + decode (Lake.ingest -> parts)
    wrap((up,), "before_work", "writer upkeep (temp sweep, pending erasures, publication)")
    wrap((ing, parts_mod), "_already_applied", "duplicate check (batch index)")
    wrap((ing,), "_erasure_filter", "erasure filter")
    wrap((ing, parts_mod), "plan_bucketed", "apply: plan (the rest)")
    wrap((ing,), "plan_apply", "apply: plan (the rest)")  # a table without buckets
    wrap((_delta,), "partition_entries", "apply: parent file list")
    wrap((_delta,), "file_count", "apply: parent file list")
    for name in ("read_entry", "read_entries"):
        wrap((bk,), name, "apply: read parent rows")
    wrap((bk._Kept,), "_read_whole", "apply: read parent rows")
    # a bucket's sub-groups (a large file), folded two at a time: the folds only (replace_groups waits for them;
    # timing it too would count them twice). Overlapped rows add up the time of every helper thread.
    wrap((parts_mod,), "fold_group_rows", "apply: plan (the rest)")
    wrap((parts_mod,), "_spill_events", "parts: spill by group (split, write)")
    wrap((parts_mod,), "_reused_positions", "parts: same-position check over the file")
    for name in ("sorted_run", "spilled"):
        wrap((parts_mod,), name, "parts: key index runs (sort, spill)")
    hashed = ph.wrap("keyed hash of keys (bucket, index)", buckets.keyed)
    bk.keyed = buckets.keyed = hashed
    if hasattr(parts_mod, "digest_array"):  # the map's hash of each event's key
        parts_mod.digest_array = ph.wrap("keyed hash of keys (bucket, index)", parts_mod.digest_array)
    wrap((KeyIndex,), "locate_hashed", "apply: key index lookup")
    wrap((bk,), "fold", "apply: fold")
    wrap((bk,), "fold_joined", "apply: fold")  # the fold on the plan's one join
    wrap((RawCopy,), "kept", "raw store (waiting for its thread)")
    stage_partitions = ph.wrap(STAGE_PHASE, wr.stage_partitions)

    def stage_timed(*args: Any, partitions: Any, **kwargs: Any) -> Any:  # a lazy stream: its days' content
        if not isinstance(partitions, dict):
            partitions = ph.iterate("apply: new content of each day (stream)", partitions)
        return stage_partitions(*args, partitions=partitions, **kwargs)

    wr.stage_partitions = stage_timed
    wrap((wr,), "gate_candidate", "gate")
    wrap((_delta,), "commit", "commit")
    wrap((wr,), "record_indexes", "index record (batch + key index)")
    wrap((lake.raw,), "put_file", "raw store")
    wrap((lake.quarantine,), "write", "quarantine")
    wrap((lake.publisher,), "publish", "publish (catalog)")
    return ph


def top_phases(phases: dict[str, float], n: int = 4) -> str:
    """The `n` largest phases as 'name 1.2 s', for a row that must say where the time goes: those of the
    main thread (in the wall time) first, then the largest two of the helper threads (overlapped)."""
    def largest(items: list[tuple[str, float]], k: int) -> list[str]:
        return [f"{name} {v:.1f} s" for name, v in sorted(items, key=lambda kv: -kv[1])[:k]]

    helper = [(k, v) for k, v in phases.items() if "overlapped" in k]
    main = [(k, v) for k, v in phases.items() if "overlapped" not in k]
    return ", ".join(largest(main, n) + largest(helper, 2))


def run_ours(work: Path, source: Path, batch: Path, days: list[int]) -> dict[str, Any]:
    from delta_release.raw.store import RawStore

    t0 = time.perf_counter()
    lake = open_lake_copy(work)
    open_s = time.perf_counter() - t0
    ph = instrument(lake)
    assert isinstance(lake.raw, RawStore)
    rss0 = maxrss_mb()
    c0, t0 = time.process_time(), time.perf_counter()
    report = lake.ingest(batch)
    seconds, cpu = time.perf_counter() - t0, time.process_time() - c0
    return {"seconds": seconds, "cpu_s": cpu, "rss_before_mb": rss0, "open_s": open_s, "phases": ph.table(seconds),
            "detail": {"version": report.version, "accepted": report.accepted, "quarantined": report.quarantined,
                       "files_added": len(report.files), "files_removed": len(report.removed)}}


def run_deltalake(work: Path, source: Path, batch: Path, days: list[int]) -> dict[str, Any]:
    import pyarrow.parquet as pq
    from deltalake import DeltaTable

    src = pq.read_table(source)
    rss0 = maxrss_mb()
    t0 = time.perf_counter()
    dt = DeltaTable(str(work))
    metrics = clauses(dt.merge(src, merge_on(days), source_alias="s", target_alias="t")).execute()
    seconds = time.perf_counter() - t0
    return {"seconds": seconds, "rss_before_mb": rss0, "detail": _merge_detail(metrics)}


JSONL_SCHEMA = {"schema_version": "Int64", "order_id": "String", "position": "Int64", "kind": "String",
                "amount_cents": "Int64", "event_day": "Int32", "currency": "String"}


def jsonl_to_source(batch: Path | bytes) -> Any:
    """The batch file as a merge source: polars.read_ndjson with the contract's columns, deletes as
    tombstones, v2 upserts in INR. No per-line checks (the decode section compares those)."""
    import io

    import polars as pl

    src = io.BytesIO(batch) if isinstance(batch, bytes) else batch
    df = pl.read_ndjson(src, schema={k: getattr(pl, v) for k, v in JSONL_SCHEMA.items()})
    up = pl.col("kind") == "upsert"
    return df.select(
        "order_id", "position",
        pl.when(up).then(pl.col("amount_cents")).alias("amount_cents"),
        pl.when(up).then(pl.col("currency").fill_null("INR")).alias("currency"),
        (~up).alias("deleted"), "event_day",
    ).to_arrow()


def run_deltalake_jsonl(work: Path, source: Path, batch: Path, days: list[int]) -> dict[str, Any]:
    """deltalake merge starting from the JSONL file ours is given: the decode is inside the timed step."""
    from deltalake import DeltaTable

    rss0 = maxrss_mb()
    c0, t0 = time.process_time(), time.perf_counter()
    src = jsonl_to_source(batch)
    decode_s = time.perf_counter() - t0
    dt = DeltaTable(str(work))
    metrics = clauses(dt.merge(src, merge_on(days), source_alias="s", target_alias="t")).execute()
    seconds, cpu = time.perf_counter() - t0, time.process_time() - c0
    return {"seconds": seconds, "cpu_s": cpu, "rss_before_mb": rss0, "phases": {"read_ndjson": round(decode_s, 4)},
            "detail": _merge_detail(metrics)}


def run_polars(work: Path, source: Path, batch: Path, days: list[int]) -> dict[str, Any]:
    import polars as pl

    src = pl.read_parquet(source)
    rss0 = maxrss_mb()
    t0 = time.perf_counter()
    merger = src.write_delta(str(work), mode="merge",
                             delta_merge_options={"predicate": merge_on(days), "source_alias": "s",
                                                  "target_alias": "t"})
    metrics = clauses(merger).execute()
    seconds = time.perf_counter() - t0
    return {"seconds": seconds, "rss_before_mb": rss0, "detail": _merge_detail(metrics)}


def _merge_detail(m: dict[str, Any]) -> dict[str, Any]:
    keys = ("num_target_rows_updated", "num_target_rows_inserted", "num_target_rows_copied",
            "num_target_files_added", "num_target_files_removed", "scan_time_ms", "rewrite_time_ms")
    return {k: m.get(k) for k in keys}


def run_pyiceberg(work: Path, source: Path, batch: Path, days: list[int]) -> dict[str, Any]:
    import pyarrow.parquet as pq

    from .data import iceberg_catalog

    shutil.copy2(work / "catalog.pristine.db", work / "catalog.db")  # back to the base snapshot
    src = pq.read_table(source)
    rss0 = maxrss_mb()
    t0 = time.perf_counter()
    tbl = iceberg_catalog(work).load_table("bench.orders")
    res = tbl.upsert(src, join_cols=["order_id"])
    seconds = time.perf_counter() - t0
    return {"seconds": seconds, "rss_before_mb": rss0,
            "detail": {"rows_updated": res.rows_updated, "rows_inserted": res.rows_inserted}}


def run_floor(work: Path, source: Path, batch: Path, days: list[int]) -> dict[str, Any]:
    """Read the 5 partitions' files and write them again as new files (no merge logic, no commit)."""
    import pyarrow.parquet as pq

    out = work.parent / (work.name + "-floor-out")
    shutil.rmtree(out, ignore_errors=True)
    rss0 = maxrss_mb()
    t0 = time.perf_counter()
    rows = 0
    for d in days:
        table = pq.read_table(work / f"event_day={d}")
        (out / f"event_day={d}").mkdir(parents=True)
        pq.write_table(table, out / f"event_day={d}" / "part-0.parquet")
        rows += table.num_rows
    seconds = time.perf_counter() - t0
    shutil.rmtree(out, ignore_errors=True)
    return {"seconds": seconds, "rss_before_mb": rss0, "detail": {"rows_rewritten": rows}}


def run_ours_deltars_checkpoint(work: Path, source: Path, batch: Path, days: list[int]) -> dict[str, Any]:
    """`ours` with the checkpoint written by delta-rs, as before our own writer (`_delta._own_checkpoint`):
    the comparison of a checkpoint commit."""
    from delta_release import _delta

    _delta._own_checkpoint = lambda *args: False
    return run_ours(work, source, batch, days)


def run_ours_inmemory_index_merge(work: Path, source: Path, batch: Path, days: list[int]) -> dict[str, Any]:
    """Lake.ingest with the key index's merges done in memory (every input copied whole, then merged or
    folded: keyfile.merge_in_memory, the same bytes): the comparison of the commit that folds the index."""
    import delta_release.index.keys as keys
    from delta_release.index import keyfile

    def in_memory(storage: Any, rel: str, sources: list[Any], *, gone: Any = "keep", exclude: Any = None,
                  replace: bool = False) -> bool:
        data = keyfile._encode(keyfile.merge_in_memory([s.keys.run() for s in sources], gone, exclude))
        if replace:
            storage.write_bytes(rel, data)
            return True
        return bool(storage.write_once(rel, data))

    setattr(keys, "write_merged", in_memory)  # noqa: B010 - (a module attribute keys.py imported by name)
    return run_ours(work, source, batch, days)


# (not in CONTENDERS: run.py times these on a lake whose next commit writes a checkpoint, or folds the key
# index into a new base)
CHECKPOINT_CONTENDERS = ("ours", "ours_deltars_checkpoint")
LABELS["ours_deltars_checkpoint"] = "ours, the checkpoint written by delta-rs (its snapshot of the whole table)"
FOLD_CONTENDERS = ("ours", "ours_inmemory_index_merge")
LABELS["ours_inmemory_index_merge"] = "ours, the key index merged in memory (every input copied whole)"

RUNNERS: dict[str, Callable[[Path, Path, Path, list[int]], dict[str, Any]]] = {
    "ours": run_ours, "deltalake_jsonl": run_deltalake_jsonl, "deltalake": run_deltalake,
    "polars": run_polars, "pyiceberg": run_pyiceberg,
    "floor": run_floor, "ours_deltars_checkpoint": run_ours_deltars_checkpoint,
    "ours_inmemory_index_merge": run_ours_inmemory_index_merge,
}


# -- result check (run by the parent, after the child, never timed) ------------------------------------

def check(contender: str, work: Path, days: list[int]) -> dict[str, Any] | None:
    """Rows, tombstones and sums over the touched days, so contenders can be compared for equal results."""
    import polars as pl

    if contender == "floor":
        return None
    if contender == "pyiceberg":
        from pyiceberg.expressions import In

        from .data import iceberg_catalog

        tbl = iceberg_catalog(work).load_table("bench.orders")
        df = pl.from_arrow(tbl.scan(row_filter=In("event_day", days)).to_arrow())
    else:
        uri = str(work / "orders") if contender == "ours" else str(work)
        df = pl.scan_delta(uri).filter(pl.col("event_day").is_in(days)).collect()
    assert isinstance(df, pl.DataFrame)
    return {"rows": df.height, "tombstones": int(df["deleted"].sum()),
            "amount_sum": int(df["amount_cents"].sum()), "position_sum": int(df["position"].sum())}


def warm_imports() -> None:
    """Import what any contender lazily imports, so no timed step pays a first import."""
    import deltalake  # noqa: F401
    import polars  # noqa: F401
    import pyarrow.compute  # noqa: F401
    import pyarrow.dataset  # noqa: F401
    import pyarrow.parquet  # noqa: F401


def advance(work: Path, parent: int, first: int) -> dict[str, Any]:
    """Bring a copied lake's orders table to version `parent` by one-event commits on day 300, with
    delta-rs's checkpoint at `first` if the table has none yet (where a table's first would come from):
    the base of the checkpoint-commit comparison (run.py)."""
    import json

    from deltalake import DeltaTable

    lake = open_lake_copy(work)
    uri = lake.table("orders").uri
    position = 9 * 10**12

    def one_commit() -> None:
        nonlocal position
        position += 1
        line = {"schema_version": 3, "order_id": f"advance-{position}", "position": position, "kind": "upsert",
                "amount_cents": 1, "event_day": 300, "currency": "EUR"}
        lake.ingest((json.dumps(line) + "\n").encode())

    while (lake.latest_version("orders") or 0) < first:
        one_commit()
    if not (Path(uri) / "_delta_log" / "_last_checkpoint").exists():
        DeltaTable(uri).create_checkpoint()
    while (lake.latest_version("orders") or 0) < parent:
        one_commit()
    return {"version": lake.latest_version("orders")}


def main(argv: list[str]) -> None:
    if argv[0] == "advance":
        emit(advance(Path(argv[1]), int(argv[2]), int(argv[3])))
        return
    contender, work, source, batch, days = argv
    warm_imports()
    emit(RUNNERS[contender](Path(work), Path(source), Path(batch), [int(d) for d in days.split(",")]))


if __name__ == "__main__":
    main(sys.argv[1:])
