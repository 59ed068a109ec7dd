"""Ingest of a batch file: in one piece, or, past the part limit, as consecutive parts (bounded memory).

A file of at most `max_part_bytes()` (256 MiB, `DELTA_RELEASE_MAX_PART_BYTES`) is one batch, ingested by
`ingest.ingest_batch` as before. A larger file is cut at line boundaries (contract/parts.py) and each
part, in file order, is decoded, stored raw (the byte-identical slice, under its own sha256), quarantined,
reconciled and committed strictly as a batch of its own, with publication deferred; only the decoded
events of one part are held at a time. After the last part the catalog publishes once: the version of
the last part's commit. So:

- readers through the gateway see the file all at once or not at all: every part's commit says
  "deferred", so no writer's crash recovery publishes a half-ingested file (a later ingest of another
  file does publish its own version, which is on top of the parts applied so far);
- a crash between parts leaves the published snapshot as it was; rerunning the same ingest finds the
  parts already applied (duplicates by batch id), applies the rest and publishes, also when every part
  was applied and only the publication was missing;
- the table equals that of ingesting the whole file at once (apply by position). The batch-wide
  position check (same position, different content) is per part: a position reused in a later part is
  judged as between batches (a conflict with the order's current row is quarantined).

The report (`IngestReport.parts`) lists the parts: `batch_id`, `first_line` (the file line of the
part's line 1: a quarantined line N of the part is file line first_line + N - 1), `offset` and `size`
(bytes in the file), `extracted`, `accepted`, `quarantined`, `version`, `duplicate`. The top-level
counts are the sums, `batch_id` the first part's, `version` the last version a part committed in this
call (null when none did), `duplicate` true when every part was. A file within the limit has `parts: []`.
"""

from __future__ import annotations

import json
import os
import zlib
from typing import Any

from . import _delta, index, progress
from ._malloc import fix_mmap_threshold, use_system_arrow_pool
from .context import LakeContext
from .contract.parts import max_part_bytes, part_ranges
from .contract.source import read_batch_file
from .ingest import IngestReport, ingest_batch
from .tables import DEFAULT_TABLE


def ingest_file(lake: LakeContext, path: str | os.PathLike[str], *, table: str = DEFAULT_TABLE,
                publish: bool = True, max_part: int | None = None) -> IngestReport:
    """Ingest a batch file: as one batch, or in parts past the part limit (module docstring)."""
    fix_mmap_threshold()  # else glibc's heaps keep freed MiB blocks and grow part after part (_malloc.py)
    use_system_arrow_pool()  # (a lake opened by other means than Lake.open)
    ranges = part_ranges(path, max_part_bytes(max_part)) if os.path.isfile(path) else [(0, -1)]
    if len(ranges) == 1:
        return ingest_batch(lake, read_batch_file(path), table=table, publish=publish)
    reports: list[IngestReport] = []
    lists: list[bytes] = []  # each part's `files` and `removed`, packed until the total (_pack)
    parts: list[dict[str, Any]] = []
    first_line = 1
    for number, (offset, size) in enumerate(ranges, start=1):
        progress.item(f"part {number}/{len(ranges)}", size)  # the bar of the CLI's `progress.work`, if any
        batch = read_batch_file(path, offset=offset, length=size)  # this part only: hashed and decoded
        report = ingest_batch(lake, batch, table=table, publish=False)
        del batch
        lists.append(_pack(report))
        reports.append(report)
        parts.append({"batch_id": report.batch_id, "first_line": first_line, "offset": offset, "size": size,
                      "extracted": report.extracted, "accepted": report.accepted,
                      "quarantined": report.quarantined, "version": report.version,
                      "duplicate": report.duplicate})
        first_line += report.extracted
    if publish:
        publish_parts(lake, table, [r.batch_id for r in reports], [r.version for r in reports])
    return _total(reports, parts, lists)


def _pack(report: IngestReport) -> bytes:
    """The part's `files` and `removed`, moved out of its report as compressed JSON until the total is
    built. A part that rewrites every (day, bucket) file lists ~2,900 of each: ~2.5 MiB of dicts and
    strings, 0.2 MiB packed, which each later part's peak would otherwise carry (9 parts: ~20 MiB)."""
    packed = zlib.compress(json.dumps([report.files, report.removed], separators=(",", ":")).encode(), 1)
    report.files, report.removed = [], []
    return packed


def publish_parts(lake: LakeContext, table: str, batch_ids: list[str], versions: list[int | None]) -> int | None:
    """Publish the version holding every part: the last one committed now, else (a rerun whose parts were
    all applied before) the last version that applied one of them. Never moves the catalog backwards."""
    ctx = lake.table(table)
    committed = [v for v in versions if v is not None]
    target = max(committed) if committed else None
    if target is None:
        latest = ctx.latest_version()
        if latest is None:
            return None
        batches = index.batch_index(ctx)
        if batches is not None:
            found = [batches.version_of(b, upto=latest) for b in batch_ids]
        else:
            wanted = set(batch_ids)
            found = [e.version for e in _delta.history(ctx.uri, ctx.storage_options)
                     if e.evidence is not None and wanted & set(e.evidence.get("batch_ids") or [])]
        target = max((v for v in found if v is not None), default=None)
        if target is None:
            return None  # no part changed the table (every line quarantined): nothing to publish
    evidence = _delta.version_evidence(ctx.uri, ctx.storage_options, target) or {}
    return lake.publish_version(table, target, digest=str(evidence.get("digest", ""))).version


def _total(reports: list[IngestReport], parts: list[dict[str, Any]], lists: list[bytes]) -> IngestReport:
    unpacked = [json.loads(zlib.decompress(packed)) for packed in lists]
    reasons: dict[str, int] = {}
    for r in reports:
        for code, n in r.reasons.items():
            reasons[code] = reasons.get(code, 0) + n
    versions = [r.version for r in reports if r.version is not None]
    return IngestReport(
        batch_id=reports[0].batch_id, extracted=sum(r.extracted for r in reports),
        accepted=sum(r.accepted for r in reports), quarantined=sum(r.quarantined for r in reports),
        reasons=dict(sorted(reasons.items())),
        schema_versions=sorted({v for r in reports for v in r.schema_versions}),
        version=versions[-1] if versions else None, duplicate=all(r.duplicate for r in reports),
        attempts=sum(r.attempts for r in reports), stale_parents=[s for r in reports for s in r.stale_parents],
        files=[f for files, _ in unpacked for f in files], removed=[p for _, removed in unpacked for p in removed],
        parts=parts)
