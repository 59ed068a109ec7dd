"""The crash drill: SIGKILL every writer at each of its steps, in a separate interpreter, then check.

The drill is a table (`WRITERS`): writer -> command line -> setup -> crash points -> expected outcome.
Writers: `ingest` (and `ingest-parts`: the same batch as a file over the part limit), `replay` (and
`replay-all`: `replay --all` of that file's parts after a restore, folded into one commit), `erase`,
`rollback --repair-forward`, `vacuum --apply`, telemetry `publish MANIFEST` (files from
`delta_release.external.producer`) and a release `run CONFIG` (its ship). The
writer's generic points (commit/writer.py and stage/: stage.after_first_file, stage.before_sync,
storage.sync.after_files, ingest.after_staging, ingest.after_gate, commit.during, ingest.after_commit,
publish.before_swap, ingest.after_publish) fire in every writer that commits; each command adds its own
(`crash_point(` / `crash_window(` in the package);
`storage.after_temp:<dir>` points kill a write between its temp file (in `_tmp/`) and its rename into
`<dir>`. A point listed here that the code does not declare (another branch adds it) is reported as
`skipped`, never as passed; `declared_points()` reads the package source, and tests/drills/test_crash.py checks
that every point the code declares is in this table.

Every scenario starts from one base lake per writer (copied per point): a base batch, then an erasure of
`ERASED` (so the lake has an erased subject), then the writer's own setup; the killed writer's batch
names `ERASED` in an event and in rejected lines. For each point:

1. a child interpreter runs the command with `DELTA_RELEASE_CRASH_AT=<point>` and is SIGKILLed there;
2. after the kill (a fresh process's view): the published snapshot is intact (it equals the state before
   the command or the state an uninterrupted run reaches; a read refused because a pending erasure makes
   the snapshot unreadable is reported, and the snapshot's rows are checked without the gateway), the
   row state is the one expected at that point, every file the published and the latest version
   reference exists with the size and sha256 of its commit evidence (I7), every commit is on the version
   before it (I6), a committed but unpublished version is refused to pinned readers (I5, I8), staged
   files are referenced by no version, the quarantine of the batch is complete (I1), and NO file under
   the lake outside `_raw/` holds an erased subject's id, except data files of versions that are not
   allowed (checked by reading every file, parquet pages and footers included: drills/scan.py);
3. the same command is rerun (in this process, through the CLI): it succeeds, reaches the state of the
   uninterrupted run (the reference, itself checked against the reference fold of all accepted events
   for the writers that apply batches: I2), applies its batch exactly once, publishes the latest
   version, and the erased-id scan holds again;
4. cleanup: `Lake.vacuum(apply=True, orphan_grace_hours=0)` of the writer's table removes staged files
   of the killed run and data files of versions that are not allowed; then the snapshot reads the same,
   no temp file is left anywhere in the lake, and no file outside `_raw/` holds an erased id at all.

"During the commit" is a watchdog kill inside the delta-rs commit call (the call releases the GIL), so
the drill reports which outcome it observed instead of claiming an instant. "During the catalog update"
is two points: `publish.before_swap`, and `catalog.in_transaction`, a SQLite trace hook the child
installs that kills at the COMMIT of the transaction that inserted a publication.

`run_crash_drill(uri)` runs the full matrix (what `delta-release drill crash` does);
`run_crash_drill(uri, subset=True)` runs `SUBSET` points per writer (the default test).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import polars as pl

from .. import _delta, progress
from ..apply import reference_fold
from ..contract import decode_batch
from ..contract.parts import ENV_MAX_PART
from ..errors import DeltaReleaseError, ErasureExposureError, InputError
from ..faults import CRASH_ENV, DELAY_ENV
from ..lake import Lake
from ..raw import batch_id_of
from ..storage import TEMP_DIR
from ..storage import TEMP_PREFIX as TEMP_NAME_PREFIX
from ..views import current_rows
from .scan import files_holding
from .scratch import prepare_scratch

SQLITE_HOOK = "catalog.in_transaction"
TEMP_PREFIX = "storage.after_temp:"
ERASED = "ord-erased-77"  # erased in every base lake, before the killed command
TARGET = "ord-target-55"  # what the killed `erase` erases
ROLLBACK_ERASED = ("ord-04", "ord-05")  # erased before the killed rollback: it must rewrite days 10 and 11
PACKAGE = Path(__file__).resolve().parent.parent

BEFORE, COMPLETED, OTHER = "before", "completed", "OTHER"
EITHER = frozenset({BEFORE, COMPLETED})


@dataclass(frozen=True, slots=True, kw_only=True)
class CrashPoint:
    name: str  # the value of DELTA_RELEASE_CRASH_AT
    step: str  # what the step is, in words
    delay: float | None = None  # watchdog delay for crash windows
    expect: frozenset[str] = EITHER  # the row states allowed right after the kill

    @property
    def label(self) -> str:
        return self.name if self.delay is None else f"{self.name}@{round(self.delay * 1000)}ms"


def _p(name: str, step: str, expect: frozenset[str] = frozenset({BEFORE}), delay: float | None = None) -> CrashPoint:
    return CrashPoint(name=name, step=step, expect=expect, delay=delay)


# The writer path's points, in the order they fire (commit/writer.py); `expect` as seen by a reader.
def _generic(*, staged: bool, several_files: bool, published: bool = True,
             delays: tuple[float, ...] = (0.003,)) -> tuple[CrashPoint, ...]:
    after = frozenset({COMPLETED}) if published else frozenset({BEFORE})
    points = []
    if staged and several_files:
        points.append(_p("stage.after_first_file", "during staging: after the first of several staged files"))
    if staged:
        # (a kill keeps the page cache: these two check that nothing is visible or committed before the
        # staged files and their folders are durable, and that the rerun completes)
        points += [_p("stage.before_sync", "during staging: every file written, none fsynced yet"),
                   _p("storage.sync.after_files", "during staging: every file fsynced, their folders not yet"),
                   _p("ingest.after_staging", "after staging, before the gate"),
                   _p("ingest.after_gate", "after the gate, before the commit")]
    points += [_p("commit.during", f"during the Delta commit (watchdog at {round(d * 1000)} ms, or at its end)",
                  delay=d) for d in delays]
    points.append(_p("ingest.after_commit", "after the commit, before the catalog update"))
    if published:
        points += [_p("publish.before_swap", "during the catalog update: generation read, swap not done"),
                   _p(SQLITE_HOOK, "during the catalog update: inside the SQLite transaction, INSERT done, "
                                   "COMMIT not")]
    points.append(_p("ingest.after_publish", "after the catalog update, before the command returns", after))
    return tuple(points)


def _split(points: tuple[CrashPoint, ...], name: str = "commit.during") -> int:
    """Where the point `name` first comes in `points` (a writer's own points go before its commit)."""
    return next(i for i, p in enumerate(points) if p.name == name)


# -- batches -------------------------------------------------------------------------------------
def _up(order_id: str, position: int, amount: int, day: int, *, v3: bool = False) -> dict[str, Any]:
    ev: dict[str, Any] = {"schema_version": 3 if v3 else 2, "order_id": order_id, "position": position,
                          "kind": "upsert", "amount_cents": amount, "event_day": day}
    if v3:
        ev["currency"] = "USD"
    return ev


def _jsonl(events: list[dict[str, Any]], *extra: bytes) -> bytes:
    return b"".join(json.dumps(e).encode() + b"\n" for e in events) + b"".join(extra)


BASE_BATCH = _jsonl([_up("ord-01", 1, 1000, 10), _up("ord-02", 2, 2000, 11), _up("ord-03", 3, 3000, 12),
                     _up("ord-04", 4, 4000, 10, v3=True), _up("ord-05", 5, 5000, 11),
                     _up(ERASED, 6, 7700, 12), _up(TARGET, 7, 5500, 13, v3=True)])
# Touches days 10..14 (several staged files): a correction, a delete, a move, new orders, an event of the
# erased subject (blocked), rejected lines naming it (quoted, unquoted, unterminated), and two bad lines.
CRASH_BATCH = _jsonl([
    _up("ord-01", 11, 1111, 10),                                         # correction on day 10
    {"schema_version": 2, "order_id": "ord-02", "position": 12, "kind": "delete"},  # tombstone on day 11
    _up("ord-03", 13, 3333, 14),                                         # moves from day 12 to 14
    _up("ord-06", 14, 6000, 13, v3=True), _up("ord-07", 15, 7000, 10),   # new orders
    _up("ord-04", 3, 9999, 10, v3=True),                                 # lower position: no effect
    _up(ERASED, 18, 7777, 12),                                           # erased subject: blocked
    _up(TARGET, 19, 5555, 13, v3=True),                                  # the subject `erase` kills on
], b'{"schema_version": 2, "order_id": "ord-08", "position": 16\n',
   b'{"schema_version": 2, "order_id": "ord-09", "position": 17, "kind": "upsert", "amount_cents": 73.5,'
   b' "event_day": 10}\n',
   b'{"schema_version": 2, "order_id": "' + ERASED.encode() + b'", "position": 20, "amount_cents": 1.5}\n',
   b'order_id=' + ERASED.encode() + b' position=21\n',
   b'{"schema_version": 2, "order_id": "' + ERASED.encode() + b'\n',
   b'{"schema_version": 3, "order_id": "' + TARGET.encode() + b'", "position": 22, "amount_cents": "5"}\n')
PARTS_LIMIT = 300  # bytes: CRASH_BATCH in 4 parts (the `ingest-parts` writer)
V2_FIXTURE = _jsonl([_up("fx-1", 1, 100, 1)])
V3_FIXTURE = _jsonl([_up("fx-2", 2, 200, 1, v3=True)])


# -- scenes: one writer's inputs and base lake ------------------------------------------------------
@dataclass(slots=True, kw_only=True)
class Scene:
    """Where a writer's drill lives: its inputs (outside every lake) and its base lake."""

    root: Path
    values: dict[str, Any] = field(default_factory=dict)

    @property
    def inputs(self) -> Path:
        return self.root / "inputs"

    @property
    def batch(self) -> Path:
        return self.inputs / "crash-batch.jsonl"


def _base(lake_dir: Path) -> Lake:
    lake = Lake.create(lake_dir)
    lake.ingest(BASE_BATCH)
    lake.erase(ERASED)
    return lake


def _setup_ingest(lake_dir: Path, scene: Scene) -> None:
    _base(lake_dir)


def _setup_replay(lake_dir: Path, scene: Scene) -> None:
    lake = _base(lake_dir)  # the batch was received (raw kept) but never applied: what replay is for
    decoded = decode_batch(CRASH_BATCH)
    lake.raw.put(CRASH_BATCH, extracted=decoded.extracted, schema_versions=decoded.schema_versions,
                 received=lake.clock.now())


def _setup_replay_all(lake_dir: Path, scene: Scene) -> None:
    """The batch applied as a file in parts (several raw batches), then the table restored to the version
    before it: `replay --all` re-applies every applied batch, folded into ONE commit (parts.py)."""
    lake = _base(lake_dir)
    before = lake.latest_version("orders")
    assert before is not None
    path = scene.inputs / "replayed.jsonl"
    path.write_bytes(CRASH_BATCH)
    from ..parts import ingest_file

    assert len(ingest_file(lake, path, max_part=PARTS_LIMIT).parts) > 1
    lake.rollback(before)


def _replay_all_points() -> tuple[CrashPoint, ...]:
    """`replay --all`: every applied raw batch read in place and spilled, one plan a group of buckets at a
    time, one stage, gate and commit, published at once."""
    g = _generic(staged=True, several_files=True)
    return (_p("parts.after_spill", "replay --all: every batch spilled, nothing planned"),
            g[0],
            _p("parts.after_group", "replay --all: the first group of buckets staged, the others not planned"),
            *g[1:3],
            _p("ingest.after_quarantine", "replay --all: staged, gated, every batch's quarantine written"),
            *g[3:])


def _setup_applied(lake_dir: Path, scene: Scene) -> None:
    lake = _base(lake_dir)
    scene.values["before_batch"] = lake.latest_version("orders")
    lake.ingest(CRASH_BATCH)


def _setup_rollback(lake_dir: Path, scene: Scene) -> None:
    """The batch applied, then two orders of the target version erased (days 10 and 11): the rollback
    to the version before the batch exposes them, so --repair-forward rewrites two partitions (staged,
    gated) and re-adds the other files; a plain restore would stage nothing."""
    _setup_applied(lake_dir, scene)
    lake = Lake.open(lake_dir)
    for order_id in ROLLBACK_ERASED:
        lake.erase(order_id)


def _setup_vacuum(lake_dir: Path, scene: Scene) -> None:
    _setup_applied(lake_dir, scene)
    lake = Lake.open(lake_dir)
    table = Path(lake.table_uri("orders"))
    source = sorted(table.glob("event_day=*/*.parquet"))[0]
    orphan = source.parent / "part-killed-writer-0000.parquet"  # a staged file a killed writer left, old
    orphan.write_bytes(source.read_bytes())
    old = time.time() - 3 * 3600
    os.utime(orphan, (old, old))


def _setup_publish(lake_dir: Path, scene: Scene) -> None:
    from ..external.producer import write_fixtures

    manifests = write_fixtures(scene.inputs / "telemetry")
    from ..external.publish import ensure_table

    lake = _base(lake_dir)
    ensure_table(lake, "telemetry")
    target = Path(lake.table_uri("telemetry")) / "hour=09"
    target.mkdir(parents=True, exist_ok=True)
    for generation, manifest in (("telemetry-48", manifests[0]), ("telemetry-49", None)):
        for f in sorted((scene.inputs / "telemetry" / "hour=09").glob(f"{generation}-*.parquet")):
            shutil.copyfile(f, target / f.name)  # the producer's drop
        if manifest is not None:
            _publish(lake, manifest)
    scene.values["manifest"] = manifests[1]  # the corrected generation: replaces the hour's files


def _publish(lake: Lake, manifest: Path) -> None:
    from ..external.manifest import load_manifest
    from ..external.publish import publish_manifest

    report = publish_manifest(lake, load_manifest(manifest, lake.tables))
    if not report.ok:
        raise DeltaReleaseError("drill setup: the telemetry generation did not publish")


def _setup_run(lake_dir: Path, scene: Scene) -> None:
    _base(lake_dir)
    for name, data in (("v2.jsonl", V2_FIXTURE), ("v3.jsonl", V3_FIXTURE)):
        (scene.inputs / name).write_bytes(data)


def _run_config(lake_dir: Path, scene: Scene) -> Path:
    cfg = {"lake": {"uri": str(lake_dir), "storage_options": {}},
           "sources": {"batches": [str(scene.batch)], "manifests": []},
           "release": {"window_days": 7},
           "retention": {"raw_days": 30, "backup_days": 35, "retained_snapshots": 5},
           "checks": {"schema_fixtures": {"v2": str(scene.inputs / "v2.jsonl"), "v3": str(scene.inputs / "v3.jsonl")},
                      "amount_unit": True, "reconciliation": True, "checksums": True, "pinned_query": False,
                      "conflict_drill": False, "erasure_drill": False, "freshness_gate": False,
                      "audit": {"days": "10:14", "max_fraction": 1.0},
                      # the drill's batch is hostile on purpose (rejected lines, late events, a moved order):
                      # the release thresholds would hold it, and this drill is about kills, not thresholds
                      "thresholds": False},
           "packet": {"directory": str(lake_dir.parent / "packets")}}
    path = lake_dir.parent / "release.yaml"
    path.write_text(json.dumps(cfg), encoding="utf-8")  # JSON is YAML
    return path


# -- the table -----------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True, kw_only=True)
class Writer:
    name: str
    summary: str
    table: str  # the table whose published snapshot the checks watch
    setup: Callable[[Path, Scene], None]  # builds the base lake (in this process)
    argv: Callable[[Path, Scene], list[str]]  # the command line after `--lake LAKE`
    points: tuple[CrashPoint, ...]
    subset: tuple[str, ...]  # labels the default test runs
    batch: bool = False  # applies CRASH_BATCH: applied once, quarantine complete, reference fold
    file_set: bool = False  # the outcome includes the table's file set (vacuum)
    erases: bool = False  # the command erases TARGET
    catalog: bool = False  # the outcome includes which catalog a reader resolves and its publications (migrate)
    env: tuple[tuple[str, str], ...] = ()  # more environment for every run of the command (killed, rerun, reference)


def _ingest_points() -> tuple[CrashPoint, ...]:
    g = _generic(staged=True, several_files=True, delays=(0.0, 0.003, 0.02))
    return (_p("ingest.after_raw", "after the raw write, before the quarantine"),
            _p(TEMP_PREFIX + "_raw", "raw batch written to its temp file, not renamed"),
            *g[:_split(g)],
            _p("ingest.after_quarantine", "after staging, the gate and the quarantine write"),
            _p(TEMP_PREFIX + "_quarantine", "quarantine ledger written to its temp file, not renamed"),
            _p(TEMP_PREFIX + "_delta_log", "the commit's log entry written to its temp file, not linked"),
            *g[_split(g):])


def _parts_points() -> tuple[CrashPoint, ...]:
    """The batch as a file over the part limit (parts.py): every part decoded, kept raw and spilled, then
    one plan over all parts (a group of buckets at a time), one stage, gate and commit."""
    g = _generic(staged=True, several_files=True)
    return (_p("ingest.after_raw", "the first part's raw copy kept, nothing spilled"),
            _p("parts.after_spill", "every part kept raw and spilled, nothing planned"),
            g[0],
            _p("parts.after_group", "the first group of buckets staged, the others not planned"),
            *g[1:_split(g)],
            _p("ingest.after_quarantine", "after staging, the gate and every part's quarantine write"),
            # the file's commit is deferred: write()'s `ingest.after_publish` fires before the one publication
            *g[_split(g):-1],
            _p("ingest.after_publish", "after the file's deferred commit, before its one publication"))


def _run_points() -> tuple[CrashPoint, ...]:
    """The run receives its batches (spilled: parts.py), stages ONE candidate (stage(): the writer's staging
    and gate points), checks it, and only on SHIP commits (commit(): `commit.during`) and publishes; the writer's
    `ingest.after_commit`/`after_publish` belong to `write()` and never fire in a run. A reader sees the
    state before the run at every point: nothing is published until the catalog moves."""
    return (_p(TEMP_PREFIX + "_raw", "run: a batch's raw copy written to its temp file, not renamed"),
            _p("ingest.after_raw", "run: a batch's raw copy kept, nothing staged"),
            _p("parts.after_spill", "run: every batch kept raw and spilled, nothing planned"),
            _p("ingest.after_staging", "run: the candidate staged, not gated"),
            _p("ingest.after_gate", "run: the candidate gated, its quarantine not written"),
            _p(TEMP_PREFIX + "_quarantine", "run: a quarantine ledger in its temp file, not renamed"),
            _p("ingest.after_quarantine", "run: the candidate's quarantine ledgers written, checks not run"),
            _p("run.after_stage", "run: the candidate of all batches staged and gated, checks not run"),
            _p("run.before_ship_commit", "run: SHIP decided, its commit not made"),
            _p("commit.during", "run: during the ship's Delta commit (watchdog at 3 ms)", delay=0.003),
            _p("run.after_ship_commit", "run: the ship commit landed, not published"),
            _p("publish.before_swap", "run: SHIP, generation read, swap not done"),
            _p(SQLITE_HOOK, "run: SHIP, inside the SQLite publish transaction"))


def _setup_migrate(lake_dir: Path, scene: Scene) -> None:
    _base(lake_dir).ingest(CRASH_BATCH)  # a SQLite lake (the local default) with four publications


WRITERS: tuple[Writer, ...] = (
    Writer(name="ingest", summary="ingest a batch", table="orders", setup=_setup_ingest, batch=True,
           argv=lambda lake, s: ["ingest", str(s.batch)], points=_ingest_points(),
           subset=("stage.after_first_file", SQLITE_HOOK, TEMP_PREFIX + "_quarantine")),
    Writer(name="ingest-parts", summary="ingest the batch as a file over the part limit (7 parts)",
           table="orders", setup=_setup_ingest, argv=lambda lake, s: ["ingest", str(s.batch)],
           points=_parts_points(), subset=("parts.after_spill", "parts.after_group"),
           env=((ENV_MAX_PART, str(PARTS_LIMIT)),)),
    Writer(name="replay", summary="replay a received, unapplied batch", table="orders", setup=_setup_replay,
           batch=True, argv=lambda lake, s: ["replay", batch_id_of(CRASH_BATCH)],
           points=(_p("ingest.after_raw", "after the raw batch is re-read and kept"),
                   *(g := _generic(staged=True, several_files=True))[:_split(g)],
                   _p("ingest.after_quarantine", "after the quarantine write"),
                   *g[_split(g):]),
           subset=("ingest.after_quarantine",)),
    Writer(name="erase", summary=f"erase {TARGET}", table="orders", setup=_setup_applied, erases=True,
           argv=lambda lake, s: ["erase", TARGET],
           points=(_p("erase.after_ledger", "the pending ledger entry written, nothing committed"),
                   _p(TEMP_PREFIX + "_erasure", "the ledger entry written to its temp file, not renamed"),
                   *_generic(staged=True, several_files=False)),
           subset=("ingest.after_commit", "erase.after_ledger")),
    Writer(name="rollback", summary="rollback --repair-forward to the version before the batch (two of its"
           " orders erased since)", table="orders", setup=_setup_rollback,
           argv=lambda lake, s: ["rollback", "--to", str(s.values["before_batch"]), "--repair-forward"],
           points=_generic(staged=True, several_files=True), subset=("commit.during@3ms",)),
    Writer(name="vacuum", summary="vacuum --apply (erased-subject files and an old orphan)", table="orders",
           setup=_setup_vacuum, file_set=True, argv=lambda lake, s: ["vacuum", "--apply"],
           points=(_p("vacuum.after_first_remove", "after the first of several file removals", EITHER),),
           subset=("vacuum.after_first_remove",)),
    Writer(name="publish", summary="telemetry publish of a corrected generation", table="telemetry",
           setup=_setup_publish, argv=lambda lake, s: ["publish", str(s.values["manifest"])],
           points=_generic(staged=False, several_files=False), subset=("publish.before_swap",)),
    Writer(name="run", summary="a release run (ship)", table="orders", setup=_setup_run, batch=True,
           argv=lambda lake, s: ["run", str(_run_config(lake, s))], points=_run_points(),
           subset=("run.after_stage", "run.after_ship_commit")),
    Writer(name="migrate", summary="catalog migrate (SQLite -> lake catalog)", table="orders",
           setup=_setup_migrate, catalog=True, argv=lambda lake, s: ["catalog", "migrate"],
           points=(_p("migrate.after_table", "the first table record copied, no publication"),
                   _p("migrate.after_publication", "the first publication copied, the rest not"),
                   _p(TEMP_PREFIX + "_catalog", "the first catalog record written to its temp file, not linked"),
                   _p("migrate.before_marker", "every publication copied and verified, format.json not written")),
           subset=("migrate.after_publication",)),
    Writer(name="replay-all", summary="replay --all after a restore (the batch's parts, one commit)",
           table="orders", setup=_setup_replay_all, argv=lambda lake, s: ["replay", "--all"],
           points=_replay_all_points(), subset=("parts.after_spill", "parts.after_group")),
)


# -- which points the code declares ----------------------------------------------------------------
_DECLARED = re.compile(r"""crash_(?:point|window)\(\s*["']([^"']+)["']\s*(\+)?""")


def declared_points(package: Path = PACKAGE) -> set[str]:
    """Every crash point the package's code names (`name:*` for a name built at run time, e.g. the temp
    file windows `storage.after_temp:*`), plus the SQLite hook this drill installs itself."""
    out = {SQLITE_HOOK}
    for path in package.rglob("*.py"):
        if path.name == "faults.py":
            continue
        for m in _DECLARED.finditer(path.read_text(encoding="utf-8")):
            out.add(m.group(1) + "*" if m.group(2) else m.group(1))
    return out


def is_declared(name: str, declared: set[str]) -> bool:
    return name in declared or any(d.endswith("*") and name.startswith(d[:-1]) for d in declared)


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


def run_child(lake_dir: Path, argv: list[str], point: CrashPoint, *, extra: dict[str, str] | None = None
              ) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, **(extra or {}), CRASH_ENV: point.name}
    env.pop(DELAY_ENV, None)
    if point.delay is not None:
        env[DELAY_ENV] = str(point.delay)
    code = ("import sys; from delta_release.drills.crash import child_setup; child_setup(); "
            "from delta_release.cli.main import cli; cli(args=sys.argv[1:], prog_name='delta-release')")
    return subprocess.run([sys.executable, "-c", code, "--lake", str(lake_dir), *argv, "--json"],
                          env=env, capture_output=True, text=True, timeout=300, check=False)


