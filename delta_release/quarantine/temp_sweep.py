"""The writer-start temp sweep, bounded by the temp folders: a killed writer's temp file (`.tmp-*`,
possibly holding payload text) is removed by the next writer without walking the lake.

Every temp file a writer makes goes into the `_tmp` folder of the storage root it writes into (storage.py):
the lake root's (raw batches, the quarantine and erasure ledgers, the indexes, every other lake-level
file) and each table root's (staged data files, a producer's uploaded files); a write below a folder on
another filesystem, into that folder's `_tmp` (storage.py, `cross_device`). A writer start lists those flat
folders (of the lake root's and `_index`'s folders, only those on another device: one stat each) and
nothing else: its cost does not grow with the lake (before: a walk of every day and bucket directory of
every table at most every 10 minutes, +43 ms at 50M rows). Temp files an earlier version left next to
their final names are found by the full walks of `vacuum` and of an erasure (`lake_temp_files`: the lake
root, following symlinked folders, and every table root outside it), which also cover `_tmp`: a writer
start never walks the lake.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import replace

from ..storage import TEMP_DIR, TEMP_GRACE_SECONDS, Storage, TempFile, sweep_local_spills

_NOT_ROOTS = frozenset({TEMP_DIR, "_catalog", "_delta_log"})


def _split(storage: Storage, tables: Iterable[str]) -> tuple[list[str], list[Storage]]:
    """The local table roots among `tables` (URIs): inside the lake root `storage` (relative paths), and
    outside it (their storages)."""
    inside: list[str] = []
    outside: dict[str, Storage] = {}
    for uri in tables:
        if "://" in uri and not uri.startswith("file://"):
            continue  # an object store: no temp files (and no client to build)
        table = Storage(uri, storage.storage_options)
        if table.root == storage.root:
            continue
        if table.root.startswith(storage.root + "/"):
            inside.append(table.root[len(storage.root) + 1:])
        else:
            outside.setdefault(table.root, table)
    return inside, list(outside.values())


def _shown(storage: Storage, owner: Storage, temp: TempFile) -> TempFile:
    """`temp` (relative to `owner`) as reported: relative to the lake root, or a full path outside it."""
    return temp if owner is storage else replace(temp, path=owner.uri(temp.path))


def _top_temp_dirs(storage: Storage) -> list[str]:
    """The `_tmp` of every folder at the first level of the lake root and of `_index` (the index roots)
    that is on another filesystem (a mount, or a symlink): where a write below it puts its temp files
    (storage.py, `cross_device`). One stat per folder; nothing more to list in the common case."""
    out: list[str] = []
    base = storage.root  # a local root: its path
    try:
        device = os.stat(base).st_dev
    except FileNotFoundError:
        return out
    for folder, prefix in ((base, ""), (f"{base}/_index", "_index/")):
        try:
            entries = list(os.scandir(folder))
        except (FileNotFoundError, NotADirectoryError):
            continue
        for entry in entries:
            try:
                if (entry.name not in _NOT_ROOTS and entry.is_dir()
                        and (entry.is_symlink() or entry.stat().st_dev != device)):
                    out.append(f"{prefix}{entry.name}/{TEMP_DIR}")
            except OSError:
                continue  # gone meanwhile, or a dangling link
    return sorted(out)


def sweep_at_writer_start(storage: Storage, grace_seconds: float = TEMP_GRACE_SECONDS,
                          *, tables: Iterable[str] = ()) -> list[TempFile]:
    """Remove the stale temp files in the temp folders of the lake root `storage`, of its top-level
    folders and index roots, and of the table roots `tables` (URIs); returns them (paths relative to the
    lake root; a table outside the lake: full path)."""
    if not storage.is_local:  # object-store writes are single PUTs: no temp files; a killed ingest's spill
        return sweep_local_spills(grace_seconds)  # (parts.py) is in the local spill root
    inside, outside = _split(storage, tables)
    under = [TEMP_DIR, *_top_temp_dirs(storage), *(f"{rel}/{TEMP_DIR}" for rel in inside)]
    removed = storage.sweep_temp(grace_seconds, under=tuple(dict.fromkeys(under)))
    for table in outside:
        removed += [_shown(storage, table, t) for t in table.sweep_temp(grace_seconds, under=(TEMP_DIR,))]
    return removed


def lake_temp_files(storage: Storage, grace_seconds: float = TEMP_GRACE_SECONDS,
                    *, tables: Iterable[str] = ()) -> list[tuple[Storage, TempFile]]:
    """Every temp file of the lake, by a full walk (vacuum and erasure): of the lake root `storage` and
    of every table root among `tables` (URIs) outside it; each with the storage its path is relative to."""
    found = [(storage, t) for t in storage.temp_files(grace_seconds)]
    for table in _split(storage, tables)[1]:
        found += [(table, t) for t in table.temp_files(grace_seconds)]
    return found


def shown_temp_files(storage: Storage, found: list[tuple[Storage, TempFile]]) -> list[TempFile]:
    """`lake_temp_files` as reported: paths relative to the lake root, or full paths outside it."""
    return [_shown(storage, owner, t) for owner, t in found]


def sweep_lake_temp(storage: Storage, grace_seconds: float = TEMP_GRACE_SECONDS,
                    *, tables: Iterable[str] = ()) -> list[TempFile]:
    """Remove the stale temp files `lake_temp_files` finds; returns them as reported."""
    stale = [(owner, t) for owner, t in lake_temp_files(storage, grace_seconds, tables=tables) if t.stale]
    for owner, t in stale:
        owner.delete_temp(t.path)
    return shown_temp_files(storage, stale)
