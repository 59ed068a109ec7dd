"""The inventory gate for a Delta table written by others.

At a version: every data file the log references exists with the size the log records, and every
deletion-vector file its live adds reference (from JSON commits, a classic or multi-part checkpoint, or a
v2 checkpoint's sidecars: `log.version_deletion_vectors`) exists and holds every vector the log places
in it (`offset` + 4-byte length + `sizeInBytes` + 4-byte checksum). With `verify_vectors` (register, and
a read whose engine failed) each vector's bytes are read too: the file's version byte, the length the
file records against `sizeInBytes`, and the CRC-32 of the vector (PROTOCOL.md, Deletion Vector Format).
Under the table root: files that no retained log entry references are reported (they do not fail the
gate; a writer may have left them, or vacuum may not have run). Hidden and underscore paths
(`_delta_log/`, `.crc` side files) are not data.
"""

from __future__ import annotations

import hashlib
import struct
import zlib
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from .. import _delta
from ..errors import GateError
from ..storage import Storage
from .log import DeletionVectorRef, LogParseError, read_log, version_deletion_vectors
from .paths import is_absolute, table_relative
from .problems import LogProblemError, log_guard


@dataclass(frozen=True, slots=True, kw_only=True)
class InventoryReport:
    location: str
    version: int
    files: int
    bytes: int
    deletion_vectors: int
    missing: list[str] = field(default_factory=list)
    size_mismatch: list[str] = field(default_factory=list)
    external: list[str] = field(default_factory=list)  # absolute references outside the table root
    damaged: list[str] = field(default_factory=list)  # deletion-vector files whose bytes the log contradicts
    unreferenced: list[str] = field(default_factory=list)
    unreadable_log: list[str] = field(default_factory=list)  # superseded log files that do not parse
    digest: str = ""

    @property
    def ok(self) -> bool:
        return not (self.missing or self.size_mismatch or self.external or self.damaged)

    def to_json(self) -> dict[str, Any]:
        return {"ok": self.ok, "location": self.location, "version": self.version, "files": self.files,
                "bytes": self.bytes, "deletion_vectors": self.deletion_vectors, "missing": self.missing,
                "size_mismatch": self.size_mismatch, "external": self.external, "damaged": self.damaged,
                "unreferenced": self.unreferenced, "unreadable_log": self.unreadable_log, "digest": self.digest}

    def raise_for_failure(self, table: str) -> None:
        if self.ok:
            return
        problems = [(p, "missing") for p in self.missing] + [(p, "size_mismatch") for p in self.size_mismatch]
        problems += [(p, "external") for p in self.external] + [(p, "damaged") for p in self.damaged]
        path, code = problems[0]
        damaged = f", {len(self.damaged)} damaged" if self.damaged else ""
        raise GateError(
            f"inventory gate failed for {table} at version {self.version}: {len(self.missing)} missing, "
            f"{len(self.size_mismatch)} with a wrong size, {len(self.external)} outside the table root{damaged}"
            f" (first: {path}: {code})",
            path=path, mismatch=code, table=table, version=self.version, missing=self.missing,
            size_mismatch=self.size_mismatch, external=self.external, damaged=self.damaged,
            unreferenced=self.unreferenced)


def _is_data_path(rel: str) -> bool:
    return not any(part.startswith(("_", ".")) for part in rel.split("/"))


def _relative(storage: Storage, path: str) -> str | None:
    """A log path relative to the table root, decoded as the protocol says; None when outside it."""
    return table_relative(path, storage.root)


