"""Snapshot permission: a version that still holds an erased subject may not be read or restored."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ..lake import Lake


def check_snapshot(lake: Lake, table: str, version: int) -> None:
    """Raise ErasureExposureError when `version` of `table` still holds an erased subject."""
    return None
