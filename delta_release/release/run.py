"""`run CONFIG.yaml`: stage ONE candidate of all the sources without committing, run every check on that
staged candidate, then ship (one strict commit per table on the run's parent, then publish) or hold
(discard the staged files: every Delta log stays as it was), and write the packet and the report.
The staging, ship and hold steps are in `candidate.py`."""

from __future__ import annotations

import json
import shutil
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import polars as pl

from .. import __version__
from .. import progress as show
from ..clock import Clock, iso
from ..distributed import check_executor, planner_on
from ..errors import StaleParentError
from ..gateway.catalog import Publication
from ..ingest import applied_batches
from ..lake import Lake
from ..stats import p95
from ..status import LAST_RUN
from ..tables import DEFAULT_TABLE
from .candidate import RunCandidate, hold, ship, stage_run
from .checks import AT_LEAST, AT_MOST, CHECK_RESULT_NAMES, THRESHOLD_CHECKS, CheckResult, RunContext, run_check
from .config import load_release_config
from .counts import run_counts, source_of
from .lakeopen import open_run_lake
from .packet import cost, next_steps, pending_evidence, rollback_plan, write_packet
from .report import render_index, render_report

Progress = Callable[[str], None]


def _quiet(_: str) -> None:
    return None


def _p95(samples: list[float]) -> float:
    return p95(samples)


def planning_times(lake: Lake, days: tuple[int, int], runs: int = 20) -> dict[str, float]:
    """p95 planning time (ms) of the audit query through the gateway: warm cache, and forced refresh."""
    out: dict[str, list[float]] = {"audit query, warm cache": [], "audit query, cache refresh": []}
    part = lake.table_def(DEFAULT_TABLE).partition
    lake.scan(DEFAULT_TABLE).filter(pl.col(part).is_between(*days)).explain()  # warm-up, not measured
    for _ in range(runs):
        for label, refresh in (("audit query, warm cache", False), ("audit query, cache refresh", True)):
            if refresh:
                lake.gateway.cache.clear()
            t0 = time.perf_counter()
            lake.scan(DEFAULT_TABLE).filter(pl.col(part).is_between(*days)).explain()
            out[label].append((time.perf_counter() - t0) * 1000)
    if lake.published("telemetry") is not None:
        hour = lake.table_def("telemetry").partition
        hours = lake.scan("telemetry").select(hour).unique().collect()[hour].to_list()
        if hours:
            label = f"telemetry hour {hours[0]}, warm cache"
            out[label] = []
            for _ in range(runs):
                t0 = time.perf_counter()
                lake.scan("telemetry").filter(pl.col(hour) == hours[0]).explain()
                out[label].append((time.perf_counter() - t0) * 1000)
    return {k: round(_p95(v), 3) for k, v in out.items()}




def run_release(config_path: str, *, lake: str | None = None, clock: Clock | None = None,
                progress: Progress = _quiet, executor: str = "local") -> dict[str, Any]:
    """The release run. `lake` (the CLI's `run --lake`) overrides the config's `lake.uri`. The whole
    config is validated before any work: a bad one raises ConfigError and creates nothing. `executor`
    ("ray": the CLI's `run --executor ray`) stages the sources on a Ray cluster (`stage_run`'s planner);
    the checks, SHIP and HOLD are the same."""
    check_executor(executor)  # an unknown name, or ray without Ray: refused before any work
    cfg = load_release_config(config_path, lake_override=lake)
    total = sum(source.stat().st_size for source in cfg.sources if source.is_file())
    with show.work("release run", total, phases=show.RUN_PHASES):  # bytes of the sources, phase and ETA
        return _run_release(cfg, clock=clock, progress=progress, executor=executor)


@dataclass(slots=True, kw_only=True)
class _Run:
    """One release run's state, from the staged candidate to the decision: what the packet is built from."""

    cfg: Any
    lk: Lake
    run_id: str
    now: datetime
    out_dir: Path
    previous: Publication | None
    staged: RunCandidate
    received: list[tuple[Any, dict[str, Any]]]
    counts: dict[str, Any]
    ctx: RunContext
    results: list[CheckResult] = field(default_factory=list)
    failed: list[str] = field(default_factory=list)
    decision: str = "hold"
    publication: Publication | None = None
    telemetry: list[dict[str, Any]] = field(default_factory=list)
    shipped_version: int | None = None
    stale: dict[str, Any] | None = None
    discarded: dict[str, Any] | None = None

    @property
    def parent(self) -> int:
        return self.staged.parent

    @property
    def scratch(self) -> Path:
        return self.out_dir / "scratch"


def _run_release(cfg: Any, *, clock: Clock | None, progress: Progress, executor: str) -> dict[str, Any]:
    show.note("open the lake")
    lk = open_run_lake(cfg, clock)
    if lk.created:
        progress(f"created a new lake at {lk.storage.root} (lake.create: true)")
    steps = len(cfg.sources) + len(cfg.checks) + 2
    step = 0

    def tick(what: str) -> None:
        nonlocal step
        step += 1
        progress(f"[{step}/{steps}] {what}")

    run = _stage(cfg, lk, tick, executor)
    _check(run, tick, progress)
    _decide(run, tick)
    packet = build_packet(run)
    return write_outputs(run, packet, tick)


