"""The release checks: each takes the run's context and returns a result value (never raises for a
failing check; an unexpected error inside a check is recorded as that check failing, with its type)."""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import polars as pl

from .. import _delta
from ..contract import decode_batch
from ..index.files import recorded_sha256
from ..tables import DEFAULT_TABLE, KeyedColumns
from ..views import current_rows, live_rows
from .counts import totals
from .fixes import freshness_failure, schema_fixture_failure
from .reference import accepted_events, compare, reference_current

if TYPE_CHECKING:
    from ..commit.view import StagedSnapshot
    from ..lake import Lake
    from .config import ReleaseConfig


@dataclass(slots=True, kw_only=True)
class RunContext:
    config: ReleaseConfig
    lake: Lake
    scratch: Path
    candidate: StagedSnapshot  # the staged file set every check reads (nothing of it is committed yet)
    recorded: dict[str, str]  # path -> sha256 the candidate's evidence records for the files it stages
    batch_ids: set[str]  # the batches the candidate's rows come from: committed ones and the run's own
    reports: list[dict[str, Any]]
    evidence: dict[str, Any] = field(default_factory=dict)

    @property
    def label(self) -> str:
        return f"the candidate staged on version {self.candidate.parent}"


@dataclass(slots=True, kw_only=True)
class CheckResult:
    name: str
    passed: bool
    detail: str
    evidence: dict[str, Any] = field(default_factory=dict)
    seconds: float = 0.0

    def to_json(self) -> dict[str, Any]:
        return {"passed": self.passed, "detail": self.detail, "seconds": round(self.seconds, 3), **self.evidence}


def check_schema_fixture(ctx: RunContext, version: int) -> CheckResult:
    path = ctx.config.schema_fixtures[version]
    name = f"schema_fixture_v{version}"
    if not path.is_file():
        detail, fix = schema_fixture_failure(ctx.config.path, version, path, None)
        return CheckResult(name=name, passed=False, detail=detail, evidence={"fix": fix})
    decoded = decode_batch(path.read_bytes())
    ok = (decoded.extracted > 0 and not decoded.rejects and decoded.schema_versions == [version])
    evidence: dict[str, Any] = {"fixture": str(path), "extracted": decoded.extracted, "accepted": decoded.accepted,
                                "reasons": decoded.reasons(), "schema_versions": decoded.schema_versions}
    if ok:
        detail = f"{path.name}: {decoded.accepted}/{decoded.extracted} lines decode as schema version {version}"
    else:
        detail, evidence["fix"] = schema_fixture_failure(ctx.config.path, version, path, decoded)
    return CheckResult(name=name, passed=ok, detail=detail, evidence=evidence)


def check_amount_unit(ctx: RunContext) -> CheckResult:
    probe = {"schema_version": 2, "order_id": "probe", "position": 1, "kind": "upsert", "event_day": 1}
    cases = {"7350": "accepted", "73.5": "amount_unit", "7350.0": "amount_unit", '"7350"': "amount_unit"}
    seen = {}
    for text in cases:
        line = json.dumps(probe)[:-1] + f', "amount_cents": {text}}}'
        decoded = decode_batch(line.encode())
        seen[text] = "accepted" if decoded.accepted else decoded.rejects[0].reason.value
    integer_column = ctx.candidate.scan().collect_schema().get("amount_cents") == pl.Int64
    ok = seen == cases and integer_column
    return CheckResult(name="amount_unit", passed=ok,
                       detail="amounts are integer cents; fractions, floats and strings are rejected" if ok
                       else f"amount-unit probe gave {_words(seen)}; amount column int64:"
                            f" {'yes' if integer_column else 'no'}",
                       evidence={"probe": seen, "amount_column_int64": integer_column})


def check_reconciliation(ctx: RunContext) -> CheckResult:
    bad = []
    for r in ctx.reports:  # every batch once (counts.py), those applied before included: their ledger too
        ledger = ctx.lake.quarantine.rows(r["batch_id"]).height
        if r["accepted"] + r["quarantined"] != r["extracted"] or ledger != r["quarantined"]:
            bad.append({"batch_id": r["batch_id"], **{k: r[k] for k in ("extracted", "accepted", "quarantined")},
                        "ledger_rows": ledger})
    return CheckResult(name="reconciliation", passed=not bad and bool(ctx.reports),
                       detail="accepted + quarantined == extracted for every batch, and the ledger holds every"
                              " quarantined record" if not bad else f"{len(bad)} batches do not reconcile",
                       evidence={"batches": len(ctx.reports), "mismatches": bad})


