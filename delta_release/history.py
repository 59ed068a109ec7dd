"""What each version of a table did, which generation published it, and whether it may be read."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from . import _delta
from .erasure.permission import exposing_entries

if TYPE_CHECKING:
    from .lake import Lake


def table_history(lake: Lake, table: str) -> list[dict[str, Any]]:
    """Oldest first. `allowed` is false for a version that still holds an erased subject (reads and
    rollbacks to it are refused); `erased_subjects` counts those subjects, never naming them."""
    generations: dict[int, list[int]] = {}
    for pub in lake.catalog.publications(table):
        generations.setdefault(pub.version, []).append(pub.generation)
    out = []
    erasures = lake.erasures.entries()
    for entry in reversed(_delta.history(lake.table_uri(table), lake.options)):
        ev = entry["evidence"] or {}
        exposing = exposing_entries(lake, table, entry["version"], entries=erasures)
        row = {
            "version": entry["version"],
            "timestamp": entry["timestamp"],
            "operation": ev.get("operation") or entry["operation"],
            "batch_ids": ev.get("batch_ids", []),
            "files_added": len(ev.get("files", [])),
            "files_removed": len(ev.get("removed", [])),
            "generations": generations.get(entry["version"], []),
            "allowed": not exposing,
            "erased_subjects": len(exposing),
        }
        if "restored_to" in ev:
            row["restored_to"] = ev["restored_to"]
        out.append(row)
    return out