def _stage(cfg: Any, lk: Lake, tick: Progress, executor: str) -> _Run:
    """Receive every source (in parts past the part limit) and stage ONE candidate of them on the latest
    version; the checks' context reads that staged candidate."""
    now = lk.clock.now()
    run_id = now.strftime("%Y%m%dT%H%M%SZ") + "-" + uuid.uuid4().hex[:6]
    out_dir = cfg.packet_dir / run_id
    previous = lk.published("orders")
    for source in cfg.sources:
        tick(f"receive {source.name}")
    show.note("receive and stage the candidate")
    planner = None if executor == "local" else planner_on(executor, lk._reopener())
    staged = stage_run(lk, list(cfg.sources), run_id=run_id, planner=planner)  # past the part limit: in parts
    received = [(b, source_of(b, i, n)) for b, (i, n) in zip(staged.batches, staged.where, strict=True)]
    counts = run_counts(received)  # the one source of the packet's counts, tables, charts and thresholds
    ctx = RunContext(config=cfg, lake=lk, scratch=out_dir / "scratch", candidate=staged.snapshot,
                     recorded={f.path: f.sha256 for f in staged.staged.evidence.files if f.sha256},
                     batch_ids=applied_batches(lk, upto=staged.parent) | set(staged.batch_ids),
                     reports=counts["batches"])
    return _Run(cfg=cfg, lk=lk, run_id=run_id, now=now, out_dir=out_dir, previous=previous, staged=staged,
                received=received, counts=counts, ctx=ctx)


def _check(run: _Run, tick: Progress, progress: Progress) -> None:
    """Every configured check on the staged candidate, in order."""
    show.phase("checks")
    for done, name in enumerate(run.cfg.checks):
        tick(f"check {name}")
        show.fraction(done, len(run.cfg.checks))
        show.note(name)
        for r in run_check(name, run.ctx):
            run.results.append(r)
            progress(f"      {'ok  ' if r.passed else 'FAIL'} {r.name}: {r.detail}")
    show.note("")
    run.failed = [r.name for r in run.results if not r.passed]


def _decide(run: _Run, tick: Progress) -> None:
    """Ship (one strict commit on the run's parent, then publish) when every check passed and the parent
    did not move; else hold (the staged files and this run's telemetry uploads discarded)."""
    lk, staged = run.lk, run.staged
    if not run.failed:
        show.phase("commit")
        try:
            run.shipped_version = ship(staged).version
        except StaleParentError as exc:  # the commit refused: nothing of the candidate became visible
            run.stale = {"expected": exc.expected, "found": exc.found}
            run.failed.append("stale_parent")
    elif (latest := lk.latest_version("orders")) != run.parent:  # held anyway: say that it also raced a writer
        run.stale = {"expected": run.parent, "found": latest}
        run.failed.append("stale_parent")
    run.decision = "hold" if run.failed else "ship"
    tick(f"decision: {run.decision}")
    if run.decision == "ship":
        assert run.shipped_version is not None
        show.phase("publish")
        run.publication = lk.publish_version("orders", run.shipped_version, digest=f"release-{run.run_id}",
                                             label=f"release-{run.run_id}")
        run.telemetry = _publish_manifests(lk, run.cfg)
        versions = {b.batch_id: b.report.version for b in staged.applied}  # set by the ship's commit
        for entry in run.counts["batches"]:
            entry["version"] = versions.get(entry["batch_id"], entry["version"])
    else:
        run.discarded = hold(staged)
        run.discarded["telemetry_files"] = _discard_uploads(lk, run.ctx.evidence.get("uploaded", []))


def build_packet(run: _Run) -> dict[str, Any]:
    """The release packet of a decided run (packet_format 1): what was checked, decided and published."""
    cfg, lk, ctx, previous = run.cfg, run.lk, run.ctx, run.previous
    shipped_version, publication = run.shipped_version, run.publication
    candidate = shipped_version if shipped_version is not None else run.parent
    show.phase("report")
    show.note("planning times")
    planning = planning_times(lk, cfg.audit.days) if run.decision == "ship" else {}
    published_now = publication or previous
    reports = [r.to_json() for r in run.staged.reports]
    packet: dict[str, Any] = {
        "packet_format": 1,
        "run_id": run.run_id,
        "created": iso(run.now),
        "tool": {"name": "delta-release", "version": __version__},
        "lake": cfg.lake_uri,
        "config": {"path": str(cfg.path), "sha256": cfg.digest, "lake_from": cfg.lake_from, "checks": cfg.checks},
        "thresholds": _thresholds_json(cfg),
        "lake_created": lk.created,
        "decision": run.decision,
        "failed_checks": run.failed,
        "reasons": [f"{r.name}: {r.detail}" for r in run.results if not r.passed],
        "checks": {r.name: r.to_json() for r in run.results},
        "snapshot": {"table": "orders", "version": shipped_version, "parent": run.parent,
                     "candidate": run.staged.staged.evidence.candidate,
                     "generation": publication.generation if publication else None,
                     "published_version": _version(published_now),
                     "published_generation": None if published_now is None else published_now.generation,
                     "previous": None if previous is None else {"version": previous.version,
                                                                "generation": previous.generation}},
        "telemetry": run.telemetry,
        "discarded": run.discarded,
        "stale_parent": run.stale,
        "schema_versions": sorted({v for r in reports for v in r["schema_versions"]}),
        "files": ctx.evidence.get("files", []),
        "counts": run.counts,
        "drills": ctx.evidence.get("drills", {}),
        "audit": ctx.evidence.get("audit"),
        "freshness": ctx.evidence.get("freshness"),
        "planning_ms": planning,
        "rollback_plan": rollback_plan(lk, lake_uri=cfg.lake_uri, published=published_now,
                                       shipped=run.decision == "ship" and _version(previous) != shipped_version),
        "cost": cost(lk, cfg, candidate),
        "pending": pending_evidence(lk, cfg, run.now),
    }
    packet["next_steps"] = next_steps(packet, cfg)
    return packet