def run_cli(lake_dir: Path, argv: list[str], *, extra: dict[str, str] | None = None) -> tuple[int, dict[str, Any]]:
    """Run a command as a user would, in its own interpreter (the reference run and the rerun). The drill
    sits beside the CLI, not above it: it never imports it."""
    proc = subprocess.run([sys.executable, "-m", "delta_release", "--lake", str(lake_dir), *argv, "--json"],
                          capture_output=True, text=True, timeout=300, check=False,
                          env={**os.environ, **(extra or {})} if extra else None)
    try:
        out = json.loads(proc.stdout.strip().splitlines()[-1]) if proc.stdout.strip() else {}
    except (json.JSONDecodeError, IndexError):
        out = {}
    if proc.returncode == 1 and "error" not in out:
        out = {"error": {"type": "internal", "stderr": proc.stderr.strip().splitlines()[-1:]}}
    return proc.returncode, out


# -- observation ----------------------------------------------------------------------------------
def _sorted_rows(df: pl.DataFrame) -> list[tuple[Any, ...]]:
    cols = sorted(df.columns)
    return sorted((tuple(r[c] for c in cols) for r in df.to_dicts()), key=repr)


def published_rows(lake: Lake, table: str) -> tuple[list[tuple[Any, ...]] | None, bool]:
    """(rows of the published snapshot, whether the gateway refused the read). A refused read (a pending
    erasure makes the version unreadable) is re-read from the Delta log, to check the snapshot itself."""
    pub = lake.published(table)
    if pub is None or lake.catalog.table(table) is None:
        return None, False
    try:
        return _sorted_rows(lake.read(table)), False
    except ErasureExposureError:
        lf = current_rows(_delta.scan(lake.table_uri(table), lake.options, pub.version), lake.table_def(table))
        return _sorted_rows(lf.collect()), True


