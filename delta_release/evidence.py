"""Commit evidence: ONE typed record per commit, one per-file record, one digest function.

The record goes into the commit's `custom_metadata` (key `delta_release`) as canonical JSON: the fixed
fields below, then the operation's own `details` flattened beside them, then `digest` (sha256 of the
canonical JSON of everything else). The catalog publishes a version under that digest. Readers of old
commits use `CommitEvidence.from_json`; unknown keys land in `details`.

Subject ids never appear here: files carry counts of distinct keys, not keys. An ingest or replay also
records `key_filter` (`KeyFilter`): the sorted leading bits of keyed hashes of the keys it changed, under
a key derived from the lake secret (`ErasureLedger.filter_digests`), so a writer whose parent went stale decides
from the log alone whether those commits touched its keys (commit/rebase.py), without reading their files.
"""

from __future__ import annotations

import base64
import hashlib
import json
from dataclasses import dataclass, field
from typing import Any

import numpy as np

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


FILTER_HASH = "hmac-sha256/rebase-filter/1"  # what a filter's values are made of (ErasureLedger.filter_digests)
# Up to this many keys, 32-bit values. What a rebase risks is a batch of k foreign keys matching: odds about
# k x keys / 2**32. At 4,096 keys two 2,000-key writers falsely overlapped ~0.1% of the time, ~11% of the
# 16-writer runs had a writer rebuild (0.8-2 s) for nothing; at 256, 2,000 x 256 / 2**32 = 0.012%.
FILTER_SHORT_KEYS = 256
FILTER_MAX_BYTES = 256 << 10  # 256 KiB of values (341 KiB of base64 in the log entry), whatever the batch
FILTER_MAX_KEYS = FILTER_MAX_BYTES // 8  # 32,768 keys (64-bit values): above it the filter is "all"


@dataclass(frozen=True, slots=True, kw_only=True)
class KeyFilter:
    """The keys a commit changed: the sorted distinct leading `width` bytes (4 up to FILTER_SHORT_KEYS
    keys, else 8) of their filter digests. `may_hold` never answers False for a key that is in; a foreign
    key matches with odds keys / 2**(8 x width) (<= 2**-24), and a false match costs a rebuild, never a
    wrong rebase. A commit that changed more than FILTER_MAX_KEYS keys records `all` (every key may be
    in: a rebase over it rebuilds), so the evidence holds at most FILTER_MAX_BYTES of values."""

    keys: int
    width: int = 8
    data: bytes = b""  # the values, big-endian, ascending
    all: bool = False

    @classmethod
    def of(cls, digests: bytes) -> KeyFilter:
        """The filter of the keys whose filter digests `digests` holds (32 bytes each, repeats allowed)."""
        count = len(digests) // 32
        if count > FILTER_MAX_KEYS:
            return cls(keys=count, all=True)
        width = 4 if count <= FILTER_SHORT_KEYS else 8
        values = np.unique(_leading(digests, width))
        return cls(keys=count, width=width, data=values.astype(f">u{width}").tobytes())

    def may_hold(self, digests: bytes) -> bool:
        """True when any of the keys (filter digests, 32 bytes each) may be in the filter."""
        if self.all:
            return bool(digests)
        if not self.data or not digests:
            return False
        values = np.frombuffer(self.data, dtype=f">u{self.width}").astype(np.uint64)
        queries = _leading(digests, self.width)
        at = np.minimum(np.searchsorted(values, queries), len(values) - 1)
        return bool((values[at] == queries).any())

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"hash": FILTER_HASH, "keys": self.keys}
        if self.all:
            return {**out, "all": True}
        return {**out, "width": self.width, "values": base64.b64encode(self.data).decode()}

    @classmethod
    def from_json(cls, d: Any) -> KeyFilter | None:
        """None when `d` is no filter this version reads (then the caller reads the commit's files)."""
        if not isinstance(d, dict) or d.get("hash") != FILTER_HASH:
            return None
        try:
            if d.get("all") is True:
                return cls(keys=int(d["keys"]), all=True)
            width, data = int(d["width"]), base64.b64decode(d["values"], validate=True)
        except (KeyError, TypeError, ValueError):
            return None
        if width not in (4, 8) or len(data) % width:
            return None
        return cls(keys=int(d.get("keys") or 0), width=width, data=data)


def _leading(digests: bytes, width: int) -> np.ndarray:
    """The leading `width` bytes of each 32-byte digest, as uint64 (big-endian)."""
    first = np.frombuffer(digests, dtype=">u8").reshape(-1, 4)[:, 0].astype(np.uint64)
    return first >> np.uint64(64 - 8 * width)


_FIXED = ("operation", "table", "parent", "candidate", "batch_ids", "files", "removed", "publication", "digest",
          "key_filter")


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
    # the keys the commit changed (an ingest or replay; None: not recorded, as in commits made before it)
    key_filter: KeyFilter | None = None

    def body(self) -> dict[str, Any]:
        """The JSON without the digest (no `key_filter` key when none is recorded: old digests hold)."""
        out = {**self.details, "operation": self.operation, "table": self.table, "parent": self.parent,
               "candidate": self.candidate, "batch_ids": list(self.batch_ids),
               "files": [f.to_json() for f in self.files], "removed": list(self.removed),
               "publication": self.publication}
        if self.key_filter is not None:
            out["key_filter"] = self.key_filter.to_json()
        return out

    @property
    def digest(self) -> str:
        return evidence_digest(self.body())

    def to_json(self) -> dict[str, Any]:
        """What the commit's metadata holds (with its digest)."""
        body = self.body()
        return {**body, "digest": evidence_digest(body)}

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> CommitEvidence:
        key_filter = KeyFilter.from_json(d.get("key_filter"))
        # (a filter this version cannot read stays in `details`, so the body and its digest are unchanged)
        fixed = _FIXED if key_filter is not None or "key_filter" not in d else _FIXED[:-1]
        return cls(operation=str(d.get("operation", "")), table=str(d.get("table", "")),
                   parent=int(d.get("parent", -1)), candidate=d.get("candidate"),
                   batch_ids=list(d.get("batch_ids") or []),
                   files=[FileRecord.from_json(f) for f in d.get("files") or []],
                   removed=list(d.get("removed") or []), publication=str(d.get("publication") or IMMEDIATE),
                   details={k: v for k, v in d.items() if k not in fixed}, key_filter=key_filter)


def evidence_digest(body: dict[str, Any]) -> str:
    """The one digest of commit evidence: sha256 of its canonical JSON (sorted keys), digest key excluded."""
    clean = {k: v for k, v in body.items() if k != "digest"}
    return hashlib.sha256(json.dumps(clean, sort_keys=True, default=str).encode()).hexdigest()
