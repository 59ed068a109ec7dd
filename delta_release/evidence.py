"""Commit evidence: ONE typed record per commit, one per-file record, one digest function.

The record goes into the commit's `custom_metadata` (key `delta_release`) as canonical JSON: the fixed
fields below, then the operation's own `details` flattened beside them, then `digest` (sha256 of the
canonical JSON of everything else). The catalog publishes a version under that digest. Readers of old
commits use `CommitEvidence.from_json`; unknown keys land in `details`.

Subject ids never appear here: files carry counts of distinct keys, not keys.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from typing import Any

IMMEDIATE = "immediate"
DEFERRED = "deferred"  # a release run's commit: published only if the run ships


@dataclass(frozen=True, slots=True, kw_only=True)
class FileRecord:
    """What a commit records for each file it adds: what the gate checked and the audit re-checks."""

    path: str
    size: int
    sha256: str | None
    rows: int | None
    partition: dict[str, Any] = field(default_factory=dict)
    min_partition: Any = None
    max_partition: Any = None
    distinct_keys: int | None = None
    bucket: str | None = None  # "bNNofMM": the file holds one keyed-hash bucket of its partition

    def to_json(self) -> dict[str, Any]:
        out = {"path": self.path, "size": self.size, "sha256": self.sha256, "rows": self.rows,
               "partition": self.partition, "min_partition": self.min_partition,
               "max_partition": self.max_partition, "distinct_keys": self.distinct_keys}
        if self.bucket is not None:  # absent for unbucketed files: their evidence (and digest) is unchanged
            out["bucket"] = self.bucket
        return out

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> FileRecord:
        return cls(path=str(d["path"]), size=int(d.get("size") or 0), sha256=d.get("sha256"), rows=d.get("rows"),
                   partition=dict(d.get("partition") or {}), min_partition=d.get("min_partition"),
                   max_partition=d.get("max_partition"), distinct_keys=d.get("distinct_keys"),
                   bucket=d.get("bucket"))


_FIXED = ("operation", "table", "parent", "candidate", "batch_ids", "files", "removed", "publication", "digest")


@dataclass(frozen=True, slots=True, kw_only=True)
class CommitEvidence:
    """Everything a commit of ours records about itself."""

    operation: str  # ingest, replay, erase, rollback, repair-forward, publish, ...
    table: str
    parent: int
    candidate: str | None = None  # the staged candidate's id (None when nothing was staged)
    batch_ids: list[str] = field(default_factory=list)
    files: list[FileRecord] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)
    publication: str = IMMEDIATE  # or DEFERRED
    details: dict[str, Any] = field(default_factory=dict)  # operation-specific, JSON-able, no subject ids

    def body(self) -> dict[str, Any]:
        """The JSON without the digest."""
        return {**self.details, "operation": self.operation, "table": self.table, "parent": self.parent,
                "candidate": self.candidate, "batch_ids": list(self.batch_ids),
                "files": [f.to_json() for f in self.files], "removed": list(self.removed),
                "publication": self.publication}

    @property
    def digest(self) -> str:
        return evidence_digest(self.body())

    def to_json(self) -> dict[str, Any]:
        """What the commit's metadata holds (with its digest)."""
        body = self.body()
        return {**body, "digest": evidence_digest(body)}

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> CommitEvidence:
        return cls(operation=str(d.get("operation", "")), table=str(d.get("table", "")),
                   parent=int(d.get("parent", -1)), candidate=d.get("candidate"),
                   batch_ids=list(d.get("batch_ids") or []),
                   files=[FileRecord.from_json(f) for f in d.get("files") or []],
                   removed=list(d.get("removed") or []), publication=str(d.get("publication") or IMMEDIATE),
                   details={k: v for k, v in d.items() if k not in _FIXED})


def evidence_digest(body: dict[str, Any]) -> str:
    """The one digest of commit evidence: sha256 of its canonical JSON (sorted keys), digest key excluded."""
    clean = {k: v for k, v in body.items() if k != "digest"}
    return hashlib.sha256(json.dumps(clean, sort_keys=True, default=str).encode()).hexdigest()
