"""Delta log entries read and written directly, for `_delta.py` (no deltalake here).

A writer needs little of a snapshot: the newest version, the files of the partitions it rewrites, and
whether the table asks anything of a writer beyond add and remove actions. delta-rs answers these from
a snapshot of every file of the table, and moves it forward by replaying every file again (60-110 ms per
version at 29,200 files, whatever the commit). Here a writer's view moves forward by the commits since:

- `entry_bytes`: the log entry of one commit of ours (the fields delta-rs writes for the same actions);
- `plain_actions`: the adds and removes of one entry, or None when it holds anything else (metadata,
  protocol, deletion vectors, absolute paths, transactions, domain metadata: the caller then asks delta-rs);
- `advance`: a file frame (path, size_bytes, num_records, partition.<col>: `get_add_actions(flatten=True)`
  reduced to those columns) moved forward by such actions;
- `load`: a writer's `State` of one version (protocol, metaData, file frame) read from the newest classic
  checkpoint and the entries after it, so that a writer never opens delta-rs's snapshot of the table
  (None when the table needs more than this reader knows: the caller then opens delta-rs's).
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import polars as pl

# The columns of the file frame `_delta.partition_entries` and `file_count` read.
FRAME_COLUMNS = ("path", "size_bytes", "num_records")
# Partition column types whose log text casts back exactly (others: the caller asks delta-rs).
_CASTABLE = (pl.Int8, pl.Int16, pl.Int32, pl.Int64, pl.UInt8, pl.UInt16, pl.UInt32, pl.UInt64, pl.String)
_PLAIN_KEYS = frozenset({"add", "remove", "commitInfo"})


@dataclass(frozen=True, slots=True)
class Actions:
    # Paths as the log holds them (URI-encoded), as delta-rs's get_add_actions gives them: the file
    # frame's paths are its paths whichever of us read them.
    adds: list[dict[str, Any]]  # path, size, num_records, partition values (log text)
    removes: list[str]  # paths


def entry_bytes(*, parent: int, adds: list[dict[str, Any]], removes: list[dict[str, Any]],
                info: dict[str, Any]) -> bytes:
    """One commit's log entry: commitInfo (operation WRITE, `info` added), then the add and remove actions
    given as their log fields."""
    def line(action: dict[str, Any]) -> str:
        return json.dumps(action, separators=(",", ":"))

    head = {"timestamp": int(time.time() * 1000), "operation": "WRITE", "readVersion": parent, **info}
    lines = [line({"commitInfo": head}), *(line({"add": a}) for a in adds), *(line({"remove": r}) for r in removes)]
    return ("\n".join(lines) + "\n").encode()


def plain_actions(lines: list[str]) -> Actions | None:
    """The adds and removes of one log entry, or None when it holds any other action (or an add with a
    deletion vector, or a path both removed and added)."""
    got = _entry(lines, facts=False)
    return None if got is None else got[0]


def _entry(lines: list[str], *, facts: bool = True
           ) -> tuple[Actions, dict[str, Any] | None, dict[str, Any] | None] | None:
    """The adds and removes of one JSON entry, with (`facts`) its protocol and metaData actions (None when
    absent); None when it holds any other action. Each line is parsed once."""
    adds: list[dict[str, Any]] = []
    removes: list[str] = []
    protocol = metadata = None
    for line in lines:
        if not line.strip():
            continue
        action = json.loads(line)
        if not isinstance(action, dict):
            return None
        if facts and set(action) == {"protocol"}:
            protocol = dict(action["protocol"])
            continue
        if facts and set(action) == {"metaData"}:
            metadata = dict(action["metaData"])
            continue
        if not set(action) <= _PLAIN_KEYS:
            return None
        if (add := action.get("add")) is not None:
            if add.get("deletionVector") or _absolute(str(add["path"])):
                return None
            adds.append({"path": str(add["path"]), "size_bytes": int(add["size"]),
                         "num_records": _num_records(add.get("stats")),
                         "partition": dict(add.get("partitionValues") or {})})
        if (remove := action.get("remove")) is not None:
            if _absolute(str(remove["path"])):
                return None
            removes.append(str(remove["path"]))
    if {a["path"] for a in adds} & set(removes):
        return None
    return Actions(adds=adds, removes=removes), protocol, metadata


def _num_records(stats: str | None) -> int | None:
    """numRecords of an add's stats string: by a pattern when the key occurs once (a third of the cost of
    parsing the statistics of every column), else by parsing it. A column named numRecords adds the key at
    least twice (its nullCount and min/max), so a single occurrence is the file's count."""
    if not stats:
        return None
    if stats.count('"numRecords"') == 1 and (m := _NUM_RECORDS_RE.search(stats)):
        return int(m.group(1))
    value = json.loads(stats).get("numRecords")
    return None if value is None else int(value)


