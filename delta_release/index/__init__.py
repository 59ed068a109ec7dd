"""Indexes that keep the writer's hot path bounded by what changed (issue 14): which batches a table's
commits applied, and where each order lives. Both are caches under `<lake>/_index/<table>/`, rebuilt from
the Delta table when missing or behind; results are equal with and without them."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from .. import _delta
from ..storage import Storage
from .batches import BatchIndex
from .keys import KeyIndex

if TYPE_CHECKING:
    from ..context import TableContext

# Set to "1" to run without the indexes (the reference for equality tests and benchmarks).
ENV_OFF = "DELTA_RELEASE_NO_INDEX"


def enabled() -> bool:
    return os.environ.get(ENV_OFF, "") not in ("1", "true", "yes")


def _root(ctx: TableContext) -> Storage | None:
    """`<lake>/_index/<table>/<Delta table id>/`: a table created again at the same URI (another id)
    never sees the indexes of the one before it, and no index is ever deleted under a running writer."""
    if ctx.index_root is None or not enabled():
        return None
    table_id = _delta.table_id(ctx.uri, ctx.storage_options)
    return None if table_id is None else ctx.index_root.child(table_id)


def batch_index(ctx: TableContext) -> BatchIndex | None:
    root = _root(ctx)
    return None if root is None else BatchIndex(root, ctx.uri, ctx.storage_options)


def key_index(ctx: TableContext) -> KeyIndex | None:
    key = ctx.table.key
    root = _root(ctx) if key else None
    if root is None or not key:
        return None
    return KeyIndex(root, ctx.storage, uri=ctx.uri, options=ctx.storage_options, key=key,
                    partition=ctx.table.partition, hasher=ctx.erasures.subject_key)


__all__ = ["BatchIndex", "ENV_OFF", "KeyIndex", "batch_index", "enabled", "key_index"]