def recorded_checksums(lake: Lake, table: str, paths: list[str]) -> dict[str, str]:
    """path -> sha256 the newest commit of ours registering it recorded, for those of `paths` some commit
    registered with a sha256 (the file index, index/files.py: no replay of every commit)."""
    return {p: sha for p, sha in recorded_sha256(lake, table, paths).items() if sha is not None}


def check_checksums(ctx: RunContext) -> CheckResult:
    lake = ctx.lake
    wanted = [e.path for e in ctx.candidate.entries if e.path not in ctx.recorded]
    recorded = {**recorded_checksums(lake, DEFAULT_TABLE, wanted), **ctx.recorded}
    store = lake.table_storage(DEFAULT_TABLE)
    files = []
    bad = []
    for e in ctx.candidate.entries:
        expected = recorded.get(e.path)
        data = store.read_bytes(e.path) if store.exists(e.path) else None
        found = hashlib.sha256(data).hexdigest() if data is not None else None
        files.append({"path": e.path, "size": e.size, "sha256": found})
        if expected is None or found != expected or (data is not None and len(data) != e.size):
            bad.append({"path": e.path, "expected": expected, "found": found})
    ctx.evidence["files"] = files
    return CheckResult(name="checksums", passed=not bad,
                       detail=f"{len(files)} files of {ctx.label} match their recorded sha256"
                       if not bad else f"{len(bad)} files differ from their recorded sha256",
                       evidence={"files_checked": len(files), "mismatches": bad})


def check_pinned_query(ctx: RunContext) -> CheckResult:
    """The candidate's current rows equal an independent fold of every accepted event of its batches
    (reference.py: O(events), frames, one listing of the raw store, one scan of the quarantine ledger)."""
    lake = ctx.lake
    tdef = lake.table_def(DEFAULT_TABLE)
    cols = tdef.keyed()
    frame = current_rows(ctx.candidate.scan(), tdef).collect()  # every column of the current view
    events = accepted_events(lake, ctx.batch_ids, cols.key)
    result = compare(frame, reference_current(events, cols, frame.columns), cols.key)
    ok = result.differences == 0
    detail = (f"{ctx.label} holds {result.rows} current orders, equal to the reference fold of every accepted"
              " event" if ok else f"{result.differences} rows differ from the reference fold"
              + (f" ({result.duplicate_keys} keys with more than one current row)" if result.duplicate_keys else ""))
    return CheckResult(name="pinned_query", passed=ok, detail=detail,
                       evidence={"parent": ctx.candidate.parent, "rows": result.rows, "differences": result.differences,
                                 "events": events.height, "expected_rows": result.expected})


def _drill_check(ctx: RunContext, name: str, run: Callable[[str], dict[str, Any]], ok_detail: str) -> CheckResult:
    result = run(str(ctx.scratch / name))
    ctx.evidence.setdefault("drills", {})[name] = result
    failed = [k for k, v in result["checks"].items() if not v]
    return CheckResult(name=f"{name}_drill", passed=bool(result["passed"]),
                       detail=ok_detail if result["passed"] else f"failed checks: {', '.join(failed)}",
                       evidence={"checks": result["checks"]})


def check_conflict_drill(ctx: RunContext) -> CheckResult:
    from ..drills.conflict import run_conflict_drill

    return _drill_check(ctx, "conflict", run_conflict_drill,
                        "stale publication rejected (expected 41, found 42), rebuilt on 42, committed 43")


def check_erasure_drill(ctx: RunContext) -> CheckResult:
    from ..drills.erasure import run_erasure_drill

    return _drill_check(ctx, "erasure", run_erasure_drill,
                        "the erased subject never reappeared; pinned read and rollback refused")


def check_audit(ctx: RunContext) -> CheckResult:
    from ..audit import audit_days

    a, b = ctx.config.audit.days
    r = audit_days(ctx.lake, DEFAULT_TABLE, a, b, staged=ctx.candidate)
    ctx.evidence["audit"] = r
    ok = r["fraction"] <= ctx.config.audit.max_fraction
    return CheckResult(name="audit_bytes", passed=ok,
                       detail=f"days {a}..{b} scan {r['bytes']['scanned']} of {r['bytes']['full_scan']} bytes "
                              f"({100 * r['fraction']:.1f}%, at most {100 * ctx.config.audit.max_fraction:.0f}%)",
                       evidence={"fraction": r["fraction"], "observed": r["fraction"], "direction": AT_MOST,
                                 "threshold": ctx.config.audit.max_fraction})


