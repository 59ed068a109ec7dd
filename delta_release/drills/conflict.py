"""The conflict drill from the release contract (seed 000, "Simulate a failed commit").

A scratch lake is brought to snapshot 41 by 41 real commits. Writer A prepares a correction of order X
(and a change to order Y that B does not touch); writer B prepares X's deletion at a higher position, on
the same parent. B commits 42. A's commit is refused with StaleParentError (expected 41, found 42); A
reloads 42, re-applies its events (the tombstone now blocks the correction), rebuilds and commits 43. X
stays absent and none of A's stale files is referenced by any version. A second case gives A's correction
a higher position than the delete: after the rebuild, X is present with A's amount.

A third case races a release run (issue 13): a candidate staged as a run stages one (publication
deferred) corrects X on the latest version without committing; writer B deletes X and commits; the
run's ship (its strict commit) is refused (stale parent), which discards its staged files: a HOLD. The
Delta log then holds B's commit and nothing of the run, X stays absent, and none of the run's staged
files exists or is referenced by any version. The drill stages through the writer API, as every writer
does (the release run itself runs this drill); the run's own race is tests/release/test_release_atomic.py's.
"""

from __future__ import annotations

import json
from typing import Any

import polars as pl

from .. import _delta
from ..contract import decode_batch
from ..errors import StaleParentError
from ..ingest import commit_candidate, prepare_candidate
from ..lake import Lake
from .scratch import prepare_scratch

ORDER_X = "ord-x"
ORDER_Y = "ord-y"
PARENT = 41


def _events(events: list[dict[str, Any]]) -> pl.DataFrame:
    data = b"".join(json.dumps(e).encode() + b"\n" for e in events)
    return decode_batch(data).events


def _up(order_id: str, position: int, amount: int, day: int) -> dict[str, Any]:
    return {"schema_version": 3, "order_id": order_id, "position": position, "kind": "upsert",
            "amount_cents": amount, "event_day": day, "currency": "USD"}


def _build_to_41(lake: Lake) -> None:
    """41 real commits: orders on days 47 and 48, X and Y among them."""
    for i in range(1, PARENT + 1):
        day = 47 if i % 2 else 48
        events = [_up(f"ord-{i:03d}", i * 10, 1000 + i, day)]
        if i == 1:
            events.append(_up(ORDER_X, 5, 7350, 47))
        if i == 2:
            events.append(_up(ORDER_Y, 6, 4200, 48))
        lake.ingest(b"".join(json.dumps(e).encode() + b"\n" for e in events))


def _referenced_anywhere(lake: Lake, paths: set[str]) -> list[str]:
    uri = lake.table_uri("orders")
    latest = lake.latest_version("orders") or 0
    seen: set[str] = set()
    for v in range(latest + 1):
        seen.update(e.path for e in _delta.file_entries(uri, lake.options, v))
    return sorted(paths & seen)


def _case(lake: Lake, *, a_position: int, b_position: int) -> dict[str, Any]:
    parent = lake.latest_version("orders")
    assert parent is not None
    a_events = _events([_up(ORDER_X, a_position, 9999, 47), _up(ORDER_Y, a_position + 1, 4300, 48)])
    b_events = _events([{"schema_version": 3, "order_id": ORDER_X, "position": b_position, "kind": "delete"}])
    prep_a = prepare_candidate(lake, a_events, parent=parent, batch_ids=["drill-writer-a"],
                               operation="drill-conflict-a")
    prep_b = prepare_candidate(lake, b_events, parent=parent, batch_ids=["drill-writer-b"],
                               operation="drill-conflict-b")
    assert not prep_a.empty and not prep_b.empty
    stale_paths = {f.path for f in prep_a.staged_files}
    b_version = commit_candidate(lake, prep_b)
    lake.publish_version("orders", b_version, digest=prep_b.evidence.digest)
    stale: dict[str, Any] = {"writer": "A", "error": None, "expected": None, "found": None}
    try:
        commit_candidate(lake, prep_a)
    except StaleParentError as exc:
        stale = {"writer": "A", "error": type(exc).__name__, "expected": exc.expected, "found": exc.found,
                 "message": exc.message}
    reload_parent = lake.latest_version("orders")
    assert reload_parent is not None
    rebuilt = prepare_candidate(lake, a_events, parent=reload_parent, batch_ids=["drill-writer-a"],
                                operation="drill-conflict-a-rebuilt")
    rebuilt_version = None
    rebuilt_keys = 0
    if not rebuilt.empty:
        rebuilt_keys = int(rebuilt.change.details["changed_keys"])
        rebuilt_version = commit_candidate(lake, rebuilt)
        lake.publish_version("orders", rebuilt_version, digest=rebuilt.evidence.digest)
    current = {r["order_id"]: r for r in lake.read().to_dicts()}
    x = current.get(ORDER_X)
    leaked = _referenced_anywhere(lake, stale_paths)
    store = lake.table_storage("orders")
    on_disk = sorted(p for p in stale_paths if store.exists(p))
    return {
        "parent": parent,
        "committed": {"writer": "B", "version": b_version},
        "stale": stale,
        "rebuilt": {"writer": "A", "parent": reload_parent, "version": rebuilt_version,
                    "changed_keys": rebuilt_keys},
        "order_present": x is not None,
        "order_amount": None if x is None else x["amount_cents"],
        "other_order_amount": current.get(ORDER_Y, {}).get("amount_cents"),
        "stale_files_referenced": leaked,
        "stale_files_left_on_storage": on_disk,
    }