def data_files(lake_dir: Path, table: str) -> list[str]:
    root = lake_dir / table
    return sorted(p.relative_to(root).as_posix() for p in root.rglob("*")
                  if p.is_file() and not p.relative_to(root).as_posix().startswith("_delta_log/"))


def outcome(lake_dir: Path, writer: Writer) -> dict[str, Any]:
    """What a reader sees after the command: the published rows (and the file set, for vacuum)."""
    lake = Lake.open(lake_dir)
    rows, refused = published_rows(lake, writer.table)
    out: dict[str, Any] = {"rows": rows, "refused": refused}
    if writer.file_set:
        out["files"] = data_files(lake_dir, writer.table)
    if writer.catalog:
        out["catalog"] = type(lake.catalog).__name__
        out["publications"] = [(p.generation, p.version, p.digest) for p in lake.catalog.publications(writer.table)]
    return out


def _versions(lake: Lake, table: str) -> int:
    if lake.catalog.table(table) is None:
        return -1
    latest = lake.latest_version(table)
    return -1 if latest is None else latest


def referenced_files(lake: Lake, table: str = "orders") -> set[str]:
    """Every data file added by any version of the table's log."""
    uri = lake.table_uri(table)
    seen: set[str] = set()
    for v in range(_versions(lake, table) + 1):
        seen.update(e.path for e in _delta.file_entries(uri, lake.options, v))
    return seen


