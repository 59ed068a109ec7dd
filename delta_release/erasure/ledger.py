"""The erasure ledger: HMAC-SHA256 of each erased subject under a lake secret, with version and time.

The secret is created once, when the lake is created, at `<lake>/_erasure/key` with mode 0600, or taken
from `DELTA_RELEASE_ERASURE_KEY`. The plain subject id is never written by this module.

One small JSON file per subject (`_erasure/subjects/<hash>.json`), so two erasures running at the same
time never overwrite each other's entry. The first write of an entry is create-only and every later one
a compare-and-swap on the bytes it replaces (S3 `If-None-Match` / `If-Match`; a hard link / a locked
compare-and-replace on local disk), so two processes erasing the same subject can never silently
overwrite each other. An entry is written twice: `pending` before the erasure commit
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
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field, replace

import polars as pl

from ..errors import SafetyError
from ..storage import Storage
from .bulk import ColumnHmac

KEY_PATH = "_erasure/key"
SUBJECTS_PREFIX = "_erasure/subjects"
ENV_KEY = "DELTA_RELEASE_ERASURE_KEY"


def load_key(storage: Storage, *, create: bool) -> bytes:
    """The lake's erasure secret; created (create=True) atomically if the lake has none yet.

    Two processes racing to create it end with ONE key: each writes a fresh secret create-only (a hard
    link on local disk, `If-None-Match: *` on S3), the loser's write is refused, and both then read the
    winner's bytes. A reader never sees a half-written key (the name appears with its full content).

    The key in use must be the lake's own (`_check_key`): with another key (DELTA_RELEASE_ERASURE_KEY set
    differently, or unset on a lake whose key came from it), every erased order's keyed hash misses the
    ledger, and a replay or a new event would bring the order back.
    """
    env = os.environ.get(ENV_KEY)
    if env:
        key, source = env.encode(), ENV_KEY
    else:
        if not storage.exists(KEY_PATH):
            # the lake's key came from the environment (a new one cannot match), unless a racing creator
            # wrote the key file (then its check) since the first look: the key file is always first
            if storage.exists(CHECK_PATH) and not storage.exists(KEY_PATH):
                raise ErasureKeyError(f"this lake's erasure key was given by {ENV_KEY} (it has no {KEY_PATH}): "
                                      f"set {ENV_KEY} to it; a new key would let erased orders back",
                                      uri=storage.root)
            if create:
                storage.write_once(KEY_PATH, secrets.token_hex(32).encode(), mode=0o600)
        key, source = storage.read_bytes(KEY_PATH).strip(), KEY_PATH
    _check_key(storage, key, source)
    return key


CHECK_PATH = "_erasure/key.check"
_CHECK_LABEL = b"delta-release/erasure-key-check/1"


class ErasureKeyError(SafetyError):
    """The erasure key in use is not the lake's (exit 3): erased orders would not be recognised."""


def _key_check(key: bytes) -> bytes:
    """What `_erasure/key.check` holds: an HMAC of a fixed label under the key (it tells keys apart, and
    says no more about the key than the ledger's keyed hashes of order ids already do)."""
    mark = hmac.new(key, _CHECK_LABEL, hashlib.sha256).hexdigest()
    return json.dumps({"format": "delta-release/erasure-key-check/1", "check": mark}, sort_keys=True).encode()


