"""`<lake>/_quarantine/<batch_id>.parquet`: one file per batch, rows in line order.

Rows carry a keyed hash of the record's order id (when it had one) instead of the id itself, so an
erasure can scrub the subject's raw text later without the ledger ever naming the subject.
"""

from __future__ import annotations

import io
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass

import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq

from ..contract import Reject
from ..storage import Storage

PREFIX = "_quarantine"
SCHEMA = pa.schema([
    ("batch_id", pa.string()),
    ("line", pa.int64()),
    ("reason", pa.string()),
    ("detail", pa.string()),
    ("raw", pa.string()),
    ("subject", pa.string()),
])


@dataclass(frozen=True, slots=True, kw_only=True)
class QuarantineRow:
    batch_id: str
    line: int
    reason: str
    detail: str
    raw: str | None
    subject: str | None


class QuarantineLedger:
    def __init__(self, storage: Storage) -> None:
        self._storage = storage

    def _path(self, batch_id: str) -> str:
        return f"{PREFIX}/{batch_id}.parquet"

    def write(self, batch_id: str, rejects: Iterable[Reject], subject_key: Callable[[str], str]) -> int:
        """Write the batch's ledger file (replacing an earlier attempt of the same batch)."""
        rows = [QuarantineRow(batch_id=batch_id, line=r.line, reason=r.reason.value, detail=r.detail,
                              raw=r.raw, subject=subject_key(r.order_id) if r.order_id else None)
                for r in sorted(rejects, key=lambda r: r.line)]
        self._write_rows(batch_id, rows)
        return len(rows)

    def _write_rows(self, batch_id: str, rows: list[QuarantineRow]) -> None:
        table = pa.Table.from_pylist([asdict(r) for r in rows], schema=SCHEMA)
        sink = io.BytesIO()
        pq.write_table(table, sink, compression="zstd")
        self._storage.write_bytes(self._path(batch_id), sink.getvalue())

    def has(self, batch_id: str) -> bool:
        return self._storage.exists(self._path(batch_id))

    def rows(self, batch_id: str | None = None) -> pl.DataFrame:
        paths = [self._path(batch_id)] if batch_id else [
            o.path for o in self._storage.list(PREFIX, recursive=False) if o.path.endswith(".parquet")]
        frames = [pl.DataFrame(pq.read_table(self._storage.open_input(p))) for p in paths
                  if self._storage.exists(p)]
        if not frames:
            return pl.DataFrame(schema={f.name: pl.String() if f.type == pa.string() else pl.Int64()
                                        for f in SCHEMA})
        return pl.concat(frames).sort("batch_id", "line")

    def scrub_subject(self, subject: str) -> int:
        """Remove the raw text of every row of `subject` (a keyed hash); returns how many rows changed."""
        changed = 0
        for obj in self._storage.list(PREFIX, recursive=False):
            if not obj.path.endswith(".parquet"):
                continue
            table = pq.read_table(self._storage.open_input(obj.path))
            rows = table.to_pylist()
            hit = [r for r in rows if r["subject"] == subject and r["raw"] is not None]
            if not hit:
                continue
            for r in hit:
                r["raw"] = None
            changed += len(hit)
            batch_id = obj.path.rsplit("/", 1)[-1].removesuffix(".parquet")
            self._write_rows(batch_id, [QuarantineRow(**r) for r in rows])
        return changed
