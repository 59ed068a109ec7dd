"""The crash drill: SIGKILL a separate interpreter at every step of ingest and publish, then check.

For each crash point a fresh lake (under the scratch lake named by --lake) gets a base batch, then a child
interpreter runs `delta-release ingest` on a second batch with `DELTA_RELEASE_CRASH_AT=<point>` and is
killed there (see `delta_release.faults`). Afterwards, in this process:

- the published snapshot reads intact and equals either the state before the run or the completed state;
- every file the published (and the latest) version references exists with the size and sha256 that its
  commit evidence recorded (I7), and each commit's parent is the version before it (I6);
- no staged file is visible: rows equal one of the two states, and a version committed but not yet
  published is refused to pinned readers (I5, I8);
- a quarantine file left by the killed run is complete, and reconciles (I1);
- rerunning the same ingest completes, applies the batch exactly once and reaches the state of an
  uninterrupted run (I2), which is also the reference fold of all accepted events;
- staged files of the killed run (referenced by no version) are found and removed (`Lake.vacuum` when the
  lake has it, else this module's orphan finder), and the snapshot still reads the same afterwards.

"During the commit" is a watchdog kill inside the delta-rs commit call (the call releases the GIL), so the
drill reports which outcome it observed (log entry written or not) instead of claiming an instant.
"During the catalog update" is two points: after the generation is read but before the swap
(`publish.before_swap`), and inside the SQLite publish transaction after its INSERT ran but before COMMIT
(`catalog.in_transaction`, a SQLite trace hook the child installs; the catalog code is not touched).
"""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import sys
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from .. import _delta
from ..apply import reference_fold
from ..clock import FixedClock
from ..contract import decode_batch
from ..errors import DeltaReleaseError, InputError
from ..faults import CRASH_ENV, DELAY_ENV
from ..ingest import applied_batches
from ..lake import Lake
from ..raw import batch_id_of
from .scratch import prepare_scratch

TABLE = "orders"
SQLITE_HOOK = "catalog.in_transaction"
ROW_KEYS = ("order_id", "amount_cents", "currency", "event_day", "position")


@dataclass(frozen=True, slots=True, kw_only=True)
class CrashPoint:
    name: str  # the value of DELTA_RELEASE_CRASH_AT
    step: str  # what the step is, in words
    delay: float | None = None  # watchdog delay for crash windows


POINTS: tuple[CrashPoint, ...] = (
    CrashPoint(name="ingest.after_raw", step="after the raw write, before the quarantine"),
    CrashPoint(name="ingest.after_quarantine", step="after staging, the gate and the quarantine write"),
    CrashPoint(name="stage.after_first_file", step="during staging: after the first of several staged files"),
    CrashPoint(name="ingest.after_staging", step="after staging, before the gate"),
    CrashPoint(name="ingest.after_gate", step="after the gate, before the commit"),
    CrashPoint(name="commit.during", step="during the Delta commit (watchdog at 0 ms)", delay=0.0),
    CrashPoint(name="commit.during", step="during the Delta commit (watchdog at 3 ms)", delay=0.003),
    CrashPoint(name="commit.during", step="during the Delta commit (watchdog at 20 ms, or at its end)",
               delay=0.02),
    CrashPoint(name="ingest.after_commit", step="after the commit, before the catalog update"),
    CrashPoint(name="publish.before_swap",
               step="during the catalog update: generation read, compare-and-swap not done"),
    CrashPoint(name=SQLITE_HOOK,
               step="during the catalog update: inside the SQLite transaction, INSERT done, COMMIT not"),
    CrashPoint(name="ingest.after_publish", step="after the catalog update, before ingest returns"),
)

CLOCK = FixedClock(datetime(2026, 11, 29, 12, 0, tzinfo=UTC))


def _up(order_id: str, position: int, amount: int, day: int, *, v3: bool = False) -> dict[str, Any]:
    ev: dict[str, Any] = {"schema_version": 3 if v3 else 2, "order_id": order_id, "position": position,
                          "kind": "upsert", "amount_cents": amount, "event_day": day}
    if v3:
        ev["currency"] = "USD"
    return ev