def _check_key(storage: Storage, key: bytes, source: str) -> None:
    """Refuse a key that is not the lake's own. The first process to use a key on a lake records its check
    (create-only; a lake written before the check gets it then), every later one compares with it. On a
    lake without the check, a key from the environment must equal the lake's key file, if it has one."""
    mine = _key_check(key)
    for _ in range(2):
        try:
            stored: bytes | None = storage.read_bytes(CHECK_PATH)
        except FileNotFoundError:
            stored = None
        if stored is not None:
            if stored.strip() != mine:
                raise ErasureKeyError(f"the erasure key from {source} is not this lake's key ({CHECK_PATH} "
                                      f"does not match): erased orders would not be recognised; give the key "
                                      f"this lake was written with", uri=storage.root)
            return
        if source == ENV_KEY and storage.exists(KEY_PATH) and storage.read_bytes(KEY_PATH).strip() != key:
            raise ErasureKeyError(f"the erasure key from {ENV_KEY} is not this lake's key ({KEY_PATH}): "
                                  f"erased orders would not be recognised; unset it or give the lake's key",
                                  uri=storage.root)
        try:
            if storage.write_once(CHECK_PATH, mine):
                return
        except OSError:
            return  # a reader without write access: nothing recorded, nothing to compare with
        # another process recorded its check first: compare with it


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
    owner: str | None = None  # "<host tag>-<pid>" of the erasing process while pending (never an id)
    # the request's retention: {"raw_days": float, "backup_days": float (0: no backups)}; None before it
    # was recorded (entries of earlier versions), then the defaults apply
    retention: dict[str, float] | None = None
    # the id's length in characters, sealed under the lake key (`ErasureLedger.seal_length`): what lets
    # `quarantine --show` find the id inside other text by hashing only windows of that length; None in
    # entries written before it was recorded (then every length an id may have is tried)
    sealed_length: int | None = None

    @property
    def done(self) -> bool:
        return self.state == "done" and self.exposed is not None

    def holds(self, version: int) -> bool:
        """True when `version` still holds this subject (only meaningful for a done entry)."""
        return any(lo <= version <= hi for lo, hi in self.exposed or [])


_LENGTH_LABEL = b"delta-release/erased-id-length/1:"
FILTER_LABEL = b"delta-release/rebase-filter/1\0"  # derives the key of the evidence's key filters
MEMO_MAX = 1 << 18  # ids whose keyed hash stays in memory (about 40 MiB at most)


def _hmac_pads(key: bytes) -> tuple[hashlib._Hash, hashlib._Hash]:
    """The SHA-256 states after HMAC's inner and outer key pads (RFC 2104)."""
    block = hashlib.sha256().block_size
    if len(key) > block:
        key = hashlib.sha256(key).digest()
    key = key.ljust(block, b"\0")
    return (hashlib.sha256(bytes(b ^ 0x36 for b in key)), hashlib.sha256(bytes(b ^ 0x5C for b in key)))


class KeyedHash:
    """HMAC-SHA256 under one key, of one id (the padded key states computed once) or of a whole column
    (in Rust where polars-hash is vouched for: bulk.py)."""

    def __init__(self, key: bytes) -> None:
        self._inner, self._outer = _hmac_pads(key)
        self._column = ColumnHmac(key, lambda ids: b"".join(map(self.digest, ids)))

    def digest(self, subject_id: str) -> bytes:
        inner = self._inner.copy()
        inner.update(subject_id.encode("utf-8"))
        outer = self._outer.copy()
        outer.update(inner.digest())
        return outer.digest()

    def digests(self, subject_ids: Iterable[str] | pl.Series) -> bytes:
        """The 32-byte digest of each id, concatenated in order."""
        if isinstance(subject_ids, pl.Series):
            fast = self._column.digests(subject_ids)
            if fast is not None:
                return fast
            subject_ids = subject_ids.to_list()
        return b"".join(map(self.digest, subject_ids))


