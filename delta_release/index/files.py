"""File index: "which sha256 (and size) did a commit of ours record for this path?" and the running totals
of the table's history (bytes added, first and last commit time), without replaying every commit.

It answers what `_delta.history` answered by reading every commit's evidence: for a path, the record of
the NEWEST commit that registered it (a reused immutable name shows its latest content, as the history
read's `setdefault` over newest-first commits did; within one commit the first record of a path wins).
It holds paths' sha256 digests, the files' sha256, sizes and versions: no subject id, no payload.

Storage: flat files under `<lake>/_index/<table>/<table id>/files/` (local disk or S3), a tiered merge:

    d-<A>-<B>.fx    level 0: the files commits A..B registered (one per catch-up of versions A..B)
    r1-<A>-<B>.fx   level 1: FAN level-0 files merged      r2-<A>-<B>.fx  level 2: FAN level-1 files merged
    b-<B>.fx        base: every path registered by versions 0..B; FAN level-2 files fold into a new base
    state.json      {"version": W, "table_id", "bytes_added", "first_ts", "last_ts"}: the totals of
                    versions 0..W, and every version up to W is in some file above (atomic replace)

Each `.fx` file is create-only (named by the versions it covers: two writers that write the same range
write the same bytes) and holds MAGIC, a count n, then columns of n rows sorted by the path's sha256:
path digest (32 bytes), file sha256 (32 raw bytes, all zero for a commit that recorded none), size (int64),
version (int64). Every row carries its version, so merging keeps the highest version per path whatever
files overlap (two racing writers' catch-ups may cover the same versions: their rows are identical).

Catching up to version T reads the log entries of the versions after the files' reach and after W, one
by one (`_delta.version_record`), writes one level-0 file, then `state.json` (files before the state that
covers them: a state a racing writer moves back is still true, it only causes more work later). Missing
or unreadable state, or no base: rebuilt once from the whole history (`_delta.history`). A file that does
not decode is deleted and its versions are read again from the log (a gap in the chain is refilled).
A lookup reads at most 3 * (FAN - 1) + 1 files (one binary search per file, memory-mapped on local disk),
whatever the number of versions; a commit's catch-up writes one small file, plus every FAN commits a
merge of FAN files, and every FAN**3 commits a new base (the one cost that grows with the table).
"""

from __future__ import annotations

import hashlib
import json
import struct
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from .. import _delta
from ..storage import Storage
from . import tiers
from .tiers import BASE, TierFile

if TYPE_CHECKING:
    from ..context import LakeContext

FOLDER = "files"
STATE = f"{FOLDER}/state.json"
MAGIC = b"DRFILES1"
HEADER = len(MAGIC) + 8
ROW = 32 + 32 + 8 + 8
FAN = 16
GRACE_VERSIONS = 8
NO_SHA = bytes(32)


@dataclass(frozen=True, slots=True)
class Recorded:
    """What the newest commit that registered a path recorded for it."""

    sha256: str | None
    size: int
    version: int


@dataclass(frozen=True, slots=True)
class Totals:
    """Running totals of versions 0..version: what `cost` needs for growth per day."""

    version: int
    bytes_added: int  # sum of the sizes every commit's evidence records (a file added twice counts twice)
    first_ts: int  # the earliest non-zero commit timestamp (ms), 0 when none
    last_ts: int  # the latest non-zero commit timestamp (ms), 0 when none


Run = tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]  # path digest S32, sha S32, size i8, version i8


def _empty() -> Run:
    return (np.zeros(0, dtype="S32"), np.zeros(0, dtype="S32"), np.zeros(0, dtype="<i8"),
            np.zeros(0, dtype="<i8"))


def _encode(run: Run) -> bytes:
    h, sha, size, ver = run
    return b"".join((MAGIC, struct.pack("<Q", len(h)), np.ascontiguousarray(h, dtype="S32").data,
                     np.ascontiguousarray(sha, dtype="S32").data, np.ascontiguousarray(size, dtype="<i8").data,
                     np.ascontiguousarray(ver, dtype="<i8").data))


class CorruptIndexFile(ValueError):
    def __init__(self, message: str, path: str) -> None:
        super().__init__(message)
        self.path = path