def find_orphans(lake: Lake, table: str = "orders") -> list[str]:
    """Data files under the table root that no version of its log references (staged, never committed)."""
    if _versions(lake, table) < 0:
        return []
    store = lake.table_storage(table)
    on_disk = {o.path for o in store.list() if not o.path.startswith("_delta_log/")}
    return sorted(on_disk - referenced_files(lake, table))


def remove_orphans(lake: Lake, table: str = "orders") -> tuple[str, list[str]]:
    """`Lake.vacuum(apply=True, orphan_grace_hours=0)` (no writer is in flight here): staged files of
    killed runs and data files of versions that are not allowed. Files it leaves that no version
    references are removed by this drill's finder, and the `orphans_removed_by_vacuum` check says so."""
    orphans = find_orphans(lake, table)
    how = "nothing to remove"
    if _versions(lake, table) >= 0:
        lake.vacuum(table, apply=True, orphan_grace_hours=0)
        how = "Lake.vacuum"
    left = find_orphans(lake, table)
    store = lake.table_storage(table) if left else None
    for path in left:
        assert store is not None
        store.delete(path)
    if left:
        how += " + drill orphan finder"
    return how, orphans


def evidence_check(lake: Lake, version: int, table: str = "orders") -> list[str]:
    """I7: problems with the files `version` references (missing, size or sha256 differing from evidence)."""
    if version < 0 or _versions(lake, table) < 0:
        return []
    uri = lake.table_uri(table)
    recorded: dict[str, dict[str, Any]] = {}
    for entry in _delta.history(uri, lake.options):
        for f in (entry.evidence or {}).get("files", []):
            recorded[f["path"]] = f
    store = lake.table_storage(table)
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


