"""The run's counts: the one source every table, chart and threshold check of the packet and report reads.

A batch is listed once, whatever how often the run received it:

- `sent` says how many times the run received its bytes (from which `sources`); a batch sent more than
  once (a resend: the same bytes, under any file name) is applied once and counted once;
- `applied_before`: a committed version already applied it (an earlier ingest or run), so this run
  applies nothing of it; its counts are those of its quarantine ledger, and it is left out of the
  totals (`counted: false`), as out of every threshold check;
- `duplicate` is true in both cases.

`extracted`, `accepted`, `quarantined` and `by_reason` are the sums over the counted batches, so the
counts table, the rejected-share chart and the `rejected_*`, `late_events` checks say the same numbers.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .candidate import RunBatch


def source_of(batch: RunBatch, part: int, parts: int) -> dict[str, Any]:
    """Where the run read a batch: the file, and for a file received in parts which part and bytes."""
    data = batch.data
    path = str(getattr(data, "path", "-"))
    out: dict[str, Any] = {"path": path}
    if parts > 1:
        out.update(part=part, parts=parts, offset=int(getattr(data, "offset", 0)), size=int(getattr(data, "size", 0)))
    return out


def source_text(source: dict[str, Any]) -> str:
    """`path`, or `path (part 2 of 3, bytes 100-199)`."""
    if not source.get("parts"):
        return str(source["path"])
    first, last = source["offset"], source["offset"] + source["size"] - 1
    return f"{source['path']} (part {source['part']} of {source['parts']}, bytes {first:,}-{last:,})"


def totals(batches: list[dict[str, Any]]) -> dict[str, Any]:
    """Sums over the batches that count (applied by this run): the numbers every check and table shows."""
    counted = [b for b in batches if b["counted"]]
    by_reason: dict[str, int] = {}
    for b in counted:
        for code, n in b["reasons"].items():
            by_reason[code] = by_reason.get(code, 0) + n
    return {"extracted": sum(b["extracted"] for b in counted), "accepted": sum(b["accepted"] for b in counted),
            "quarantined": sum(b["quarantined"] for b in counted), "by_reason": dict(sorted(by_reason.items())),
            "counted_batches": len(counted)}


def run_counts(received: list[tuple[RunBatch, dict[str, Any]]]) -> dict[str, Any]:
    """`received`: each batch the run received, in order, with its source (`source_of`)."""
    entries: dict[str, dict[str, Any]] = {}
    for batch, source in received:
        entry = entries.get(batch.batch_id)
        if entry is not None:  # the same bytes again: one entry, marked
            entry["sent"] += 1
            entry["sources"].append(source)
            entry["duplicate"] = True
            continue
        r = batch.report
        entries[batch.batch_id] = {
            "batch_id": batch.batch_id, "source": source["path"], "sources": [source], "sent": 1,
            "extracted": r.extracted, "accepted": r.accepted, "quarantined": r.quarantined,
            "reasons": dict(r.reasons), "version": r.version, "applied_before": r.duplicate,
            "duplicate": r.duplicate, "counted": not r.duplicate}
    batches = list(entries.values())
    return {"batches": batches, "received": len(received), **totals(batches)}


def duplicate_text(entry: dict[str, Any]) -> str:
    """Why a batch is marked as a duplicate, in words ("" when it is not one)."""
    parts = []
    if entry["sent"] > 1:
        parts.append(f"received {entry['sent']} times (same bytes), applied and counted once")
    if entry["applied_before"]:
        parts.append("already applied by an earlier version: nothing applied, not counted in the totals")
    return "; ".join(parts)