def write_outputs(run: _Run, packet: dict[str, Any], tick: Progress) -> dict[str, Any]:
    """The packet, its HTML report, the packet directory's index and `_release/last_run.json`; the run's
    answer (the CLI's JSON)."""
    show.note("packet and report")
    packet_path, digest = write_packet(packet, run.out_dir)
    report_path = render_report(packet, digest, run.out_dir / "report.html")
    index_path = render_index(run.cfg.packet_dir)
    shutil.rmtree(run.scratch, ignore_errors=True)
    snapshot = {"table": "orders", "version": run.shipped_version, "parent": run.parent,  # as the packet
                "generation": run.publication.generation if run.publication else None}
    summary = {"run_id": run.run_id, "created": iso(run.now), "decision": run.decision, "packet": str(packet_path),
               "report": str(report_path), "packet_sha256": digest, "failed_checks": run.failed,
               "snapshot": snapshot}
    run.lk.storage.write_bytes(LAST_RUN, json.dumps(summary, sort_keys=True).encode())
    tick(f"packet written: {packet_path}")
    results = run.results
    return {"decision": run.decision, "packet": str(packet_path), "packet_sha256": digest,
            "report": str(report_path), "index": str(index_path), "lake": run.cfg.lake_uri, "run_id": run.run_id,
            "snapshot": dict(snapshot), "failed_checks": run.failed, "checks": {r.name: r.passed for r in results},
            "discarded": run.discarded,
            "summary": [{"check": r.name, "passed": r.passed, "observed": r.evidence.get("observed"),
                         "threshold": r.evidence.get("threshold"), "direction": r.evidence.get("direction"),
                         "seconds": round(r.seconds, 3)}
                        for r in results], "lake_created": run.lk.created}


def _thresholds_json(cfg: Any) -> dict[str, Any]:
    t = cfg.thresholds
    return {"rejected": {"per_batch": t.rejected_per_batch, "mostly": t.rejected_mostly,
                         "overall": t.rejected_overall, "by_reason": dict(t.rejected_by_reason)},
            "late_events": {"max_share": t.late_events},
            "stale_events": {"older_than_days": t.stale_days, "max_share": t.stale_events},
            "moved_orders": {"max_share": t.moved_orders},
            "audit": {"days": list(cfg.audit.days), "max_fraction": cfg.audit.max_fraction},
            # how each threshold check compares: it passes when observed <= (or >=) its threshold
            "direction": {name: AT_LEAST if name == "rejected_per_batch" else AT_MOST
                          for name in (*THRESHOLD_CHECKS, "audit_bytes")}}


def _version(pub: Any) -> int | None:
    return None if pub is None else int(pub.version)


def _discard_uploads(lake: Lake, uploaded: list[str]) -> list[str]:
    """On HOLD: delete the telemetry objects this run uploaded that no version of their table references
    (the producer's drop still has them); returns `table:path` of each deleted one."""
    from ..external.manifest import registered_files

    out = []
    by_table: dict[str, list[str]] = {}
    for item in uploaded:
        table, _, path = item.partition(":")
        by_table.setdefault(table, []).append(path)
    known = {t: registered_files(lake, t, paths) for t, paths in by_table.items()}
    for item in uploaded:
        table, _, path = item.partition(":")
        if path not in known[table]:
            lake.table_storage(table).delete(path)
            out.append(item)
    return out


def _publish_manifests(lake: Lake, cfg: Any) -> list[dict[str, Any]]:
    from ..external.publish import publish_manifest
    from .checks import receive_manifest

    out = []
    for path in cfg.manifests:
        report = publish_manifest(lake, receive_manifest(lake, path)).to_json()
        out.append({k: report.get(k) for k in ("ok", "published", "generation", "version", "catalog", "missing",
                                               "unexpected", "size_mismatch", "count_mismatch", "checksum_mismatch")})
    return out


__all__ = ["CHECK_RESULT_NAMES", "run_release"]
