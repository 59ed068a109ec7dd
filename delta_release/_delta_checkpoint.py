"""A classic checkpoint from the previous one and the log entries since, a batch of rows at a time.

delta-rs writes a checkpoint by loading its snapshot of the whole table, with every file's statistics. On
the 50M-row bench table (29,200 files), the ingest whose commit wrote one took +316 ms, and its peak rose
from 314 to 410 MiB, on every 100th commit. Here the previous checkpoint is streamed through, 8,192 rows
at a time:
- rows whose file no entry since touches are copied as they are;
- the entries' final actions follow: the add or remove that last touched each path, and the newest
  protocol and metaData;
- the new file keeps the previous checkpoint's own schema and compression.

Tombstones (remove rows) are kept until `delta.deletedFileRetentionDuration` (1 week by default) after
their deletion, as delta-rs keeps them.

`build` returns None, writing nothing, for anything it does not know. The caller then lets delta-rs
write the checkpoint. That covers:
- no previous classic single-file checkpoint;
- a gap in the entries;
- an action other than add, remove, metaData, protocol or commitInfo;
- txn, domainMetadata, sidecar or deletion-vector content;
- a field that the previous checkpoint's schema cannot hold;
- a retention it cannot parse.
No deltalake here: `_delta` calls it.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from ._delta_log import OTHER_ACTIONS, Read, checkpoint_path, field_names, last_checkpoint, log_path

BATCH_ROWS = 8192
MAX_ENTRIES = 256  # entries since the previous checkpoint (normally the interval, 100); beyond, delta-rs
MAX_ENTRY_BYTES = 64 << 20  # their JSON: the final action of each path they touch is held in memory
ACTIONS = ("add", "remove", "metaData", "protocol")
# The add and remove fields this writer fills from a JSON action (absent ones null); a previous checkpoint
# whose add or remove holds anything else (Spark's stats_parsed, partitionValues_parsed) is left to delta-rs
FILE_FIELDS = frozenset({"path", "partitionValues", "size", "modificationTime", "dataChange", "stats", "tags",
                         "deletionVector", "baseRowId", "defaultRowCommitVersion", "clusteringProvider",
                         "deletionTimestamp", "extendedFileMetadata"})
DEFAULT_RETENTION_MS = 7 * 24 * 3600 * 1000  # delta.deletedFileRetentionDuration: interval 1 week
_UNITS_MS = {"millisecond": 1, "second": 1000, "minute": 60_000, "hour": 3_600_000, "day": 86_400_000,
             "week": 604_800_000}
_INTERVAL = re.compile(r"^\s*interval\s+(\d+)\s+([a-z]+?)s?\s*$")


class _Unknown(Exception):
    """Something this writer does not know: delta-rs writes the checkpoint instead."""


def build(read: Read, version: int, *, now_ms: int,
          open_file: Callable[[str], Any] | None = None) -> tuple[bytes, dict[str, Any]] | None:
    """The checkpoint of `version` (parquet bytes) and its `_last_checkpoint` document, or None.
    `open_file(rel)`: a seekable reader of a log file (the previous checkpoint is then read a batch at a
    time, not held whole); without it the checkpoint's bytes come from `read`."""
    start = last_checkpoint(read)
    if start is None or start >= version or version - start > MAX_ENTRIES:
        return None
    try:
        since = _since(read, start, version)
        if open_file is not None:
            with open_file(checkpoint_path(start)) as handle:
                return _write(pq.ParquetFile(handle), since, version, now_ms)
        data = read(checkpoint_path(start))
        return None if data is None else _write(pq.ParquetFile(pa.BufferReader(data)), since, version, now_ms)
    except (_Unknown, pa.ArrowException, OSError, KeyError, TypeError, ValueError, AttributeError, IndexError,
            ArithmeticError):  # (an integer beyond int64 in an entry: OverflowError)
        return None


class _Since:
    """The final action of each path touched by the entries after the checkpoint, and the newest protocol
    and metaData among them."""

    def __init__(self) -> None:
        self.files: dict[str, tuple[str, dict[str, Any]]] = {}  # path -> ("add" | "remove", action)
        self.protocol: dict[str, Any] | None = None
        self.metadata: dict[str, Any] | None = None


def _since(read: Read, start: int, version: int) -> _Since:
    out = _Since()
    held = 0
    for v in range(start + 1, version + 1):
        raw = read(log_path(v))
        if raw is None:
            raise _Unknown(f"no entry {v}")
        held += len(raw)
        if held > MAX_ENTRY_BYTES:
            raise _Unknown("entries too large")
        for line in raw.decode("utf-8").splitlines():
            if not line.strip():
                continue
            action = json.loads(line)
            if not isinstance(action, dict) or len(action) != 1:
                raise _Unknown("not one action per line")
            (kind, body), = action.items()
            if kind == "commitInfo":
                continue
            if kind not in ACTIONS or not isinstance(body, dict):
                raise _Unknown(kind)
            if kind in ("add", "remove"):
                if body.get("deletionVector") is not None:
                    raise _Unknown("deletion vector")
                out.files[str(body["path"])] = (kind, body)
            elif kind == "protocol":
                out.protocol = body
            else:
                out.metadata = body
    return out