def parent_chain_ok(lake: Lake, table: str = "orders") -> bool:
    """I6: every commit of ours was made on the version right before it."""
    if _versions(lake, table) < 0:
        return True
    for entry in _delta.history(lake.table_uri(table), lake.options):
        ev = entry.evidence
        if ev is not None and "parent" in ev and ev["parent"] != entry.version - 1:
            return False
    return True


def _pinned_unpublished_refused(lake: Lake, table: str) -> bool:
    pub = lake.published(table)
    latest = _versions(lake, table)
    if pub is None or latest <= pub.version:
        return True
    try:
        lake.read(table, version=latest)
    except DeltaReleaseError:
        return True
    return False


def _commits_of(lake: Lake, batch_id: str) -> int:
    return sum(batch_id in ((e.evidence or {}).get("batch_ids", []))
               for e in _delta.history(lake.table_uri("orders"), lake.options))


def _quarantine_rows(lake: Lake, batch_id: str) -> int | None:
    return lake.quarantine.rows(batch_id).height if lake.quarantine.has(batch_id) else None


def erased_ids(lake: Lake) -> list[str]:
    """The drill's subjects that the ledger names (a pending entry counts: the subject is erased)."""
    subjects = {e.subject for e in lake.erasures.entries()}
    return [s for s in (ERASED, TARGET) if lake.erasures.subject_key(s) in subjects]


