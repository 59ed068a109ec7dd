"""Delta log entries read and written directly, for `_delta.py` (no deltalake here).

A writer needs little of a snapshot: the newest version, the files of the partitions it rewrites, and
whether the table asks anything of a writer beyond add and remove actions. delta-rs answers these from
a snapshot of every file of the table, and moves it forward by replaying every file again (60-110 ms per
version at 29,200 files, whatever the commit). Here a writer's view moves forward by the commits since:

- `entry_bytes`: the log entry of one commit of ours (the fields delta-rs writes for the same actions);
- `plain_actions`: the adds and removes of one entry, or None when it holds anything else (metadata,
  protocol, deletion vectors, absolute paths, transactions, domain metadata: the caller then asks delta-rs);
- `advance`: a file frame (path, size_bytes, num_records, partition.<col>: `get_add_actions(flatten=True)`
  reduced to those columns) moved forward by such actions.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from typing import Any
from urllib.parse import unquote

import polars as pl

# The columns of the file frame `_delta.partition_entries` and `file_count` read.
FRAME_COLUMNS = ("path", "size_bytes", "num_records")
# Partition column types whose log text casts back exactly (others: the caller asks delta-rs).
_CASTABLE = (pl.Int8, pl.Int16, pl.Int32, pl.Int64, pl.UInt8, pl.UInt16, pl.UInt32, pl.UInt64, pl.String)
_PLAIN_KEYS = frozenset({"add", "remove", "commitInfo"})


@dataclass(frozen=True, slots=True)
class Actions:
    adds: list[dict[str, Any]]  # path decoded, size, num_records, partition values (log text)
    removes: list[str]  # decoded paths


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
    adds: list[dict[str, Any]] = []
    removes: list[str] = []
    for line in lines:
        if not line.strip():
            continue
        action = json.loads(line)
        if not isinstance(action, dict) or not set(action) <= _PLAIN_KEYS:
            return None
        if (add := action.get("add")) is not None:
            if add.get("deletionVector") or _absolute(str(add["path"])):
                return None
            stats = json.loads(add["stats"]) if add.get("stats") else {}
            adds.append({"path": unquote(str(add["path"])), "size_bytes": int(add["size"]),
                         "num_records": stats.get("numRecords"),
                         "partition": dict(add.get("partitionValues") or {})})
        if (remove := action.get("remove")) is not None:
            if _absolute(str(remove["path"])):
                return None
            removes.append(unquote(str(remove["path"])))
    if {a["path"] for a in adds} & set(removes):
        return None
    return Actions(adds=adds, removes=removes)


def _absolute(path: str) -> bool:
    """A path that is a URI or absolute (shallow clones, other writers): delta-rs's listing says how it
    names such a file, so the caller asks it."""
    return "://" in path or path.startswith("/")


def slim(frame: pl.DataFrame) -> pl.DataFrame:
    """The file frame's columns of a flattened add-actions frame."""
    return frame.select([c for c in frame.columns if c in FRAME_COLUMNS or c.startswith("partition.")])


def advance(frame: pl.DataFrame, steps: list[Actions]) -> pl.DataFrame | None:
    """`frame` after the commits `steps` (oldest first); None when a partition column's type does not cast
    back from log text exactly."""
    parts = [c for c in frame.columns if c.startswith("partition.")]
    if any(frame.schema[c] not in _CASTABLE for c in parts):
        return None
    for step in steps:
        gone = set(step.removes) | {a["path"] for a in step.adds}  # a re-added path replaces its entry
        if gone:
            frame = frame.filter(~pl.col("path").is_in(pl.Series(sorted(gone), dtype=pl.String).implode()))
        if step.adds:
            new = {"path": pl.Series([a["path"] for a in step.adds], dtype=pl.String),
                   "size_bytes": pl.Series([a["size_bytes"] for a in step.adds], dtype=pl.Int64),
                   "num_records": pl.Series([a["num_records"] for a in step.adds], dtype=pl.Int64)}
            for c in parts:
                text = pl.Series([a["partition"].get(c.removeprefix("partition.")) or None for a in step.adds],
                                 dtype=pl.String)  # "" is the null partition (Delta protocol)
                new[c] = text.cast(frame.schema[c], strict=True)
            frame = pl.concat([frame, pl.DataFrame(new).select(frame.columns).cast(frame.schema)])
    return frame
