"""What each version of a table did, which generation published it, and whether it may be read."""

from __future__ import annotations

import json
from typing import NotRequired, TypedDict

from . import _delta, _delta_log
from .context import LakeContext
from .evidence import CommitEvidence
from .storage import Storage


class HistoryEntry(TypedDict):
    """One version of a table (the `history` command's JSON row)."""

    version: int
    timestamp: int
    operation: str
    batch_ids: list[str]
    files_added: int
    files_removed: int
    generations: list[int]
    allowed: bool  # false: the version holds an erased subject (reads and rollbacks to it are refused)
    erased_subjects: int
    restored_to: NotRequired[int]


def table_history(lake: LakeContext, table: str) -> list[HistoryEntry]:
    """Oldest first. `allowed` is false for a version that still holds an erased subject (reads and
    rollbacks to it are refused); `erased_subjects` counts those subjects, never naming them."""
    generations: dict[int, list[int]] = {}
    for pub in lake.catalog.publications(table):
        generations.setdefault(pub.version, []).append(pub.generation)
    out: list[HistoryEntry] = []
    erasures = lake.erasures.entries()
    store = lake.table_storage(table)
    for entry in reversed(_delta.history(lake.table_uri(table), lake.options)):
        ev = CommitEvidence.from_json(entry.evidence) if entry.evidence is not None else None
        exposing = lake.erasure_reader.exposing(table, entry.version, entries=erasures)
        added, removed = _file_counts(store, entry.version, ev)
        row: HistoryEntry = {
            "version": entry.version,
            "timestamp": entry.timestamp,
            "operation": str(commit_operation(entry)),
            "batch_ids": ev.batch_ids if ev else [],
            "files_added": added,
            "files_removed": removed,
            "generations": generations.get(entry.version, []),
            "allowed": not exposing,
            "erased_subjects": len(exposing),
        }
        if ev is not None and "restored_to" in ev.details:
            row["restored_to"] = int(ev.details["restored_to"])
        out.append(row)
    return out


def commit_operation(entry: _delta.CommitRecord) -> str | None:
    """What a commit did: our evidence's operation (ingest, erase, release, ...), else the Delta operation
    (WRITE, DELETE, ...) of a commit not ours. `history` and `status` both say it this way."""
    return str((entry.evidence or {}).get("operation") or "") or entry.operation


def _file_counts(store: Storage, version: int, ev: CommitEvidence | None) -> tuple[int, int]:
    """Files the commit added and removed: from our evidence, else (a commit another writer made: a
    registered table, a Spark job) by counting the add and remove actions of its log entry (0 when the
    entry is gone, e.g. cleaned up behind a checkpoint)."""
    if ev is not None:
        return len(ev.files), len(ev.removed)
    added = removed = 0
    try:
        text = store.read_bytes(_delta_log.log_path(version))
    except FileNotFoundError:
        text = b""
    for line in text.splitlines():
        if line.strip():
            action = json.loads(line)
            added += "add" in action
            removed += "remove" in action
    return added, removed