def _absolute(path: str) -> bool:
    """A path that is a URI or absolute (shallow clones, other writers): delta-rs's listing says how it
    names such a file, so the caller asks it."""
    return "://" in path or path.startswith("/")


def slim(frame: pl.DataFrame) -> pl.DataFrame:
    """The file frame's columns of a flattened add-actions frame."""
    return frame.select([c for c in frame.columns if c in FRAME_COLUMNS or c.startswith("partition.")])


def advance(frame: pl.DataFrame, steps: list[Actions]) -> pl.DataFrame | None:
    """`frame` after the commits `steps` (oldest first); None when a partition column's type does not cast
    back from log text exactly.

    As if each step were applied in turn (its removes and re-added paths dropped, then its adds appended),
    in one filter and one concat: a rebase's commit, a rebuild after other writers' commits and `load`'s
    replay after a checkpoint move the frame over many steps, and a Polars filter + concat per step cost
    ~1 ms each at a few hundred files."""
    parts = [c for c in frame.columns if c.startswith("partition.")]
    if any(frame.schema[c] not in _CASTABLE for c in parts):
        return None
    gone: set[str] = set()  # paths removed (or replaced) by some step: dropped from `frame`
    adds = [a for step in steps for a in step.adds]
    kept: dict[str, list[int]] = {}  # path -> indexes in `adds` of its adds that are still there
    at = 0
    for step in steps:
        for path in (*step.removes, *(a["path"] for a in step.adds)):  # a re-added path replaces its entry
            kept.pop(path, None)
            gone.add(path)
        for a in step.adds:
            kept.setdefault(a["path"], []).append(at)
            at += 1
    if gone:
        frame = frame.filter(~pl.col("path").is_in(pl.Series(sorted(gone), dtype=pl.String).implode()))
    if adds:
        new = {"path": pl.Series([a["path"] for a in adds], dtype=pl.String),
               "size_bytes": pl.Series([a["size_bytes"] for a in adds], dtype=pl.Int64),
               "num_records": pl.Series([a["num_records"] for a in adds], dtype=pl.Int64)}
        for c in parts:
            text = pl.Series([a["partition"].get(c.removeprefix("partition.")) or None for a in adds],
                             dtype=pl.String)  # "" is the null partition (Delta protocol)
            new[c] = text.cast(frame.schema[c], strict=True)  # (every add cast, as when applied in turn)
        added = pl.DataFrame(new).select(frame.columns).cast(frame.schema)
        rows = sorted(i for held in kept.values() for i in held)  # (in the order they were appended)
        if len(rows) < len(adds):
            added = added[rows]
        frame = pl.concat([frame, added])
    return frame


# -- A writer's snapshot, read from the log without delta-rs ---------------------------------------------
# delta-rs's snapshot holds every file's statistics, and `get_add_actions(flatten=True)` expands them into
# a column per statistic and column: at 29,200 files (the 50M-row bench lake) the open took 0.11-0.38 s and
# 48-56 MiB, the flattened actions 47 MiB more, and the writer keeps four columns of them. `load` reads
# what a writer needs (protocol, metadata, and path, size, record count and partition values of each file)
# from the newest classic checkpoint and the JSON entries after it. Anything else (a v2 or multi-part
# checkpoint, reader features or a reader version above 1, column mapping, deletion vectors, transactions,
# domain metadata, absolute paths, a partition type other than integers and strings, a long replay without
# a checkpoint) makes it return None, and the caller asks delta-rs.

# Delta partition column types -> the file frame's dtype (as delta-rs's flattened add actions give them).
_PARTITION_TYPES: dict[str, pl.DataType] = {"byte": pl.Int8(), "short": pl.Int16(), "integer": pl.Int32(),
                                            "long": pl.Int64(), "string": pl.String()}
MAX_REPLAY = 256  # JSON entries replayed past the checkpoint (or from version 0 without one)
MAX_JSON_BYTES = 8 << 20  # bytes of JSON entries replayed (~20 ms per MiB here); beyond, delta-rs reads them
_NUM_RECORDS = r'"numRecords"\s*:\s*(\d+)'
_NUM_RECORDS_RE = re.compile(_NUM_RECORDS)
_BATCH = 8192  # checkpoint rows decoded at a time: the stats strings of a batch, not of the table


