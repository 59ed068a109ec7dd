"""Deterministic benchmark data under benchmarks/data/<scale>/ (git-ignored), built once and reused.

Orders: every day holds the same number of orders (`per_day`), so the 1M- and 5M-row tables used for the
memory comparison differ only in how many *untouched* days they hold; the batch is identical and the touched
partitions have the same orders and sizes (amounts and the ~1% pre-existing tombstones are drawn per table,
so a handful of values differ).

Positions: base rows 10,000,000 + row index; the batch's fresh events 1,000,000,000 + line; its stale
events (which every contender must ignore) small unique positions below every stored position.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq

from ._common import Scale, data_dir

ROW_SCHEMA = pa.schema([
    ("order_id", pa.string()), ("position", pa.int64()), ("amount_cents", pa.int64()),
    ("currency", pa.string()), ("deleted", pa.bool_()), ("event_day", pa.int32()),
])
CURRENCIES = np.array(["INR", "USD", "EUR", "GBP"])
BASE_POSITION = 10_000_000
FRESH_POSITION = 1_000_000_000


def per_day(scale: Scale) -> int:
    return -(-scale.rows // scale.days)


def table_days(scale: Scale, rows: int) -> int:
    """Days a table of about `rows` rows spans at this scale's fixed orders-per-day."""
    return max(scale.touched_days + 1, round(rows / per_day(scale)))