def receive_manifest(lake: Lake, path: Path, uploaded: list[str] | None = None) -> Any:
    """Take a producer's drop: the objects listed by the manifest, found beside it, uploaded into the table
    under their immutable names (an existing name is never overwritten). Returns the parsed manifest.
    Creates no Delta log (a held run leaves every log as it was); names newly written go to `uploaded`."""
    from ..external.manifest import load_manifest

    manifest = load_manifest(path, lake.tables)
    drop = path.parent
    store = lake.table_storage(manifest.table)
    for f in manifest.files:
        if not (drop / f.path).is_file():
            continue
        data = (drop / f.path).read_bytes()
        if store.write_once(f.path, data):
            if uploaded is not None:
                uploaded.append(f"{manifest.table}:{f.path}")
        elif store.read_bytes(f.path) != data:
            raise FileExistsError(f"immutable name {f.path} already holds other bytes")
    return manifest


def check_freshness_gate(ctx: RunContext) -> CheckResult:
    """Every configured manifest passes the manifest-vs-inventory gate, and the gate is shown to be live:
    the same manifest with one object that was never written must fail as `missing`."""
    from dataclasses import replace

    from ..external.manifest import ManifestFile, gate_manifest

    reports = []
    ok = bool(ctx.config.manifests)
    for path in ctx.config.manifests:
        manifest = receive_manifest(ctx.lake, path, ctx.evidence.setdefault("uploaded", []))
        report = gate_manifest(ctx.lake, manifest).to_json()
        ghost = ManifestFile(path=f"{manifest.directory}/never-written-{ctx.candidate.parent}.parquet",
                             size_bytes=1, records=1, sha256="0" * 64)
        probe = gate_manifest(ctx.lake, replace(manifest, files=(*manifest.files, ghost))).to_json()
        live = (not probe["ok"]) and probe["missing"] == [ghost.path]
        reports.append({"manifest": str(path), "generation": manifest.generation, "gate": report,
                        "omitted_object_rejected": live})
        ok = ok and bool(report["ok"]) and live
    ctx.evidence["freshness"] = reports
    evidence: dict[str, Any] = {"manifests": [{k: r[k] for k in ("manifest", "generation", "omitted_object_rejected")}
                                              | {"ok": r["gate"]["ok"]} for r in reports]}
    if ok:
        detail = f"{len(reports)} telemetry manifest(s) match their inventory; a manifest with an omitted object is" \
                 " rejected"
    else:  # which of the three causes happened, and its fix
        detail, evidence["fix"] = freshness_failure(ctx.config.path, reports)
    return CheckResult(name="freshness_gate", passed=ok, detail=detail, evidence=evidence)


# -- release thresholds (config `thresholds:`): observed value vs threshold, one check each ---------------

AT_MOST, AT_LEAST = "<=", ">="  # a threshold check passes when observed <= (or >=) its threshold


def _words(mapping: dict[str, Any]) -> str:
    """{'a': 1, 'b': 2} as `a 1, b 2` (human output never shows a Python repr)."""
    return ", ".join(f"{k} {v}" for k, v in mapping.items())


def _share(part: int, whole: int) -> float:
    return part / whole if whole else 0.0


def _cols(lake: Lake) -> KeyedColumns:
    """The released table's key, ordering, tombstone and partition columns (table_defs/*.yaml)."""
    return lake.table_def(DEFAULT_TABLE).keyed()


def _current(lake: Lake, version: int | None) -> pl.DataFrame:
    """Key, partition and ordering columns of the current rows (tombstones excluded) at `version`."""
    c = _cols(lake)
    if version is None:
        return pl.DataFrame(schema={c.key: pl.String, c.partition: pl.Int64, c.ordering: pl.Int64})
    return (live_rows(_delta.scan(lake.table_uri(DEFAULT_TABLE), lake.options, version), lake.table_def(DEFAULT_TABLE))
            .select(c.key, c.partition, c.ordering).collect())


def _max_applied_position(lake: Lake, version: int | None) -> int | None:
    if version is None:
        return None
    value = (_delta.scan(lake.table_uri(DEFAULT_TABLE), lake.options, version)
             .select(pl.col(_cols(lake).ordering).max()).collect().item())
    return None if value is None else int(value)


