"""Reading registered tables: an engine that reads this version correctly, or a refusal with the reasons.

Polars (through delta-rs) refuses column mapping and some reader features, and silently clamps INT96
timestamps beyond 2262-04-11 (the nanosecond range) to that date. The gateway therefore looks at the
table's protocol and at its data before choosing a reader. The range of INT96 columns is decided from the
log's statistics where the writer recorded them and from the data itself where it did not (the footer says
which columns are INT96; those columns are read at microsecond precision and their range checked).

Engines, in order: Polars where nothing above applies; DuckDB's delta extension (its own log replay and
parquet reader); deltalake's own scan (column mapping and deletion vectors, but INT96 wraps like Polars, so
never where an INT96 range is at risk). DuckDB and deltalake answers are checked against the log: a
partition column that comes back NULL where the log has a value (DuckDB does this under column mapping
`id`/`name`) disqualifies that engine for the table. No engine left: the read is refused (exit 3).
"""

from __future__ import annotations

import datetime as dt
from typing import TYPE_CHECKING, Any

import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq

from .. import _delta
from ..errors import InputError, SafetyError, rust_panic
from ..gateway.engines import connect, extension_available, storage_failure
from ..storage import Storage
from .inventory import check_inventory
from .paths import table_relative
from .problems import LogProblemError, classify, log_guard

if TYPE_CHECKING:
    from ..context import LakeContext

# Polars decodes INT96 timestamps as nanoseconds since the epoch, which only span these instants.
NS_MIN = dt.datetime(1677, 9, 21, 0, 12, 43, 145225, tzinfo=dt.UTC)
NS_MAX = dt.datetime(2262, 4, 11, 23, 47, 16, 854775, tzinfo=dt.UTC)
INSTALL_HINT = "pip install 'delta-release[interop]' (duckdb-ext-delta) to read it through DuckDB"


class UnreadableTableError(SafetyError):
    """No installed engine can read this version of a table correctly."""

    def __init__(self, table: str, version: int, reasons: list[str]) -> None:
        hint = "" if duckdb_delta_available() else f"; DuckDB's delta extension is not installed: {INSTALL_HINT}"
        super().__init__(f"table {table} version {version} cannot be read correctly by any installed engine ("
                         f"{'; '.join(reasons)}){hint}", table=table, version=version, reasons=reasons)
        self.table = table
        self.version = version
        self.reasons = reasons


def feature_limits(storage: Storage, version: int) -> list[str]:
    """Protocol features Polars (delta-rs' file list + Polars' parquet reader) does not read."""
    facts = _delta.table_configuration(storage.root, storage.storage_options, version)
    reasons: list[str] = []
    mode = facts["configuration"].get("delta.columnMapping.mode", "none")
    if mode not in (None, "none"):
        reasons.append(f"column mapping mode {mode!r}")
    known = {"deletionVectors", "timestampNtz"} | ({"columnMapping"} if reasons else set())
    reasons += [f"reader feature {f!r}" for f in sorted(set(facts["reader_features"]) - known)]
    return reasons


def value_risks(storage: Storage, version: int) -> list[str]:
    """Values Polars and deltalake would silently get wrong at `version` (INT96 beyond 1677..2262)."""
    schema = _delta.arrow_schema(storage.root, storage.storage_options, version)
    stamps = [f.name for f in schema if pa.types.is_timestamp(f.type)]
    return _timestamp_risks(storage, version, stamps) if stamps else []


def polars_limits(storage: Storage, version: int) -> list[str]:
    """Reasons why Polars would refuse or misread `version` of the table at `storage` (empty: it reads it)."""
    return feature_limits(storage, version) or value_risks(storage, version)


def _timestamp_risks(storage: Storage, version: int, columns: list[str]) -> list[str]:
    actions = _delta.add_actions_table(storage.root, storage.storage_options, version).to_pylist()
    unproven: dict[str, list[str]] = {}  # file -> timestamp columns its statistics do not bound
    for col in columns:
        for row in actions:
            lo, hi = row.get(f"min.{col}"), row.get(f"max.{col}")
            if lo is None and hi is None:
                records, nulls = row.get("num_records"), row.get(f"null_count.{col}")
                if records is None or nulls is None or records > nulls:  # no statistics: the data decides
                    unproven.setdefault(row["path"], []).append(col)
                continue
            if any(_outside(v) for v in (lo, hi) if v is not None):
                return [f"column {col} holds timestamps outside {NS_MIN.date()}..{NS_MAX.date()}"
                        " (Polars would clamp them)"]
    for path, cols in sorted(unproven.items()):
        found = _int96_outside(storage, path, cols)
        if found:
            return [f"column {found} holds timestamps outside {NS_MIN.date()}..{NS_MAX.date()} in {path}"
                    " (no statistics; read from the file; Polars would clamp them)"]
    return []


