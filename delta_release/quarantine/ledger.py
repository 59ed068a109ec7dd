"""`<lake>/_quarantine/<batch_id>.parquet`: one file per batch, rows in line order, no payload text.

A row points into the raw batch instead of copying the line: its line number, byte offset and length in
the batch's bytes (`_raw/`), the reason code, a detail that describes and never quotes (`details.py`), and
the keyed hash of the subject when the line named one it could decode. The raw store stays the one place
a line's text lives, so an erasure never has to rewrite the quarantine; `quarantine --show` reads the text
from the raw batch and withholds lines of erased subjects (`view.py`).

No column can hold payload, and parquet statistics are written for the integer columns only, so not even
a footer's min/max can carry text.
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
from .details import safe_detail
from .spans import line_spans

PREFIX = "_quarantine"
FORMAT_KEY = b"delta_release.quarantine.format"
FORMAT = b"2"
SCHEMA = pa.schema([
    ("batch_id", pa.string()),
    ("line", pa.int64()),
    ("offset", pa.int64()),
    ("length", pa.int64()),
    ("reason", pa.string()),
    ("detail", pa.string()),
    ("subject", pa.string()),
], metadata={FORMAT_KEY: FORMAT})
STATISTICS = ["line", "offset", "length"]  # never on a string column
_POLARS = {f.name: pl.String() if f.type == pa.string() else pl.Int64() for f in SCHEMA}


@dataclass(frozen=True, slots=True, kw_only=True)
class QuarantineRow:
    batch_id: str
    line: int
    offset: int | None
    length: int | None
    reason: str
    detail: str
    subject: str | None


def encode_rows(rows: list[QuarantineRow]) -> bytes:
    """A ledger file's bytes: the fixed schema, zstd, statistics on the integer columns only."""
    table = pa.Table.from_pylist([asdict(r) for r in rows], schema=SCHEMA)
    sink = io.BytesIO()
    pq.write_table(table, sink, compression="zstd", write_statistics=STATISTICS)
    return sink.getvalue()


def _span(reject: Reject, spans: list[tuple[int, int]]) -> tuple[int | None, int | None]:
    offset, length = getattr(reject, "offset", None), getattr(reject, "length", None)
    if isinstance(offset, int) and isinstance(length, int):
        return offset, length
    if 1 <= reject.line <= len(spans):
        return spans[reject.line - 1]
    return None, None


class QuarantineLedger:
    def __init__(self, storage: Storage) -> None:
        self._storage = storage

    def _path(self, batch_id: str) -> str:
        return f"{PREFIX}/{batch_id}.parquet"

    def write(self, batch_id: str, rejects: Iterable[Reject], subject_key: Callable[[str], str],
              data: object = None) -> int:
        """Write the batch's ledger file (replacing an earlier attempt of the same batch). A reject's byte
        span is its own `offset`/`length` when the decoder set them, else computed from `data` (the raw
        batch's bytes) or, when that is not bytes, from the batch read back from the raw store."""
        rejects = sorted(rejects, key=lambda r: r.line)
        spans: list[tuple[int, int]] = []
        if any(not isinstance(getattr(r, attr, None), int) for r in rejects for attr in ("offset", "length")):
            if not isinstance(data, bytes):
                from ..raw import RawStore

                data = RawStore(self._storage).read(batch_id)
            spans = line_spans(data)
        rows = []
        for r in rejects:
            offset, length = _span(r, spans)
            rows.append(QuarantineRow(batch_id=batch_id, line=r.line, offset=offset, length=length,
                                      reason=r.reason.value, detail=safe_detail(r.reason.value, r.detail),
                                      subject=subject_key(r.order_id) if r.order_id else None))
        self._storage.write_bytes(self._path(batch_id), encode_rows(rows))
        return len(rows)

    def has(self, batch_id: str) -> bool:
        return self._storage.exists(self._path(batch_id))

    def paths(self) -> list[str]:
        return [o.path for o in self._storage.list(PREFIX, recursive=False) if o.path.endswith(".parquet")
                and not o.path.rsplit("/", 1)[-1].startswith(".")]

    def lines(self, batch_ids: Iterable[str], storage_options: dict[str, str] | None = None) -> pl.DataFrame:
        """`batch_id`, `line` of every quarantined line of `batch_ids`: one listing and ONE Polars scan of
        those batches' files (every ingest writes one, so `rows()` opening each file in Python cost 1.8 s
        at 1,000 batches). Both columns exist in every format of the ledger."""
        wanted = {self._path(b) for b in batch_ids}
        paths = [p for p in self.paths() if p in wanted]
        if not paths:
            return pl.DataFrame(schema={"batch_id": pl.String, "line": pl.Int64})
        return (pl.scan_parquet([self._storage.uri(p) for p in paths], storage_options=storage_options or None,
                                hive_partitioning=False, missing_columns="insert", extra_columns="ignore")
                .select(pl.col("batch_id").cast(pl.String), pl.col("line").cast(pl.Int64)).collect())

    def rows(self, batch_id: str | None = None) -> pl.DataFrame:
        """The ledger's rows (of one batch, or all), sorted by batch and line, in the columns of SCHEMA.
        A legacy file not migrated yet is read without its text column."""
        paths = [self._path(batch_id)] if batch_id else self.paths()
        frames = []
        for p in paths:
            if not self._storage.exists(p):
                continue
            pf = pq.ParquetFile(self._storage.open_input(p))
            frame = pl.DataFrame(pf.read(columns=[c for c in pf.schema_arrow.names if c in _POLARS]))
            frames.append(frame.with_columns(
                [pl.lit(None, dtype=t).alias(c) for c, t in _POLARS.items() if c not in frame.columns]
            ).select(list(_POLARS)).cast(_POLARS))
        if not frames:
            return pl.DataFrame(schema=_POLARS)
        return pl.concat(frames).sort("batch_id", "line")