def disallowed_files(lake: Lake, table: str = "orders") -> set[str]:
    """Data files referenced by a version that may not be read (it holds an erased subject)."""
    from ..erasure.permission import snapshot_allowed

    uri = lake.table_uri(table)
    out: set[str] = set()
    for v in range(_versions(lake, table) + 1):
        if not snapshot_allowed(lake, table, v):
            out.update(e.path for e in _delta.file_entries(uri, lake.options, v))
    return out


def _subject_label(order_id: str) -> str:
    """The drill's name for an erased id (ids of erased subjects are never printed)."""
    if order_id in ROLLBACK_ERASED:
        return f"ROLLBACK_ERASED[{ROLLBACK_ERASED.index(order_id)}]"
    return "ERASED" if order_id == ERASED else "TARGET"


def erased_id_holders(lake_dir: Path, *, allow_disallowed: bool,
                      raw_copies: frozenset[str] = frozenset()) -> dict[str, list[str]]:
    """id -> files under the lake outside `_raw/` holding it (all of them read), minus, when
    `allow_disallowed`, data files of versions that are not allowed (vacuum removes those), and minus
    temp files in `_tmp/` that are the copy of a raw batch in `raw_copies` (batch ids): a raw batch's
    bytes on their way to `_raw/<sha256>.jsonl`, written by a copy killed before its link."""
    lake = Lake.open(lake_dir)
    skip = {f"orders/{p}" for p in disallowed_files(lake)} if allow_disallowed else set()

    def raw_copy(rel: str) -> bool:
        return (bool(raw_copies) and rel.startswith(f"{TEMP_DIR}/{TEMP_NAME_PREFIX}")
                and batch_id_of((lake_dir / rel).read_bytes()) in raw_copies)

    out = {}
    for subject in erased_ids(lake):
        held = [p for p in files_holding(lake_dir, subject, skip=("_raw/",)) if p not in skip and not raw_copy(p)]
        if held:
            out[subject] = held
    return out


def temp_files(lake_dir: Path) -> list[str]:
    """Temp files left anywhere under the lake (ours `.tmp-*`, delta-rs's `*.tmp`)."""
    return sorted(p.relative_to(lake_dir).as_posix() for p in lake_dir.rglob("*")
                  if p.is_file() and (p.name.startswith(".tmp") or p.name.endswith(".tmp")))


