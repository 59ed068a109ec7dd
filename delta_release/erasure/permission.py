"""Snapshot permission: a version that still holds an erased subject may not be read or restored.

A done ledger entry names the version ranges that hold its subject, so the usual check reads no data.
An entry still pending (its erasure commit not yet recorded, e.g. after a crash) is checked by hashing
the distinct keys of the version itself; versions are immutable, so that answer is cached. A version
whose files are gone from storage (`OSError`) cannot be proven free of it, so it is held to expose it;
any other failure of that scan is raised, never turned into an answer.

A refusal names the nearest version that may be read (`nearest_hint`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import polars as pl

from .. import _delta
from ..errors import ErasureExposureError
from .ledger import ErasureEntry

if TYPE_CHECKING:
    from ..context import LakeContext

_SCAN_CACHE: dict[tuple[str, int, frozenset[str]], frozenset[str]] = {}


def _keyed_table(lake: LakeContext, table: str) -> str | None:
    tdef = lake.tables.get(table)
    return tdef.key if tdef is not None else None


def subjects_in_version(lake: LakeContext, table: str, version: int, subjects: frozenset[str]) -> frozenset[str]:
    """Which of `subjects` (keyed hashes) `version` holds, by hashing its distinct keys (cached)."""
    key = _keyed_table(lake, table)
    if key is None or not subjects:
        return frozenset()
    uri = lake.table_uri(table)
    cache_key = (uri, version, subjects)
    if cache_key not in _SCAN_CACHE:
        try:
            keys = (_delta.scan(uri, lake.options, version)
                    .select(pl.col(key).unique()).collect()[key].drop_nulls().to_list())
        except OSError:  # its files are gone (vacuumed or removed): nothing proves it no longer holds them
            return subjects
        hashes = {lake.erasures.subject_key(k) for k in keys}
        _SCAN_CACHE[cache_key] = frozenset(subjects & hashes)
    return _SCAN_CACHE[cache_key]


def exposing_entries(lake: LakeContext, table: str, version: int, *,
                     entries: list[ErasureEntry] | None = None) -> list[ErasureEntry]:
    """The erasure entries whose subject `version` of `table` still holds (`entries`: the ledger, when
    the caller already read it)."""
    if _keyed_table(lake, table) is None:
        return []
    entries = [e for e in (lake.erasures.entries() if entries is None else entries) if e.table == table]
    out = [e for e in entries if e.done and e.holds(version)]
    pending = frozenset(e.subject for e in entries if not e.done)
    if pending:
        held = subjects_in_version(lake, table, version, pending)
        out += [e for e in entries if e.subject in held]
    return out


def snapshot_allowed(lake: LakeContext, table: str, version: int) -> bool:
    return not exposing_entries(lake, table, version)


def resume_command(lake: LakeContext) -> str:
    """The command that completes an erasure a killed writer left pending (any writer also does)."""
    return f"delta-release --lake {lake.storage.uri()} erase --resume"


def exposure_error(table: str, version: int, count: int, *, action: str = "reading", hint: str = "",
                   resume: str | None = None) -> ErasureExposureError:
    """The refusal; it names the version and how many subjects, never which ones (`hint`: the nearest
    readable version). `resume`: an erasure is pending (its writer was killed before its commit): the
    message names the command that completes it."""
    message = (f"{action} version {version} of {table} would expose an erased subject"
               f" ({count} erased subject(s) still held by that version){hint}")
    fields: dict[str, object] = {"table": table, "version": version, "erased_subjects": count}
    if resume is not None:
        message += (f"; an erasure was interrupted before its commit: run `{resume}` (or any writer: ingest,"
                    " replay, erase, rollback, run, publish) to complete it")
        fields["resume"] = resume
    return ErasureExposureError(message, **fields)


def pending_resume(lake: LakeContext, exposing: list[ErasureEntry]) -> str | None:
    """The resume command when one of `exposing` is still pending, else None."""
    return resume_command(lake) if any(not e.done for e in exposing) else None


def check_snapshot(lake: LakeContext, table: str, version: int) -> None:
    """Raise ErasureExposureError when `version` of `table` still holds an erased subject."""
    exposing = exposing_entries(lake, table, version)
    if exposing:
        raise exposure_error(table, version, len(exposing), hint=nearest_hint(lake, table, version),
                             resume=pending_resume(lake, exposing))


def nearest_readable(lake: LakeContext, table: str, version: int) -> int | None:
    """The allowed version closest to `version` (the newer one on a tie), or None."""
    latest = lake.latest_version(table)
    if latest is None:
        return None
    for distance in range(1, latest + 1):
        for v in (version + distance, version - distance):
            if 0 <= v <= latest and snapshot_allowed(lake, table, v):
                return v
    return None


def nearest_hint(lake: LakeContext, table: str, version: int) -> str:
    """"; the nearest readable version is N" for a refusal's message, or "" when none is."""
    v = nearest_readable(lake, table, version)
    return "" if v is None else f"; the nearest readable version is {v}"