def _int96_outside(storage: Storage, log_path: str, columns: list[str]) -> str | None:
    """The first of `columns` stored as INT96 in the file whose values leave the nanosecond range."""
    rel = table_relative(log_path, storage.root)
    if rel is None:
        return None  # outside the root: the inventory gate has already refused it
    with storage.open_input(rel) as handle:
        parquet = pq.ParquetFile(handle, coerce_int96_timestamp_unit="us")  # not ns: 9999-12-31 must not wrap
        meta = parquet.schema
        int96 = {meta.column(i).path.split(".")[0] for i in range(len(meta)) if meta.column(i).physical_type == "INT96"}
        if not int96:
            return None
        # Column mapping renames physical columns; then every INT96 column is checked.
        wanted = [c for c in columns if c in int96] or sorted(int96)
        table = parquet.read(columns=wanted, use_threads=False)
    for name in wanted:
        column = table.column(name)
        if not pa.types.is_timestamp(column.type):
            continue
        for value in column.to_pylist():
            if value is not None and _outside(value):
                return name
    return None
def _outside(value: Any) -> bool:
    if not isinstance(value, dt.datetime):
        return False
    aware = value if value.tzinfo else value.replace(tzinfo=dt.UTC)
    return aware < NS_MIN or aware > NS_MAX


def duckdb_delta_available() -> bool:
    return extension_available("delta")


def read_duckdb_delta(uri: str, version: int, options: dict[str, str] | None = None) -> pl.DataFrame:
    """`version` of the Delta table at `uri`, read by DuckDB's delta extension (its own log replay); an
    s3:// table through httpfs with the lake's S3 settings as a DuckDB secret (gateway/engines.py)."""
    con = connect(uri, options, delta=True)
    try:
        con.execute("SET TimeZone = 'UTC'")
        path = uri.removeprefix("file://").replace("'", "''")
        con.execute(f"ATTACH '{path}' AS pinned (TYPE delta, VERSION {int(version)})")
        return con.sql("SELECT * FROM pinned").pl()
    except Exception as exc:
        raise storage_failure(exc, uri, options) from exc
    finally:
        con.close()


def read_deltalake(uri: str, options: dict[str, str], version: int) -> pl.DataFrame:
    """`version` read by deltalake's own scan (column mapping, deletion vectors)."""
    frame = pl.from_arrow(_delta.query_all(uri, options, version))
    assert isinstance(frame, pl.DataFrame)
    return frame


def partition_problems(storage: Storage, version: int, frame: pl.DataFrame) -> list[str]:
    """Partition columns an engine's answer gets wrong against the log's partition values.

    A row can only be NULL in a partition column when it comes from a file whose partition value is null;
    rows per file come from the log's record count, or the file's parquet footer where the log has none.
    """
    columns = _delta.partition_columns_at(storage.root, storage.storage_options, version)
    if not columns:
        return []
    entries = _delta.file_entries(storage.root, storage.storage_options, version)
    problems: list[str] = []
    for col in columns:
        if col not in frame.columns:
            problems.append(f"partition column {col} is missing from the answer")
            continue
        null_files = [e for e in entries if e.partition_values.get(col) is None]
        allowed = sum(_rows(storage, e) for e in null_files)
        nulls = frame[col].null_count()
        if nulls > allowed:
            problems.append(f"partition column {col} came back NULL in {nulls} rows, the log allows {allowed}")
    return problems


def _rows(storage: Storage, entry: _delta.FileEntry) -> int:
    if entry.num_records is not None:
        return int(entry.num_records)
    rel = table_relative(entry.path, storage.root)
    if rel is None:
        return 0
    with storage.open_input(rel) as handle:
        return int(pq.ParquetFile(handle).metadata.num_rows)


def _candidates(storage: Storage, version: int, prefer: str) -> tuple[list[str], list[str]]:
    """Engines that may read this version, best first, and why the others may not."""
    features = feature_limits(storage, version)
    risks = value_risks(storage, version)
    engines: list[str] = []
    if not features and not risks:
        engines.append("polars")
    if duckdb_delta_available():
        engines.append("duckdb-delta")
    if not risks:
        engines.append("deltalake")
    if prefer == "duckdb":
        engines = ["duckdb-delta"] if duckdb_delta_available() else []
    return engines, features + risks


def _read(engine: str, storage: Storage, uri: str, options: dict[str, str], version: int) -> pl.DataFrame:
    if engine == "duckdb-delta":
        return read_duckdb_delta(uri, version, options)
    return read_deltalake(uri, options, version)


_FAILED_ENGINES: list[str] = []  # engines that raised in this process (see `engine_failed`)


