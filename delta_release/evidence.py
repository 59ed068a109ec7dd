"""Commit evidence: ONE typed record per commit, one per-file record, one digest function.

The record goes into the commit's `custom_metadata` (key `delta_release`) as canonical JSON: the fixed
fields below, then the operation's own `details` flattened beside them, then `digest` (sha256 of the
canonical JSON of everything else). The catalog publishes a version under that digest. Readers of old
commits use `CommitEvidence.from_json`; unknown keys land in `details`.

Subject ids never appear here: files carry counts of distinct keys, not keys. An ingest or replay also
records `key_filter` (`KeyFilter`): a Bloom filter of the keys it changed, over keyed hashes under a key
derived from the lake secret (`ErasureLedger.filter_digests`), so a writer whose parent went stale decides
from the log alone whether those commits touched its keys (commit/rebase.py), without reading their files.
"""

from __future__ import annotations

import base64
import hashlib
import json
import math
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


FILTER_HASH = "hmac-sha256/rebase-filter/1"  # what a filter's bits are made of (ErasureLedger.filter_digests)
FILTER_FPR = 0.01  # a filter's false-positive rate at its sized key count: 1 in 100 foreign keys "may be in"
FILTER_HASHES = 7  # bit positions per key: optimal (ln 2 x bits per key) at that rate
FILTER_BITS_PER_KEY = -math.log(FILTER_FPR) / math.log(2) ** 2  # 9.59
FILTER_MAX_BYTES = 64 << 10  # 64 KiB of bits (87 KiB of base64 in the log entry), whatever the batch
FILTER_MAX_KEYS = int(FILTER_MAX_BYTES * 8 / FILTER_BITS_PER_KEY)  # 54,700: above it the filter is "all"


@dataclass(frozen=True, slots=True, kw_only=True)
class KeyFilter:
    """The keys a commit changed, as a Bloom filter of their filter digests (32 bytes each; the first 16
    give the bit positions h1 + i * h2 mod `bits`, i < `hashes`). `may_hold` never answers False for a key
    that is in: a false positive costs a rebuild, never a wrong rebase. Sized at FILTER_FPR for its keys;
    a commit that changed more than FILTER_MAX_KEYS keys records `all` (every key may be in: a rebase over
    it rebuilds), so the evidence stays under FILTER_MAX_BYTES of bits however large the batch."""

    keys: int
    bits: int = 0  # 0 with `all` or with no key
    hashes: int = FILTER_HASHES
    data: bytes = b""
    all: bool = False

    @classmethod
    def of(cls, digests: bytes) -> KeyFilter:
        """The filter of the keys whose filter digests `digests` holds (32 bytes each, repeats allowed)."""
        count = len(digests) // 32
        if count > FILTER_MAX_KEYS:
            return cls(keys=count, all=True)
        if not count:
            return cls(keys=0)
        bits = 64 * math.ceil(count * FILTER_BITS_PER_KEY / 64)
        table = np.zeros(bits, dtype=bool)
        table[_positions(digests, bits, FILTER_HASHES).ravel()] = True
        return cls(keys=count, bits=bits, data=np.packbits(table, bitorder="little").tobytes())

    def may_hold(self, digests: bytes) -> bool:
        """True when any of the keys (filter digests, 32 bytes each) may be in the filter."""
        if self.all:
            return bool(digests)
        if not self.bits or not digests:
            return False
        table = np.unpackbits(np.frombuffer(self.data, dtype=np.uint8), bitorder="little")
        return bool(table[_positions(digests, self.bits, self.hashes)].all(axis=1).any())

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"hash": FILTER_HASH, "keys": self.keys}
        if self.all:
            return {**out, "all": True}
        return {**out, "bits": self.bits, "hashes": self.hashes, "bloom": base64.b64encode(self.data).decode()}

    @classmethod
    def from_json(cls, d: Any) -> KeyFilter | None:
        """None when `d` is no filter this version reads (then the caller reads the commit's files)."""
        if not isinstance(d, dict) or d.get("hash") != FILTER_HASH:
            return None
        try:
            if d.get("all") is True:
                return cls(keys=int(d["keys"]), all=True)
            bits, hashes, data = int(d["bits"]), int(d["hashes"]), base64.b64decode(d["bloom"], validate=True)
        except (KeyError, TypeError, ValueError):
            return None
        if bits < 0 or bits % 8 or len(data) != bits // 8 or not 1 <= hashes <= 32:
            return None
        return cls(keys=int(d.get("keys") or 0), bits=bits, hashes=hashes, data=data)


def _positions(digests: bytes, bits: int, hashes: int) -> np.ndarray:
    """The bit positions of each key: (keys x hashes), double hashing on two 64-bit halves of its digest."""
    words = np.frombuffer(digests, dtype="<u8").reshape(-1, 4)
    h1, h2 = words[:, 0], words[:, 1] | np.uint64(1)
    steps = np.arange(hashes, dtype=np.uint64)
    return ((h1[:, None] + steps[None, :] * h2[:, None]) % np.uint64(bits)).astype(np.int64)


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
