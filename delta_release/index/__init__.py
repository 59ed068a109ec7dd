"""Indexes that keep the writer's hot path bounded by what changed (issue 14): which batches a table's
commits applied, and where each order lives. Both are caches under `<lake>/_index/<table>/`, rebuilt from
the Delta table when missing or behind; results are equal with and without them."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from .batches import BatchIndex
from .keys import KeyIndex

if TYPE_CHECKING:
    from ..context import TableContext

# Set to "1" to run without the indexes (the reference for equality tests and benchmarks).
ENV_OFF = "DELTA_RELEASE_NO_INDEX"


def enabled() -> bool:
    return os.environ.get(ENV_OFF, "") not in ("1", "true", "yes")


def batch_index(ctx: TableContext) -> BatchIndex | None:
    if ctx.index_root is None or not enabled():
        return None
    return BatchIndex(ctx.index_root, ctx.uri, ctx.storage_options)


def key_index(ctx: TableContext) -> KeyIndex | None:
    if ctx.index_root is None or not ctx.table.key or not enabled():
        return None
    return KeyIndex(ctx.index_root, ctx.storage, uri=ctx.uri, options=ctx.storage_options, key=ctx.table.key,
                    partition=ctx.table.partition, hasher=ctx.erasures.subject_key)


__all__ = ["BatchIndex", "ENV_OFF", "KeyIndex", "batch_index", "enabled", "key_index"]