def _jsonl(events: list[dict[str, Any]], *extra: bytes) -> bytes:
    return b"".join(json.dumps(e).encode() + b"\n" for e in events) + b"".join(extra)


BASE_BATCH = _jsonl([_up("ord-01", 1, 1000, 10), _up("ord-02", 2, 2000, 11), _up("ord-03", 3, 3000, 12),
                     _up("ord-04", 4, 4000, 10, v3=True), _up("ord-05", 5, 5000, 11)])
# Touches days 10..14 (several staged files): a correction, a delete, a move, new orders, two bad lines.
CRASH_BATCH = _jsonl([
    _up("ord-01", 11, 1111, 10),                                         # correction on day 10
    {"schema_version": 2, "order_id": "ord-02", "position": 12, "kind": "delete"},  # tombstone on day 11
    _up("ord-03", 13, 3333, 14),                                         # moves from day 12 to 14
    _up("ord-06", 14, 6000, 13, v3=True), _up("ord-07", 15, 7000, 10),   # new orders
    _up("ord-04", 3, 9999, 10, v3=True),                                 # lower position: no effect
], b'{"schema_version": 2, "order_id": "ord-08", "position": 16\n',
   b'{"schema_version": 2, "order_id": "ord-09", "position": 17, "kind": "upsert", "amount_cents": 73.5,'
   b' "event_day": 10}\n')


# -- the child interpreter ----------------------------------------------------------------------------
def child_setup() -> None:
    """Run first in the killed interpreter (which then runs the real CLI): the SQLite hook when armed."""
    if os.environ.get(CRASH_ENV) == SQLITE_HOOK:
        _install_sqlite_hook()


def _install_sqlite_hook() -> None:
    """SIGKILL at the COMMIT of the first transaction that inserted a publication (its INSERT already ran)."""
    import sqlite3

    real_connect = sqlite3.connect

    def connect(*args: Any, **kw: Any) -> sqlite3.Connection:
        con: sqlite3.Connection = real_connect(*args, **kw)
        state = {"inserted": False}

        def trace(statement: str) -> None:
            text = statement.strip().upper()
            if text.startswith("INSERT INTO PUBLICATIONS"):
                state["inserted"] = True
            elif text.startswith("COMMIT") and state["inserted"]:
                os.kill(os.getpid(), signal.SIGKILL)

        con.set_trace_callback(trace)
        return con

    sqlite3.connect = connect  # type: ignore[assignment]


def run_child(lake_dir: Path, batch: Path, point: CrashPoint) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, CRASH_ENV: point.name}
    env.pop(DELAY_ENV, None)
    if point.delay is not None:
        env[DELAY_ENV] = str(point.delay)
    code = ("import sys; from delta_release.drills.crash import child_setup; child_setup(); "
            "from delta_release.cli.main import cli; cli(args=sys.argv[1:], prog_name='delta-release')")
    return subprocess.run([sys.executable, "-c", code, "--lake", str(lake_dir), "ingest", str(batch), "--json"],
                          env=env, capture_output=True, text=True, timeout=300, check=False)


# -- observation ----------------------------------------------------------------------------------
def _rows(lake: Lake) -> list[tuple[Any, ...]]:
    return [tuple(r[k] for k in ROW_KEYS) for r in lake.read(TABLE).to_dicts()]


def _fold_rows(data: list[bytes]) -> list[tuple[Any, ...]]:
    events = []
    for batch in data:
        events += decode_batch(batch).events.to_dicts()
    folded = reference_fold(events)
    return sorted((k, v["amount_cents"], v["currency"], v["event_day"], v["position"]) for k, v in folded.items())


def referenced_files(lake: Lake) -> set[str]:
    """Every data file added by any version of the table's log."""
    uri = lake.table_uri(TABLE)
    latest = lake.latest_version(TABLE) or 0
    seen: set[str] = set()
    for v in range(latest + 1):
        seen.update(e.path for e in _delta.file_entries(uri, lake.options, v))
    return seen


