"""The release packet: canonical JSON with its own sha256, the rollback plan, cost and pending evidence."""

from __future__ import annotations

import hashlib
import json
from datetime import datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .. import _delta
from ..clock import iso
from ..index.files import history_growth

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


def _orders_at(lake: Lake, version: int) -> int | None:
    """How many current orders (tombstones excluded) `version` holds; None when it cannot be read."""
    import polars as pl

    from ..tables import DEFAULT_TABLE
    from ..views import live_rows

    try:
        return int(live_rows(_delta.scan(lake.table_uri(DEFAULT_TABLE), lake.options, version),
                             lake.table_def(DEFAULT_TABLE)).select(pl.len()).collect().item())
    except Exception:  # noqa: BLE001 - a vacuumed version: the plan says it cannot be read
        return None


def _lake_arg(lake_uri: str) -> str:
    import shlex

    return f"--lake {shlex.quote(lake_uri)}"


def rollback_plan(lake: Lake, *, lake_uri: str, published: Any, shipped: bool) -> dict[str, Any]:
    """What to do if the published release must be withdrawn: restore the newest earlier publication that is
    allowed (holds no erased subject), saying what it holds; never the current version; else repair forward.
    `published`: the catalog's publication after the run; `shipped`: whether this run published a new
    version (a HOLD, or a SHIP that changed nothing, did not: there is nothing of it to roll back)."""
    from ..erasure.permission import snapshot_allowed

    if published is None:
        return {"mode": "none", "current": None, "target": None, "command": None,
                "reason": "nothing is published yet, so there is nothing to roll back"}
    current = int(published.version)
    now_orders = _orders_at(lake, current)
    base: dict[str, Any] = {"current": {"version": current, "generation": published.generation, "orders": now_orders}}
    if not shipped:  # the run changed nothing readers see: withdrawing an earlier release is not its plan
        return {**base, "mode": "none", "target": None, "command": None,
                "reason": f"this run published no new version, so there is nothing to roll back: readers get"
                          f" version {current} (generation {published.generation}), as before the run"}
    for pub in reversed(lake.catalog.publications("orders")):
        if pub.version >= current:
            continue
        orders = _orders_at(lake, pub.version)
        if orders is None:
            continue
        holds = ("the empty table (0 orders): rolling back withdraws every order" if orders == 0 else
                 f"{orders:,} orders (now {now_orders:,})" if now_orders is not None else f"{orders:,} orders")
        if snapshot_allowed(lake, "orders", pub.version):
            return {**base, "mode": "restore", "target": {"version": pub.version, "generation": pub.generation,
                                                          "orders": orders, "holds": holds},
                    "command": f"delta-release {_lake_arg(lake_uri)} rollback --to {pub.version}",
                    "reason": f"version {pub.version} (generation {pub.generation}) is the newest earlier publication"
                              f" and holds no erased subject; it holds {holds}",
                    "previous_allowed_snapshot": {"version": pub.version, "generation": pub.generation}}
        return {**base, "mode": "repair-forward", "target": {"version": pub.version, "generation": pub.generation,
                                                             "orders": orders, "holds": holds},
                "command": f"delta-release {_lake_arg(lake_uri)} rollback --to {pub.version} --repair-forward",
                "reason": f"version {pub.version} would expose an erased subject: the repair commits its content"
                          " without every erased subject", "previous_allowed_snapshot": None}
    return {**base, "mode": "none", "target": None, "command": None,
            "reason": f"no earlier readable publication than version {current}"}


