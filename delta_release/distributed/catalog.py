"""The catalog a worker sees: the driver's table entries, read once on the driver and shipped with each task.

A worker resolves table locations (`LakeContext.table_uri`) and nothing more: it never publishes. So it
needs no access to the driver's catalog (a SQLite file on the driver's disk, say) and never contends for
it; anything that would change the catalog is refused as a bug.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..gateway.catalog import Publication, TableEntry


@dataclass(frozen=True, slots=True)
class WorkerCatalog:
    """A read-only `Catalog` of the driver's table entries; no publications (workers read none)."""

    entries: tuple[TableEntry, ...]

    def table(self, name: str) -> TableEntry | None:
        return next((e for e in self.entries if e.name == name), None)

    def tables(self) -> list[TableEntry]:
        return list(self.entries)

    def current(self, name: str) -> Publication | None:
        return None

    def publications(self, name: str) -> list[Publication]:
        return []

    def register(self, name: str, *, location: str, kind: str) -> TableEntry:
        raise AssertionError("a worker never writes the catalog")

    def set_location(self, name: str, location: str) -> None:
        raise AssertionError("a worker never writes the catalog")

    def reset_table(self, name: str, *, location: str, kind: str) -> None:
        raise AssertionError("a worker never writes the catalog")

    def publish(self, name: str, *, expected_generation: int | None, version: int, digest: str,
                completed: str, label: str | None = None) -> Publication:
        raise AssertionError("a worker never publishes")