@dataclass(frozen=True, slots=True)
class State:
    """What a writer reads of one version: its protocol and metaData actions (log field names) and the
    file frame (FRAME_COLUMNS and partition.<col>)."""

    version: int
    protocol: dict[str, Any]
    metadata: dict[str, Any]
    frame: pl.DataFrame


Read = Callable[[str], "bytes | None"]  # a log file's bytes by its path under the table root; None: absent


LAST_CHECKPOINT = "_delta_log/_last_checkpoint"
# Checkpoint columns whose content neither this reader nor the checkpoint writer (`_delta_checkpoint`) handles
OTHER_ACTIONS = ("txn", "domainMetadata", "sidecar", "checkpointMetadata", "cdc")


def log_path(version: int) -> str:
    return f"_delta_log/{version:020d}.json"


def checkpoint_path(version: int) -> str:
    return f"_delta_log/{version:020d}.checkpoint.parquet"


def last_checkpoint(read: Read) -> int | None:
    """The version of the newest classic single-file checkpoint `_last_checkpoint` names, or None (no
    such file, unreadable, or a checkpoint of another kind)."""
    raw = read(LAST_CHECKPOINT)
    try:
        doc = json.loads(raw) if raw else None
    except ValueError:
        return None
    if not isinstance(doc, dict) or not isinstance(doc.get("version"), int) or doc.get("parts") \
            or doc.get("v2Checkpoint"):
        return None
    return int(doc["version"])


def load(read: Read, version: int) -> State | None:
    """The state of `version`, or None when reading it needs more than this module knows."""
    start = last_checkpoint(read)
    if start is not None and start > version:
        start = None
    if (version - (start if start is not None else -1)) > MAX_REPLAY:
        return None
    protocol: dict[str, Any] | None = None
    metadata: dict[str, Any] | None = None
    if start is not None:
        data = read(checkpoint_path(start))
        got = None if data is None else _checkpoint(data)
        if got is None:
            return None
        protocol, metadata, texts = got
    else:
        texts = _texts([])
    steps: list[Actions] = []
    replayed = 0
    for v in range(0 if start is None else start + 1, version + 1):
        raw = read(log_path(v))
        if raw is None:
            return None
        replayed += len(raw)
        if replayed > MAX_JSON_BYTES:
            return None
        try:
            got_entry = _entry(raw.decode().splitlines())
        except (ValueError, KeyError, TypeError, AttributeError):
            return None
        if got_entry is None:
            return None
        step, new_protocol, new_metadata = got_entry
        protocol, metadata = new_protocol or protocol, new_metadata or metadata
        steps.append(step)
    if protocol is None or metadata is None:
        return None
    try:
        types = _partition_types(protocol, metadata)
    except (KeyError, TypeError, ValueError, AttributeError):
        return None  # a metaData action without a readable schema: delta-rs says what is wrong
    if types is None:
        return None
    try:
        missing = [pl.lit(None, dtype=pl.String).alias(f"partition.{c}") for c in types
                   if f"partition.{c}" not in texts.columns]
        frame = advance(texts.with_columns(*missing).select(
            *FRAME_COLUMNS,
            *[pl.when(pl.col(name) != "").then(pl.col(name)).cast(t, strict=True).alias(name)  # "": null partition
              for name, t in ((f"partition.{c}", t) for c, t in types.items())]), steps)
    except (pl.exceptions.PolarsError, TypeError, ValueError):
        return None
    return None if frame is None else State(version=version, protocol=protocol, metadata=metadata, frame=frame)


def _partition_types(protocol: dict[str, Any], metadata: dict[str, Any]) -> dict[str, pl.DataType] | None:
    """The file frame's dtype of each partition column, or None when the table is beyond this reader."""
    if int(protocol.get("minReaderVersion") or 1) > 1 or protocol.get("readerFeatures"):
        return None
    config = metadata.get("configuration") or {}
    if str(config.get("delta.columnMapping.mode", "none")).lower() != "none":
        return None
    fields = {f["name"]: f["type"] for f in json.loads(metadata["schemaString"])["fields"]}
    out: dict[str, pl.DataType] = {}
    for c in metadata.get("partitionColumns") or []:
        kind = fields.get(c)
        dtype = _PARTITION_TYPES.get(kind) if isinstance(kind, str) else None
        if dtype is None:
            return None
        out[c] = dtype
    return out


