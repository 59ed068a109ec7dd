"""`run CONFIG.yaml`: ingest the sources without publishing, run every check on the candidate snapshot,
then ship (publish the generation) or hold (publish nothing), and write the packet and the report."""

from __future__ import annotations

import shutil
import time
import uuid
from collections.abc import Callable
from typing import Any

import polars as pl

from ..clock import Clock, iso
from ..lake import Lake
from ..stats import p95
from .checks import CHECK_RESULT_NAMES, RunContext, run_check
from .config import load_release_config
from .lakeopen import open_run_lake
from .packet import cost, pending_evidence, rollback_plan, write_packet
from .report import render_report

Progress = Callable[[str], None]


def _quiet(_: str) -> None:
    return None


def _p95(samples: list[float]) -> float:
    return p95(samples)


def planning_times(lake: Lake, days: tuple[int, int], runs: int = 20) -> dict[str, float]:
    """p95 planning time (ms) of the audit query through the gateway: warm cache, and forced refresh."""
    out: dict[str, list[float]] = {"audit query, warm cache": [], "audit query, cache refresh": []}
    lake.scan("orders").filter(pl.col("event_day").is_between(*days)).explain()  # warm-up, not measured
    for _ in range(runs):
        for label, refresh in (("audit query, warm cache", False), ("audit query, cache refresh", True)):
            if refresh:
                lake.gateway.cache.clear()
            t0 = time.perf_counter()
            lake.scan("orders").filter(pl.col("event_day").is_between(*days)).explain()
            out[label].append((time.perf_counter() - t0) * 1000)
    if lake.published("telemetry") is not None:
        hours = lake.scan("telemetry").select("hour").unique().collect()["hour"].to_list()
        if hours:
            label = f"telemetry hour {hours[0]}, warm cache"
            out[label] = []
            for _ in range(runs):
                t0 = time.perf_counter()
                lake.scan("telemetry").filter(pl.col("hour") == hours[0]).explain()
                out[label].append((time.perf_counter() - t0) * 1000)
    return {k: round(_p95(v), 3) for k, v in out.items()}


def run_release(config_path: str, *, clock: Clock | None = None, progress: Progress = _quiet) -> dict[str, Any]:
    cfg = load_release_config(config_path)
    lake = open_run_lake(cfg, clock)
    if lake.created:
        progress(f"created a new lake at {lake.storage.root} (lake.create: true)")
    now = lake.clock.now()
    run_id = now.strftime("%Y%m%dT%H%M%SZ") + "-" + uuid.uuid4().hex[:6]
    out_dir = cfg.packet_dir / run_id
    scratch = out_dir / "scratch"
    previous = lake.published("orders")
    steps = len(cfg.sources) + len(cfg.checks) + 2
    step = 0

    def tick(what: str) -> None:
        nonlocal step
        step += 1
        progress(f"[{step}/{steps}] {what}")

    reports: list[dict[str, Any]] = []
    for source in cfg.sources:
        tick(f"ingest {source.name}")
        reports.append(lake.ingest(source, publish=False).to_json())
    candidate = lake.latest_version("orders")
    assert candidate is not None
    ctx = RunContext(config=cfg, lake=lake, scratch=scratch, candidate_version=candidate, reports=reports)
    results = []
    for name in cfg.checks:
        tick(f"check {name}")
        for r in run_check(name, ctx):
            results.append(r)
            progress(f"      {'ok  ' if r.passed else 'FAIL'} {r.name}: {r.detail}")
    failed = [r.name for r in results if not r.passed]
    decision = "hold" if failed else "ship"
    tick(f"decision: {decision}")
    publication = None
    telemetry = []
    if decision == "ship":
        publication = lake.publish_version("orders", candidate, digest=f"release-{run_id}", label=f"release-{run_id}")
        telemetry = _publish_manifests(lake, cfg)
    planning = planning_times(lake, cfg.audit.days) if decision == "ship" else {}
    by_reason: dict[str, int] = {}
    for rep in reports:
        for k, v in rep["reasons"].items():
            by_reason[k] = by_reason.get(k, 0) + v
    packet: dict[str, Any] = {
        "packet_format": 1,
        "run_id": run_id,
        "created": iso(now),
        "config": {"path": str(cfg.path), "checks": cfg.checks},
        "lake_created": lake.created,
        "decision": decision,
        "failed_checks": failed,
        "checks": {r.name: r.to_json() for r in results},
        "snapshot": {"table": "orders", "version": candidate,
                     "generation": publication.generation if publication else None,
                     "published_version": _version(publication or previous),
                     "previous": None if previous is None else {"version": previous.version,
                                                                "generation": previous.generation}},
        "telemetry": telemetry,
        "schema_versions": sorted({v for r in reports for v in r["schema_versions"]}),
        "files": ctx.evidence.get("files", []),
        "counts": {"batches": [{k: r[k] for k in ("batch_id", "extracted", "accepted", "quarantined", "reasons",
                                                   "version", "duplicate")} for r in reports],
                   "extracted": sum(r["extracted"] for r in reports),
                   "accepted": sum(r["accepted"] for r in reports),
                   "quarantined": sum(r["quarantined"] for r in reports), "by_reason": by_reason},
        "drills": ctx.evidence.get("drills", {}),
        "audit": ctx.evidence.get("audit"),
        "freshness": ctx.evidence.get("freshness"),
        "planning_ms": planning,
        "rollback_plan": rollback_plan(lake, previous_version=previous.version if previous else None),
        "cost": cost(lake, cfg, candidate),
        "pending": pending_evidence(lake, cfg, now),
    }
    packet_path, digest = write_packet(packet, out_dir)
    report_path = render_report(packet, digest, out_dir / "report.html")
    shutil.rmtree(scratch, ignore_errors=True)
    tick(f"packet written: {packet_path}")
    return {"decision": decision, "packet": str(packet_path), "packet_sha256": digest, "report": str(report_path),
            "snapshot": {"table": "orders", "version": candidate,
                         "generation": publication.generation if publication else None},
            "failed_checks": failed, "checks": {r.name: r.passed for r in results}, "lake_created": lake.created}


def _version(pub: Any) -> int | None:
    return None if pub is None else int(pub.version)


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
