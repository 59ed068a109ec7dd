"""The query boundary: every scan resolves the table's published version from the catalog first.

A pinned version newer than the published one is refused (it may be a commit whose publication has not
completed); the current view hides tombstones.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import polars as pl

from ..erasure.permission import check_snapshot
from ..errors import NotFoundError

if TYPE_CHECKING:
    from ..lake import Lake

CURRENT_COLUMNS = ["order_id", "amount_cents", "currency", "event_day", "position"]


class Gateway:
    def __init__(self, lake: Lake, *, policy: str = "refresh") -> None:
        self.lake = lake
        self.policy = policy

    def resolve(self, table: str, version: int | None) -> tuple[str, int]:
        """(table location, version) a reader may use, checked against the catalog now."""
        pub = self.lake.catalog.current(table)
        if pub is None:
            raise NotFoundError(f"table {table} has no published version", table=table)
        if version is None:
            version = pub.version
        elif version < 0 or version > pub.version:
            raise NotFoundError(f"version {version} of {table} is not published (published: {pub.version})",
                                table=table, version=version, published=pub.version)
        check_snapshot(self.lake, table, version)
        return self.lake.table_uri(table), version

    def scan(self, table: str, version: int | None, *, include_tombstones: bool = False) -> pl.LazyFrame:
        uri, version = self.resolve(table, version)
        lf = pl.scan_delta(uri, version=version, storage_options=self.lake.options or None)
        tdef = self.lake.tables.get(table)
        if tdef is not None and tdef.name == "orders" and not include_tombstones:
            lf = lf.filter(pl.col("deleted").not_()).select(CURRENT_COLUMNS).sort("order_id")
        return lf