# -- the drill --------------------------------------------------------------------------------------
def _state(observed: dict[str, Any], before: dict[str, Any], after: dict[str, Any]) -> str:
    rows = observed["rows"]
    if rows == before["rows"]:
        return BEFORE
    return COMPLETED if rows == after["rows"] else OTHER


def _rerun_ok(writer: Writer, code: int, out: dict[str, Any]) -> bool:
    if writer.name == "run":
        return code == 0 and out.get("decision") == "ship"
    return code == 0 and "error" not in out


def drill_point(scene: Scene, writer: Writer, index: int, point: CrashPoint, *, base: Path,
                before: dict[str, Any], after: dict[str, Any], ref_quarantined: int | None) -> dict[str, Any]:
    lake_dir = scene.root / f"{index:02d}-{re.sub(r'[^A-Za-z0-9]+', '-', point.label)}" / "lake"
    shutil.copytree(base, lake_dir)
    argv = writer.argv(lake_dir, scene)
    started = time.perf_counter()
    proc = run_child(lake_dir, argv, point, extra=dict(writer.env))
    killed = proc.returncode == -signal.SIGKILL
    table = writer.table
    batch_id = batch_id_of(CRASH_BATCH)

    lake = Lake.open(lake_dir)  # a fresh process's view; SQLite rolls back a hot journal here
    seen = outcome(lake_dir, writer)
    state = _state(seen, before, after)
    pub = lake.published(table)
    pub_version = -1 if pub is None else pub.version
    latest = _versions(lake, table)
    orphans = find_orphans(lake, table)
    holders = erased_id_holders(lake_dir, allow_disallowed=True, raw_copies=frozenset({batch_id}))
    q_rows = _quarantine_rows(lake, batch_id) if writer.batch else None
    observed = {
        "returncode": proc.returncode, "state": state, "read_refused": seen["refused"],
        "published_version": pub_version, "latest_version": latest, "committed": latest > pub_version,
        "staged_orphans": len(orphans), "temp_files": temp_files(lake_dir),
        "quarantine_written": q_rows is not None,
        "erased_ids_outside_raw": {_subject_label(k): v for k, v in holders.items()},
    }
    checks = {
        "killed": killed,
        "snapshot_intact": seen["rows"] == before["rows"] or seen["rows"] == after["rows"],
        "catalog_whole": not writer.catalog or seen in (before, after),  # never a half-copied catalog
        "expected_state": state in point.expect,
        "published_files_match_evidence": not evidence_check(lake, pub_version, table),
        "latest_files_match_evidence": not evidence_check(lake, latest, table),
        "parents_chain": parent_chain_ok(lake, table),
        "unpublished_version_refused": _pinned_unpublished_refused(lake, table),
        "staged_files_not_referenced": not (set(orphans) & referenced_files(lake, table)) if latest >= 0 else True,
        "erased_ids_only_in_raw_or_disallowed": not holders,
    }
    if writer.batch:
        checks["quarantine_complete"] = q_rows is None or q_rows == ref_quarantined

    code, out = run_cli(lake_dir, argv, extra=dict(writer.env))
    lake = Lake.open(lake_dir)
    final = outcome(lake_dir, writer)
    pub = lake.published(table)
    checks["rerun_succeeds"] = _rerun_ok(writer, code, out)
    checks["rerun_reaches_reference_state"] = final == after
    checks["rerun_published_latest"] = pub is not None and pub.version == _versions(lake, table)
    if writer.batch:
        checks["batch_applied_once"] = _commits_of(lake, batch_id) == 1
        checks["quarantine_after_rerun"] = _quarantine_rows(lake, batch_id) == ref_quarantined
    rerun_holders = erased_id_holders(lake_dir, allow_disallowed=True)
    checks["erased_ids_only_in_raw_or_disallowed_after_rerun"] = not rerun_holders

    how, removed = remove_orphans(Lake.open(lake_dir), table)
    if table != "orders":  # data files of erased subjects' versions live in orders
        Lake.open(lake_dir).vacuum("orders", apply=True, orphan_grace_hours=0)
    lake = Lake.open(lake_dir)
    pub = lake.published(table)
    left_temp = temp_files(lake_dir)
    clean_holders = erased_id_holders(lake_dir, allow_disallowed=False)
    checks["orphans_removed"] = not find_orphans(lake, table)
    checks["orphans_removed_by_vacuum"] = "finder" not in how
    checks["reads_same_after_cleanup"] = outcome(lake_dir, writer)["rows"] == after["rows"]
    checks["files_match_evidence_after_cleanup"] = not evidence_check(lake, -1 if pub is None else pub.version, table)
    checks["no_temp_files_after_cleanup"] = not left_temp
    checks["erased_ids_only_in_raw_after_cleanup"] = not clean_holders
    return {
        "writer": writer.name, "point": point.name, "label": point.label, "step": point.step,
        "delay_s": point.delay, "expect": sorted(point.expect), "observed": observed,
        "rerun": {"exit_code": code, "error": (out.get("error") or {}).get("type")},
        "cleanup": {"by": how, "removed": removed, "temp_files_left": left_temp,
                    "erased_ids_outside_raw": {_subject_label(k): v for k, v in clean_holders.items()}},
        "checks": checks, "passed": all(checks.values()), "seconds": round(time.perf_counter() - started, 2),
        "child_stderr": proc.stderr.strip().splitlines()[-1:] if not killed else [],
    }


