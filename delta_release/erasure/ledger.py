"""The erasure ledger: HMAC-SHA256 of each erased subject under a lake secret, with version and time.

The secret is created once, when the lake is created, at `<lake>/_erasure/key` with mode 0600, or taken
from `DELTA_RELEASE_ERASURE_KEY`. The plain subject id is never written by this module.

One small JSON file per subject (`_erasure/subjects/<hash>.json`), so two erasures running at the same
time never overwrite each other's entry. An entry is written twice: `pending` before the erasure commit
(from then on the subject's events are blocked), `done` after it, with what the commit removed and which
versions of the table still hold the subject (`exposed`, inclusive version ranges) and in which data
files (`files`). Versions are immutable and, once the subject is blocked, no later version can hold it,
so `exposed` answers "may this version be read?" without reading any data.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import secrets
from dataclasses import asdict, dataclass, field, replace

from ..storage import Storage

KEY_PATH = "_erasure/key"
SUBJECTS_PREFIX = "_erasure/subjects"
ENV_KEY = "DELTA_RELEASE_ERASURE_KEY"


def load_key(storage: Storage, *, create: bool) -> bytes:
    env = os.environ.get(ENV_KEY)
    if env:
        return env.encode()
    if storage.is_local:
        path = storage.local_path(KEY_PATH)
        if not path.exists() and create:
            path.parent.mkdir(parents=True, exist_ok=True)
            try:
                fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            except FileExistsError:  # another process created it first; use theirs
                return path.read_bytes().strip()
            try:
                os.write(fd, secrets.token_hex(32).encode())
            finally:
                os.close(fd)
        return path.read_bytes().strip()
    if not storage.exists(KEY_PATH) and create:
        storage.write_once(KEY_PATH, secrets.token_hex(32).encode())
    return storage.read_bytes(KEY_PATH).strip()


@dataclass(frozen=True, slots=True, kw_only=True)
class ErasureEntry:
    subject: str  # hex HMAC-SHA256 of the order id
    version: int | None  # the Delta version of the erasure commit (None: nothing was stored)
    erased_at: str
    table: str = "orders"
    state: str = "done"  # "pending" from the request until its commit and exposure are recorded
    exposed: list[list[int]] | None = None  # inclusive version ranges that still hold the subject
    files: list[str] | None = None  # data files (relative to the table root) that hold the subject
    raw_batches: list[str] = field(default_factory=list)  # raw batch ids whose bytes hold the subject
    rows_removed: int = 0

    @property
    def done(self) -> bool:
        return self.state == "done" and self.exposed is not None

    def holds(self, version: int) -> bool:
        """True when `version` still holds this subject (only meaningful for a done entry)."""
        return any(lo <= version <= hi for lo, hi in self.exposed or [])


class ErasureLedger:
    def __init__(self, storage: Storage, key: bytes) -> None:
        self._storage = storage
        self._key = key
        self._cache: tuple[tuple[tuple[str, int], ...], list[ErasureEntry]] | None = None

    def subject_key(self, order_id: str) -> str:
        return hmac.new(self._key, order_id.encode("utf-8"), hashlib.sha256).hexdigest()

    def _path(self, subject: str) -> str:
        return f"{SUBJECTS_PREFIX}/{subject}.json"

    def entries(self) -> list[ErasureEntry]:
        """Every entry, pending ones included; re-read only when the listing (names, sizes) changes."""
        listing = tuple((o.path, o.size) for o in self._storage.list(SUBJECTS_PREFIX, recursive=False)
                        if o.path.endswith(".json"))
        if self._cache is not None and self._cache[0] == listing:
            return self._cache[1]
        entries = []
        for path, _ in listing:
            try:
                entries.append(ErasureEntry(**json.loads(self._storage.read_bytes(path))))
            except FileNotFoundError:
                continue
        entries.sort(key=lambda e: (e.erased_at, e.subject))
        self._cache = (listing, entries)
        return entries

    def get(self, subject: str) -> ErasureEntry | None:
        return next((e for e in self.entries() if e.subject == subject), None)

    def erased_subjects(self) -> set[str]:
        return {e.subject for e in self.entries()}

    def is_erased(self, order_id: str) -> bool:
        return self.subject_key(order_id) in self.erased_subjects()

    def record(self, order_id: str, *, version: int | None, erased_at: str, **fields: object) -> ErasureEntry:
        """Record (or replace) the entry of `order_id`'s subject; the id itself is hashed here."""
        entry = ErasureEntry(subject=self.subject_key(order_id), version=version, erased_at=erased_at,
                             **fields)  # type: ignore[arg-type]
        return self.write(entry)

    def write(self, entry: ErasureEntry) -> ErasureEntry:
        data = json.dumps(asdict(entry), indent=1, sort_keys=True).encode()
        self._storage.write_bytes(self._path(entry.subject), data)
        self._cache = None
        return entry

    def update(self, entry: ErasureEntry, **changes: object) -> ErasureEntry:
        return self.write(replace(entry, **changes))  # type: ignore[arg-type]

    def size_bytes(self) -> int:
        return sum(o.size for o in self._storage.list(SUBJECTS_PREFIX, recursive=False))
