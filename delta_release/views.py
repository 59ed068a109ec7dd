"""The one implementation of each view over a table's rows.

- `partition_filter`: rows in some partitions (None means the null partition).
- `current_rows`: what readers see: tombstone rows dropped, the tombstone column dropped, sorted by key.
  Which column marks a tombstone and which is the key come from the table definition (table_defs/*.yaml).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import polars as pl

from .tables import TableDef


def partition_filter(column: str, values: Iterable[Any]) -> pl.Expr:
    """Rows whose partition column is one of `values` (None means the null partition)."""
    values = list(values)
    plain = [v for v in values if v is not None]
    expr = pl.col(column).is_in(plain) if plain else pl.lit(False)
    if any(v is None for v in values):
        expr = expr | pl.col(column).is_null()
    return expr.fill_null(False)


def current_columns(tdef: TableDef) -> list[str]:
    """The columns of the current view: the key first, then every other column but the tombstone marker,
    by name (a stable order that does not depend on the file schema's order)."""
    rest = sorted(c for c in tdef.columns if c not in (tdef.tombstone, tdef.key))
    return ([tdef.key] if tdef.key else []) + rest


def live_rows(lf: pl.LazyFrame, tdef: TableDef) -> pl.LazyFrame:
    """Every row that is not a tombstone, all columns kept (no sort); a table without a tombstone column
    is returned as it is."""
    return lf if tdef.tombstone is None else lf.filter(pl.col(tdef.tombstone).not_())


def current_rows(lf: pl.LazyFrame, tdef: TableDef) -> pl.LazyFrame:
    """The current view of a table's rows: tombstones filtered out, sorted by key. A table without a
    tombstone column (external, registered) is returned as it is."""
    if tdef.tombstone is None:
        return lf
    out = live_rows(lf, tdef).select(current_columns(tdef))
    return out.sort(tdef.key) if tdef.key else out