_HINTS = {
    "rejected_per_batch": "the quarantine ledger lists each rejected line with its reason and raw offset; fix the"
                          " producer or the batch, then run again",
    "rejected_overall": "too many lines were rejected overall; see the counts by reason below",
    "rejected_by_reason": "one reason code dominates; see the counts by reason below",
    "late_events": "events arrived with positions below what the table already applied (out-of-order producer"
                   " or a replayed feed)",
    "stale_events": "upserts for event days far older than the newest: a backfill? raise"
                    " thresholds.stale_events in the config if intended",
    "moved_orders": "many orders changed event_day: check the producer's day assignment",
    "audit_bytes": "the audit query scans too much: check partitioning and file statistics",
    "checksums": "a data file differs from its recorded sha256: do not ship; investigate storage",
    "pinned_query": "the candidate differs from the reference fold of the accepted events",
    "amount_unit": "the decoder let a non-integer amount through, or the amount column is not int64: do not ship;"
                   " report it as a defect of delta-release",
    "reconciliation": "a batch's accepted + quarantined is not its extracted lines, or its quarantine ledger is"
                      " short: do not ship; `quarantine --batch ID` lists a batch's ledger",
    "conflict_drill": "the stale-writer drill failed in its scratch lake: run it alone to see which of its checks"
                      " failed",
    "erasure_drill": "the erasure drill failed in its scratch lake: run it alone to see which of its checks failed",
}
_DRILLS = {"conflict_drill": "conflict", "erasure_drill": "erasure"}  # a failed drill check: the drill alone


def next_steps(packet: dict[str, Any], config: ReleaseConfig) -> list[dict[str, str]]:
    """Copy-paste commands for the release manager, each with `--lake`."""
    import shlex

    from ..drills.scratch import suggested_scratch

    lake = _lake_arg(packet["lake"])
    cfg = shlex.quote(str(config.path))
    steps: list[dict[str, str]] = []
    if packet["decision"] == "hold":
        for name in packet["failed_checks"]:  # a check's own fix (release/fixes.py) follows what it found
            check = packet["checks"].get(name, {})
            hint = (f"{check['detail']}; fix: {check['fix']}" if check.get("fix")
                    else _HINTS.get(name, check.get("detail") or "see the check's row in the report"))
            command = (f"delta-release --lake {shlex.quote(suggested_scratch())} drill {_DRILLS[name]}"
                       if name in _DRILLS else "")
            steps.append({"what": f"{name} failed: {hint}", "command": command})
        steps.append({"what": "see what is committed but not published, and the last run",
                      "command": f"delta-release {lake} status"})
        steps.append({"what": "after fixing the sources (or the thresholds, if the data is right), run again",
                      "command": f"delta-release {lake} run {cfg}"})
    else:
        snap = packet["snapshot"]
        steps.append({"what": f"check what readers now get (version {snap['version']})",
                      "command": f"delta-release {lake} read --table orders"})
        steps.append({"what": "see the lake's state", "command": f"delta-release {lake} status"})
        plan = packet["rollback_plan"]
        if plan.get("command"):
            steps.append({"what": f"if this release must be withdrawn: {plan['reason']}", "command": plan["command"]})
    steps.append({"what": "see what vacuum would remove (a dry run)", "command": f"delta-release {lake} vacuum"})
    return steps


def _retained_bytes(uri: str, options: dict[str, str], retained: range,
                    current: list[_delta.FileEntry]) -> dict[str, int]:
    """path -> size of every file some version of `retained` references: the newest version's files plus
    every file a later commit of the range removed (a removed file was in the version before its removal).
    Reads the range's log entries, not one snapshot per version; each snapshot when a remove has no size."""
    held = {e.path: e.size for e in current}
    for v in range(retained.start + 1, retained.stop):
        removed = _delta.removed_files(uri, options, v)
        if removed is None or any(size is None for _, size in removed):
            held = {}
            for old in retained:
                held.update({e.path: e.size for e in _delta.file_entries(uri, options, old)})
            return held
        for path, size in removed:
            held.setdefault(path, int(size or 0))
    return held


def cost(lake: Lake, config: ReleaseConfig, version: int) -> dict[str, Any]:
    uri = lake.table_uri("orders")
    retained = range(max(0, version - config.retained_snapshots + 1), version + 1)
    current_entries = _delta.file_entries(uri, lake.options, version)
    held = _retained_bytes(uri, lake.options, retained, current_entries)
    growth = history_growth(lake, "orders")  # running totals of the file index: no replay of every commit
    added = growth.bytes_added
    days = max(1.0, (growth.last_ts - growth.first_ts) / 86_400_000) if growth.last_ts else 1.0
    current = sum(e.size for e in current_entries)
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
