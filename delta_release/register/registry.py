"""`register NAME URI`: put a Delta table written by others in the catalog, after the inventory gate.

The gate runs at the table's latest version before anything is written to the catalog; only a table
that passes gets an entry (kind "registered") and a publication of that version. Registering the same
name and location again re-runs the gate and publishes the newer version, if any: that is how a
registered table moves forward.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from .. import _delta
from ..errors import InputError, NotFoundError
from ..gateway.lake_catalog import TABLE_NAME
from ..lakeroot import check_lake_path
from ..storage import Storage
from .inventory import InventoryReport, check_inventory
from .problems import log_guard
from .reader import reader_for
from .timestamps import AmbiguousColumn, ambiguous_timestamp_partitions

if TYPE_CHECKING:
    from ..context import LakeContext

KIND = "registered"


@dataclass(frozen=True, slots=True, kw_only=True)
class Registration:
    table: str
    location: str
    version: int
    generation: int
    inventory: InventoryReport
    reader: dict[str, Any]
    ambiguous: list[AmbiguousColumn]  # timestamp partition columns whose log values name no zone: read as UTC

    def to_json(self) -> dict[str, Any]:
        return {"table": self.table, "kind": KIND, "location": self.location, "version": self.version,
                "generation": self.generation, **{k: v for k, v in self.inventory.to_json().items()
                                                  if k not in ("location", "version")},
                "reader": self.reader,
                "ambiguous_timestamp_partition": [a.to_json() for a in self.ambiguous]}


def check_source(name: str, uri: str, options: dict[str, str]) -> None:
    """What `register_table` checks of the table at `uri` before it needs a lake: the name, the table, its
    inventory gate (the CLI runs it first when --lake holds no lake yet, so a failed register creates
    none)."""
    _check_name(name)
    storage = Storage(uri, options)
    check_lake_path(storage.root, "table path")
    with log_guard(name, None):
        version = _delta.latest_version(storage.root, options)
    if version is None:
        raise NotFoundError(f"no Delta table at {storage.root}", uri=storage.root)
    check_inventory(storage, version, table=name, verify_vectors=True).raise_for_failure(name)


def _check_name(name: str) -> None:
    """A name every catalog can store (the lake-resident one keeps it in object names): letters, digits,
    `_`, `.` and `-`, starting with a letter or digit, at most 128 characters. Spaces, newlines and
    terminal escapes were accepted by SQLite, then stopped `catalog migrate` half-way."""
    if not isinstance(name, str) or not TABLE_NAME.fullmatch(name):
        shown = name[:80] if isinstance(name, str) else name
        raise InputError(f"bad table name {shown!r}: use letters, digits, '_', '.' and '-', starting with a "
                         "letter or digit (at most 128)", table=str(shown))


def register_table(lake: LakeContext, name: str, uri: str) -> Registration:
    """Gate the table at `uri` at its latest version, then catalog and publish it as `name`."""
    _check_name(name)
    storage = Storage(uri, lake.options)
    check_lake_path(storage.root, "table path")
    if name in lake.tables:
        raise InputError(f"{name} is one of the lake's own tables; register under another name", table=name)
    if storage.is_local != lake.storage.is_local:  # what gateway/locations.py lets a registered entry name
        raise InputError(f"cannot register {storage.root} in the lake {lake.storage.root}: a registered table is "
                         "on the lake's own kind of store (local disk or s3://)", table=name, uri=storage.root)
    existing = lake.catalog.table(name)
    if existing is not None and (existing.kind != KIND or existing.location != storage.root):
        raise InputError(f"table {name} is already in the catalog at {existing.location} (kind {existing.kind})",
                         table=name, location=existing.location, kind=existing.kind)
    with log_guard(name, None):
        version = _delta.latest_version(storage.root, lake.options)
    if version is None:
        raise NotFoundError(f"no Delta table at {storage.root}", uri=storage.root)
    report = check_inventory(storage, version, table=name, verify_vectors=True)
    report.raise_for_failure(name)
    reader = reader_for(storage, version, name)
    ambiguous = ambiguous_timestamp_partitions(storage, version)
    lake.catalog.register(name, location=storage.root, kind=KIND)
    pub = lake.publish_version(name, version, digest=report.digest)
    return Registration(table=name, location=storage.root, version=pub.version, generation=pub.generation,
                        inventory=report, reader=reader, ambiguous=ambiguous)
