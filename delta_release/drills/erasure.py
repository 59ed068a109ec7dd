"""The erasure drill from the release contract (seed 000, "Execute a deletion request and replay").

In a scratch lake: three batches give the subject a row, a move to another day and a tombstone. Then
the subject is erased; every raw batch is replayed; a newer event for the subject is ingested; a pinned
read and a rollback to the last version before the erasure are attempted. The drill passes only when
no read path (current, tombstones included, the second engine when present) ever returns the subject
and both attempts are refused. It also repairs forward, vacuums, and scans every file of the lake
outside the raw store for the plain id. Its own evidence names the subject by a keyed-hash prefix only.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import polars as pl

from ..errors import ErasureExposureError
from ..lake import Lake
from .scratch import prepare_scratch

SUBJECT = "ord-erase-47"


def _line(order_id: str, position: int, kind: str = "upsert", amount: int = 100,
          day: int | None = 47) -> bytes:
    ev: dict[str, Any] = {"schema_version": 3, "order_id": order_id, "position": position, "kind": kind}
    if kind == "upsert":
        ev.update(amount_cents=amount, event_day=day, currency="USD")
    elif day is not None:
        ev["event_day"] = day
    return json.dumps(ev).encode() + b"\n"


BATCHES = [
    _line(SUBJECT, 81, amount=7350) + _line("ord-83", 82, amount=4200) + _line("ord-90", 83, day=48),
    _line(SUBJECT, 90, amount=7400, day=48) + _line("ord-91", 91, day=48) + _line("ord-84", 92),
    _line(SUBJECT, 95, kind="delete", day=None) + _line("ord-92", 96, day=49),
]


def _visible(lake: Lake) -> dict[str, bool]:
    """Whether each read path of the published version returns the subject."""
    seen = {
        "current": SUBJECT in lake.read()["order_id"].to_list(),
        "with_tombstones": SUBJECT in lake.scan(include_tombstones=True).collect()["order_id"].to_list(),
    }
    read_duckdb = getattr(lake.gateway, "read_duckdb", None)
    if read_duckdb is not None:
        seen["duckdb"] = SUBJECT in read_duckdb("orders", include_tombstones=True)["order_id"].to_list()
    return seen


def _refused(fn: Any) -> dict[str, Any]:
    try:
        fn()
    except ErasureExposureError as exc:
        return {"refused": True, "error": type(exc).__name__, "message": exc.message}
    return {"refused": False, "error": None}


def _files_with_id(root: Path, needle: bytes, *, skip: tuple[str, ...]) -> list[str]:
    hits = []
    for path in sorted(root.rglob("*")):
        rel = path.relative_to(root).as_posix()
        if path.is_file() and not rel.startswith(skip) and needle in path.read_bytes():
            hits.append(rel)
    return hits


def _published(lake: Lake) -> int:
    pub = lake.published("orders")
    assert pub is not None
    return pub.version


def run_erasure_drill(uri: str) -> dict[str, Any]:
    path = prepare_scratch(uri)
    lake = Lake.create(path)
    ingested = [lake.ingest(b).version for b in BATCHES]
    before = _published(lake)  # the last version before the erasure (holds a tombstone)
    others_before = sorted(set(lake.read(version=before)["order_id"].to_list()) - {SUBJECT})
    erased = lake.erase(SUBJECT)
    after_erase = _visible(lake)
    replays = lake.replay(all_batches=True)
    after_replay = _visible(lake)
    newer = lake.ingest(_line(SUBJECT, 1000, amount=1, day=50) + _line("ord-93", 1001, day=50))
    quarantined = lake.quarantine.rows(newer.batch_id).filter(pl.col("reason") == "erased_subject")
    after_newer = _visible(lake)
    published = _published(lake)
    pinned = _refused(lambda: lake.read(version=before))
    rollback = _refused(lambda: lake.rollback(before))
    unchanged = _published(lake) == published
    repaired = lake.rollback(before, repair_forward=True)
    repaired_rows = sorted(lake.read()["order_id"].to_list())
    after_repair = _visible(lake)
    vacuum = lake.vacuum(apply=True, retain_versions=3, replay_horizon_hours=0, orphan_grace_hours=0)
    retained_read: dict[str, Any] = {}
    for v in sorted(vacuum.needed_versions):
        try:
            retained_read[str(v)] = SUBJECT not in lake.read(version=v)["order_id"].to_list()
        except Exception as exc:  # noqa: BLE001 - a retained snapshot that cannot be read fails the drill
            retained_read[str(v)] = False
            retained_read[f"{v}_error"] = type(exc).__name__
    leftovers = _files_with_id(path / "orders", SUBJECT.encode(), skip=("_delta_log",))
    plain_id_files = _files_with_id(path, SUBJECT.encode(), skip=("_raw/",))

    checks = {
        "absent_after_erase": erased.rows_removed >= 1 and not any(after_erase.values()),
        "absent_after_replay": len(replays) == len(BATCHES) and not any(after_replay.values()),
        "new_event_blocked": newer.reasons.get("erased_subject") == 1 and quarantined.height == 1
        and not any(after_newer.values()),
        "pinned_read_refused": pinned["refused"],
        "rollback_refused": rollback["refused"] and unchanged,
        "repair_forward_without_subject": repaired.mode == "repair-forward" and not any(after_repair.values())
        and set(others_before) <= set(repaired_rows),
        "vacuum_leaves_no_subject_file": not leftovers,
        "retained_snapshots_read": bool(retained_read) and all(v is True for v in retained_read.values()),
        "no_plain_id_outside_raw": not plain_id_files,
    }
    result: dict[str, Any] = {
        "drill": "erasure", "lake": str(path), "passed": all(checks.values()), "checks": checks,
        "subject": erased.subject[:16], "versions": {"ingested": ingested, "before_erasure": before,
                                                     "erasure": erased.version, "repair_forward": repaired.version},
        "erase": erased.to_json(), "pending": erased.pending,
        "visible": {"after_erase": after_erase, "after_replay": after_replay, "after_newer_event": after_newer,
                    "after_repair_forward": after_repair},
        "pinned_read": pinned, "rollback": rollback, "repair_forward": repaired.to_json(),
        "vacuum": {"removed_by_reason": vacuum.to_json()["removed_by_reason"],
                   "needed_versions": vacuum.to_json()["needed_versions"],
                   "retained_snapshots_read": retained_read,
                   "files_holding_subject": leftovers},
        "files_with_plain_id_outside_raw": plain_id_files,
    }
    # The evidence goes into release packets: it must not hold the plain id either.
    checks["evidence_holds_no_id"] = SUBJECT not in json.dumps(result, default=str)
    result["passed"] = all(checks.values())
    return result
