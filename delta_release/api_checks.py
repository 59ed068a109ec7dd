"""Argument checks for the Python API (`Lake.scan`, `Lake.read`, `Lake.erase`), so a wrong type is a clear
InputError naming the argument instead of a TypeError from deep inside Polars or deltalake; and the guard
that keeps `erase` of a never-seen id from silently blocking it forever."""

from __future__ import annotations

import operator
from typing import TYPE_CHECKING, Any

import polars as pl

from . import _delta
from .errors import InputError, SafetyError

if TYPE_CHECKING:
    from .context import LakeContext as Lake  # the facade and the context below it both serve


class UnknownSubjectError(SafetyError):
    """`erase` of an id the lake never saw: refused unless forced (it would block that id forever)."""


def check_table(table: Any, *, where: str = "table") -> str:
    if not isinstance(table, str) or not table:
        hint = (f"; for a version write version={table}" if isinstance(table, int) and not isinstance(table, bool)
                else "")
        raise InputError(f"{where} must be a table name (a non-empty string), got {type(table).__name__}"
                         f" {table!r}{hint}", argument=where)
    return table


def check_version(version: Any, *, where: str = "version") -> int | None:
    """None or a non-negative int (numpy ints accepted); '2', 2.0 and True are refused."""
    if version is None:
        return None
    if isinstance(version, bool) or isinstance(version, str | float | bytes):
        raise InputError(f"{where} must be an int or None, got {type(version).__name__} {version!r}",
                         argument=where)
    try:
        value = operator.index(version)
    except TypeError:
        raise InputError(f"{where} must be an int or None, got {type(version).__name__}", argument=where) from None
    if value < 0:
        raise InputError(f"{where} must be >= 0, got {value}", argument=where)
    return value


def nearest_readable(lake: Lake, table: str, version: int) -> int | None:
    """The allowed version closest to `version` (the newer one on a tie), or None."""
    from .erasure.permission import snapshot_allowed

    latest = lake.latest_version(table)
    if latest is None:
        return None
    for distance in range(1, latest + 1):
        for v in (version + distance, version - distance):
            if 0 <= v <= latest and snapshot_allowed(lake, table, v):
                return v
    return None


def nearest_hint(lake: Lake, table: str, version: int) -> str:
    try:
        v = nearest_readable(lake, table, version)
    except Exception:  # noqa: BLE001 - the hint must never turn a refusal into a crash
        return ""
    return "" if v is None else f"; the nearest readable version is {v}"


def require_seen(lake: Lake, subject_id: str, table: str) -> None:
    """Refuse to erase an id this lake never saw (not in the ledger, the latest version or any raw batch)."""
    from .erasure.pending import raw_batches_holding

    if lake.erasures.get(lake.erasures.subject_key(subject_id)) is not None:
        return
    key = lake.table_def(table).key
    latest = lake.latest_version(table)
    if key and latest is not None:
        hits = (_delta.scan(lake.table_uri(table), lake.options, latest)
                .filter(pl.col(key) == subject_id).select(pl.len()).collect().item())
        if hits:
            return
    if raw_batches_holding(lake, subject_id, as_order_id=True):
        return
    raise UnknownSubjectError(
        f"this lake never saw that id in {table} (no row in version {latest}, no raw batch names it); erasing it"
        " would block it forever: check the id, or pass --force (API: force=True) to block it anyway",
        table=table)