def _log_files(lake: Lake) -> dict[str, bytes]:
    store = lake.table_storage("orders")
    return {o.path: store.read_bytes(o.path) for o in store.list("_delta_log/") if o.path.endswith(".json")}


def _run_case(lake: Lake, *, run_position: int, b_position: int) -> dict[str, Any]:
    """A release run staged on the latest version loses the race to writer B's delete of X."""
    parent = lake.latest_version("orders")
    assert parent is not None
    candidate = prepare_candidate(lake, _events([_up(ORDER_X, run_position, 5555, 47)]), parent=parent,
                                  batch_ids=["drill-conflict-run"], operation="release", publish_now=False)
    staged_paths = {f.path for f in candidate.staged_files}
    b_events = _events([{"schema_version": 3, "order_id": ORDER_X, "position": b_position, "kind": "delete"}])
    prep_b = prepare_candidate(lake, b_events, parent=parent, batch_ids=["drill-writer-b-run"],
                               operation="drill-conflict-b")
    b_version = commit_candidate(lake, prep_b)
    lake.publish_version("orders", b_version, digest=prep_b.evidence.digest)
    log_before_ship = _log_files(lake)
    refused: dict[str, Any] = {"error": None}
    discarded: list[str] = []
    try:
        commit_candidate(lake, candidate)  # the ship
    except StaleParentError as exc:  # the hold: a refused commit discards its staged files
        refused = {"error": type(exc).__name__, "expected": exc.expected, "found": exc.found}
        discarded = sorted(staged_paths)
    store = lake.table_storage("orders")
    return {
        "parent": parent, "committed": {"writer": "B", "version": b_version}, "ship": refused,
        "discarded_files": len(discarded),
        "log_unchanged_by_hold": _log_files(lake) == log_before_ship,
        "latest": lake.latest_version("orders"),
        "order_present": ORDER_X in set(lake.read()["order_id"].to_list()),
        "staged_files_referenced": _referenced_anywhere(lake, staged_paths),
        "staged_files_left_on_storage": sorted(p for p in staged_paths if store.exists(p)),
    }


def run_conflict_drill(uri: str) -> dict[str, Any]:
    path = prepare_scratch(uri)
    lake = Lake.create(path)
    _build_to_41(lake)
    built = lake.latest_version("orders")
    first = _case(lake, a_position=1000, b_position=1001)
    # The second case starts from the first one's end (X tombstoned at 1001): B's delete at 2000 and A's
    # correction at 2001 race again on one parent; A's higher position must re-create X.
    second = _case(lake, a_position=2001, b_position=2000) if first["order_present"] is False else None
    # The third case starts from the second one's end (X present at 2001): a release run's correction at
    # 3001 is staged; B's delete at 3000 commits first on the same parent, so the run must hold.
    run = _run_case(lake, run_position=3001, b_position=3000) if second is not None else None
    checks = {
        "snapshot_41_by_41_commits": built == PARENT,
        "b_committed_42": first["committed"]["version"] == PARENT + 1,
        "a_refused_stale_parent": first["stale"]["error"] == "StaleParentError"
        and first["stale"]["expected"] == PARENT and first["stale"]["found"] == PARENT + 1,
        "a_rebuilt_on_42_committed_43": first["rebuilt"]["parent"] == PARENT + 1
        and first["rebuilt"]["version"] == PARENT + 2,
        "rebuilt_candidate_not_empty": first["rebuilt"]["changed_keys"] > 0
        and first["other_order_amount"] == 4300,
        "deleted_order_absent": first["order_present"] is False,
        "stale_files_never_referenced": not first["stale_files_referenced"]
        and not first["stale_files_left_on_storage"],
        "higher_position_correction_wins": second is not None and second["order_present"] is True
        and second["order_amount"] == 9999 and second["stale"]["error"] == "StaleParentError",
        "second_case_stale_files_never_referenced": second is not None
        and not second["stale_files_referenced"],
        "release_run_refused_stale_parent": run is not None and run["ship"]["error"] == "StaleParentError"
        and run["ship"]["found"] == run["committed"]["version"] == run["latest"],
        "release_run_hold_left_log_unchanged": run is not None and run["log_unchanged_by_hold"]
        and run["discarded_files"] > 0,
        "release_run_deleted_order_absent": run is not None and run["order_present"] is False,
        "release_run_staged_files_gone": run is not None and not run["staged_files_referenced"]
        and not run["staged_files_left_on_storage"],
    }
    return {"drill": "conflict", "lake": str(path), "passed": all(checks.values()), "checks": checks,
            **{k: first[k] for k in ("parent", "committed", "stale", "rebuilt", "order_present")},
            "evidence": first, "higher_position_case": second, "release_run_case": run}