def _decode(buf: Any, path: str) -> Run:
    if len(buf) < HEADER or bytes(buf[:len(MAGIC)]) != MAGIC:
        raise CorruptIndexFile(f"not a file index file: {path}", path)
    (n,) = struct.unpack("<Q", bytes(buf[len(MAGIC):HEADER]))
    if len(buf) != HEADER + ROW * n:
        raise CorruptIndexFile(f"file index file of the wrong length: {path}", path)
    return (np.frombuffer(buf, dtype="S32", count=n, offset=HEADER),
            np.frombuffer(buf, dtype="S32", count=n, offset=HEADER + 32 * n),
            np.frombuffer(buf, dtype="<i8", count=n, offset=HEADER + 64 * n),
            np.frombuffer(buf, dtype="<i8", count=n, offset=HEADER + 72 * n))


def _newest(runs: list[Run]) -> Run:
    """One run sorted by path digest, the highest version's row for each (rows of one version and one
    path are identical: a commit's own duplicates are dropped when its rows are made)."""
    runs = [r for r in runs if len(r[0])]
    if not runs:
        return _empty()
    h, sha, size, ver = (np.concatenate([r[i] for r in runs]) for i in range(4))
    order = np.lexsort((-ver, h))  # by digest, then newest first
    h, sha, size, ver = h[order], sha[order], size[order], ver[order]
    keep = np.ones(len(h), dtype=bool)
    keep[1:] = h[1:] != h[:-1]
    return (np.ascontiguousarray(h[keep]), np.ascontiguousarray(sha[keep]), np.ascontiguousarray(size[keep]),
            np.ascontiguousarray(ver[keep]))


def path_digest(path: str) -> bytes:
    return hashlib.sha256(path.encode()).digest()


def _rows(records: Iterable[_delta.CommitRecord]) -> Run:
    """The rows the evidence of `records` registers (for one path: the first record of the newest commit)."""
    h: list[bytes] = []
    sha: list[bytes] = []
    size: list[int] = []
    ver: list[int] = []
    for rec in records:
        seen: set[bytes] = set()
        for f in (rec.evidence or {}).get("files", []):
            d = path_digest(str(f["path"]))
            if d in seen:
                continue
            seen.add(d)
            digest = f.get("sha256")
            h.append(d)
            sha.append(bytes.fromhex(digest) if isinstance(digest, str) and len(digest) == 64 else NO_SHA)
            size.append(int(f.get("size") or 0))
            ver.append(rec.version)
    if not h:
        return _empty()
    return _newest([(np.array(h, dtype="S32"), np.array(sha, dtype="S32"), np.array(size, dtype="<i8"),
                     np.array(ver, dtype="<i8"))])


def _add_totals(totals: Totals, records: Iterable[_delta.CommitRecord], version: int) -> Totals:
    added, first, last = totals.bytes_added, totals.first_ts, totals.last_ts
    for rec in records:
        added += sum(int(f.get("size") or 0) for f in (rec.evidence or {}).get("files", []))
        if rec.timestamp:
            first = rec.timestamp if not first else min(first, rec.timestamp)
            last = max(last, rec.timestamp)
    return Totals(version=version, bytes_added=added, first_ts=first, last_ts=last)