def _batch_events(lake: Lake, batch_id: str) -> pl.DataFrame:
    """The accepted events of one retained raw batch (quarantined lines left out)."""
    decoded = decode_batch(lake.raw.read(batch_id))
    quarantined = lake.quarantine.rows(batch_id)["line"].to_list()
    return decoded.events.filter(~pl.col("line").is_in(quarantined))


def _rejected_checks(ctx: RunContext) -> list[CheckResult]:
    """Over the batches this run applies, each once (counts.py: the same numbers as the packet's counts)."""
    t = ctx.config.thresholds
    counted = [r for r in ctx.reports if r.get("counted", True)]
    per_batch = [{"batch_id": r["batch_id"], "source": r.get("source", ""), "extracted": r["extracted"],
                  "quarantined": r["quarantined"], "share": round(_share(r["quarantined"], r["extracted"]), 4)}
                 for r in counted]
    over = [b for b in per_batch if b["share"] > t.rejected_per_batch]
    # "mostly", weighted by lines: a tiny all-bad batch among large good ones does not hold the run by itself
    lines = sum(b["extracted"] for b in per_batch)
    within = _share(lines - sum(b["extracted"] for b in over), lines) if lines else 1.0
    ctx.evidence["rejected_per_batch"] = per_batch
    sums = totals([{**r, "counted": True} for r in counted])
    extracted, quarantined, by_reason = sums["extracted"], sums["quarantined"], sums["by_reason"]
    overall = _share(quarantined, extracted)
    reasons = {code: {"count": n, "observed": round(_share(n, extracted), 4),
                      "threshold": t.rejected_by_reason.get(code, t.rejected_by_reason["default"])}
               for code, n in sorted(by_reason.items())}
    top_reason = max(reasons, key=lambda c: reasons[c]["observed"]) if reasons else ""
    reasons_over = {c: v for c, v in reasons.items() if v["observed"] > v["threshold"]}
    def pct(x: float) -> str:
        return f"{x:.1%}"

    return [
        CheckResult(name="rejected_per_batch", passed=within >= t.rejected_mostly,
                    detail=f"{pct(within)} of the run's lines are in batches that reject at most"
                           f" {pct(t.rejected_per_batch)} of their lines; at least {pct(t.rejected_mostly)} must be"
                           f" ({len(over)} of {len(per_batch)} batches over)"
                           + ("; over: " + ", ".join(f"{b['source'] or b['batch_id']} ({b['batch_id']})"
                                                     f" {pct(b['share'])}" for b in over) if over else ""),
                    evidence={"observed": round(within, 4), "threshold": t.rejected_mostly, "direction": AT_LEAST,
                              "per_batch_limit": t.rejected_per_batch, "batches_over": over}),
        CheckResult(name="rejected_overall", passed=overall <= t.rejected_overall,
                    detail=f"{quarantined} of {extracted} lines rejected ({pct(overall)}, at most"
                           f" {pct(t.rejected_overall)})",
                    evidence={"observed": round(overall, 4), "threshold": t.rejected_overall, "direction": AT_MOST,
                              "quarantined": quarantined, "extracted": extracted}),
        CheckResult(name="rejected_by_reason", passed=not reasons_over,
                    detail="every reason code within its limit" + (
                        f" (highest {top_reason} {pct(reasons[top_reason]['observed'])})" if reasons else "")
                    if not reasons_over else
                    "over the limit: " + ", ".join(f"{c} {pct(v['observed'])} > {pct(v['threshold'])}"
                                                   for c, v in reasons_over.items()),
                    evidence={"observed": max((v["observed"] for v in reasons.values()), default=0.0),
                              "threshold": t.rejected_by_reason["default"], "direction": AT_MOST,
                              "reasons": reasons}),
    ]


