"""Reading registered tables: Polars where it reads the table correctly, DuckDB's delta extension where not.

Polars (through delta-rs) refuses column mapping and some reader features, and silently clamps INT96
timestamps beyond 2262-04-11 (the nanosecond range) to that date. The gateway therefore looks at the
table's protocol and its file statistics before choosing a reader: a table Polars would misread goes to
DuckDB's delta extension (its own log replay and parquet reader), or, when that is not installed, the
read is refused with the reasons. It never returns silently wrong values.
"""

from __future__ import annotations

import datetime as dt
from typing import TYPE_CHECKING, Any

import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq

from .. import _delta
from ..errors import InputError, SafetyError
from ..storage import Storage
from .inventory import check_inventory

if TYPE_CHECKING:
    from ..context import LakeContext

# Polars decodes INT96 timestamps as nanoseconds since the epoch, which only span these instants.
NS_MIN = dt.datetime(1677, 9, 21, 0, 12, 43, 145225, tzinfo=dt.UTC)
NS_MAX = dt.datetime(2262, 4, 11, 23, 47, 16, 854775, tzinfo=dt.UTC)
INSTALL_HINT = "pip install 'delta-release[interop]' (duckdb-ext-delta) to read it through DuckDB"


class UnreadableTableError(SafetyError):
    """No installed engine can read this version of a table correctly."""

    def __init__(self, table: str, version: int, reasons: list[str]) -> None:
        super().__init__(f"table {table} version {version} cannot be read correctly by Polars ("
                         f"{'; '.join(reasons)}) and DuckDB's delta extension is not installed: {INSTALL_HINT}",
                         table=table, version=version, reasons=reasons)
        self.table = table
        self.version = version
        self.reasons = reasons


def polars_limits(storage: Storage, version: int) -> list[str]:
    """Reasons why Polars would refuse or misread `version` of the table at `storage` (empty: it reads it)."""
    facts = _delta.table_configuration(storage.root, storage.storage_options, version)
    reasons: list[str] = []
    mode = facts["configuration"].get("delta.columnMapping.mode", "none")
    if mode not in (None, "none"):
        reasons.append(f"column mapping mode {mode!r}")
    known = {"deletionVectors", "timestampNtz"} | ({"columnMapping"} if reasons else set())
    reasons += [f"reader feature {f!r}" for f in sorted(set(facts["reader_features"]) - known)]
    if reasons:
        return reasons
    schema = _delta.arrow_schema(storage.root, storage.storage_options, version)
    stamps = [f.name for f in schema if pa.types.is_timestamp(f.type)]
    if stamps:
        reasons += _timestamp_risks(storage, version, stamps)
    return reasons


def _timestamp_risks(storage: Storage, version: int, columns: list[str]) -> list[str]:
    actions = _delta.add_actions_table(storage.root, storage.storage_options, version).to_pylist()
    reasons: list[str] = []
    unproven: set[str] = set()
    for col in columns:
        for row in actions:
            lo, hi = row.get(f"min.{col}"), row.get(f"max.{col}")
            if lo is None and hi is None:
                if (row.get("num_records") or 0) > (row.get(f"null_count.{col}") or 0):
                    unproven.add(row["path"])
                continue
            if any(_outside(v) for v in (lo, hi) if v is not None):
                reasons.append(f"column {col} holds timestamps outside {NS_MIN.date()}..{NS_MAX.date()}"
                               " (Polars would clamp them)")
                break
    for path in sorted(unproven)[:50]:  # files without statistics: look for INT96 in their footers
        with storage.open_input(path) as handle:
            meta = pq.ParquetFile(handle).schema
        if any(meta.column(i).physical_type == "INT96" for i in range(len(meta))):
            reasons.append(f"INT96 timestamps without statistics in {path}")
            break
    return reasons


def _outside(value: Any) -> bool:
    if not isinstance(value, dt.datetime):
        return False
    aware = value if value.tzinfo else value.replace(tzinfo=dt.UTC)
    return aware < NS_MIN or aware > NS_MAX


def duckdb_delta_available() -> bool:
    try:
        _extension_dir()
    except ImportError:
        return False
    return True


def _extension_dir() -> str:
    import duckdb_ext  # the duckdb-ext-delta wheel ships the extension binary in this namespace package

    return f"{list(duckdb_ext.__path__)[0]}/extensions"


def read_duckdb_delta(uri: str, version: int) -> pl.DataFrame:
    """`version` of the Delta table at `uri`, read by DuckDB's delta extension (its own log replay)."""
    if "://" in uri and not uri.startswith("file://"):
        raise InputError(f"the DuckDB delta reader reads local tables only for now: {uri}", uri=uri)
    import duckdb

    con = duckdb.connect(config={"autoinstall_known_extensions": "false", "autoload_known_extensions": "false"})
    try:
        con.execute(f"SET extension_directory = '{_extension_dir()}'")
        con.execute("LOAD delta")
        con.execute("SET TimeZone = 'UTC'")
        path = uri.removeprefix("file://").replace("'", "''")
        con.execute(f"ATTACH '{path}' AS pinned (TYPE delta, VERSION {int(version)})")
        return con.sql("SELECT * FROM pinned").pl()
    finally:
        con.close()


def scan_registered(lake: LakeContext, table: str, version: int | None) -> pl.LazyFrame:
    """Resolve through the gateway, re-check the version's inventory, then read with an engine that is right."""
    uri, version = lake.gateway.resolve(table, version)
    storage = Storage(uri, lake.options)
    check_inventory(storage, version, unreferenced=False).raise_for_failure(table)
    reasons = polars_limits(storage, version)
    if not reasons:
        return _delta.scan(uri, lake.options, version)
    if not duckdb_delta_available():
        raise UnreadableTableError(table, version, reasons)
    return read_duckdb_delta(uri, version).lazy()


def reader_for(storage: Storage, version: int) -> dict[str, Any]:
    """Which engine the gateway reads this version with, and why."""
    reasons = polars_limits(storage, version)
    engine = "polars" if not reasons else ("duckdb-delta" if duckdb_delta_available() else None)
    return {"engine": engine, "polars_limits": reasons}


def read_registered(lake: LakeContext, table: str, version: int | None, *, engine: str) -> tuple[pl.DataFrame, str]:
    """Read a registered table with the engine asked for; returns the rows and the engine that read them.

    `polars` may still be answered by DuckDB's delta extension where Polars would be wrong (the reasons are
    in `reader_for`); `duckdb` always reads through DuckDB's delta extension, after the same checks.
    """
    uri, version = lake.gateway.resolve(table, version)
    storage = Storage(uri, lake.options)
    if engine == "duckdb":
        check_inventory(storage, version, unreferenced=False).raise_for_failure(table)
        if not duckdb_delta_available():
            raise InputError("the duckdb engine for registered tables needs the duckdb-ext-delta wheel"
                             " (pip install '.[interop]')", table=table)
        return read_duckdb_delta(uri, version), "duckdb-delta"
    used = reader_for(storage, version)["engine"] or "polars"
    return scan_registered(lake, table, version).collect(), used
