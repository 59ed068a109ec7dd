"""The second engine (DuckDB) and the proof that engines read the same files.

DuckDB reads exactly the file list the gateway resolved from the Delta log, with `read_parquet([...])`
and hive partitioning off: DuckDB's hive reading would turn a null partition into the string
`__HIVE_DEFAULT_PARTITION__`, so partition values are attached from the log's `partitionValues` instead.
Polars reads through the Delta log (`scan_delta`). `compare_file_sets` checks both against the gateway's
list; a DuckDB glob over a partition directory is compared the same way and reports unregistered files.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote

import polars as pl
import pyarrow as pa

from .. import s3config
from .._delta import FileEntry
from ..errors import InputError, SafetyError

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


INSTALL_HINT = "pip install 'delta-release[interop]'"


def extension_dir() -> str:
    """Where the duckdb-ext-* wheels put DuckDB's extension binaries (ImportError when none is installed)."""
    import duckdb_ext  # a namespace package: duckdb-ext-delta and duckdb-ext-httpfs ship their binaries in it

    return f"{list(duckdb_ext.__path__)[0]}/extensions"


def extension_available(name: str) -> bool:
    """True when DuckDB's extension `name` (delta, httpfs) was installed from its wheel."""
    try:
        import duckdb

        return any(Path(extension_dir()).glob(f"v{duckdb.__version__}/*/{name}.duckdb_extension"))
    except ImportError:
        return False


def connect(uri: str = "", options: Mapping[str, str] | None = None, *,
            delta: bool = False) -> duckdb.DuckDBPyConnection:
    """An in-memory DuckDB that never reaches for the network to install or load extensions. For an
    s3:// `uri` it loads httpfs from its wheel and holds the lake's S3 settings (`options`, resolved by
    s3config.py) as a temporary secret; `delta=True` loads the delta extension too. A missing extension
    wheel is an InputError (exit 2) that says what to install."""
    import duckdb  # imported on first use: most commands never need the second engine

    settings = s3config.resolve(uri, options) if s3config.is_s3(uri) else {}
    needed = (["httpfs"] if s3config.is_s3(uri) else []) + (["delta"] if delta else [])
    if s3config.is_s3(uri) and s3config.needs_aws_extension(settings):
        needed.append("aws")
    missing = [n for n in needed if not extension_available(n)]
    if missing:
        what = " and ".join(f"duckdb-ext-{n}" for n in missing)
        place = "an s3:// lake" if s3config.is_s3(uri) else "a Delta table"
        raise InputError(f"DuckDB needs its {' and '.join(missing)} extension to read {place}: {INSTALL_HINT}"
                         f" ({what})", uri=uri, missing=missing)
    con = duckdb.connect(config={"autoinstall_known_extensions": False, "autoload_known_extensions": False})
    try:
        if needed:
            con.execute(f"SET extension_directory = '{extension_dir()}'")
        for name in needed:
            con.execute(f"LOAD {name}")
        if s3config.is_s3(uri):
            con.execute(s3config.duckdb_secret_sql(settings))
    except BaseException:
        con.close()
        raise
    return con


def storage_failure(exc: Exception, uri: str, options: Mapping[str, str] | None) -> Exception:
    """A DuckDB error that says the object store refused or did not answer, as the one-line InputError
    naming the setting to check; anything else unchanged."""
    if s3config.is_s3(uri) and type(exc).__name__ in ("IOException", "HTTPException"):
        return s3config.storage_error(f"DuckDB cannot read {uri}", exc, s3config.resolve(uri, options), uri=uri)
    return exc


def polars_schema(columns: dict[str, str], partition: str) -> pl.Schema:
    """Column order and types of the polars path: data columns in definition order, partition last."""
    arrow = {"string": pa.string(), "int64": pa.int64(), "int32": pa.int32(), "float64": pa.float64(),
             "bool": pa.bool_()}
    fields = [pa.field(c, arrow[t]) for c, t in columns.items() if c != partition]
    fields.append(pa.field(partition, arrow[columns[partition]]))
    return pl.from_arrow(pa.schema(fields).empty_table()).schema  # type: ignore[union-attr]


def duckdb_read(root: str, entries: tuple[FileEntry, ...] | list[FileEntry], columns: dict[str, str],
                partition: str, options: Mapping[str, str] | None = None) -> tuple[pl.DataFrame, set[str]]:
    """Read `entries` (paths relative to `root`, a directory or an s3:// URI reached with `options`) with
    DuckDB; returns the frame and the files DuckDB opened."""
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
    con = connect(root, options)
    try:
        con.register("m", mapping)
        frame = con.execute(sql, {"files": files}).pl()
        opened = {str(r[0]) for r in
                  con.execute("SELECT file_name FROM parquet_file_metadata($files)", {"files": files}).fetchall()}
    except Exception as exc:
        raise storage_failure(exc, root, options) from exc
    finally:
        con.close()
    return frame.select([pl.col(c).cast(t) for c, t in schema.items()]), opened


def duckdb_glob(pattern: str, options: Mapping[str, str] | None = None) -> set[str]:
    """The files a DuckDB glob (as `read_parquet('<dir>/*.parquet')` would use) sees."""
    con = connect(pattern, options)
    try:
        return {str(r[0]) for r in con.execute("SELECT file FROM glob($p)", {"p": pattern}).fetchall()}
    except Exception as exc:
        raise storage_failure(exc, pattern, options) from exc
    finally:
        con.close()
