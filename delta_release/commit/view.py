"""A staged candidate as a snapshot that can be read before it is committed.

`staged_snapshot(ctx, staged)` is the file set the commit would produce: the parent's files minus the
candidate's removes plus its adds. `StagedSnapshot.scan()` reads exactly those files with Polars (the
partition column comes from each file's partition value, as the Delta log would give it), so a release
run checks the very rows it would ship without any Delta version existing for them. `pl.scan_delta`
stays in `_delta.py`; this reads parquet files from a list, like the gateway's second engine does.
"""

from __future__ import annotations

from dataclasses import dataclass

import polars as pl

from .. import _delta
from ..context import TableContext
from ..gateway.engines import file_uri, polars_schema
from .writer import StagedCandidate


@dataclass(frozen=True, slots=True, kw_only=True)
class StagedSnapshot:
    table: str
    uri: str
    storage_options: dict[str, str]
    parent: int
    columns: dict[str, str]
    partition: str
    entries: list[_delta.FileEntry]  # what the commit would make the table's file set, sorted by path
    added: list[str]  # paths the candidate stages or registers
    removed: list[str]  # paths of the parent it removes

    def scan(self) -> pl.LazyFrame:
        """Every row of the staged file set (tombstones included), columns as `_delta.scan` gives them."""
        schema = polars_schema(self.columns, self.partition)
        ptype = schema[self.partition]
        data_schema = {c: t for c, t in schema.items() if c != self.partition}
        frames = [pl.scan_parquet(file_uri(self.uri, e.path), storage_options=self.storage_options or None,
                                  hive_partitioning=False)
                  .select([pl.col(c).cast(t) for c, t in data_schema.items()])
                  .with_columns(pl.lit(e.partition_values.get(self.partition)).cast(ptype).alias(self.partition))
                  for e in self.entries]
        if not frames:
            return pl.DataFrame(schema=schema).lazy()
        return pl.concat(frames, how="vertical")



def staged_snapshot(ctx: TableContext, staged: StagedCandidate) -> StagedSnapshot:
    """The file set `staged` would commit on its parent (nothing is read but the parent's log)."""
    removed = {r.path for r in staged.removes}
    entries = [e for e in _delta.file_entries(ctx.uri, ctx.storage_options, staged.parent) if e.path not in removed]
    rows = {f.path: f.rows for f in staged.evidence.files}
    pcol = ctx.table.partition
    added = [_delta.FileEntry(path=a.path, size=a.size,
                              partition_values={pcol: a.partition_values.get(pcol)}, num_records=rows.get(a.path))
             for a in staged.adds]
    return StagedSnapshot(table=ctx.name, uri=ctx.uri, storage_options=ctx.storage_options, parent=staged.parent,
                          columns=dict(ctx.table.columns), partition=pcol,
                          entries=sorted(entries + added, key=lambda e: e.path),
                          added=[a.path for a in staged.adds], removed=sorted(removed))