def check_inventory(storage: Storage, version: int, *, unreferenced: bool = True, table: str | None = None,
                    verify_vectors: bool = False) -> InventoryReport:
    """Compare what `version` of the table at `storage` references with what is on storage.

    The live files come from deltalake's log replay; a log it cannot replay is refused (LogProblemError,
    exit 3) with the reason. `verify_vectors`: read each deletion vector's bytes too (`vector_damage`).
    """
    name = table or storage.root
    with log_guard(name, version):
        entries = _delta.file_entries(storage.root, storage.storage_options, version)
    try:
        vectors = version_deletion_vectors(storage, version)
    except LogParseError as exc:
        raise LogProblemError(name, version, "corrupt_log", f"{exc.path}: {exc.detail}") from exc
    listing = {o.path: o.size for o in storage.list("")}
    missing: list[str] = []
    wrong: list[str] = []
    external: list[str] = []
    total = 0
    dv_count = 0
    digest = hashlib.sha256()
    needed: dict[str, list[DeletionVectorRef]] = {}  # deletion-vector file -> the vectors placed in it
    for entry in entries:
        rel = _relative(storage, entry.path)
        if rel is None:
            external.append(entry.path)
            continue
        total += entry.size
        digest.update(f"{rel}\t{entry.size}\n".encode())
        found = listing.get(rel)
        if found is None:
            missing.append(rel)
        elif found != entry.size:
            wrong.append(rel)
        for dv in vectors.get(rel, []):
            dv_count += 1
            dv_rel = _relative(storage, dv.path) if is_absolute(dv.path) else dv.path
            if dv_rel is None:
                external.append(dv.path)
                continue
            digest.update(f"{dv_rel}\t{dv.offset}\t{dv.size}\n".encode())
            needed.setdefault(dv_rel, []).append(dv)
    for dv_rel, refs in sorted(needed.items()):
        dv_size = listing.get(dv_rel)
        if dv_size is None:
            missing.append(dv_rel)
        elif dv_size < max(dv.needed_bytes for dv in refs):
            wrong.append(dv_rel)
    damaged = [] if not verify_vectors else [
        p for p, refs in sorted(needed.items()) if p not in missing and p not in wrong
        and vector_damage(storage, p, refs) is not None]
    stray: list[str] = []
    unreadable: list[str] = []
    if unreferenced:
        log = read_log(storage)
        unreadable = log.unreadable
        stray = sorted(p for p in listing if _is_data_path(p) and p not in log.referenced)
    return InventoryReport(location=storage.root, version=version, files=len(entries), bytes=total,
                           deletion_vectors=dv_count, missing=sorted(set(missing)),
                           size_mismatch=sorted(set(wrong)), external=sorted(set(external)), damaged=damaged,
                           unreferenced=stray, unreadable_log=unreadable, digest=digest.hexdigest())


_PORTABLE_MAGIC = 1681511377  # RoaringBitmapArray, portable serialization (little endian)


def vector_damage(storage: Storage, rel: str, refs: Iterable[DeletionVectorRef]) -> str | None:
    """What is wrong with the deletion-vector file `rel` for the vectors `refs` the log places in it (None:
    nothing). PROTOCOL.md, Deletion Vector Format: a version byte (1), then at each vector's `offset` its
    length (4 bytes, big endian; must equal `sizeInBytes`), the serialized bitmap (starting with the
    portable RoaringBitmapArray magic, little endian) and the CRC-32 of those `sizeInBytes` bytes (big
    endian)."""
    try:
        data = storage.read_bytes(rel)
    except OSError as exc:
        return f"unreadable: {type(exc).__name__}"
    if not data or data[0] != 1:
        return f"version byte {data[:1].hex() or 'missing'}, expected 01"
    for dv in refs:
        start, end = dv.offset, dv.offset + 4 + dv.size + 4
        if len(data) < end:
            return f"{len(data)} bytes, the vector at {dv.offset} needs {end}"
        length, = struct.unpack(">I", data[start:start + 4])
        body = data[start + 4:start + 4 + dv.size]
        checksum, = struct.unpack(">I", data[end - 4:end])
        if length != dv.size:
            return f"the vector at {dv.offset} records {length} bytes, the log {dv.size}"
        if dv.size < 4 or struct.unpack("<I", body[:4])[0] != _PORTABLE_MAGIC:
            return f"the vector at {dv.offset} is no RoaringBitmapArray"
        if zlib.crc32(body) != checksum:
            return f"the vector at {dv.offset} fails its checksum"
    return None
