"""The ingest pipeline: decode -> raw -> erasure filter -> apply -> quarantine -> stage -> gate -> commit
-> publish. A stale parent rebuilds the candidate on the new parent (bounded attempts)."""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import polars as pl

from . import _delta
from .apply import plan_apply
from .apply.fold import read_rows_from
from .contract import DecodedBatch, Reason, Reject, decode_batch
from .contract.decode import count_reasons
from .errors import GateError, ReconciliationError, StaleParentError
from .faults import crash_point, crash_window
from .publish import Candidate, gate_candidate, stage_partitions
from .quarantine.upkeep import writer_start
from .raw import batch_id_of

if TYPE_CHECKING:
    from .lake import Lake

MAX_ATTEMPTS = 8


@dataclass(slots=True, kw_only=True)
class IngestReport:
    batch_id: str
    extracted: int
    accepted: int
    quarantined: int
    reasons: dict[str, int]
    schema_versions: list[int]
    version: int | None
    duplicate: bool = False
    attempts: int = 0
    stale_parents: list[dict[str, Any]] = field(default_factory=list)
    files: list[dict[str, Any]] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {
            "batch_id": self.batch_id, "extracted": self.extracted, "accepted": self.accepted,
            "quarantined": self.quarantined, "reasons": self.reasons,
            "schema_versions": self.schema_versions, "version": self.version,
            "duplicate": self.duplicate, "attempts": self.attempts, "stale_parents": self.stale_parents,
            "files": self.files, "removed": self.removed,
        }


def applied_batches(lake: Lake, table: str = "orders") -> set[str]:
    out: set[str] = set()
    for entry in _delta.history(lake.table_uri(table), lake.options):
        ev = entry["evidence"] or {}
        out.update(ev.get("batch_ids", []))
    return out


def _erasure_filter(lake: Lake, decoded: DecodedBatch) -> tuple[pl.DataFrame, list[Reject]]:
    erased = lake.erasures.erased_subjects()
    if not erased or decoded.events.height == 0:
        return decoded.events, []
    keys = decoded.events["order_id"].unique().to_list()
    blocked = [k for k in keys if lake.erasures.subject_key(k) in erased]
    if not blocked:
        return decoded.events, []
    mask = pl.col("order_id").is_in(blocked)
    rejects = [Reject(line=int(line), reason=Reason.ERASED_SUBJECT, detail="the subject of this event is erased",
                      raw=None, order_id=oid)
               for oid, line in decoded.events.filter(mask).select("order_id", "line").iter_rows()]
    return decoded.events.filter(mask.not_()), rejects


def evidence_digest(evidence: dict[str, Any]) -> str:
    """The digest a commit's evidence is published under (sha256 of its canonical JSON)."""
    return hashlib.sha256(json.dumps(evidence, sort_keys=True).encode()).hexdigest()


@dataclass(slots=True, kw_only=True)
class Prepared:
    """A writer's work on one parent: the plan, and the staged, gated candidate (None when no change)."""

    parent: int
    plan: Any
    candidate: Candidate | None
    evidence: dict[str, Any] | None


def prepare_candidate(lake: Lake, events: pl.DataFrame, *, parent: int, batch_ids: list[str],
                      operation: str, table: str = "orders", publication: str = "immediate") -> Prepared:
    """Apply `events` on `parent`: plan the partitions, stage new files, gate them. Nothing is visible."""
    uri = lake.table_uri(table)
    lf = pl.scan_delta(uri, version=parent, storage_options=lake.options or None)
    plan = plan_apply(events, read_rows_from(lf))
    if plan.empty:
        return Prepared(parent=parent, plan=plan, candidate=None, evidence=None)
    prepared = stage_candidate(lake, table=table, parent=parent, partitions=plan.partitions, batch_ids=batch_ids,
                               operation=operation, changed_keys=plan.changed_keys, publication=publication)
    prepared.plan = plan
    return prepared


def files_of_partitions(entries: list[_delta.FileEntry], column: str, values: Any) -> list[_delta.FileEntry]:
    """The files of `entries` in the partitions `values` (None: the null partition): what a rewrite removes."""
    wanted = {partition_text(v) for v in values}
    return [e for e in entries if partition_text(e.partition_values.get(column)) in wanted]


def stage_candidate(lake: Lake, *, table: str, parent: int, partitions: dict[Any, pl.DataFrame],
                    batch_ids: list[str], operation: str, **evidence: Any) -> Prepared:
    """Replace whole partitions on `parent`: stage their new content, gate it, record the evidence.
    Ingest, erasure and drills all publish through here; nothing is visible until `commit_candidate`."""
    tdef = lake.tables[table]
    removes = files_of_partitions(_delta.file_entries(lake.table_uri(table), lake.options, parent),
                                  tdef.partition, partitions)
    tstore = lake.table_storage(table)
    candidate = stage_partitions(tstore, table=table, parent=parent, batch_ids=batch_ids,
                                 partition_column=tdef.partition, key=tdef.key or "order_id",
                                 file_schema=tdef.file_schema(), partitions=partitions,
                                 removes=removes, now_ms=int(lake.clock.now().timestamp() * 1000))
    crash_point("ingest.after_staging")
    try:
        gate_candidate(tstore, candidate)
        crash_point("ingest.after_gate")
    except GateError:
        discard_candidate(lake, candidate)
        raise
    record = candidate.evidence(operation=operation, **evidence)
    record["digest"] = evidence_digest(record)
    return Prepared(parent=parent, plan=None, candidate=candidate, evidence=record)


