"""The erasure ledger's read side as one object on the context (SQLMesh's StateReader, beside its writer).

`ErasureReader` answers what the context's `ErasureReads` interface (context.py) asks, from the ledger
(ledger.py), snapshot permission (permission.py), lineage (lineage.py), pending evidence (pending.py)
and text (text.py). Readers (the gateway, history, audit, the quarantine view) ask it; the erasure
writer (maintenance/erase.py) writes the ledger and is never reached from here.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..retention import BACKUP_EXPIRY_DAYS, RAW_RETENTION_DAYS
from .ledger import ErasureEntry
from .lineage import table_lineage
from .pending import pending_all
from .permission import check_snapshot, exposing_entries, snapshot_allowed
from .records import Lineage, PendingItem
from .text import names_erased_subject

if TYPE_CHECKING:
    from ..context import LakeContext


class ErasureReader:
    """The read side of `lake`'s erasure ledger (implements context.ErasureReads)."""

    def __init__(self, lake: LakeContext) -> None:
        self._lake = lake

    def subject_key(self, subject_id: str) -> str:
        return self._lake.erasures.subject_key(subject_id)

    def entries(self) -> list[ErasureEntry]:
        return self._lake.erasures.entries()

    def exposing(self, table: str, version: int, *, entries: list[ErasureEntry] | None = None) -> list[ErasureEntry]:
        return exposing_entries(self._lake, table, version, entries=entries)

    def allowed(self, table: str, version: int) -> bool:
        return snapshot_allowed(self._lake, table, version)

    def check_snapshot(self, table: str, version: int) -> None:
        check_snapshot(self._lake, table, version)

    def lineage(self, table: str) -> Lineage:
        return table_lineage(self._lake, table)

    def pending(self, *, raw_retention_days: float = RAW_RETENTION_DAYS,
                backup_expiry_days: float | None = BACKUP_EXPIRY_DAYS) -> list[PendingItem]:
        return pending_all(self._lake, raw_retention_days=raw_retention_days, backup_expiry_days=backup_expiry_days)

    def names_erased_subject(self, text: str) -> bool:
        return names_erased_subject(text, self._lake.erasures.erased_subjects(), self._lake.erasures.subject_key)
