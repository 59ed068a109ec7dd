"""The one module that imports `deltalake`. It turns delta-rs calls and errors into the project's terms.

Commits are strict: a transaction is built on a `DeltaTable` opened at the writer's parent version with
`CommitProperties(max_commit_retries=0)`, so any newer version makes delta-rs fail instead of silently
rebasing (it rebases by default when partitions differ). That failure becomes `StaleParentError`.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from typing import Any

import polars as pl
import pyarrow as pa
from deltalake import CommitProperties, DeltaTable, QueryBuilder, Schema
from deltalake.exceptions import CommitFailedError, DeltaError, TableNotFoundError
from deltalake.transaction import AddAction, RemoveAction

from .errors import NotFoundError, StaleParentError

METADATA_KEY = "delta_release"


@dataclass(frozen=True, slots=True, kw_only=True)
class FileAdd:
    path: str
    size: int
    partition_values: dict[str, str | None]
    stats: str
    modification_time: int


@dataclass(frozen=True, slots=True, kw_only=True)
class FileEntry:
    path: str
    size: int
    partition_values: dict[str, Any]
    num_records: int | None


def _open(uri: str, options: dict[str, str], version: int | None = None) -> DeltaTable:
    try:
        return DeltaTable(uri, version=version, storage_options=options or None)
    except TableNotFoundError as exc:
        raise NotFoundError(f"no Delta table at {uri}", uri=uri) from exc
    except DeltaError as exc:
        if version is not None:
            raise NotFoundError(f"version {version} of {uri} cannot be opened: {str(exc).splitlines()[0]}",
                                uri=uri, version=version) from exc
        raise


def latest_version(uri: str, options: dict[str, str]) -> int | None:
    """The newest version, or None when there is no Delta table at `uri`."""
    try:
        return int(DeltaTable(uri, storage_options=options or None).version())
    except TableNotFoundError:
        return None


def create_table(uri: str, options: dict[str, str], schema: pa.Schema, partition_by: list[str],
                 *, name: str) -> None:
    """Create an empty table (version 0) unless one exists."""
    if latest_version(uri, options) is not None:
        return
    try:
        DeltaTable.create(uri, Schema.from_arrow(schema), partition_by=partition_by, mode="error",
                          name=name, storage_options=options or None)
    except DeltaError:
        if latest_version(uri, options) is None:
            raise


def commit(uri: str, options: dict[str, str], *, table: str, parent: int, adds: list[FileAdd],
           removes: list[FileEntry], evidence: dict[str, Any], partition_by: list[str]) -> int:
    """One atomic commit of adds and removes on `parent`; returns the new version or raises StaleParent."""
    handle = _open(uri, options, parent)
    # A remove needs a deletion time even when the commit adds nothing (an erasure emptying a partition).
    now = max([a.modification_time for a in adds], default=0) or int(time.time() * 1000)
    actions: list[AddAction | RemoveAction] = [
        AddAction(path=a.path, size=a.size, partition_values=a.partition_values,
                  modification_time=a.modification_time, data_change=True, stats=a.stats)
        for a in adds
    ]
    actions += [
        RemoveAction(path=r.path, data_change=True, deletion_timestamp=now, size=r.size,
                     partition_values={k: None if v is None else str(v)
                                       for k, v in r.partition_values.items()})
        for r in removes
    ]
    props = CommitProperties(max_commit_retries=0,
                             custom_metadata={METADATA_KEY: json.dumps(evidence, sort_keys=True)})
    try:
        handle.create_write_transaction(actions, mode="append", schema=handle.schema(),
                                        partition_by=partition_by, commit_properties=props)
    except CommitFailedError as exc:
        raise StaleParentError(table, parent, latest_version(uri, options)) from exc
    return parent + 1


def file_entries(uri: str, options: dict[str, str], version: int) -> list[FileEntry]:
    """The files a version references, with their partition values and record counts."""
    return snapshot_entries(_open(uri, options, version))


def open_snapshot(uri: str, options: dict[str, str], version: int) -> DeltaTable:
    """A table handle pinned to `version`, log already replayed; `polars.scan_delta` accepts it as is.

    Outside this module treat it as opaque (the gateway caches it so a warm query skips the log replay).
    """
    return _open(uri, options, version)


def snapshot_entries(handle: DeltaTable) -> list[FileEntry]:
    """`file_entries` of an opened snapshot."""
    actions = pa.table(handle.get_add_actions(flatten=True)).to_pylist()
    out = []
    for row in actions:
        parts = {k.removeprefix("partition."): v for k, v in row.items() if k.startswith("partition.")}
        out.append(FileEntry(path=row["path"], size=int(row["size_bytes"]), partition_values=parts,
                             num_records=row.get("num_records")))
    return sorted(out, key=lambda e: e.path)


def scan(uri: str, options: dict[str, str], version: int | None = None) -> pl.LazyFrame:
    """Every row of a version (tombstones included) as a Polars LazyFrame; the one `scan_delta` outside
    the gateway's cached-snapshot path. Views (current rows) are in `delta_release.views`."""
    return pl.scan_delta(uri, version=version, storage_options=options or None)


