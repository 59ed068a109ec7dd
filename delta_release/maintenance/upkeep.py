"""The writers' upkeep: what every writer runs before its `write` (commit/writer.py knows nothing of it).

Each writer (ingest and replay, erase, rollback, the external publish, the release run) calls
`before_work` before it reads its parent; `erase --resume` runs only this. It finishes work a killed
writer left behind: stale temp files, a legacy quarantine ledger, erasures left pending (completed by
the erasure writer, maintenance/erase.py), and a landed-but-unpublished commit. Pending erasures are
thus completed before any writer commits; the committer itself imports none of this.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ..commit.writer import recover_publication
from ..context import TableContext
from ..gateway.catalog import Publication
from ..quarantine.upkeep import writer_start
from .erase import complete_pending_erasures


@dataclass(slots=True, kw_only=True)
class Upkeep:
    """What `before_work` did before the writer's own work (reported by writers that care)."""

    temp_files_removed: list[str] = field(default_factory=list)  # lake-relative paths
    quarantine_migrated: int = 0  # legacy ledger files rewritten without their text
    erasures_completed: int = 0  # erasures a killed writer left pending, completed here
    publication: Publication | None = None

    def to_json(self) -> dict[str, Any]:
        return {"temp_files_removed": self.temp_files_removed, "quarantine_migrated": self.quarantine_migrated,
                "erasures_completed": self.erasures_completed}


def before_work(ctx: TableContext, *, lake_wide: bool = True) -> Upkeep:
    """What every writer does before it reads its parent: finish work a killed writer left behind.

    Lake-wide (when the context knows its lake; `lake_wide=False` for a writer that already did it):
    remove stale temp files (a killed writer's, which may hold payload text), migrate a legacy
    quarantine ledger (quarantine/upkeep.py), and complete every erasure left pending in the ledger by a
    killed writer (maintenance/erase.py; its commits are plain `write`s, with no upkeep of their own). Then
    publish a landed-but-unpublished commit of this table."""
    upkeep = Upkeep()
    if lake_wide and ctx.lake is not None:
        lake = ctx.lake  # the roots a writer writes into: the lake's, this table's, the lake's other tables'
        roots = {ctx.uri, *(lake.resolve_location(lake.default_location(t)) for t in lake.tables.values())}
        started = writer_start(lake.storage, tables=sorted(roots))
        upkeep.temp_files_removed = list(started["temp_files_removed"])
        upkeep.quarantine_migrated = int(started["quarantine_migrated"])
        upkeep.erasures_completed = complete_pending_erasures(ctx.lake)
    upkeep.publication = recover_publication(ctx)
    return upkeep
