"""The writer-start temp sweep, bounded by the temp folders: a killed writer's temp file (`.tmp-*`,
possibly holding payload text) is removed by the next writer without walking the lake.

Every temp file a writer makes goes into the `_tmp` folder of the storage root it writes into (storage.py):
the lake root's (raw batches, the quarantine and erasure ledgers, the indexes, every other lake-level
file) and each table root's (staged data files, a producer's uploaded files). A writer start lists those
flat folders and nothing else: its cost does not grow with the lake (before: a walk of every day and bucket
directory of every table at most every 10 minutes, +43 ms at 50M rows). Temp files an earlier version left
next to their final names are found by the full walks of `vacuum` and of an erasure
(`Storage.sweep_temp` without `under`), which also cover `_tmp`: a writer start never walks the lake.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import replace

from ..storage import TEMP_DIR, TEMP_GRACE_SECONDS, Storage, TempFile


def sweep_at_writer_start(storage: Storage, grace_seconds: float = TEMP_GRACE_SECONDS,
                          *, tables: Iterable[str] = ()) -> list[TempFile]:
    """Remove the stale temp files in the temp folders of the lake root `storage` and of the table roots
    `tables` (URIs); returns them (paths relative to the lake root; a table outside the lake: full path)."""
    if not storage.is_local:
        return []  # object-store writes are single PUTs: no temp files
    under = [TEMP_DIR]
    outside: list[Storage] = []
    for uri in tables:
        table = Storage(uri, storage.storage_options)
        if not table.is_local:
            continue
        if table.root.startswith(storage.root + "/"):
            under.append(f"{table.root[len(storage.root) + 1:]}/{TEMP_DIR}")
        elif table.root != storage.root:
            outside.append(table)
    removed = storage.sweep_temp(grace_seconds, under=tuple(dict.fromkeys(under)))
    for table in outside:
        removed += [replace(t, path=table.uri(t.path)) for t in table.sweep_temp(grace_seconds, under=(TEMP_DIR,))]
    return removed
