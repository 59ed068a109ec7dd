"""Which data files each version of a table references, from one pass over the table's history.

Our commits carry their evidence (files added with size and sha256, paths removed) in the commit
metadata, so the file set of every version follows from the previous one without replaying the log per
version. A commit without that evidence (someone else's, or the first version left after a log cleanup)
is read from the log itself. The result is a lifetime per file: the version ranges that reference it
(`Lineage`, erasure/records.py).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import polars as pl

from .. import _delta
from .records import Lineage

if TYPE_CHECKING:
    from ..context import LakeContext

# Operations that never change the file set (delta-rs writes two commits around a vacuum).
NO_DATA_CHANGE = {"VACUUM START", "VACUUM END", "SET TBLPROPERTIES", "UPGRADE PROTOCOL"}


def _files_from_evidence(ev: dict[str, Any] | None) -> tuple[list[dict[str, Any]], list[str]] | None:
    if not ev or not isinstance(ev.get("files"), list) or not isinstance(ev.get("removed"), list):
        return None
    files = ev["files"]
    if not all(isinstance(f, dict) and isinstance(f.get("path"), str) for f in files):
        return None
    return files, [str(p) for p in ev["removed"]]


def table_lineage(lake: LakeContext, table: str) -> Lineage:
    uri = lake.table_uri(table)
    history = sorted(_delta.history(uri, lake.options), key=lambda h: h.version)
    lineage = Lineage(latest=history[-1].version if history else -1)
    current: set[str] = set()
    previous: int | None = None
    for entry in history:
        version = entry.version
        lineage.timestamps[version] = entry.timestamp
        ev = entry.evidence
        lineage.operations[version] = (ev or {}).get("operation") or entry.operation or ""
        from_evidence = _files_from_evidence(ev)
        if previous is not None and previous == version - 1 and from_evidence is not None:
            added, removed = from_evidence
            new = (current - set(removed)) | {f["path"] for f in added}
            for f in added:
                lineage.evidence[f["path"]] = f
        elif previous is not None and previous == version - 1 and entry.operation in NO_DATA_CHANGE:
            new = set(current)
        else:
            new = {e.path for e in _delta.file_entries(uri, lake.options, version)}
        for path in sorted(new - current):
            lineage.lifetimes.setdefault(path, []).append([version, None])
        for path in sorted(current - new):
            lineage.lifetimes[path][-1][1] = version
        current = new
        previous = version
    return lineage


def data_files_on_storage(lake: LakeContext, table: str) -> dict[str, int]:
    """Data files present in the table's directory (path relative to the table root -> size)."""
    store = lake.table_storage(table)
    return {o.path: o.size for o in store.list()
            if not o.path.startswith("_delta_log/") and o.path.endswith(".parquet")
            and not o.path.rsplit("/", 1)[-1].startswith(".")}


def files_holding(lake: LakeContext, table: str, key: str, value: str, paths: list[str]) -> set[str]:
    """The subset of `paths` (existing data files) that hold a row whose `key` equals `value`.

    One Polars scan of the key column with the row-group statistics skipping most of each file.
    """
    if not paths:
        return set()
    store = lake.table_storage(table)
    by_uri = {store.uri(p): p for p in paths}
    found = (pl.scan_parquet(list(by_uri), include_file_paths="_file", hive_partitioning=False,
                             storage_options=lake.options or None)
             .select(key, "_file").filter(pl.col(key) == value).select("_file").unique().collect())
    out = set()
    for uri in found["_file"].to_list():
        out.add(by_uri.get(uri) or next(p for u, p in by_uri.items() if u.endswith(uri) or uri.endswith(p)))
    return out


def merge_ranges(ranges: list[list[int]]) -> list[list[int]]:
    out: list[list[int]] = []
    for lo, hi in sorted(ranges):
        if out and lo <= out[-1][1] + 1:
            out[-1][1] = max(out[-1][1], hi)
        else:
            out.append([lo, hi])
    return out
