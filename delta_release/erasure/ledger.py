"""The erasure ledger: HMAC-SHA256 of each erased subject under a lake secret, with version and time.

The secret is created once, when the lake is created, at `<lake>/_erasure/key` with mode 0600, or taken
from `DELTA_RELEASE_ERASURE_KEY`. The plain subject id is never written by this module.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import secrets
from dataclasses import asdict, dataclass

from ..storage import Storage

KEY_PATH = "_erasure/key"
LEDGER_PATH = "_erasure/ledger.json"
ENV_KEY = "DELTA_RELEASE_ERASURE_KEY"


def load_key(storage: Storage, *, create: bool) -> bytes:
    env = os.environ.get(ENV_KEY)
    if env:
        return env.encode()
    if storage.is_local:
        path = storage.local_path(KEY_PATH)
        if not path.exists() and create:
            path.parent.mkdir(parents=True, exist_ok=True)
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
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


class ErasureLedger:
    def __init__(self, storage: Storage, key: bytes) -> None:
        self._storage = storage
        self._key = key
        self._cache: tuple[int | None, list[ErasureEntry]] | None = None

    def subject_key(self, order_id: str) -> str:
        return hmac.new(self._key, order_id.encode("utf-8"), hashlib.sha256).hexdigest()

    def entries(self) -> list[ErasureEntry]:
        size = self._storage.size(LEDGER_PATH)
        if self._cache is not None and self._cache[0] == size:
            return self._cache[1]
        if size is None:
            entries: list[ErasureEntry] = []
        else:
            entries = [ErasureEntry(**e) for e in json.loads(self._storage.read_bytes(LEDGER_PATH))]
        self._cache = (size, entries)
        return entries

    def erased_subjects(self) -> set[str]:
        return {e.subject for e in self.entries()}

    def is_erased(self, order_id: str) -> bool:
        return self.subject_key(order_id) in self.erased_subjects()

    def record(self, order_id: str, *, version: int | None, erased_at: str) -> ErasureEntry:
        entry = ErasureEntry(subject=self.subject_key(order_id), version=version, erased_at=erased_at)
        entries = [e for e in self.entries() if e.subject != entry.subject] + [entry]
        data = json.dumps([asdict(e) for e in entries], indent=1, sort_keys=True).encode()
        self._storage.write_bytes(LEDGER_PATH, data)
        self._cache = None
        return entry

    def size_bytes(self) -> int:
        return self._storage.size(LEDGER_PATH) or 0