def find_orphans(lake: Lake) -> list[str]:
    """Data files under the table root that no version of its log references (staged, never committed)."""
    store = lake.table_storage(TABLE)
    on_disk = {o.path for o in store.list() if not o.path.startswith("_delta_log/")}
    return sorted(on_disk - referenced_files(lake))


def remove_orphans(lake: Lake) -> tuple[str, list[str]]:
    """Remove staged files of killed runs with `Lake.vacuum` (no grace: no writer is in flight here).

    Falls back to this drill's orphan finder when the lake has no vacuum, and says so; the finder also
    removes whatever vacuum left, and the drill's `orphans_removed_by_vacuum` check reports that.
    """
    orphans = find_orphans(lake)
    how = "drill orphan finder" if orphans else "nothing to remove"
    vacuum = getattr(lake, "vacuum", None)
    if callable(vacuum) and orphans:
        vacuum(TABLE, apply=True, orphan_grace_hours=0)
        how = "Lake.vacuum"
    store = lake.table_storage(TABLE)
    for path in find_orphans(lake):
        how = f"{how} + drill orphan finder" if how == "Lake.vacuum" else how
        store.delete(path)
    return how, orphans


def evidence_check(lake: Lake, version: int) -> list[str]:
    """I7: problems with the files `version` references (missing, size or sha256 differing from evidence)."""
    uri = lake.table_uri(TABLE)
    recorded: dict[str, dict[str, Any]] = {}
    for entry in _delta.history(uri, lake.options):
        for f in (entry["evidence"] or {}).get("files", []):
            recorded[f["path"]] = f
    store = lake.table_storage(TABLE)
    problems = []
    for e in _delta.file_entries(uri, lake.options, version):
        ev = recorded.get(e.path)
        if ev is None:
            problems.append(f"{e.path}: no commit evidence")
            continue
        size = store.size(e.path)
        if size is None:
            problems.append(f"{e.path}: missing")
        elif size != ev["size"] or size != e.size:
            problems.append(f"{e.path}: size {size}, evidence {ev['size']}, log {e.size}")
        elif hashlib.sha256(store.read_bytes(e.path)).hexdigest() != ev["sha256"]:
            problems.append(f"{e.path}: sha256 differs from evidence")
    return problems


def parent_chain_ok(lake: Lake) -> bool:
    """I6: every commit of ours was made on the version right before it."""
    for entry in _delta.history(lake.table_uri(TABLE), lake.options):
        ev = entry["evidence"]
        if ev is not None and "parent" in ev and ev["parent"] != entry["version"] - 1:
            return False
    return True


def _pinned_unpublished_refused(lake: Lake, published: int, latest: int) -> bool:
    if latest <= published:
        return True
    try:
        lake.read(TABLE, version=latest)
    except DeltaReleaseError:
        return True
    return False


def _commits_of(lake: Lake, batch_id: str) -> int:
    return sum(batch_id in ((e["evidence"] or {}).get("batch_ids", []))
               for e in _delta.history(lake.table_uri(TABLE), lake.options))


def _quarantine_rows(lake: Lake, batch_id: str) -> int | None:
    return lake.quarantine.rows(batch_id).height if lake.quarantine.has(batch_id) else None


# -- the drill --------------------------------------------------------------------------------------
def _base_lake(path: Path) -> Lake:
    lake = Lake.create(path, clock=CLOCK)
    lake.ingest(BASE_BATCH)
    return lake


