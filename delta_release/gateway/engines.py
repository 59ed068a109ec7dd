"""The second engine (DuckDB) and the proof that engines read the same files.

DuckDB reads exactly the file list the gateway resolved from the Delta log, with `read_parquet([...])`
and hive partitioning off: DuckDB's hive reading would turn a null partition into the string
`__HIVE_DEFAULT_PARTITION__`, so partition values are attached from the log's `partitionValues` instead.
Polars reads through the Delta log (`scan_delta`). `compare_file_sets` checks both against the gateway's
list; a DuckDB glob over a partition directory is compared the same way and reports unregistered files.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote

import polars as pl
import pyarrow as pa

from .._delta import FileEntry
from ..errors import SafetyError

if TYPE_CHECKING:
    import duckdb

_DUCK_TYPES = {"string": "VARCHAR", "int64": "BIGINT", "int32": "INTEGER", "float64": "DOUBLE",
               "bool": "BOOLEAN"}


class EngineMismatchError(SafetyError):
    """Two engines (or an engine and the gateway) would read different files for the same version."""

    def __init__(self, table: str, version: int, differences: dict[str, dict[str, list[str]]]) -> None:
        parts = [f"{engine}: {len(d['missing'])} missing, {len(d['unexpected'])} unexpected"
                 for engine, d in differences.items()]
        super().__init__(f"engines disagree on the files of {table} version {version}: " + "; ".join(parts),
                         table=table, version=version, differences=differences)
        self.table = table
        self.version = version
        self.differences = differences


@dataclass(frozen=True, slots=True, kw_only=True)
class FileSetReport:
    """The gateway's file set against the set each engine (or glob) saw."""

    expected: list[str]
    seen: dict[str, list[str]]
    missing: dict[str, list[str]]  # engine -> expected files it did not see
    unexpected: dict[str, list[str]]  # engine -> files it saw that the gateway did not resolve

    @property
    def mismatch(self) -> bool:
        return any(self.missing.values()) or any(self.unexpected.values())

    def raise_for_mismatch(self, table: str, version: int) -> None:
        if self.mismatch:
            raise EngineMismatchError(table, version, {
                e: {"missing": self.missing[e], "unexpected": self.unexpected[e]} for e in self.seen
                if self.missing[e] or self.unexpected[e]})

    def to_json(self) -> dict[str, Any]:
        return {"mismatch": self.mismatch, "expected": len(self.expected),
                "seen": {e: len(v) for e, v in self.seen.items()},
                "missing": self.missing, "unexpected": self.unexpected}


def file_uri(root: str, rel: str) -> str:
    return f"{root.rstrip('/')}/{unquote(rel)}"


def compare_file_sets(expected: set[str], seen: dict[str, set[str]]) -> FileSetReport:
    return FileSetReport(expected=sorted(expected), seen={e: sorted(s) for e, s in seen.items()},
                         missing={e: sorted(expected - s) for e, s in seen.items()},
                         unexpected={e: sorted(s - expected) for e, s in seen.items()})


def connect() -> duckdb.DuckDBPyConnection:
    """An in-memory DuckDB that never reaches for the network to install or load extensions."""
    import duckdb  # imported on first use: most commands never need the second engine

    return duckdb.connect(config={"autoinstall_known_extensions": False, "autoload_known_extensions": False})


def polars_schema(columns: dict[str, str], partition: str) -> pl.Schema:
    """Column order and types of the polars path: data columns in definition order, partition last."""
    arrow = {"string": pa.string(), "int64": pa.int64(), "int32": pa.int32(), "float64": pa.float64(),
             "bool": pa.bool_()}
    fields = [pa.field(c, arrow[t]) for c, t in columns.items() if c != partition]
    fields.append(pa.field(partition, arrow[columns[partition]]))
    return pl.from_arrow(pa.schema(fields).empty_table()).schema  # type: ignore[union-attr]


def duckdb_read(root: str, entries: tuple[FileEntry, ...] | list[FileEntry], columns: dict[str, str],
                partition: str) -> tuple[pl.DataFrame, set[str]]:
    """Read `entries` (paths relative to `root`) with DuckDB; returns the frame and the files DuckDB opened."""
    schema = polars_schema(columns, partition)
    if not entries:
        return pl.DataFrame(schema=schema), set()
    files = [file_uri(root, e.path) for e in entries]
    values = [e.partition_values.get(partition) for e in entries]
    mapping = pa.table({"filename": pa.array(files, pa.string()),
                        "pvalue": pa.array([None if v is None else str(v) for v in values], pa.string())})
    data_cols = ", ".join(f't."{c}"' for c in schema.names() if c != partition)
    sql = (f'SELECT {data_cols}, CAST(m.pvalue AS {_DUCK_TYPES[columns[partition]]}) AS "{partition}" '
           "FROM read_parquet($files, filename=true, hive_partitioning=false) t JOIN m USING (filename)")
    con = connect()
    try:
        con.register("m", mapping)
        frame = con.execute(sql, {"files": files}).pl()
        opened = {str(r[0]) for r in
                  con.execute("SELECT file_name FROM parquet_file_metadata($files)", {"files": files}).fetchall()}
    finally:
        con.close()
    return frame.select([pl.col(c).cast(t) for c, t in schema.items()]), opened


def duckdb_glob(pattern: str) -> set[str]:
    """The files a DuckDB glob (as `read_parquet('<dir>/*.parquet')` would use) sees."""
    con = connect()
    try:
        return {str(r[0]) for r in con.execute("SELECT file FROM glob($p)", {"p": pattern}).fetchall()}
    finally:
        con.close()