def _texts(parts: list[pl.DataFrame]) -> pl.DataFrame:
    """The checkpoint's files with their partition values as text, as one frame (partition columns are
    added by name as they appear)."""
    empty = pl.DataFrame(schema={"path": pl.String, "size_bytes": pl.Int64, "num_records": pl.Int64})
    return pl.concat([empty, *parts], how="diagonal") if parts else empty


def _checkpoint(data: bytes) -> tuple[dict[str, Any], dict[str, Any], pl.DataFrame] | None:
    """protocol, metaData and the files (partition values as text) of a classic checkpoint, or None."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        f = pq.ParquetFile(pa.BufferReader(data))
        schema = f.schema_arrow
        names = set(schema.names)
        if not {"add", "protocol", "metaData"} <= names or "stats" not in field_names(schema.field("add").type):
            return None
        for other in OTHER_ACTIONS:
            if other in names and _any_valid(f, [other, field_names(schema.field(other).type)[0]]):
                return None
        if "deletionVector" in field_names(schema.field("add").type) and _any_valid(f, ["add", "deletionVector"]):
            return None
        head = f.read(columns=["protocol", "metaData"], use_threads=False)
        protocol = next(p for p in head.column("protocol").to_pylist() if p is not None)
        meta = next(m for m in head.column("metaData").to_pylist() if m is not None)
        meta["configuration"] = dict(meta.get("configuration") or [])
        parts = []
        for batch in f.iter_batches(batch_size=_BATCH, columns=["add.path", "add.size", "add.partitionValues",
                                                                 "add.stats"], use_threads=False):
            add = batch.column("add")
            add = add.filter(add.is_valid())
            if len(add):
                parts.append(_checkpoint_files(add))
        texts = _texts(parts)
    except (pa.ArrowException, pl.exceptions.PolarsError, OSError, StopIteration, KeyError, TypeError, ValueError,
            AttributeError, IndexError):  # not the shape the protocol describes: delta-rs reads it or says why
        return None
    paths = texts["path"]
    if (paths.str.contains("://", literal=True) | paths.str.starts_with("/")).any():
        return None
    return protocol, meta, texts


def field_names(dtype: Any) -> list[str]:
    return [dtype.field(i).name for i in range(dtype.num_fields)]


def _any_valid(f: Any, path: list[str]) -> bool:
    """Whether any row of the checkpoint holds the struct at `path` (read through its first leaf)."""
    import pyarrow.compute as pc

    dtype = f.schema_arrow.field(path[0]).type
    leaf = list(path)
    for name in path[1:]:
        dtype = dtype.field(name).type
    while hasattr(dtype, "num_fields") and dtype.num_fields and not hasattr(dtype, "value_type"):
        leaf.append(dtype.field(0).name)
        dtype = dtype.field(0).type
    array = f.read(columns=[".".join(leaf)], use_threads=False).column(path[0]).combine_chunks()
    held = array.is_valid()
    for name in path[1:]:
        array = array.field(name)
        held = pc.and_(held, array.is_valid())
    return bool(pc.any(held).as_py())


def _checkpoint_files(add: Any) -> pl.DataFrame:
    """path, size_bytes, num_records and partition.<key> (text) of a batch of checkpoint add actions."""
    import pyarrow as pa

    values = add.field("partitionValues")  # map<string, string>: as a list of {key, value}
    pairs = pa.ListArray.from_arrays(values.offsets, pa.StructArray.from_arrays(
        [values.values.field(0), values.values.field(1)], names=["key", "value"]))
    frame = pl.from_arrow(pa.table({"path": add.field("path"), "size_bytes": add.field("size"),
                                    "stats": add.field("stats"), "pairs": pairs}))
    assert isinstance(frame, pl.DataFrame)
    keys = frame.select(pl.col("pairs").explode().struct.field("key").unique().drop_nulls())["key"].to_list()
    # `_num_records`'s rule, by column: the pattern where the key occurs once, the parse elsewhere
    stats = frame["stats"]
    records = stats.str.extract(_NUM_RECORDS).cast(pl.Int64)
    odd = (stats.str.count_matches('"numRecords"', literal=True) > 1).fill_null(False)
    if odd.any():
        records = records.scatter(odd.arg_true(), pl.Series([_num_records(s) for s in stats.filter(odd)],
                                                             dtype=pl.Int64))
    return frame.select(
        "path", pl.col("size_bytes").cast(pl.Int64), pl.lit(records).alias("num_records"),
        *[pl.col("pairs").list.eval(pl.element().filter(pl.element().struct.field("key") == k)
                                    .struct.field("value")).list.first().alias(f"partition.{k}") for k in keys])