def _retention_ms(metadata: dict[str, Any]) -> int:
    text = (metadata.get("configuration") or {}).get("delta.deletedFileRetentionDuration")
    if text is None:
        return DEFAULT_RETENTION_MS
    m = _INTERVAL.match(str(text).lower())
    if m is None or m.group(2) not in _UNITS_MS:
        raise _Unknown(f"retention {text!r}")
    return int(m.group(1)) * _UNITS_MS[m.group(2)]


def _write(f: pq.ParquetFile, since: _Since, version: int, now_ms: int) -> tuple[bytes, dict[str, Any]]:
    schema = f.schema_arrow
    if not set(ACTIONS) <= set(schema.names) or not set(schema.names) <= {*ACTIONS, *OTHER_ACTIONS}:
        raise _Unknown("checkpoint columns")
    for kind in ("add", "remove"):
        if not set(field_names(schema.field(kind).type)) <= FILE_FIELDS:
            raise _Unknown(f"{kind} fields")
    metadata = since.metadata or _first(f, "metaData")
    oldest = now_ms - _retention_ms(_plain(metadata))
    touched = pa.array(list(since.files), type=pa.string())
    codec = f.metadata.row_group(0).column(0).compression if f.metadata.num_row_groups else "NONE"
    sink = pa.BufferOutputStream()
    rows = adds = 0
    with pq.ParquetWriter(sink, schema, compression="none" if codec.upper() == "UNCOMPRESSED" else codec.lower(),
                          write_statistics=False) as writer:
        for batch in f.iter_batches(batch_size=BATCH_ROWS, use_threads=False):
            for other in OTHER_ACTIONS:
                if other in schema.names and batch.column(other).null_count != len(batch):
                    raise _Unknown(other)
            add, remove = batch.column("add"), batch.column("remove")
            if "deletionVector" in field_names(add.type) and pc.any(pc.is_valid(add.field("deletionVector"))).as_py():
                raise _Unknown("deletion vector")
            keep = pc.or_(
                pc.and_kleene(add.is_valid(), pc.invert(pc.is_in(add.field("path"), value_set=touched))),
                pc.and_kleene(remove.is_valid(), pc.and_kleene(
                    pc.invert(pc.is_in(remove.field("path"), value_set=touched)),
                    pc.greater_equal(pc.fill_null(remove.field("deletionTimestamp"), 0), oldest))))
            if since.protocol is None:
                keep = pc.or_(keep, batch.column("protocol").is_valid())
            if since.metadata is None:
                keep = pc.or_(keep, batch.column("metaData").is_valid())
            kept = batch.filter(pc.fill_null(keep, False))
            if kept.num_rows:
                writer.write_batch(kept)
                rows += kept.num_rows
                adds += kept.num_rows - kept.column("add").null_count
        new = [{"add": body} if kind == "add" else {"remove": body} for kind, body in since.files.values()
               if kind == "add" or int(body.get("deletionTimestamp") or 0) >= oldest]
        new += [{"protocol": since.protocol}] if since.protocol is not None else []
        new += [{"metaData": since.metadata}] if since.metadata is not None else []
        if new:
            writer.write_table(_rows(new, schema))
            rows += len(new)
            adds += sum(1 for r in new if "add" in r)
    data = sink.getvalue().to_pybytes()
    return data, {"version": version, "size": rows, "sizeInBytes": len(data), "numOfAddFiles": adds}


def _first(f: pq.ParquetFile, column: str) -> dict[str, Any]:
    values = f.read(columns=[column], use_threads=False).column(column).drop_null().to_pylist()
    if not values:
        raise _Unknown(f"no {column}")
    found: dict[str, Any] = values[0]
    return found


def _plain(metadata: dict[str, Any]) -> dict[str, Any]:
    """A metaData action with its configuration as a dict (a checkpoint row holds it as key/value pairs)."""
    config = metadata.get("configuration") or {}
    return {**metadata, "configuration": dict(config) if not isinstance(config, dict) else config}


def _rows(actions: list[dict[str, Any]], schema: pa.Schema) -> pa.Table:
    """The actions as checkpoint rows of `schema`: one action per row, every other column null."""
    columns = []
    for field in schema:
        values = [_value(a[field.name], field.type) if field.name in a else None for a in actions]
        columns.append(pa.array(values, type=field.type))
    return pa.Table.from_arrays(columns, schema=schema)


def _value(value: Any, dtype: Any) -> Any:
    """A JSON action value shaped for `dtype`; _Unknown for a field the type cannot hold."""
    if value is None:
        return None
    if pa.types.is_struct(dtype):
        if not isinstance(value, dict):
            raise _Unknown("struct")
        names = field_names(dtype)
        extra = set(value) - set(names)
        if extra:
            raise _Unknown(f"fields {sorted(extra)}")
        return {n: _value(value.get(n), dtype.field(n).type) for n in names}
    if pa.types.is_map(dtype):
        if not isinstance(value, dict):
            raise _Unknown("map")
        return [(k, _value(v, dtype.item_type)) for k, v in value.items()]
    if pa.types.is_list(dtype) or pa.types.is_large_list(dtype):
        if not isinstance(value, list):
            raise _Unknown("list")
        return [_value(v, dtype.value_type) for v in value]
    return value
