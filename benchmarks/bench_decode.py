"""Decode a v2/v3 JSON Lines mix: ours (`decode_batch`, every line accounted for) against
`polars.read_ndjson` plus the same checks written as Polars expressions.

    python -m benchmarks.bench_decode CONTENDER FILE.jsonl
"""

from __future__ import annotations

import io
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

from ._common import emit

CONTENDERS = ("ours", "polars")
LABELS = {"ours": "ours: contract.decode_batch", "polars": "polars.read_ndjson + the same checks"}


def events(n: int, seed: int) -> list[dict[str, Any]]:
    rng = np.random.default_rng(seed)
    version = rng.integers(2, 4, n)
    delete = rng.random(n) < 0.15
    amount = rng.integers(0, 1_000_000, n)
    day = rng.integers(0, 365, n)
    cur = np.array(["USD", "EUR", "GBP", "INR"])[rng.integers(0, 4, n)]
    out = []
    for i in range(n):
        ev: dict[str, Any] = {"schema_version": int(version[i]), "order_id": f"ord-{i % (n // 3 + 1):07d}",
                              "position": i, "kind": "delete" if delete[i] else "upsert"}
        if not delete[i]:
            ev["amount_cents"] = int(amount[i])
            ev["event_day"] = int(day[i])
            if version[i] == 3:
                ev["currency"] = str(cur[i])
        out.append(ev)
    return out


BAD_LINES = [b'{"schema_version": 2, "order_id": "x", "position": ', b'[1, 2]',
             b'{"schema_version": 3, "order_id": "bad", "position": 5, "kind": "upsert", "amount_cents": 73.5, '
             b'"event_day": 1, "currency": "USD"}',
             b'{"schema_version": 3, "order_id": "bad", "position": 6, "kind": "upsert", "amount_cents": 1, '
             b'"event_day": 1, "currency": "usd"}',
             b'{"schema_version": 4, "order_id": "bad", "position": 7, "kind": "upsert"}']


def with_bad_lines(data: bytes, every: int = 100) -> bytes:
    """Replace every `every`-th line by a malformed or invalid one (1% at the default)."""
    lines = data.split(b"\n")
    for i in range(0, len(lines) - 1, every):
        lines[i] = BAD_LINES[(i // every) % len(BAD_LINES)]
    return b"\n".join(lines)


def run_ours(data: bytes) -> dict[str, Any]:
    from delta_release.contract import decode_batch

    t0 = time.perf_counter()
    decoded = decode_batch(data)
    seconds = time.perf_counter() - t0
    return {"seconds": seconds, "lines": decoded.extracted, "accepted": decoded.accepted,
            "rejected": len(decoded.rejects)}


def polars_checks(data: bytes) -> Any:
    """read_ndjson with the contract's columns, then the contract's checks as one expression chain."""
    import polars as pl

    schema = {"schema_version": pl.Int64, "order_id": pl.String, "position": pl.Int64, "kind": pl.String,
              "amount_cents": pl.Int64, "event_day": pl.Int64, "currency": pl.String}
    df = pl.read_ndjson(io.BytesIO(data), schema=schema).with_row_index("line", offset=1)
    v, kind, oid = pl.col("schema_version"), pl.col("kind"), pl.col("order_id")
    up = kind == "upsert"
    reason = (
        pl.when(v.is_null()).then(pl.lit("missing_field"))
        .when(~v.is_in([2, 3])).then(pl.lit("unknown_schema_version"))
        .when(oid.is_null() | pl.col("position").is_null() | kind.is_null()).then(pl.lit("missing_field"))
        .when((oid.str.len_chars() == 0) | (oid.str.len_chars() > 128) | ~oid.str.contains(r"^[[:print:]]+$"))
        .then(pl.lit("bad_value"))
        .when(pl.col("position") < 0).then(pl.lit("bad_value"))
        .when(~kind.is_in(["upsert", "delete"])).then(pl.lit("bad_value"))
        .when(up & (pl.col("amount_cents").is_null() | pl.col("event_day").is_null())).then(pl.lit("missing_field"))
        .when(up & (pl.col("amount_cents") < 0)).then(pl.lit("bad_value"))
        .when(~up & pl.col("amount_cents").is_not_null()).then(pl.lit("unexpected_field"))
        .when((v == 2) & pl.col("currency").is_not_null()).then(pl.lit("unexpected_field"))
        .when(up & (v == 3) & pl.col("currency").is_null()).then(pl.lit("missing_field"))
        .when(pl.col("currency").is_not_null() & ~pl.col("currency").str.contains(r"^[A-Z]{3}$"))
        .then(pl.lit("bad_currency"))
        .when(pl.col("event_day") < 0).then(pl.lit("bad_value"))
        .otherwise(None)
    )
    df = df.with_columns(reason=reason, currency=pl.when(up & (v == 2)).then(pl.lit("INR"))
                         .otherwise(pl.col("currency")))
    content = pl.concat_str([oid, kind, pl.col("amount_cents"), pl.col("currency"), pl.col("event_day")],
                            separator="|", ignore_nulls=True)
    df = df.with_columns(content=content)
    ok = pl.col("reason").is_null()
    first = pl.col("content").filter(ok).first().over("position")
    df = df.with_columns(reason=pl.when(ok & (pl.col("content") != first)).then(pl.lit("position_conflict"))
                         .otherwise(pl.col("reason")))
    return df


def run_polars(data: bytes) -> dict[str, Any]:
    t0 = time.perf_counter()
    try:
        df = polars_checks(data)
    except Exception as exc:  # noqa: BLE001 - read_ndjson is all-or-nothing; report how it failed
        return {"seconds": time.perf_counter() - t0, "failed": f"{type(exc).__name__}: {str(exc)[:120]}"}
    seconds = time.perf_counter() - t0
    rejected = int(df["reason"].is_not_null().sum())
    return {"seconds": seconds, "lines": df.height, "accepted": df.height - rejected, "rejected": rejected}


def main(argv: list[str]) -> None:
    contender, path = argv
    import polars  # noqa: F401  (both contenders import it; not timed)

    import delta_release.contract  # noqa: F401

    data = Path(path).read_bytes()
    emit({"run_ours": run_ours, "run_polars": run_polars}[f"run_{contender}"](data))


if __name__ == "__main__":
    main(sys.argv[1:])
