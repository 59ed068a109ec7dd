"""The version an index is complete up to, stored with the Delta table id it was built for (a table
re-created at the same URI has another id, so its old index is ignored and rebuilt)."""

from __future__ import annotations

import json

from .. import _delta
from ..storage import Storage


def read_watermark(index: Storage, path: str, uri: str, options: dict[str, str]) -> int | None:
    """The version in `path`, or None when it is missing, unreadable or written for another table."""
    try:
        mark = json.loads(index.read_bytes(path))
        if mark.get("table_id") != _delta.table_id(uri, options):
            return None  # written for another table once at this URI: rebuild
        return int(mark["version"])
    except (FileNotFoundError, OSError, ValueError, KeyError, TypeError, AttributeError):  # not a JSON object
        return None


def write_watermark(index: Storage, path: str, uri: str, options: dict[str, str], version: int) -> None:
    """Not fsynced (one fsync less per ingest, 10-60 ms on a busy disk): every index file the mark covers
    was fsynced before it is written, so after a power cut the mark is the new one (true), the old one
    (the next lookup catches up again) or empty (unreadable: None, the index is rebuilt); never ahead."""
    index.write_bytes(path, json.dumps({"version": version, "table_id": _delta.table_id(uri, options)}).encode(),
                      durable=False)
