"""Pending evidence: every place that still holds an erased subject after its erasure, and until when.

- raw batches: immutable by design; they keep the subject's events until raw retention expires (a
  replay of them keeps the subject blocked);
- old data files: files of earlier versions, until `vacuum --apply` removes them (allowed at once,
  since no version that holds an erased subject may be read or restored);
- backups taken before the erasure, until backup expiry.

The raw batches that hold a subject can only be found while its plain id is known (at the erasure), so
the erasure records their batch ids in the ledger entry; everything else is recomputed from storage.
"""

from __future__ import annotations

import json
import re
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from ..clock import iso
from ..contract import decode_batch
from ..errors import NotFoundError
from ..tables import DEFAULT_TABLE
from .ledger import ErasureEntry
from .lineage import data_files_on_storage
from .records import PendingItem

if TYPE_CHECKING:
    from ..context import LakeContext

from ..retention import BACKUP_EXPIRY_DAYS, RAW_RETENTION_DAYS  # noqa: E402 - one set of defaults


def _parse(ts: str) -> datetime:
    return datetime.fromisoformat(ts.replace("Z", "+00:00"))


def raw_batches_holding(lake: LakeContext, subject_id: str, *, as_order_id: bool = False) -> list[str]:
    """Ids of the raw batches whose bytes hold `subject_id` (an event for it, or a rejected line naming it).
    A rejected line that could not be read as an event names it when its text contains it anywhere (what
    an erasure must report), or, with `as_order_id`, only as the value of an `order_id` key (what proves
    the lake saw that order: `upsert` or `USD` are in every line's text)."""
    needle = subject_id.encode("utf-8")
    named = re.compile('"order_id"[ \t]*:[ \t]*(?:' + "|".join(re.escape(json.dumps(subject_id, ensure_ascii=a))
                                                            for a in (True, False)) + ")")
    key = lake.table_def(DEFAULT_TABLE).keyed().key  # the raw batches are the keyed table's events
    out = []
    for batch in lake.raw.list():
        data = lake.raw.read_sha(batch.sha256)
        if needle not in data and b"\\u" not in data:
            continue
        decoded = decode_batch(data)
        hit = subject_id in set(decoded.events[key].to_list()) or any(
            r.order_id == subject_id or (r.order_id is None and r.raw is not None and (
                named.search(r.raw) is not None if as_order_id else subject_id in r.raw))
            for r in decoded.rejects)
        if hit:
            out.append(batch.batch_id)
    return out


def pending_for(lake: LakeContext, entry: ErasureEntry, *, raw_retention_days: float = RAW_RETENTION_DAYS,
                backup_expiry_days: float | None = BACKUP_EXPIRY_DAYS) -> list[dict[str, Any]]:
    """What still holds `entry`'s subject now, each with `what` and `until` (ISO time). The retention the
    erasure was requested with, recorded in its entry, wins over the arguments (the defaults)."""
    if entry.retention is not None:
        raw_retention_days = entry.retention.get("raw_days", raw_retention_days)
        backup_expiry_days = entry.retention.get("backup_days", backup_expiry_days)
    now = lake.clock.now()
    erased_at = _parse(entry.erased_at)
    out: list[dict[str, Any]] = []
    for batch_id in entry.raw_batches:
        try:
            batch = lake.raw.get(batch_id)
        except NotFoundError:
            continue
        received = _parse(batch.received) if batch.received else erased_at
        out.append({"what": f"raw batch {batch_id}", "kind": "raw_batch",
                    "until": iso(received + timedelta(days=raw_retention_days)),
                    "detail": "raw batches are immutable; a replay keeps the subject blocked"})
    if entry.files:
        present = data_files_on_storage(lake, entry.table)
        left = sorted(p for p in entry.files if p in present)
        if left:
            out.append({"what": f"{len(left)} old data file(s) of table {entry.table}", "kind": "data_files",
                        "until": entry.erased_at, "files": left,
                        "detail": "no allowed snapshot needs them; `vacuum --apply` removes them"})
    if backup_expiry_days:
        until = erased_at + timedelta(days=backup_expiry_days)
        if until > now:
            out.append({"what": "backups taken before the erasure", "kind": "backup", "until": iso(until),
                        "detail": f"backups expire {backup_expiry_days:g} days after they are taken"})
    return out


def pending_all(lake: LakeContext, *, raw_retention_days: float = RAW_RETENTION_DAYS,
                backup_expiry_days: float | None = BACKUP_EXPIRY_DAYS) -> list[PendingItem]:
    """Pending evidence for every erased subject (named by a prefix of its keyed hash)."""
    out: list[PendingItem] = []
    for entry in lake.erasures.entries():
        for item in pending_for(lake, entry, raw_retention_days=raw_retention_days,
                                backup_expiry_days=backup_expiry_days):
            row: PendingItem = {"subject": entry.subject[:16], "what": item["what"], "kind": item["kind"],
                                "until": item["until"], "detail": item["detail"]}
            if "files" in item:
                row["files"] = item["files"]
            out.append(row)
    return out