def scan_snapshot(handle: DeltaTable) -> pl.LazyFrame:
    """A LazyFrame over a snapshot from `open_snapshot` (no second log replay)."""
    return pl.scan_delta(handle)


def file_uris(uri: str, options: dict[str, str], version: int) -> list[str]:
    return list(_open(uri, options, version).file_uris())


def history(uri: str, options: dict[str, str], limit: int | None = None) -> list[dict[str, Any]]:
    """Commits newest first: version, timestamp, operation and our evidence (decoded) when present."""
    out = []
    for entry in _open(uri, options).history(limit):
        raw = entry.get(METADATA_KEY)
        out.append({
            "version": int(entry["version"]),
            "timestamp": int(entry.get("timestamp", 0)),
            "operation": entry.get("operation"),
            "evidence": json.loads(raw) if isinstance(raw, str) else None,
        })
    return out


def partition_columns_at(uri: str, options: dict[str, str], version: int) -> list[str]:
    return list(_open(uri, options, version).metadata().partition_columns)


def arrow_schema(uri: str, options: dict[str, str], version: int | None = None) -> pa.Schema:
    return pa.schema(_open(uri, options, version).schema().to_arrow())


def table_configuration(uri: str, options: dict[str, str], version: int | None = None) -> dict[str, Any]:
    handle = _open(uri, options, version)
    protocol = handle.protocol()
    return {
        "configuration": dict(handle.metadata().configuration),
        "min_reader_version": protocol.min_reader_version,
        "reader_features": list(protocol.reader_features or []),
    }


def add_actions_table(uri: str, options: dict[str, str], version: int) -> pa.Table:
    """The add actions of a version, flattened: path, size_bytes, num_records, min.<col>, max.<col>, ..."""
    return pa.table(_open(uri, options, version).get_add_actions(flatten=True))


def is_delta_error(exc: BaseException) -> bool:
    """Whether `exc` is one of deltalake's own errors (its log replay or reader refused something)."""
    return isinstance(exc, DeltaError)


def query_all(uri: str, options: dict[str, str], version: int) -> pa.Table:
    """Every row of `version`, read by deltalake's own scan (column mapping and deletion vectors applied)."""
    handle = _open(uri, options, version)
    return pa.table(QueryBuilder().register("t", handle).execute("SELECT * FROM t").read_all())


__all__ = [
    "FileAdd", "FileEntry", "METADATA_KEY", "add_actions_table", "arrow_schema", "commit",
    "create_table", "file_entries", "file_uris", "history", "latest_version", "open_snapshot",
    "is_delta_error", "partition_columns_at", "query_all", "scan", "scan_snapshot", "snapshot_entries",
    "table_configuration",
]