class FileIndex:
    def __init__(self, index: Storage, uri: str, options: dict[str, str]) -> None:
        self.index, self.uri, self.options = index, uri, options
        self.files_read = 0  # index files opened by this object (tests and benchmarks watch it)
        self.versions_read = 0  # log entries read by catch-ups of this object
        self.rebuilds = 0  # whole-history rebuilds by this object

    # -- files ------------------------------------------------------------------------------------
    def _files(self) -> list[TierFile]:
        return [f for o in self.index.list(FOLDER, recursive=False) if (f := tiers.parse(o.path, ".fx")) is not None]

    def _load(self, f: TierFile) -> Run:
        """The file's rows; FileNotFoundError when a merge deleted it since it was listed, CorruptIndexFile
        when it does not decode."""
        self.files_read += 1
        return _decode(tiers.read(self.index, f.path)[0], f.path)

    def _write(self, level: int, first: int, last: int, run: Run) -> None:
        self.index.write_once(tiers.name(FOLDER, ".fx", level, first, last), _encode(run))

    def state(self) -> Totals | None:
        """The totals `state.json` holds, None when missing, unreadable or written for another table."""
        try:
            doc = json.loads(self.index.read_bytes(STATE))
            if doc.get("table_id") != _delta.table_id(self.uri, self.options):
                return None
            return Totals(version=int(doc["version"]), bytes_added=int(doc["bytes_added"]),
                          first_ts=int(doc["first_ts"]), last_ts=int(doc["last_ts"]))
        except (FileNotFoundError, OSError, ValueError, KeyError, TypeError, AttributeError):
            return None

    def _set_state(self, totals: Totals) -> None:
        doc = {"version": totals.version, "table_id": _delta.table_id(self.uri, self.options),
               "bytes_added": totals.bytes_added, "first_ts": totals.first_ts, "last_ts": totals.last_ts}
        self.index.write_bytes(STATE, json.dumps(doc, sort_keys=True).encode())

    def _view(self, files: list[TierFile]) -> tuple[list[TierFile], int] | None:
        """The files a lookup reads (the newest base, then the chain after it) and the version they reach;
        None without a base."""
        bases = [f for f in files if f.level == BASE]
        if not bases:
            return None
        base = max(bases, key=lambda b: b.last)
        chain = tiers.chain(files, base.last, max(f.last for f in files))
        return [base, *chain], (chain[-1].last if chain else base.last)

    # -- catching up ------------------------------------------------------------------------------
    def catch_up(self, upto: int | None = None) -> Totals:
        """Make the index valid for `upto` (default: the newest version); returns the totals there."""
        if upto is None:
            upto = _delta.latest_version(self.uri, self.options)
            if upto is None:
                return Totals(version=-1, bytes_added=0, first_ts=0, last_ts=0)
        for _ in range(5):  # a racing merge deleted a file we listed: list again
            try:
                return self._catch_up(upto)
            except FileNotFoundError:
                continue
        return self._catch_up(upto)

    def _catch_up(self, upto: int) -> Totals:
        state = self.state()
        view = self._view(self._files()) if state is not None else None
        if state is None or view is None:
            return self.rebuild(upto)
        reach = view[1]
        if state.version >= upto and reach >= upto:
            return state
        start = min(reach, state.version)
        records: list[_delta.CommitRecord] = []
        for version in range(start + 1, upto + 1):
            rec = _delta.version_record(self.uri, self.options, version)
            self.versions_read += 1
            if rec is None:  # a log entry we cannot read (not committed, or gone): the whole history
                return self.rebuild(upto)
            records.append(rec)
        if reach < upto:
            self._write(0, reach + 1, upto, _rows(r for r in records if r.version > reach))
            self.maintain()
        totals = state if state.version >= upto else _add_totals(
            state, (r for r in records if r.version > state.version), upto)
        if totals.version != state.version:
            self._set_state(totals)
        return totals

    def rebuild(self, upto: int) -> Totals:
        """The whole index from the history up to `upto`, once (a missing or unreadable state or base).
        Deletes no file: a base hides every file up to its version."""
        self.rebuilds += 1
        records = [r for r in _delta.history(self.uri, self.options) if r.version <= upto]
        records.sort(key=lambda r: r.version)
        run = _rows(records)
        name = tiers.name(FOLDER, ".fx", BASE, 0, upto)
        if not self.index.write_once(name, _encode(run)):
            try:  # a base of that version exists: keep it if it decodes, else replace it
                self._load(TierFile(name, BASE, 0, upto))
            except (CorruptIndexFile, FileNotFoundError):
                self.index.write_bytes(name, _encode(run))
        totals = _add_totals(Totals(version=-1, bytes_added=0, first_ts=0, last_ts=0), records, upto)
        self._set_state(totals)
        return totals

    def maintain(self) -> None:
        """Merge full tiers (FAN level-0 files -> a level-1 file -> a level-2 file -> a new base), then
        delete what merges replaced more than GRACE_VERSIONS versions ago."""
        try:
            tiers.retry_listing(self._maintain)
        except CorruptIndexFile as exc:  # never merge it: its versions are read again from the log
            self.index.delete(exc.path)

    def _maintain(self) -> None:
        files = self._files()
        for level in (0, 1, 2):
            if not any(f.level == BASE for f in files):
                return
            above = max(f.last for f in files if f.level > level)
            units = tiers.chain(files, above, max(f.last for f in files), level)
            if len(units) < FAN:
                continue
            units = units[:FAN]
            runs = [self._load(f) for f in units]
            if level < 2:
                self._write(level + 1, units[0].first, units[-1].last, _newest(runs))
            else:
                base = next(b for b in files if b.level == BASE and b.last == above)
                self._write(BASE, 0, units[-1].last, _newest([self._load(base), *runs]))
            files = self._files()
        self._tidy(files)

    def _tidy(self, files: list[TierFile]) -> None:
        for f in tiers.superseded(files, GRACE_VERSIONS):
            self.index.delete(f.path)

    # -- reading ----------------------------------------------------------------------------------
    def lookup(self, paths: Iterable[str], *, upto: int | None = None) -> dict[str, Recorded]:
        """path -> what the newest commit registering it recorded, for each of `paths` some commit of ours
        registered (others are absent). Catches up to `upto` (default: the newest version) first."""
        paths = list(dict.fromkeys(paths))
        for attempt in range(5):
            self.catch_up(upto)
            try:
                return self._lookup(paths)
            except FileNotFoundError:  # a merge deleted a file we listed: list again
                if attempt == 4:
                    raise
            except CorruptIndexFile:
                if attempt == 4:
                    raise
        raise AssertionError("unreachable")

    def _lookup(self, paths: list[str]) -> dict[str, Recorded]:
        if not paths:
            return {}
        view = self._view(self._files())
        if view is None:
            raise FileNotFoundError("file index: no base")
        queries: np.ndarray | None = None  # hashed at the first file with rows: an empty index hashes nothing
        best = np.full(len(paths), -1, dtype="<i8")
        sha = np.zeros(len(paths), dtype="S32")
        size = np.zeros(len(paths), dtype="<i8")
        for f in view[0]:
            try:
                h, fsha, fsize, fver = self._load(f)
            except CorruptIndexFile:
                self.index.delete(f.path)  # its versions are read again from the log by the next catch-up
                raise
            if not len(h):
                continue
            if queries is None:
                queries = np.array([path_digest(p) for p in paths], dtype="S32")
            idx = np.searchsorted(h, queries)
            inside = idx < len(h)
            hit = np.zeros(len(paths), dtype=bool)
            hit[inside] = h[idx[inside]] == queries[inside]
            newer = np.zeros(len(paths), dtype=bool)
            newer[hit] = fver[idx[hit]] > best[hit]
            at = idx[newer]
            best[newer], sha[newer], size[newer] = fver[at], fsha[at], fsize[at]
        out: dict[str, Recorded] = {}
        for i in np.nonzero(best >= 0)[0].tolist():
            digest = bytes(sha[i]).ljust(32, b"\0")  # numpy strips trailing zero bytes of S32 values
            out[paths[i]] = Recorded(sha256=None if digest == NO_SHA else digest.hex(), size=int(size[i]),
                                     version=int(best[i]))
        return out


