"""Timestamp partition values that name no zone (issue 16): read as UTC, and flagged.

The Delta protocol stores a partition value as a string. For a `timestamp` column (an instant) the
original rule was "interpreted using the time zone of the system which wrote to the table", a zone the log
does not record; since delta-io/delta#3378 (2024) writers should store the instant in UTC with an explicit
suffix (`2021-09-08 11:11:11Z` / `+00:00`), and older values stay valid. A reader cannot know the writer's
zone, so every reader picks one: deltalake, Polars, DuckDB and Delta Kernel read UTC (Kernel's documented
rule; delta-kernel-rs uses the connector's session zone and UTC by default), Spark its session zone.

The gateway reads such values as UTC, like the engines it uses, and never silently: `register` lists each
column whose log values carry no offset under `ambiguous_timestamp_partition` (JSON and text). A
`timestamp_ntz` column is a wall-clock value by definition and is never flagged.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from .. import _delta
from ..storage import Storage
from .log import LogParseError, _actions, _file_actions
from .paths import LOG_DIR

_LOG_FILE = re.compile(r"^(\d{20})\.(json|checkpoint.*\.parquet)$")
_OFFSET = re.compile(r"(Z|[+-]\d{2}(:?\d{2})?(:?\d{2})?)$", re.IGNORECASE)
READ_AS = "UTC"


@dataclass(frozen=True, slots=True, kw_only=True)
class AmbiguousColumn:
    column: str
    files: int  # add actions (up to the version) whose value for this column has no offset
    example: str  # one such value, exactly as logged

    def to_json(self) -> dict[str, Any]:
        return {"column": self.column, "files": self.files, "example": self.example, "read_as": READ_AS}


def has_offset(value: str) -> bool:
    """True when a serialized timestamp names its zone: a `Z` or a numeric offset after the time."""
    time = re.split(r"[T ]", value.strip(), maxsplit=1)
    return len(time) == 2 and bool(_OFFSET.search(time[1]))


def _values(body: dict[str, Any]) -> dict[str, Any]:
    raw = body.get("partitionValues") or {}
    if isinstance(raw, list):  # a checkpoint's map column arrives as (key, value) pairs
        return {str(k): v for k, v in raw}
    return raw if isinstance(raw, dict) else {}


def ambiguous_timestamp_partitions(storage: Storage, version: int) -> list[AmbiguousColumn]:
    """The `timestamp` partition columns whose log values (added files up to `version`) name no zone."""
    columns = _delta.timestamp_partition_columns(storage.root, storage.storage_options, version)
    if not columns:
        return []
    counts = {c: 0 for c in columns}
    examples: dict[str, str] = {}
    for obj in storage.list(LOG_DIR):
        match = _LOG_FILE.match(obj.path[len(LOG_DIR) + 1:])
        if not match or int(match.group(1)) > version:
            continue
        try:
            actions = _actions(storage, obj.path)
        except LogParseError:
            continue  # the inventory gate reports unreadable log files
        for kind, body in _file_actions(actions):
            if kind != "add":
                continue
            values = _values(body)
            for logical, physical in columns.items():
                value = values.get(physical)
                if isinstance(value, str) and value and not has_offset(value):
                    counts[logical] += 1
                    examples.setdefault(logical, value)
    return [AmbiguousColumn(column=c, files=n, example=examples[c]) for c, n in sorted(counts.items()) if n]