def touched_days(scale: Scale) -> list[int]:
    """The batch's days, spread over the smallest memory table so every table holds them."""
    span = table_days(scale, min(scale.memory_rows))
    n = scale.touched_days
    return [span * (i + 1) // (n + 1) for i in range(n)]


def order_id_expr(day: pl.Expr, idx: pl.Expr, prefix: str = "ord") -> pl.Expr:
    return pl.format(prefix + "-{}-{}", day.cast(pl.String).str.zfill(3), idx.cast(pl.String).str.zfill(7))


def base_frame(scale: Scale, days: int) -> pl.DataFrame:
    """`days` x `per_day` orders, sorted by (event_day, order_id); about 1% already tombstoned."""
    n_day = per_day(scale)
    total = days * n_day
    rng = np.random.default_rng(scale.seed)
    amount = rng.integers(100, 1_000_000, total)
    currency = CURRENCIES[rng.integers(0, len(CURRENCIES), total)]
    deleted = rng.random(total) < 0.01
    df = pl.DataFrame({
        "day": np.repeat(np.arange(days, dtype=np.int32), n_day),
        "i": np.tile(np.arange(n_day, dtype=np.int64), days),
        "amount_cents": amount, "currency": currency, "deleted": deleted,
    })
    return df.select(
        order_id_expr(pl.col("day"), pl.col("i")).alias("order_id"),
        (BASE_POSITION + pl.int_range(0, pl.len(), dtype=pl.Int64)).alias("position"),
        pl.when(pl.col("deleted")).then(None).otherwise(pl.col("amount_cents")).alias("amount_cents"),
        pl.when(pl.col("deleted")).then(None).otherwise(pl.col("currency")).alias("currency"),
        pl.col("deleted"),
        pl.col("day").cast(pl.Int32).alias("event_day"),
    )


def batch_events(scale: Scale) -> list[dict[str, Any]]:
    """The apply batch: per touched day, updates, tombstones and stale updates of existing orders, and
    new orders; one event per order, lines shuffled, v2/v3 mixed."""
    rng = np.random.default_rng(scale.seed + 1)
    n_day = per_day(scale)
    k = scale.batch // scale.touched_days
    events: list[dict[str, Any]] = []
    for day in touched_days(scale):
        existing = min(int(0.67 * k), int(0.95 * n_day))
        n_tomb, n_stale = int(0.22 * existing), max(1, int(0.03 * existing))
        n_upd = existing - n_tomb - n_stale
        ids = rng.choice(n_day, existing, replace=False)
        for j, i in enumerate(ids):
            kind = "upsert" if j < n_upd else "delete" if j < n_upd + n_tomb else "stale"
            events.append({"order_id": f"ord-{day:03d}-{i:07d}", "kind": kind, "event_day": day})
        for i in range(k - existing):
            events.append({"order_id": f"new-{day:03d}-{i:07d}", "kind": "upsert", "event_day": day})
    order = rng.permutation(len(events))
    out = []
    stale_pos = 1
    for line, idx in enumerate(order):
        ev = events[idx]
        version = int(rng.integers(2, 4))
        rec: dict[str, Any] = {"schema_version": version, "order_id": ev["order_id"]}
        if ev["kind"] == "stale":
            rec["position"] = stale_pos
            stale_pos += 1
        else:
            rec["position"] = FRESH_POSITION + line
        rec["kind"] = "delete" if ev["kind"] == "delete" else "upsert"
        if rec["kind"] == "upsert":
            rec["amount_cents"] = int(rng.integers(100, 1_000_000))
        rec["event_day"] = ev["event_day"]
        if version == 3 and rec["kind"] == "upsert":
            rec["currency"] = str(CURRENCIES[rng.integers(0, len(CURRENCIES))])
        out.append(rec)
    return out


def events_to_source(events: list[dict[str, Any]]) -> pa.Table:
    """The batch as the other contenders receive it: already decoded (they get decoding for free)."""
    cols: dict[str, list[Any]] = {f.name: [] for f in ROW_SCHEMA}
    for ev in events:
        up = ev["kind"] == "upsert"
        cols["order_id"].append(ev["order_id"])
        cols["position"].append(ev["position"])
        cols["amount_cents"].append(ev["amount_cents"] if up else None)
        cols["currency"].append((ev.get("currency") or "INR") if up else None)
        cols["deleted"].append(not up)
        cols["event_day"].append(ev["event_day"])
    return pa.table(cols, schema=ROW_SCHEMA)


def jsonl(events: list[dict[str, Any]]) -> bytes:
    return b"".join(json.dumps(e, separators=(",", ":")).encode() + b"\n" for e in events)


# -- tables -----------------------------------------------------------------------------------------

def build_ours(frame: pl.DataFrame, path: Path) -> dict[str, Any]:
    """Our lake with the base rows, laid out by our own staging path (stage -> gate -> strict commit)."""
    from datetime import UTC, datetime

    from delta_release.clock import FixedClock
    from delta_release.commit import Change, Plan, replace_partitions, write
    from delta_release.context import TableContext

    from ._common import create_lake

    lake = create_lake(path, clock=FixedClock(datetime(2026, 11, 29, tzinfo=UTC)))
    parts = {key[0]: df for key, df in frame.partition_by("event_day", as_dict=True, maintain_order=True).items()}

    class BaseRows(Plan):
        def build(self, ctx: TableContext, parent: int) -> Change:
            return replace_partitions(ctx, parent, parts, operation="bench-base", batch_ids=["bench-base"],
                                      details={"changed_keys": frame.height})

    from delta_release import index

    ctx = lake.table("orders")
    keys = index.key_index(ctx)
    if keys is not None:  # as a lake grown by ingests has it: the index follows every commit (not timed)
        keys.catch_up(ctx.latest_version() or 0)
    result = write(ctx, BaseRows())
    return {"version": result.version, "files": len(result.staged.staged_files)}


def build_delta(frame: pl.DataFrame, path: Path) -> dict[str, Any]:
    from deltalake import write_deltalake

    write_deltalake(str(path), frame.to_arrow().cast(ROW_SCHEMA), partition_by=["event_day"], mode="error")
    return {"files": sum(1 for _ in path.rglob("*.parquet"))}


def iceberg_catalog(path: Path) -> Any:
    from pyiceberg.catalog.sql import SqlCatalog

    path.mkdir(parents=True, exist_ok=True)
    return SqlCatalog("bench", uri=f"sqlite:///{path}/catalog.db", warehouse=f"file://{path}/warehouse")


def build_iceberg(frame: pl.DataFrame, path: Path) -> dict[str, Any]:
    """pyiceberg table with the same rows, identity-partitioned by event_day, in a SQLite catalog. The
    pristine catalog file is kept so each run can start from the base snapshot again."""
    cat = iceberg_catalog(path)
    cat.create_namespace("bench")
    tbl = cat.create_table("bench.orders", schema=ROW_SCHEMA)
    with tbl.update_spec() as spec:
        spec.add_identity("event_day")
    tbl = cat.load_table("bench.orders")
    tbl.append(frame.to_arrow().cast(ROW_SCHEMA))
    shutil.copy2(path / "catalog.db", path / "catalog.pristine.db")
    return {"snapshot": tbl.current_snapshot().snapshot_id if tbl.current_snapshot() else None}


# -- the build ----------------------------------------------------------------------------------------

def _stamp(path: Path, params: dict[str, Any]) -> bool:
    stamp = path / ".built.json"
    return stamp.exists() and json.loads(stamp.read_text()) == json.loads(json.dumps(params, sort_keys=True))


# Bumped when the package's on-disk layout of a built lake of ours changes, so `ensure` rebuilds it untimed
# instead of the first timed ingest migrating it (2: the key index as sorted `.kx` files, not shards).
OURS_LAYOUT = 2


def _done(path: Path, params: dict[str, Any]) -> None:
    (path / ".built.json").write_text(json.dumps(params, sort_keys=True))


def ensure(scale: Scale, kinds: tuple[str, ...] = ("ours", "delta", "iceberg"), log: Any = print) -> dict[str, Any]:
    """Build whatever is missing for this scale; returns the paths the benchmarks use."""
    root = data_dir(scale)
    root.mkdir(parents=True, exist_ok=True)
    info: dict[str, Any] = {"root": root, "touched_days": touched_days(scale), "per_day": per_day(scale),
                            "tables": {}}
    data_fields = ("rows", "days", "touched_days", "batch", "seed")  # a table is stamped by its own days
    params = {"scale": {k: v for k, v in scale.to_json().items() if k in data_fields}, "format": 4}
    batch_dir = root / "batch"
    if not _stamp(batch_dir, params):
        shutil.rmtree(batch_dir, ignore_errors=True)
        batch_dir.mkdir(parents=True)
        events = batch_events(scale)
        (batch_dir / "batch.jsonl").write_bytes(jsonl(events))
        pq.write_table(events_to_source(events), batch_dir / "source.parquet")
        _done(batch_dir, params)
    info["batch_jsonl"] = batch_dir / "batch.jsonl"
    info["source_parquet"] = batch_dir / "source.parquet"
    for rows in scale.memory_rows:
        days = table_days(scale, rows)
        label = f"{days * per_day(scale)}"
        entry: dict[str, Any] = {"rows": days * per_day(scale), "days": days}
        frame: pl.DataFrame | None = None
        for kind, builder in (("ours", build_ours), ("delta", build_delta), ("iceberg", build_iceberg)):
            if kind not in kinds:
                continue
            path = root / f"{kind}_{label}"
            stamp = {**params, "kind": kind, "days": days, **({"layout": OURS_LAYOUT} if kind == "ours" else {})}
            if not _stamp(path, stamp):
                if frame is None:
                    frame = base_frame(scale, days)
                shutil.rmtree(path, ignore_errors=True)
                log(f"  building {kind} table: {frame.height:,} rows over {days} days -> {path.name}")
                builder(frame, path)
                _done(path, stamp)
            entry[kind] = path
        info["tables"][entry["rows"]] = entry
    return info