# -- the callers' entry points ---------------------------------------------------------------------
def file_index(lake: LakeContext, table: str) -> FileIndex | None:
    """The file index of `table` (`<lake>/_index/<table>/<Delta table id>/`), None when indexes are off or
    there is no table."""
    from . import enabled

    if not enabled():
        return None
    uri = lake.table_uri(table)
    table_id = _delta.table_id(uri, lake.options)
    if table_id is None:
        return None
    return FileIndex(lake.storage.child(f"_index/{table}/{table_id}"), uri, lake.options)


def history_files(uri: str, options: dict[str, str]) -> dict[str, str | None]:
    """The reference answer (every commit's evidence, newest first): path -> sha256 recorded for it."""
    out: dict[str, str | None] = {}
    for entry in _delta.history(uri, options):
        for f in (entry.evidence or {}).get("files", []):
            out.setdefault(f["path"], f.get("sha256"))
    return out


def history_totals(uri: str, options: dict[str, str]) -> Totals:
    """The reference totals, from every commit."""
    records = _delta.history(uri, options)
    return _add_totals(Totals(version=-1, bytes_added=0, first_ts=0, last_ts=0), records,
                       max((r.version for r in records), default=-1))


def recorded_sha256(lake: LakeContext, table: str, paths: Iterable[str]) -> dict[str, str | None]:
    """path -> sha256 the newest commit of ours registering it recorded, for those of `paths` some commit
    registered; from the file index (whole history only when indexes are off)."""
    paths = list(paths)
    if lake.latest_version(table) is None or not paths:
        return {}
    fi = file_index(lake, table)
    if fi is None:
        every = history_files(lake.table_uri(table), lake.options)
        return {p: every[p] for p in paths if p in every}
    return {p: r.sha256 for p, r in fi.lookup(paths).items()}


def history_growth(lake: LakeContext, table: str) -> Totals:
    """Bytes added by every commit and the first/last commit time; from the file index's totals."""
    if lake.latest_version(table) is None:
        return Totals(version=-1, bytes_added=0, first_ts=0, last_ts=0)
    fi = file_index(lake, table)
    if fi is None:
        return history_totals(lake.table_uri(table), lake.options)
    return fi.catch_up()
