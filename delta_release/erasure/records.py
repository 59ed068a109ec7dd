"""The erasure read side's records, plain data (no lake, no I/O): what the context's `ErasureReads`
(context.py) returns besides the ledger's `ErasureEntry`. Here so the context can name them without
importing the modules that compute them (lineage.py, pending.py), which take the context.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, NotRequired, TypedDict


@dataclass(slots=True, kw_only=True)
class Lineage:
    """Which versions of a table reference each data file (erasure/lineage.py `table_lineage`)."""

    latest: int
    # path -> [[first version, first version that no longer references it (None: still current)], ...]
    lifetimes: dict[str, list[list[int | None]]] = field(default_factory=dict)
    evidence: dict[str, dict[str, Any]] = field(default_factory=dict)  # path -> evidence of its add
    timestamps: dict[int, int] = field(default_factory=dict)  # version -> commit time, ms
    operations: dict[int, str] = field(default_factory=dict)

    def ranges(self, path: str) -> list[list[int]]:
        """Inclusive version ranges that reference `path`."""
        return [[int(lo), self.latest if hi is None else int(hi) - 1]  # type: ignore[arg-type]
                for lo, hi in self.lifetimes.get(path, [])]

    def files_at(self, version: int) -> set[str]:
        return {p for p, spans in self.lifetimes.items()
                if any(lo <= version and (hi is None or version < hi) for lo, hi in spans)}  # type: ignore[operator]

    def referenced(self, path: str, versions: set[int]) -> set[int]:
        return {v for v in versions for lo, hi in self.ranges(path) if lo <= v <= hi}


class PendingItem(TypedDict):
    """Something that still holds an erased subject, and until when."""

    subject: str  # a prefix of the keyed hash, never the id
    what: str
    kind: str  # raw_batch, data_files or backup
    until: str  # ISO time
    detail: str
    files: NotRequired[list[str]]