def _event_checks(ctx: RunContext) -> list[CheckResult]:
    t = ctx.config.thresholds
    lake = ctx.lake
    parent = ctx.candidate.parent
    c = _cols(lake)
    running = _max_applied_position(lake, parent)
    before = _current(lake, parent)
    newest = before[c.partition].max() if before.height else None  # newest partition (day) applied so far
    late = accepted = stale = upserts = 0
    for r in ctx.reports:
        if not r.get("counted", not r.get("duplicate")):  # applied before: nothing of it is in the candidate
            continue
        events = _batch_events(lake, r["batch_id"])
        accepted += events.height
        if running is not None:
            late += events.filter(pl.col(c.ordering) < running).height
        top = events[c.ordering].max()
        if top is not None:
            running = int(top) if running is None else max(running, int(top))  # type: ignore[arg-type]
        ups = events.filter(pl.col("kind") == "upsert")
        upserts += ups.height
        if newest is not None:
            stale += ups.filter(pl.col(c.partition) < int(newest) - t.stale_days).height  # type: ignore[arg-type]
        day = ups[c.partition].max()
        if day is not None:
            newest = day if newest is None else max(newest, day)
    after = (live_rows(ctx.candidate.scan(), lake.table_def(DEFAULT_TABLE))  # staged, not yet committed
             .select(c.key, c.partition, c.ordering).collect())
    moved_frame = before.join(after, on=c.key, suffix="_after").filter(
        pl.col(c.partition).ne_missing(pl.col(f"{c.partition}_after")))
    moved = moved_frame.height
    late_share, stale_share = _share(late, accepted), _share(stale, upserts)
    moved_share = _share(moved, before.height)
    def pct(x: float) -> str:
        return f"{x:.1%}"

    return [
        CheckResult(name="late_events", passed=late_share <= t.late_events,
                    detail=f"{late} of {accepted} accepted events ({pct(late_share)}) have a position below the"
                           f" table's max applied position (at most {pct(t.late_events)})",
                    evidence={"observed": round(late_share, 4), "threshold": t.late_events, "direction": AT_MOST,
                              "late": late,
                              "accepted": accepted, "parent_version": parent}),
        CheckResult(name="stale_events", passed=stale_share <= t.stale_events,
                    detail=f"{stale} of {upserts} upserts ({pct(stale_share)}) are for an {c.partition} more than"
                           f" {t.stale_days} days before the newest already applied (at most {pct(t.stale_events)})",
                    evidence={"observed": round(stale_share, 4), "threshold": t.stale_events, "direction": AT_MOST,
                              "stale": stale,
                              "upserts": upserts, "newest_event_day": None if newest is None else int(newest),  # type: ignore[arg-type]
                              "older_than_days": t.stale_days}),
        CheckResult(name="moved_orders", passed=moved_share <= t.moved_orders,
                    detail=f"{moved} of {before.height} orders of version {parent} ({pct(moved_share)}) move to"
                           f" another {c.partition} (at most {pct(t.moved_orders)})",
                    evidence={"observed": round(moved_share, 4), "threshold": t.moved_orders, "direction": AT_MOST,
                              "moved": moved,
                              "orders_before": before.height}),
    ]


def check_thresholds(ctx: RunContext) -> list[CheckResult]:
    return _rejected_checks(ctx) + _event_checks(ctx)


CHECKS: dict[str, Callable[[RunContext], list[CheckResult]]] = {
    "schema_fixtures": lambda ctx: [check_schema_fixture(ctx, 2), check_schema_fixture(ctx, 3)],
    "amount_unit": lambda ctx: [check_amount_unit(ctx)],
    "reconciliation": lambda ctx: [check_reconciliation(ctx)],
    "checksums": lambda ctx: [check_checksums(ctx)],
    "pinned_query": lambda ctx: [check_pinned_query(ctx)],
    "conflict_drill": lambda ctx: [check_conflict_drill(ctx)],
    "erasure_drill": lambda ctx: [check_erasure_drill(ctx)],
    "audit": lambda ctx: [check_audit(ctx)],
    "freshness_gate": lambda ctx: [check_freshness_gate(ctx)],
    "thresholds": check_thresholds,
}
THRESHOLD_CHECKS = ["rejected_per_batch", "rejected_overall", "rejected_by_reason", "late_events", "stale_events",
                    "moved_orders"]
CHECK_RESULT_NAMES = {"schema_fixtures": ["schema_fixture_v2", "schema_fixture_v3"], "audit": ["audit_bytes"],
                      "thresholds": THRESHOLD_CHECKS}


def run_check(name: str, ctx: RunContext) -> list[CheckResult]:
    started = time.perf_counter()
    try:
        results = CHECKS[name](ctx)
    except Exception as exc:  # noqa: BLE001 - a check that crashes is a failed check, recorded with its type
        results = [CheckResult(name=n, passed=False, detail=f"check raised {type(exc).__name__}: "
                               f"{str(exc).splitlines()[0] if str(exc) else ''}")
                   for n in CHECK_RESULT_NAMES.get(name, [name])]
    elapsed = time.perf_counter() - started
    for r in results:
        r.seconds = elapsed / len(results)
    return results
