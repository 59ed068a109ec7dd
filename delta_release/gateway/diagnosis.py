"""Why a read failed: the gateway's diagnosis of a failed read of a version it resolved.

A read that raised (Polars found a file missing, or panicked on a truncated one) is turned into the
refusal that names the version: `VacuumedVersionError` when files of the version are gone from storage
(with the vacuum record that removed them, erasure/vacuumlog.py, and the nearest readable version), a
`GateError` when a file is not what its commit recorded (size, then sha256), else the failure itself.
The diagnosis reads only after a failure; when it fails in turn (storage or the log unreachable: `OSError`,
a `DeltaReleaseError`), the original failure stands.
"""

from __future__ import annotations

import hashlib
from typing import TYPE_CHECKING, Any

from ..erasure.vacuumlog import removed_by, vacuumed_error
from ..errors import DeltaReleaseError, GateError
from ..index.files import recorded_sha256

if TYPE_CHECKING:
    from ..context import LakeContext as Lake


def _damaged(lake: Lake, table: str, version: int, store: Any) -> GateError | None:
    """A GateError for the first file of `version` that is not what was committed (a truncated or
    overwritten file, on which Polars may panic), else None: first the size its log entry records (a stat
    each), then, all sizes equal, the sha256 our commit's evidence recorded (each file read once, stopping
    at the first that differs; this runs only after a read failed)."""
    files = lake.gateway.files(table, version)
    for f in files:
        size = store.size(f.path)
        if size is not None and size != f.size:
            return GateError(f"data file {f.path} of {table} version {version} is damaged: {size} bytes on "
                             f"storage, its log entry says {f.size}", path=f.path, mismatch="size",
                             table=table, version=version)
    recorded = recorded_sha256(lake, table, [f.path for f in files])
    for f in files:
        want = recorded.get(f.path)
        if not want:
            continue
        digest = hashlib.sha256()
        with store.open_input(f.path) as handle:
            while block := handle.read(8 << 20):
                digest.update(block)
        if digest.hexdigest() != want:
            return GateError(f"data file {f.path} of {table} version {version} is damaged: its sha256 is not "
                             "the one its commit recorded", path=f.path, mismatch="sha256",
                             table=table, version=version)
    return None


def missing_files_error(lake: Lake, table: str, version: int | None, exc: BaseException) -> BaseException:
    """For a read that failed (`exc`): a VacuumedVersionError when files of the version are missing from
    storage (a vacuum of ours, or files removed by someone else), a GateError when one has the wrong size
    (damaged), else `exc` itself."""
    try:
        pub = lake.published(table)
        if pub is None:
            return exc
        version = pub.version if version is None else version
        store = lake.table_storage(table)

        def present(v: int) -> bool:
            try:
                return all(store.exists(f.path) for f in lake.gateway.files(table, v))
            except DeltaReleaseError:  # refused (erased subject, vacuumed): not readable
                return False

        if present(version):
            return _damaged(lake, table, version, store) or exc
        return vacuumed_error(lake, table, version, pub.version, removed_by(lake, table, version),
                              present=present)
    except (OSError, DeltaReleaseError):  # storage or the log failed too: the original failure stands
        return exc
