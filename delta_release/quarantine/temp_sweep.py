"""The writer-start temp sweep, bounded: a killed writer's temp file (`.tmp-*`, possibly holding payload
text) is removed by the next writer without walking the whole lake on every start.

Every writer start sweeps the folders where payload-bearing temp files are written (`HOT`: raw batches,
the quarantine ledger, the erasure ledger; each a flat folder). The full walk of the lake (table data,
indexes, everything but Delta logs and the catalog) runs at most once per `FULL_EVERY_SECONDS`, the time
of the last one kept in `MARK` (wall clock: temp-file ages are wall-clock too). `vacuum` and an erasure
still walk the whole lake every time (`Storage.sweep_temp` without `under`).
"""

from __future__ import annotations

import json
import time

from ..storage import TEMP_GRACE_SECONDS, Storage, TempFile

HOT = ("_raw", "_quarantine", "_erasure")
MARK = "_upkeep/temp-sweep.json"
FULL_EVERY_SECONDS = 600.0


def _last_full(storage: Storage) -> float | None:
    try:
        return float(json.loads(storage.read_bytes(MARK))["at"])
    except (FileNotFoundError, OSError, ValueError, KeyError, TypeError):
        return None


def sweep_at_writer_start(storage: Storage, grace_seconds: float = TEMP_GRACE_SECONDS,
                          *, now: float | None = None) -> list[TempFile]:
    """Remove the stale temp files a writer must not leave behind; returns them."""
    if not storage.is_local:
        return []  # object-store writes are single PUTs: no temp files
    now = time.time() if now is None else now
    last = _last_full(storage)
    if last is not None and 0 <= now - last < FULL_EVERY_SECONDS:
        return storage.sweep_temp(grace_seconds, under=HOT)
    removed = storage.sweep_temp(grace_seconds)
    storage.write_bytes(MARK, json.dumps({"at": now}).encode())
    return removed
