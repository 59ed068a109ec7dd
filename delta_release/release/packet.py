"""The release packet: canonical JSON with its own sha256, the rollback plan, cost and pending evidence."""

from __future__ import annotations

import hashlib
import json
from datetime import datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .. import _delta
from ..clock import iso

if TYPE_CHECKING:
    from ..lake import Lake
    from .config import ReleaseConfig


def canonical(obj: Any) -> bytes:
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str).encode()


def write_packet(packet: dict[str, Any], directory: Path) -> tuple[Path, str]:
    """Write `packet.json` (canonical) and `packet.json.sha256`; returns the path and the digest."""
    directory.mkdir(parents=True, exist_ok=True)
    data = canonical(packet)
    digest = hashlib.sha256(data).hexdigest()
    path = directory / "packet.json"
    path.write_bytes(data)
    (directory / "packet.json.sha256").write_text(f"{digest}  packet.json\n")
    return path, digest


def rollback_plan(lake: Lake, *, previous_version: int | None) -> dict[str, Any]:
    """Where readers go if this release must be rolled back: the previous allowed snapshot, else forward."""
    from ..erasure.permission import snapshot_allowed

    if previous_version is None:
        return {"mode": "none", "previous_allowed_snapshot": None, "reason": "no earlier published snapshot"}
    for pub in reversed(lake.catalog.publications("orders")):
        if pub.version > previous_version:
            continue
        if snapshot_allowed(lake, "orders", pub.version):
            mode = "restore" if pub.version == previous_version else "restore-older"
            return {"mode": mode, "previous_allowed_snapshot": {"version": pub.version, "generation": pub.generation},
                    "command": f"delta-release rollback --to {pub.version}",
                    "reason": "holds no erased subject"}
        return {"mode": "repair-forward", "previous_allowed_snapshot": None,
                "command": f"delta-release rollback --to {pub.version} --repair-forward",
                "reason": f"version {pub.version} would expose an erased subject"}
    return {"mode": "none", "previous_allowed_snapshot": None, "reason": "no earlier published snapshot"}


def cost(lake: Lake, config: ReleaseConfig, version: int) -> dict[str, Any]:
    uri = lake.table_uri("orders")
    retained = range(max(0, version - config.retained_snapshots + 1), version + 1)
    held: dict[str, int] = {}
    for v in retained:
        for e in _delta.file_entries(uri, lake.options, v):
            held[e.path] = e.size
    history = _delta.history(uri, lake.options)
    added = sum(f["size"] for h in history for f in (h["evidence"] or {}).get("files", []))
    stamps = [h["timestamp"] for h in history if h["timestamp"]]
    days = max(1.0, (max(stamps) - min(stamps)) / 86_400_000) if stamps else 1.0
    current = sum(e.size for e in _delta.file_entries(uri, lake.options, version))
    raw = sum(o.size for o in lake.storage.list("_raw"))
    return {
        "retained_snapshots": len(retained),
        "retained_snapshot_bytes": sum(held.values()),
        "current_snapshot_bytes": current,
        "deletion_ledger_bytes": lake.erasures.size_bytes(),
        "erased_subjects": len(lake.erasures.entries()),
        "raw_store_bytes": raw,
        "growth_per_day_bytes": round(added / days),
        "growth_basis": f"bytes added by commits over {days:.2f} day(s) of history (at least one day)",
    }


def pending_evidence(lake: Lake, config: ReleaseConfig, now: datetime) -> dict[str, Any]:
    """What still holds data past the release window: raw batches, erased subjects' traces, backups."""
    window_end = now + timedelta(days=config.window_days)
    items: list[dict[str, Any]] = []
    for batch in lake.raw.list():
        received = datetime.fromisoformat(batch.received.replace("Z", "+00:00")) if batch.received else now
        until = received + timedelta(days=config.raw_retention_days)
        items.append({"what": f"raw batch {batch.batch_id}", "until": iso(until)})
    items.append({"what": "backups of this release", "until": iso(now + timedelta(days=config.backup_expiry_days))})
    try:
        from ..erasure.pending import pending_all

        items += [dict(i) for i in pending_all(lake, raw_retention_days=config.raw_retention_days,
                             backup_expiry_days=config.backup_expiry_days)]
    except (ImportError, TypeError):
        pass
    for item in items:
        item["beyond_release_window"] = item["until"] > iso(window_end)
    return {"release_window": {"start": iso(now), "end": iso(window_end)},
            "items": items, "beyond_window": sum(1 for i in items if i["beyond_release_window"])}