def engine_failed() -> bool:
    """Whether an engine's read raised in this process. Its worker threads may then outlive the read and
    crash the interpreter's shutdown (Polars' delta scan after a deletion-vector error: SIGSEGV or SIGBUS
    in about one exit of three), so the CLI ends such a process without that shutdown (cli/main.py)."""
    return bool(_FAILED_ENGINES)


def _engine_error(storage: Storage, table: str, version: int, engine: str, exc: BaseException) -> None:
    """After `engine` raised `exc` reading a version whose inventory passed: name a damaged file if there is
    one (the files may have changed since the check, or a deletion vector may hold other bytes of the same
    size: GateError, exit 3). Returns when the files are as the log says."""
    _FAILED_ENGINES.append(engine)
    check_inventory(storage, version, unreferenced=False, table=table, verify_vectors=True).raise_for_failure(table)


def collect_checked(storage: Storage, table: str, version: int, frame: pl.LazyFrame, engine: str) -> pl.DataFrame:
    """`frame.collect()` for a registered table: an engine that fails is a refusal naming the table (or the
    damaged file), exit 3, never an internal error."""
    try:
        return frame.collect()
    except BaseException as exc:
        if not isinstance(exc, Exception) and not rust_panic(exc):
            raise  # KeyboardInterrupt, SystemExit
        with log_guard(table, version):
            _engine_error(storage, table, version, engine, exc)
        raise LogProblemError(table, version, "engine_failed",
                              f"{engine}: {type(exc).__name__}: {_first_line(exc)}") from exc


def read_checked(storage: Storage, table: str, version: int, *, prefer: str = "polars",
                 options: dict[str, str] | None = None) -> tuple[pl.LazyFrame, str]:
    """The rows of `version` from the first engine that reads them correctly, and that engine's name.

    Every file the version needs (data files and deletion vectors) is checked before any engine touches
    the table; Polars' answer is lazy (`collect_checked` collects it under the same refusals)."""
    uri, options = storage.root, dict(options or storage.storage_options)
    with log_guard(table, version):
        check_inventory(storage, version, unreferenced=False, table=table).raise_for_failure(table)
        engines, reasons = _candidates(storage, version, prefer)
        refusals = list(reasons) if "polars" not in engines else []
        for engine in engines:
            if engine == "polars":
                return _delta.scan(uri, options, version), engine
            try:
                frame = _read(engine, storage, uri, options, version)
            except Exception as exc:  # noqa: BLE001 - an engine that fails is not used; the reason is kept
                _engine_error(storage, table, version, engine, exc)
                if _delta.is_delta_error(exc):
                    reason = classify(str(exc))
                    if reason is not None and not reason.startswith("unsupported_feature"):
                        raise  # the log itself is damaged: log_guard refuses with the reason
                refusals.append(f"{engine} failed: {type(exc).__name__}: {_first_line(exc)}")
                continue
            wrong = partition_problems(storage, version, frame)
            if not wrong:
                return frame.lazy(), engine
            refusals += [f"{engine}: {w}" for w in wrong]
    if prefer == "duckdb" and not duckdb_delta_available():
        raise InputError("the duckdb engine for registered tables needs the duckdb-ext-delta wheel"
                         " (pip install '.[interop]')", table=table)
    raise UnreadableTableError(table, version, refusals)


def _first_line(exc: BaseException) -> str:
    return next((x.strip() for x in str(exc).splitlines() if x.strip()), "")[:200]


def scan_registered(lake: LakeContext, table: str, version: int | None) -> pl.LazyFrame:
    """Resolve through the gateway, re-check the version's inventory, then read with an engine that is right."""
    uri, version = lake.gateway.resolve(table, version)
    return read_checked(Storage(uri, lake.options), table, version, options=lake.options)[0]


def reader_for(storage: Storage, version: int, table: str | None = None) -> dict[str, Any]:
    """Which engine the gateway would try first for this version, and why Polars cannot (if it cannot)."""
    with log_guard(table or storage.root, version):
        engines, reasons = _candidates(storage, version, "polars")
    return {"engine": engines[0] if engines else None, "polars_limits": reasons}


def read_registered(lake: LakeContext, table: str, version: int | None, *, engine: str) -> tuple[pl.DataFrame, str]:
    """Read a registered table with the engine asked for; returns the rows and the engine that read them.

    `polars` may be answered by another engine where Polars would be wrong; `duckdb` reads through
    DuckDB's delta extension only, after the same checks, and is refused where DuckDB would be wrong.
    """
    uri, version = lake.gateway.resolve(table, version)
    storage = Storage(uri, lake.options)
    frame, used = read_checked(storage, table, version, prefer=engine, options=lake.options)
    return collect_checked(storage, table, version, frame, used), used