def drill_point(root: Path, index: int, point: CrashPoint, batch: Path, *, before: list[tuple[Any, ...]],
                after: list[tuple[Any, ...]], after_quarantined: int) -> dict[str, Any]:
    lake_dir = root / f"{index:02d}-{point.name.replace('.', '-')}"
    base = _base_lake(lake_dir)
    base_version = base.published(TABLE).version  # type: ignore[union-attr]
    batch_id = batch_id_of(batch.read_bytes())
    proc = run_child(lake_dir, batch, point)
    killed = proc.returncode == -signal.SIGKILL

    lake = Lake.open(lake_dir, clock=CLOCK)  # a fresh process's view; SQLite rolls back a hot journal here
    published = lake.published(TABLE)
    assert published is not None
    latest = lake.latest_version(TABLE) or 0
    rows = _rows(lake)
    orphans = find_orphans(lake)
    q_rows = _quarantine_rows(lake, batch_id)
    observed = {
        "returncode": proc.returncode, "raw_kept": any(b.batch_id == batch_id for b in lake.raw.list()),
        "quarantine_written": q_rows is not None, "staged_orphans": len(orphans),
        "committed": latest > base_version, "published_version": published.version, "latest_version": latest,
        "state": "completed" if rows == after else "before" if rows == before else "OTHER",
    }
    checks = {
        "killed": killed,
        "snapshot_intact": rows in (before, after),
        "published_files_match_evidence": not evidence_check(lake, published.version),
        "latest_files_match_evidence": not evidence_check(lake, latest),
        "parents_chain": parent_chain_ok(lake),
        "unpublished_version_refused": _pinned_unpublished_refused(lake, published.version, latest),
        "staged_files_not_referenced": not (set(orphans) & referenced_files(lake)),
        "quarantine_complete": q_rows is None or q_rows == after_quarantined,
    }
    rerun = Lake.open(lake_dir, clock=CLOCK).ingest(batch)
    lake = Lake.open(lake_dir, clock=CLOCK)
    final_pub = lake.published(TABLE)
    assert final_pub is not None
    checks["rerun_reconciles"] = rerun.accepted + rerun.quarantined == rerun.extracted
    checks["rerun_reaches_reference_state"] = _rows(lake) == after
    checks["batch_applied_once"] = _commits_of(lake, batch_id) == 1 and batch_id in applied_batches(lake)
    checks["rerun_published_latest"] = final_pub.version == lake.latest_version(TABLE)
    checks["quarantine_after_rerun"] = _quarantine_rows(lake, batch_id) == after_quarantined
    how, removed = remove_orphans(Lake.open(lake_dir))  # vacuum on the real clock: file times are real
    checks["orphans_removed"] = not find_orphans(lake)
    checks["orphans_removed_by_vacuum"] = "finder" not in how or not removed
    checks["reads_same_after_cleanup"] = _rows(lake) == after
    checks["files_match_evidence_after_cleanup"] = not evidence_check(lake, final_pub.version)
    return {
        "point": point.name, "step": point.step, "delay_s": point.delay, "observed": observed,
        "rerun": {"duplicate": rerun.duplicate, "version": rerun.version, "attempts": rerun.attempts},
        "cleanup": {"by": how, "removed": removed},
        "checks": checks, "passed": all(checks.values()),
        "child_stderr": proc.stderr.strip().splitlines()[-1:] if not killed else [],
    }


def run_crash_drill(uri: str, *, points: tuple[CrashPoint, ...] = POINTS) -> dict[str, Any]:
    if "://" in uri and not uri.startswith("file://"):
        raise InputError("drill crash needs a local scratch lake (it kills local interpreters)", lake=uri)
    root = prepare_scratch(uri)
    batch = root / "crash-batch.jsonl"
    batch.write_bytes(CRASH_BATCH)
    reference = _base_lake(root / "00-reference")
    before = _rows(reference)
    ref_report = reference.ingest(batch)
    after = _rows(reference)
    fold = _fold_rows([BASE_BATCH, CRASH_BATCH])
    results = [drill_point(root, i, p, batch, before=before, after=after,
                           after_quarantined=ref_report.quarantined)
               for i, p in enumerate(points, start=1)]
    checks = {"reference_equals_fold": after == fold and before != after}
    for r in results:
        label = r["point"] if r["delay_s"] is None else f"{r['point']}@{int(r['delay_s'] * 1000)}ms"
        checks[label] = r["passed"]
    outcomes: dict[str, dict[str, int]] = {}
    for r in results:
        outcomes.setdefault(r["point"], {}).setdefault(r["observed"]["state"], 0)
        outcomes[r["point"]][r["observed"]["state"]] += 1
    return {
        "passed": all(checks.values()), "checks": checks, "points": results, "outcomes": outcomes,
        "reference": {"rows": len(after), "version": ref_report.version, "extracted": ref_report.extracted,
                      "accepted": ref_report.accepted, "quarantined": ref_report.quarantined},
    }
