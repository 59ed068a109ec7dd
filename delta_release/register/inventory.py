"""The inventory gate for a Delta table written by others.

At a version: every data file the log references exists with the size the log records, and every
deletion-vector file it needs exists and is long enough. Under the table root: files that no retained
log entry references are reported (they do not fail the gate; a writer may have left them, or vacuum
may not have run). Hidden and underscore paths (`_delta_log/`, `.crc` side files) are not data.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import Any

from .. import _delta
from ..errors import GateError
from ..storage import Storage
from .log import LogParseError, read_log, version_deletion_vectors
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
    unreferenced: list[str] = field(default_factory=list)
    unreadable_log: list[str] = field(default_factory=list)  # superseded log files that do not parse
    digest: str = ""

    @property
    def ok(self) -> bool:
        return not (self.missing or self.size_mismatch or self.external)

    def to_json(self) -> dict[str, Any]:
        return {"ok": self.ok, "location": self.location, "version": self.version, "files": self.files,
                "bytes": self.bytes, "deletion_vectors": self.deletion_vectors, "missing": self.missing,
                "size_mismatch": self.size_mismatch, "external": self.external,
                "unreferenced": self.unreferenced, "unreadable_log": self.unreadable_log, "digest": self.digest}

    def raise_for_failure(self, table: str) -> None:
        if self.ok:
            return
        problems = [(p, "missing") for p in self.missing] + [(p, "size_mismatch") for p in self.size_mismatch]
        problems += [(p, "external") for p in self.external]
        path, code = problems[0]
        raise GateError(
            f"inventory gate failed for {table} at version {self.version}: {len(self.missing)} missing, "
            f"{len(self.size_mismatch)} with a wrong size, {len(self.external)} outside the table root"
            f" (first: {path}: {code})",
            path=path, mismatch=code, table=table, version=self.version, missing=self.missing,
            size_mismatch=self.size_mismatch, external=self.external, unreferenced=self.unreferenced)


def _is_data_path(rel: str) -> bool:
    return not any(part.startswith(("_", ".")) for part in rel.split("/"))


def _relative(storage: Storage, path: str) -> str | None:
    """A log path relative to the table root, decoded as the protocol says; None when outside it."""
    return table_relative(path, storage.root)


def check_inventory(storage: Storage, version: int, *, unreferenced: bool = True,
                    table: str | None = None) -> InventoryReport:
    """Compare what `version` of the table at `storage` references with what is on storage.

    The live files come from deltalake's log replay; a log it cannot replay is refused (LogProblemError,
    exit 3) with the reason.
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
        dv = vectors.get(rel)
        if dv is None:
            continue
        dv_count += 1
        dv_rel = _relative(storage, dv.path) if is_absolute(dv.path) else dv.path
        if dv_rel is None:
            external.append(dv.path)
            continue
        digest.update(f"{dv_rel}\t{dv.offset}\t{dv.size}\n".encode())
        dv_size = listing.get(dv_rel)
        if dv_size is None:
            missing.append(dv_rel)
        elif dv_size < dv.needed_bytes:
            wrong.append(dv_rel)
    stray: list[str] = []
    unreadable: list[str] = []
    if unreferenced:
        log = read_log(storage)
        unreadable = log.unreadable
        stray = sorted(p for p in listing if _is_data_path(p) and p not in log.referenced)
    return InventoryReport(location=storage.root, version=version, files=len(entries), bytes=total,
                           deletion_vectors=dv_count, missing=sorted(set(missing)),
                           size_mismatch=sorted(set(wrong)), external=sorted(set(external)),
                           unreferenced=stray, unreadable_log=unreadable, digest=digest.hexdigest())
