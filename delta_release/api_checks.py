"""Argument checks for the Python API (`Lake.scan`, `Lake.read`, `Lake.erase`), so a wrong type is a clear
InputError naming the argument instead of a TypeError from deep inside Polars or deltalake; and the guard
that keeps `erase` of a never-seen id from silently blocking it forever. (The nearest readable version a
refusal names is erasure/permission.py's: nothing below the facade imports this module.)"""

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