def commit_candidate(lake: Lake, prepared: Prepared, *, table: str = "orders") -> int:
    """One strict commit of a gated candidate on its parent; a stale parent discards the staged files."""
    assert prepared.candidate is not None and prepared.evidence is not None
    cand = prepared.candidate
    try:
        with crash_window("commit.during"):
            return _delta.commit(lake.table_uri(table), lake.options, table=table, parent=prepared.parent,
                                 adds=[f.to_add() for f in cand.files], removes=cand.removes,
                                 evidence=prepared.evidence, partition_by=[lake.tables[table].partition])
    except StaleParentError:
        discard_candidate(lake, cand)
        raise


def discard_candidate(lake: Lake, candidate: Candidate) -> None:
    """Remove a candidate's staged files; they were never referenced by any version."""
    store = lake.table_storage(candidate.table)
    for f in candidate.files:
        store.delete(f.path)


def ingest_batch(lake: Lake, data: bytes, *, replay: bool = False, table: str = "orders",
                 publish: bool = True) -> IngestReport:
    """Ingest one batch. With publish=False (a release run) the commit lands but the catalog is left to
    the run's ship decision, and crash recovery will not publish it either."""
    writer_start(lake.storage)  # stale temp files, legacy quarantine ledger (quarantine/upkeep.py)
    decoded = decode_batch(data)
    batch_id = batch_id_of(data)
    lake.raw.put(data, extracted=decoded.extracted, schema_versions=decoded.schema_versions,
                 received=lake.clock.now())
    crash_point("ingest.after_raw")
    report = IngestReport(batch_id=batch_id, extracted=decoded.extracted, accepted=decoded.accepted,
                          quarantined=len(decoded.rejects), reasons=decoded.reasons(),
                          schema_versions=decoded.schema_versions, version=None)
    lake.recover_publication(table)
    if not replay and batch_id in applied_batches(lake, table):
        report.duplicate = True
        return report
    for attempt in range(1, MAX_ATTEMPTS + 1):
        report.attempts = attempt
        parent = lake.latest_version(table)
        assert parent is not None
        # Filter after reading the parent, on every attempt: an erasure records its subject before it
        # commits, so an erasure that made the parent stale is seen here and cannot be undone.
        events, blocked = _erasure_filter(lake, decoded)
        prepared = prepare_candidate(lake, events, parent=parent, batch_ids=[batch_id],
                                     operation="replay" if replay else "ingest", table=table,
                                     publication="immediate" if publish else "deferred")
        conflicts = prepared.plan.conflicts
        conflict_rejects = [Reject(line=c.line, reason=Reason.POSITION_CONFLICT, detail=c.detail,
                                   raw=_line_text(data, c.line), order_id=c.order_id) for c in conflicts]
        rejects = sorted([*decoded.rejects, *blocked, *conflict_rejects],
                         key=lambda r: r.line)
        accepted = events.height - len(conflicts)
        if accepted + len(rejects) != decoded.extracted:
            if prepared.candidate is not None:
                discard_candidate(lake, prepared.candidate)
            raise ReconciliationError(batch_id, decoded.extracted, accepted, len(rejects))
        report.accepted, report.quarantined = accepted, len(rejects)
        report.reasons = count_reasons(rejects)
        lake.quarantine.write(batch_id, rejects, lake.erasures.subject_key, data)
        crash_point("ingest.after_quarantine")
        if prepared.candidate is None:
            return report
        try:
            version = commit_candidate(lake, prepared, table=table)
        except StaleParentError as exc:
            report.stale_parents.append({"expected": exc.expected, "found": exc.found})
            continue
        assert prepared.evidence is not None
        crash_point("ingest.after_commit")
        if publish:
            lake.publish_version(table, version, digest=prepared.evidence["digest"])
        crash_point("ingest.after_publish")
        report.version = version
        report.files = [f.public() for f in prepared.candidate.files]
        report.removed = [r.path for r in prepared.candidate.removes]
        return report
    last = report.stale_parents[-1]
    raise StaleParentError(table, last["expected"], last["found"])


def partition_text(value: Any) -> str | None:
    """A partition value as the Delta log writes it (None stays None: the null partition)."""
    return None if value is None else str(value)


def _line_text(data: bytes, line: int) -> str:
    from .contract.decode import split_lines

    return split_lines(data)[line - 1].decode("utf-8", errors="backslashreplace")


def replay_batches(lake: Lake, batch_id: str | None, *, all_batches: bool) -> list[IngestReport]:
    ids = [b.batch_id for b in lake.raw.list()] if all_batches else [batch_id] if batch_id else []
    return [ingest_batch(lake, lake.raw.read(b), replay=True) for b in ids]
