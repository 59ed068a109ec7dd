"""The reader's metadata cache: what a reader last refreshed a table to, and when that refresh completed.

One entry per table: the catalog generation and table location it refreshed to, the Delta version that
generation publishes, the resolved file list of that version, and the refresh's start and *completion*
times. A refresh that has not completed leaves no entry behind, so an entry is proof of a completed
refresh, not of an attempt. `Requests` counts the metadata calls the gateway makes, so the freshness
drill can report what a query costs.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any

from .._delta import FileEntry


@dataclass(frozen=True, slots=True, kw_only=True)
class CachedTable:
    table: str
    generation: int
    location: str
    version: int
    files: tuple[FileEntry, ...]
    refresh_started: str
    refresh_completed: str

    def to_json(self) -> dict[str, Any]:
        return {"table": self.table, "generation": self.generation, "location": self.location,
                "version": self.version, "files": len(self.files), "refresh_started": self.refresh_started,
                "refresh_completed": self.refresh_completed}


@dataclass(slots=True)
class Requests:
    """Metadata calls made by the gateway (catalog queries, Delta log resolutions, object listings/reads)."""

    catalog_reads: int = 0
    log_resolutions: int = 0
    object_lists: int = 0
    object_reads: int = 0
    extra: dict[str, int] = field(default_factory=dict)

    def snapshot(self) -> dict[str, int]:
        return {f.name: getattr(self, f.name) for f in fields(self) if f.name != "extra"} | self.extra

    def since(self, before: dict[str, int]) -> dict[str, int]:
        now = self.snapshot()
        return {k: now[k] - before.get(k, 0) for k in now}