class ErasureLedger:
    def __init__(self, storage: Storage, key: bytes) -> None:
        self._storage = storage
        self._key = key
        self._cache: tuple[tuple[tuple[str, int], ...], list[ErasureEntry]] | None = None
        self._hash = KeyedHash(key)
        self._digest = self._hash.digest
        self._memo: dict[str, str] = {}
        # commit evidence's rebase filters (commit/rebase.py): under a key of their own, so a filter in the
        # Delta log (which outlives vacuum and erasure) cannot be matched against this ledger's hashes
        self._filter_hash = KeyedHash(hashlib.sha256(FILTER_LABEL + key).hexdigest().encode())

    def subject_key(self, subject_id: str) -> str:
        """HMAC-SHA256 of the id under the lake secret, hex (equal to `hmac.new(key, id, sha256)`). The
        padded key states are computed once: a bucket split or an index rebuild hashes millions of ids,
        and `hmac.new` per id costs 2.7x as much. Recent results are kept in memory for the per-id callers
        (bounded: cleared when full); the bulk paths use `subject_digests`."""
        known = self._memo.get(subject_id)
        if known is not None:
            return known
        digest = self._digest(subject_id).hex()
        if len(self._memo) >= MEMO_MAX:
            self._memo.clear()
        self._memo[subject_id] = digest
        return digest

    def subject_digests(self, subject_ids: Iterable[str] | pl.Series) -> bytes:
        """The raw 32-byte HMAC-SHA256 of each id, concatenated in order (`bytes.fromhex(subject_key(id))`
        for each, without hex or memo). The bulk paths (a batch's buckets, key-index lookups, records and
        rebuilds, the erasure filter) hash each distinct key once with it. A Polars String column is
        hashed in Rust outside the GIL where polars-hash is vouched for (`bulk.ColumnHmac`), else here."""
        return self._hash.digests(subject_ids)

    def filter_digests(self, subject_ids: Iterable[str] | pl.Series) -> bytes:
        """The 32-byte digest of each id for the key filters of commit evidence (commit/rebase.py): an
        HMAC-SHA256 under a key derived from the lake secret (sha256 of FILTER_LABEL + secret), not the
        ledger's. Without the secret nobody can tell which ids a filter holds, and with the ledger alone
        nobody can test an erased subject's hash against the filters of old commits."""
        return self._filter_hash.digests(subject_ids)

    def seal_length(self, subject_id: str) -> int:
        """`len(subject_id)` XOR 32 bits of an HMAC of the subject's hash under the lake key (a pad of its
        own per subject): without the key the stored number says nothing about the length, with it the
        length is read back (`id_lengths`), and a holder of the key could as well hash guessed ids."""
        return len(subject_id) ^ self._length_pad(self.subject_key(subject_id))

    def _length_pad(self, subject: str) -> int:
        return int.from_bytes(hmac.new(self._key, _LENGTH_LABEL + subject.encode(), hashlib.sha256).digest()[:4], "big")

    def id_lengths(self) -> set[int] | None:
        """The lengths (characters) of the erased ids, or None when an entry does not record its length."""
        out = set()
        for e in self.entries():
            if e.sealed_length is None:
                return None
            out.add(e.sealed_length ^ self._length_pad(e.subject))
        return out

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

    def is_erased(self, subject_id: str) -> bool:
        return self.subject_key(subject_id) in self.erased_subjects()

    def record(self, subject_id: str, *, version: int | None, erased_at: str, **fields: object) -> ErasureEntry:
        """Record (or replace) the entry of `subject_id`'s subject; the id itself is hashed here."""
        entry = ErasureEntry(subject=self.subject_key(subject_id), version=version, erased_at=erased_at,
                             sealed_length=self.seal_length(subject_id), **fields)  # type: ignore[arg-type]
        return self.write(entry)

    @staticmethod
    def _bytes(entry: ErasureEntry) -> bytes:
        return json.dumps(asdict(entry), indent=1, sort_keys=True).encode()

    def write(self, entry: ErasureEntry) -> ErasureEntry:
        """Create the entry of a new subject (create-only). If another process created it first, its
        entry stands and is returned (an erasure in flight or done: either way the subject is blocked)."""
        self._cache = None
        if self._storage.write_once(self._path(entry.subject), self._bytes(entry)):
            return entry
        stored = self._storage.read_bytes(self._path(entry.subject))
        return ErasureEntry(**json.loads(stored))

    def update(self, entry: ErasureEntry, **changes: object) -> ErasureEntry:
        """Replace `entry` (as read or written by this process) with `entry` plus `changes`, only if the
        stored entry is still exactly `entry` (compare-and-swap); else refuse: another erasure of the same
        subject moved it, and this one must re-run on what that one recorded."""
        path = self._path(entry.subject)
        new = replace(entry, **changes)  # type: ignore[arg-type]
        self._cache = None
        stored = self._storage.read_tagged(path)
        if stored is not None and stored[0] == self._bytes(entry) \
                and self._storage.replace_if(path, self._bytes(new), stored[1]):
            return new
        raise SafetyError("the erasure ledger entry of this subject changed concurrently "
                          "(another erasure of it is running or ran): run erase again", subject=entry.subject)

    def size_bytes(self) -> int:
        return sum(o.size for o in self._storage.list(SUBJECTS_PREFIX, recursive=False))
