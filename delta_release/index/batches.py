"""Applied-batch index: is this batch id already in a commit of the table? Without replaying history.

On storage (`Storage` rooted at `<lake>/_index/<table>/`, local disk or S3):

    batches/<batch_id>    create-only marker per applied batch id; content: the version that applied it
    batches.version       {"version": V}: every commit up to V has its markers (atomic replace)

Catching up to version T reads the log entries of versions (V, T] one by one (`_delta.version_evidence`),
writes their markers, then moves `batches.version` to T. Markers are always written before the watermark
that covers them, so a watermark that a racing writer moves back is still true (only more work later).
Missing watermark: rebuilt from the whole history once (`_delta.history`).
"""

from __future__ import annotations

from .. import _delta
from ..evidence import CommitEvidence
from ..storage import Storage
from .watermark import read_watermark, write_watermark

WATERMARK = "batches.version"
MARKERS = "batches"


class BatchIndex:
    def __init__(self, index: Storage, uri: str, options: dict[str, str]) -> None:
        self.index, self.uri, self.options = index, uri, options

    def watermark(self) -> int | None:
        return read_watermark(self.index, WATERMARK, self.uri, self.options)

    def _mark(self, batch_ids: list[str], version: int) -> None:
        for b in batch_ids:
            if "/" in b or b.startswith("."):
                continue  # never a path: batch ids are sha256 hex
            if not self.index.exists(f"{MARKERS}/{b}"):
                self.index.write_once(f"{MARKERS}/{b}", str(version).encode())

    def catch_up(self, upto: int) -> None:
        """Make the index valid for `upto` (a committed version)."""
        start = self.watermark()
        if start is not None and start >= upto:
            return
        if start is None:  # missing: rebuild from the whole history, once (markers are only ever added)
            for entry in _delta.history(self.uri, self.options):
                if entry.evidence is not None and entry.version <= upto:
                    self._mark(CommitEvidence.from_json(entry.evidence).batch_ids, entry.version)
        else:
            for version in range(start + 1, upto + 1):
                raw = _delta.version_evidence(self.uri, self.options, version)
                if raw is not None:
                    self._mark(CommitEvidence.from_json(raw).batch_ids, version)
        write_watermark(self.index, WATERMARK, self.uri, self.options, upto)

    def applied(self, batch_id: str, *, upto: int) -> bool:
        """True when a commit at or before `upto` (or one already indexed after it) carries `batch_id`."""
        self.catch_up(upto)
        return self.index.exists(f"{MARKERS}/{batch_id}")

    def version_of(self, batch_id: str, *, upto: int) -> int | None:
        """The version that applied `batch_id` (its marker's content), None when no commit carries it."""
        self.catch_up(upto)
        return self._marked_version(batch_id)

    def _marked_version(self, batch_id: str) -> int | None:
        path = f"{MARKERS}/{batch_id}"
        if "/" in batch_id or batch_id.startswith(".") or not self.index.exists(path):
            return None
        text = self.index.read_bytes(path).decode().strip()
        return int(text) if text.isdigit() else None

    def record(self, batch_ids: list[str], version: int) -> None:
        """After our own commit: its markers now, the watermark through the usual catch-up."""
        self._mark(batch_ids, version)
        self.catch_up(version)

    def all(self, *, upto: int) -> set[str]:
        """Batch ids applied by a commit at or before `upto`. Markers of later commits (a racing writer's,
        written after its commit landed) are in the listing too: those of the commits after `upto` up to
        the latest version read after the listing are taken out again (a release run's reference fold
        must hold exactly what its parent holds)."""
        self.catch_up(upto)
        found = {o.path.rsplit("/", 1)[-1] for o in self.index.list(MARKERS)
                 if not o.path.rsplit("/", 1)[-1].startswith(".")}
        latest = _delta.latest_version(self.uri, self.options)
        for version in range(upto + 1, (latest if latest is not None else upto) + 1):
            raw = _delta.version_evidence(self.uri, self.options, version)
            for b in CommitEvidence.from_json(raw).batch_ids if raw is not None else []:
                if b in found and (self._marked_version(b) or 0) > upto:
                    found.discard(b)
        return found
