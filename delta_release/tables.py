"""Table definitions (table_defs/*.yaml): name, kind, key, ordering column, tombstone column, partition, columns."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
import yaml

from .errors import ConfigError

DEFAULT_TABLES_DIR = Path(__file__).resolve().parent / "table_defs"  # package data: ships in the wheel
# The table a verb acts on when none is named (table_defs/orders.yaml).
DEFAULT_TABLE = "orders"

_ARROW_TYPES: dict[str, pa.DataType] = {
    "string": pa.string(),
    "int64": pa.int64(),
    "int32": pa.int32(),
    "float64": pa.float64(),
    "bool": pa.bool_(),
}
_KEYS = {"name", "kind", "key", "ordering", "tombstone", "partition", "columns", "location"}


@dataclass(frozen=True, slots=True, kw_only=True)
class KeyedColumns:
    """The column names a keyed (event-applied) table plays its roles with, all from its definition."""

    key: str  # one current row per key value (the erasure subject)
    ordering: str  # the source position that orders a key's events
    tombstone: str  # true on a delete kept as a row
    partition: str


@dataclass(frozen=True, slots=True, kw_only=True)
class TableDef:
    name: str
    kind: str  # "delta" (we apply events) or "external" (producer manifests)
    partition: str
    columns: dict[str, str]
    key: str | None = None  # the subject key: one current row per key (erasure applies to keyed tables)
    ordering: str | None = None  # the source-position column that orders a key's events
    tombstone: str | None = None  # the boolean column marking a delete kept as a row (hidden by current views)
    location: str | None = None  # relative to the lake root, or an absolute URI; default: the name

    def keyed(self) -> KeyedColumns:
        """The key, ordering, tombstone and partition column names; a ConfigError when the definition lacks
        one (an external table has no key): generic code asks here instead of naming a table's columns."""
        if self.key is None or self.ordering is None or self.tombstone is None:
            missing = [n for n, v in (("key", self.key), ("ordering", self.ordering), ("tombstone", self.tombstone))
                       if v is None]
            raise ConfigError(f"table {self.name!r} is not keyed: its definition has no {', '.join(missing)}",
                              file=f"table_defs/{self.name}.yaml", key=missing[0])
        return KeyedColumns(key=self.key, ordering=self.ordering, tombstone=self.tombstone, partition=self.partition)

    def arrow_schema(self) -> pa.Schema:
        """Full schema, partition column last (as Delta and hive paths present it)."""
        fields = [pa.field(c, _ARROW_TYPES[t]) for c, t in self.columns.items() if c != self.partition]
        fields.append(pa.field(self.partition, _ARROW_TYPES[self.columns[self.partition]]))
        return pa.schema(fields)

    def file_schema(self) -> pa.Schema:
        """Schema of the data files: the partition column lives in the path, not in the file."""
        return pa.schema([f for f in self.arrow_schema() if f.name != self.partition])


def _check(path: Path, doc: Any) -> TableDef:
    if not isinstance(doc, dict):
        raise ConfigError(f"{path}: a table definition must be a mapping", file=str(path))
    for key in doc:
        if key not in _KEYS:
            raise ConfigError(f"{path}: unknown key {key!r}", file=str(path), key=str(key))
    for key in ("name", "kind", "partition", "columns"):
        if key not in doc:
            raise ConfigError(f"{path}: missing key {key!r}", file=str(path), key=key)
    columns = doc["columns"]
    if not isinstance(columns, dict) or doc["partition"] not in columns:
        raise ConfigError(f"{path}: columns must map names to types and include the partition",
                          file=str(path), key="columns")
    for name, typ in columns.items():
        if typ not in _ARROW_TYPES:
            raise ConfigError(f"{path}: column {name} has unknown type {typ!r}", file=str(path),
                              key=f"columns.{name}")
    return TableDef(
        name=str(doc["name"]), kind=str(doc["kind"]), partition=str(doc["partition"]),
        columns={str(k): str(v) for k, v in columns.items()}, key=doc.get("key"),
        ordering=doc.get("ordering"), tombstone=doc.get("tombstone"), location=doc.get("location"),
    )


def load_table_defs(directory: Path = DEFAULT_TABLES_DIR) -> dict[str, TableDef]:
    defs: dict[str, TableDef] = {}
    for path in sorted(directory.glob("*.yaml")):
        table = _check(path, yaml.safe_load(path.read_text(encoding="utf-8")))
        defs[table.name] = table
    return defs