def _fold_rows(lake: Lake) -> list[tuple[Any, ...]]:
    """The reference fold of every accepted event of the base and crash batches, erased subjects out."""
    events: list[dict[str, Any]] = []
    for data in (BASE_BATCH, CRASH_BATCH):
        events += decode_batch(data).events.to_dicts()
    erased = set(erased_ids(lake))
    folded = reference_fold([e for e in events if e["order_id"] not in erased])
    df = pl.DataFrame([{"order_id": k, **{c: v[c] for c in ("amount_cents", "currency", "event_day", "position")}}
                       for k, v in folded.items()])
    return _sorted_rows(df)


def drill_writer(root: Path, writer: Writer, *, labels: set[str] | None, declared: set[str]) -> dict[str, Any]:
    scene = Scene(root=root / writer.name)
    scene.inputs.mkdir(parents=True, exist_ok=True)
    scene.batch.write_bytes(CRASH_BATCH)
    base = scene.root / "base" / "lake"
    writer.setup(base, scene)
    before = outcome(base, writer)
    ref_dir = scene.root / "reference" / "lake"
    shutil.copytree(base, ref_dir)
    code, out = run_cli(ref_dir, writer.argv(ref_dir, scene), extra=dict(writer.env))
    after = outcome(ref_dir, writer)
    ref_lake = Lake.open(ref_dir)
    checks = {"reference_run_succeeds": _rerun_ok(writer, code, out), "reference_changes_state": after != before}
    ref_quarantined = None
    if writer.batch:
        ref_quarantined = _quarantine_rows(ref_lake, batch_id_of(CRASH_BATCH))
        checks["reference_equals_fold"] = after["rows"] == _fold_rows(ref_lake)
    progress.advance(1)  # the set-up and reference run: one step of the drill's bar
    points, skipped = [], []
    chosen = chosen_points(writer, labels, declared)
    for i, point in enumerate(writer.points, start=1):
        if labels is not None and point.label not in labels:
            continue
        if point not in chosen:
            skipped.append({"label": point.label, "step": point.step, "why": "not declared by this build's code"})
            continue
        progress.note(f"{writer.name}: kill {chosen.index(point) + 1}/{len(chosen)} at {point.label}")
        result = drill_point(scene, writer, i, point, base=base, before=before, after=after,
                             ref_quarantined=ref_quarantined)
        progress.advance(1)
        points.append(result)
        checks[point.label] = result["passed"]
    shutil.rmtree(base.parent, ignore_errors=True)
    return {"writer": writer.name, "summary": writer.summary, "table": writer.table,
            "command": ["delta-release", "--lake", "LAKE", *writer.argv(ref_dir, scene)],
            "passed": all(checks.values()), "checks": checks, "points": points, "skipped": skipped,
            "reference": {"exit_code": code, "rows": None if after["rows"] is None else len(after["rows"])}}


SUBSET = {w.name: w.subset for w in WRITERS}


def chosen_points(writer: Writer, labels: set[str] | None, declared: set[str]) -> list[CrashPoint]:
    """The points of `writer` the drill kills at: those in `labels` (all when None) the code declares."""
    return [p for p in writer.points if (labels is None or p.label in labels) and is_declared(p.name, declared)]


def writer_names(text: str) -> tuple[str, ...]:
    """`ingest,erase` -> ("ingest", "erase"); an unknown name is an InputError listing the valid ones."""
    names = tuple(dict.fromkeys(n.strip() for n in text.split(",") if n.strip()))
    valid = [w.name for w in WRITERS]
    unknown = [n for n in names if n not in valid]
    if unknown or not names:
        raise InputError(f"drill crash --writers: unknown writer(s) {', '.join(unknown) or '(none given)'}; valid:"
                         f" {', '.join(valid)} (comma-separated)", argument="--writers", value=text)
    return names


def run_crash_drill(uri: str, *, writers: tuple[str, ...] | None = None, subset: bool = False,
                    labels: dict[str, set[str]] | None = None) -> dict[str, Any]:
    """The full matrix (every writer, every point its code declares), or `subset=True`: `SUBSET`."""
    if "://" in uri and not uri.startswith("file://"):
        raise InputError("drill crash needs a local scratch lake (it kills local interpreters)", lake=uri)
    if writers is not None:
        writer_names(",".join(writers) or ",")  # an unknown name: exit 2 naming the valid ones
    started = time.perf_counter()
    root = prepare_scratch(uri)
    declared = declared_points()
    results = []
    todo = [(w, (labels or {}).get(w.name) or (set(w.subset) if subset else None)) for w in WRITERS
            if writers is None or w.name in writers]
    steps = sum(1 + len(chosen_points(w, chosen, declared)) for w, chosen in todo)  # set-up + each kill
    with progress.work("drill crash", steps, unit="steps"):
        for n, (writer, chosen) in enumerate(todo, start=1):
            progress.note(f"{writer.name} ({n}/{len(todo)}): set-up and reference run")
            results.append(drill_writer(root, writer, labels=chosen, declared=declared))
    covered = {p.name for w in WRITERS for p in w.points}
    uncovered = sorted(d for d in declared if not any(is_declared(c, {d}) for c in covered))
    checks: dict[str, bool] = {"every_declared_point_in_matrix": not uncovered}
    for r in results:
        checks.update({f"{r['writer']}:{k}": v for k, v in r["checks"].items()})
    matrix = {r["writer"]: [p["label"] for p in r["points"]] for r in results}
    return {
        "drill": "crash", "lake": str(root), "passed": all(checks.values()), "checks": checks,
        "matrix": matrix, "kills": sum(len(v) for v in matrix.values()),
        "skipped": {r["writer"]: [s["label"] for s in r["skipped"]] for r in results if r["skipped"]},
        "uncovered_points": uncovered, "subset": subset, "seconds": round(time.perf_counter() - started, 1),
        "writers": results,
    }
