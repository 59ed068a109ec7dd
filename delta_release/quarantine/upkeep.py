"""What every writer does first: sweep stale temp files, and migrate a legacy quarantine ledger.

Ledger files written before format 2 held each rejected line's text (a `raw` column) and details that
could quote the line. `migrate_legacy` rewrites each such file in the current schema: the text is dropped,
the line's byte span is computed from its raw batch (when the batch is still stored), the detail passes
`safe_detail`, everything else is kept. Each file is replaced atomically; `_quarantine/format.json` is
written last, so a killed migration is simply redone by the next writer and a migrated lake costs one
`exists` per writer start.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

import pyarrow.parquet as pq

from ..errors import NotFoundError
from ..storage import TEMP_GRACE_SECONDS, Storage
from .details import safe_detail
from .ledger import FORMAT, FORMAT_KEY, PREFIX, QuarantineLedger, QuarantineRow, encode_rows
from .spans import line_spans
from .temp_sweep import sweep_at_writer_start

MARKER = f"{PREFIX}/format.json"


def _is_current(schema_metadata: dict[bytes, bytes] | None, names: list[str]) -> bool:
    return bool(schema_metadata and schema_metadata.get(FORMAT_KEY) == FORMAT) and "raw" not in names


def migrate_legacy(storage: Storage) -> int:
    """Rewrite every legacy ledger file without its text; returns how many files were rewritten."""
    if storage.exists(MARKER):
        return 0
    from ..raw import RawStore

    raw = RawStore(storage)
    migrated = 0
    for path in QuarantineLedger(storage).paths():
        pf = pq.ParquetFile(storage.open_input(path))
        arrow = pf.schema_arrow
        if _is_current(arrow.metadata, arrow.names):
            continue
        keep = [c for c in ("batch_id", "line", "offset", "length", "reason", "detail", "subject") if c in arrow.names]
        records = pf.read(columns=keep).to_pylist()
        batch_id = path.rsplit("/", 1)[-1].removesuffix(".parquet")
        try:
            spans = line_spans(raw.read(batch_id))
        except NotFoundError:
            spans = []
        rows = []
        for r in records:
            line = int(r["line"])
            offset, length = spans[line - 1] if 1 <= line <= len(spans) else (r.get("offset"), r.get("length"))
            rows.append(QuarantineRow(batch_id=r.get("batch_id") or batch_id, line=line, offset=offset,
                                      length=length, reason=r["reason"],
                                      detail=safe_detail(r["reason"], r.get("detail")), subject=r.get("subject")))
        storage.write_bytes(path, encode_rows(rows))
        migrated += 1
    storage.write_bytes(MARKER, json.dumps({"format": int(FORMAT)}).encode())
    return migrated


def writer_start(storage: Storage, grace_seconds: float = TEMP_GRACE_SECONDS, *,
                 tables: Iterable[str] = ()) -> dict[str, Any]:
    """Called by a writer before its own work: removes stale temp files from the temp folders of the lake
    root and of the table roots `tables` (URIs; never a walk of the lake, temp_sweep.py), migrates a legacy
    ledger."""
    removed = sweep_at_writer_start(storage, grace_seconds, tables=tables)
    return {"temp_files_removed": [t.path for t in removed], "quarantine_migrated": migrate_legacy(storage)}
