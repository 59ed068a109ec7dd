"""Apply several batches on one parent without committing between them.

`overlay_rows(base, partitions)` is a `ReadRows` that answers as the parent would after a commit that
replaced `partitions` (day -> whole new content): the partitions it replaced come from memory, every other
one from `base`. Applying batch after batch through it, each on the overlay of the ones before, gives the
same rows, conflicts and quarantine lines as committing them one by one (the fold is by position); the
union of the replaced partitions is then ONE candidate on the parent.
"""

from __future__ import annotations

from typing import Any

import polars as pl

from .fold import ROW_SCHEMA, ApplyPlan, ReadRows, plan_apply


def overlay_rows(base: ReadRows, partitions: dict[Any, pl.DataFrame]) -> ReadRows:
    """`base` with `partitions` (day -> rows, tombstones included) replaced whole."""
    if not partitions:
        return base

    def keep(frame: pl.DataFrame, keys: list[str] | None) -> pl.DataFrame:
        return frame if keys is None else frame.filter(pl.col("order_id").is_in(keys))

    def read(*, days: list[Any] | None = None, keys: list[str] | None = None,
             exclude_days: list[Any] | None = None) -> pl.DataFrame:
        excluded = set(exclude_days or [])
        frames: list[pl.DataFrame] = []
        if days is not None:
            from_base = [d for d in days if d not in partitions and d not in excluded]
            if from_base:
                frames.append(base(days=from_base, keys=keys))
            frames += [keep(partitions[d], keys) for d in days if d in partitions and d not in excluded]
        else:
            frames.append(base(keys=keys, exclude_days=sorted(excluded | set(partitions),
                                                              key=lambda d: (d is None, d or 0))))
            frames += [keep(p, keys) for d, p in partitions.items() if d not in excluded]
        if not frames:
            return pl.DataFrame(schema=ROW_SCHEMA)
        return pl.concat([f.cast(ROW_SCHEMA) for f in frames])  # type: ignore[arg-type]

    return read


def apply_in_sequence(batches: list[pl.DataFrame], base: ReadRows) -> tuple[dict[Any, pl.DataFrame], list[ApplyPlan]]:
    """Apply each frame of events on the overlay of the ones before; returns the union of the replaced
    partitions (their final content) and each batch's own plan (its conflicts, changed keys)."""
    merged: dict[Any, pl.DataFrame] = {}
    plans = []
    for events in batches:
        plan = plan_apply(events, overlay_rows(base, merged))
        merged.update(plan.partitions)
        plans.append(plan)
    return merged, plans
