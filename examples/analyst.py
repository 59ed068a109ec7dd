"""An analyst's session: open the demo lake, read the published orders and a pinned older version with
Polars, compare them, and draw one chart (revenue by event day, published vs pinned) as an SVG.

    make demo                                  # builds ./lake
    python examples/analyst.py --lake lake --out orders-by-day.svg

The same on an s3:// lake: the storage settings come from the standard AWS_* variables (or AWS_PROFILE and
~/.aws/credentials), as for every delta-release entry point; `--duckdb` also reads the published version
with DuckDB (the `interop` extra) and checks it returns the same rows:

    export AWS_ENDPOINT_URL=https://s3.example.com AWS_ACCESS_KEY_ID=... AWS_SECRET_ACCESS_KEY=...
    python examples/analyst.py --lake s3://bucket/lake --duckdb

The chart is plain SVG written by hand: matplotlib is only in the `bench` extra and this example should
run with the product's own dependencies (Polars does the work; the SVG is 40 lines of text).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import polars as pl

import delta_release as dr


def compare(published: pl.DataFrame, pinned: pl.DataFrame) -> dict[str, int]:
    """Orders added, removed and changed between the pinned version and the published one."""
    both = published.join(pinned, on="order_id", how="full", suffix="_pinned", coalesce=True)
    added = both.filter(pl.col("amount_cents_pinned").is_null() & pl.col("amount_cents").is_not_null()).height
    removed = both.filter(pl.col("amount_cents").is_null() & pl.col("amount_cents_pinned").is_not_null()).height
    changed = both.filter(pl.col("amount_cents").is_not_null() & pl.col("amount_cents_pinned").is_not_null()
                          & ((pl.col("amount_cents") != pl.col("amount_cents_pinned"))
                             | (pl.col("event_day") != pl.col("event_day_pinned")))).height
    return {"published_orders": published.height, "pinned_orders": pinned.height,
            "added": added, "removed": removed, "changed": changed}


def by_day(frame: pl.DataFrame) -> pl.DataFrame:
    return frame.group_by("event_day").agg(pl.col("amount_cents").sum().alias("cents")).sort("event_day")


def svg_chart(series: dict[str, pl.DataFrame], title: str) -> str:
    """Grouped bars of cents per event_day, one colour per series."""
    days = sorted({d for f in series.values() for d in f["event_day"].drop_nulls().to_list()})[-20:]
    values = {name: dict(zip(f["event_day"].to_list(), f["cents"].to_list(), strict=True))
              for name, f in series.items()}
    top = max((v for vals in values.values() for d, v in vals.items() if d in days), default=1) or 1
    width, height, left, bottom = 900, 360, 70, 40
    slot = (width - left - 20) / max(1, len(days))
    bar = slot * 0.8 / max(1, len(series))
    colours = ["#3b6ea5", "#e39b2d", "#2e8b57"]
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
           f'viewBox="0 0 {width} {height}">',
           f'<text x="{left}" y="20" font-size="15" font-family="sans-serif">{title}</text>']
    for i, day in enumerate(days):
        for j, name in enumerate(series):
            v = values[name].get(day, 0) or 0
            h = (height - bottom - 80) * v / top  # room above for the title and legend
            x = left + i * slot + j * bar
            out.append(f'<rect x="{x:.1f}" y="{height - bottom - h:.1f}" width="{bar:.1f}" height="{h:.1f}" '
                       f'fill="{colours[j % 3]}"><title>{name} day {day}: {v / 100:,.2f}</title></rect>')
        out.append(f'<text x="{left + i * slot + slot * 0.4:.1f}" y="{height - bottom + 16}" font-size="11" '
                   f'text-anchor="middle" font-family="sans-serif">{day}</text>')
    for j, name in enumerate(series):
        out.append(f'<rect x="{width - 220}" y="{30 + 18 * j}" width="12" height="12" fill="{colours[j % 3]}"/>'
                   f'<text x="{width - 202}" y="{41 + 18 * j}" font-size="12" font-family="sans-serif">{name}</text>')
    out.append(f'<text x="{left}" y="{height - 6}" font-size="11" font-family="sans-serif">event_day '
               f'(amounts in major units; max {top / 100:,.2f})</text></svg>')
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--lake", default="lake")
    ap.add_argument("--out", default="orders-by-day.svg")
    ap.add_argument("--pinned", type=int, default=None, help="version to compare with (default: the one before"
                                                             " the published)")
    ap.add_argument("--duckdb", action="store_true", help="also read the published version with DuckDB")
    args = ap.parse_args(argv)
    try:
        return session(args)
    except (dr.DeltaReleaseError, OSError) as exc:  # a bad argument: one line, not a traceback
        text = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        print(f"{ap.prog}: error: {text}", file=sys.stderr)
        return exc.exit_code if isinstance(exc, dr.DeltaReleaseError) else 2


def session(args: argparse.Namespace) -> int:
    lake = dr.Lake.open(args.lake)                         # a path or s3://bucket/prefix (AWS_* settings)
    published = lake.read("orders")                        # what every reader gets now
    version = lake.published("orders").version             # type: ignore[union-attr]
    pinned_version = args.pinned if args.pinned is not None else max(0, version - 1)
    pinned = lake.read("orders", version=pinned_version)   # a pinned, erasure-checked older snapshot
    diff = compare(published, pinned)
    print(f"published version {version}: {diff['published_orders']} orders; pinned version {pinned_version}: "
          f"{diff['pinned_orders']} orders; added {diff['added']}, removed {diff['removed']}, "
          f"changed {diff['changed']}")
    if args.duckdb:
        duck = lake.gateway.read_duckdb("orders")          # DuckDB over exactly the gateway's file list
        same = duck.sort("order_id").equals(published.sort("order_id"))
        print(f"duckdb: {'same rows' if same else 'DIFFERENT ROWS'} ({duck.height} orders)")
        if not same:
            return 1
    svg = svg_chart({f"published v{version}": by_day(published), f"pinned v{pinned_version}": by_day(pinned)},
                    "Order value by event day: published vs pinned")
    Path(args.out).write_text(svg, encoding="utf-8")
    print(f"chart: {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
