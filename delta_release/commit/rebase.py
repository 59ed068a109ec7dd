"""Rebase a staged candidate onto a newer parent without rebuilding it (issue 14 item 4).

When a strict commit fails because other writers committed first, `write` asks the plan
(`Plan.can_rebase`) whether its staged files are still right on the new latest version. Only the ingest
plan says yes, and only when every commit in between is provably independent of its candidate:

- each is a commit of ours (it has evidence) whose operation is an ordinary `ingest` or `replay`, made
  strictly on the version before it: an erase, rollback, repair-forward, vacuum, release run, external
  publish or a foreign (non-delta-release) commit means a full rebuild;
- none of them applied one of our batch ids (a duplicate: the rebuild skips it);
- none of them removed a file our candidate removes (same partition or bucket rewritten: our staged
  copy of it would resurrect what they replaced);
- none of them changed one of our batch's keys (it covers an order both writers placed in different new
  partitions, where no file is shared). Decided from what they RECORDED: each ingest's evidence holds a
  filter of the keys it changed (`evidence.KeyFilter`: sorted leading 32 or 64 bits of keyed hashes under
  a key derived from the lake secret: no id, and not the erasure ledger's hashes), tested with our keys'
  digests; no data file is read. A false match (odds <= 2**-20 per key of ours and commit; always for a
  commit that changed more than FILTER_MAX_KEYS keys, which records `all`) only means a rebuild. A
  commit made before filters were recorded has none: then the key column of every file it added is
  read, as before (a superset of the keys it changed: the rows of the files it rewrote).

Then the candidate's adds and removes mean the same on the new parent as on the old one, and the same
staged files are committed (strictly) on the new parent: nothing is decoded, folded, staged or gated
again (`writer.onto`). The plan adds its own conditions (the ingest plan: no subject of its batch was
erased since it filtered them). Reading a commit's evidence reads that commit's log entry alone (`version_evidence`).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

import polars as pl

from .. import _delta
from ..evidence import CommitEvidence
from .writer import StagedCandidate

if TYPE_CHECKING:
    from ..context import TableContext

REBASE_OPERATIONS = frozenset({"ingest", "replay"})


class KeySet:
    """A candidate's keys for `independent_since`, and their filter digests once asked: a writer among many
    rebases once per commit that lands before its own, and its keys do not change meanwhile."""

    def __init__(self, keys: Iterable[str]) -> None:
        self.series = pl.Series("k", sorted(set(keys)), dtype=pl.String)
        self._digests: bytes | None = None

    def digests(self, ctx: TableContext) -> bytes:
        if self._digests is None:
            self._digests = ctx.erasures.filter_digests(self.series)
        return self._digests


def independent_since(ctx: TableContext, staged: StagedCandidate, new_parent: int, *,
                      keys: Iterable[str] | KeySet, batch_ids: Iterable[str]) -> bool:
    """True when no commit in (staged.parent, new_parent] touched what `staged` depends on (see above)."""
    if new_parent <= staged.parent:
        return False
    ours_removed = {r.path for r in staged.removes}
    ours_batches = set(batch_ids)
    ours = keys if isinstance(keys, KeySet) else KeySet(keys)  # digests computed at the first commit with a filter
    key_series = ours.series
    for version in range(staged.parent + 1, new_parent + 1):
        raw = _delta.version_evidence(ctx.uri, ctx.storage_options, version)
        if raw is None:
            return False  # a foreign commit, or its log entry is gone
        theirs = CommitEvidence.from_json(raw)
        if (theirs.operation not in REBASE_OPERATIONS or theirs.table != ctx.name
                or theirs.parent != version - 1):
            return False
        if ours_batches.intersection(theirs.batch_ids) or ours_removed.intersection(theirs.removed):
            return False
        if not key_series.len():
            continue
        if theirs.key_filter is not None:
            if theirs.key_filter.may_hold(ours.digests(ctx)):
                return False
        elif _any_key_in(ctx, [f.path for f in theirs.files], key_series):  # recorded no filter
            return False
    return True


def _any_key_in(ctx: TableContext, paths: list[str], keys: pl.Series) -> bool:
    """Does any of the data files `paths` hold one of `keys` (in any row: current or tombstone)?"""
    import pyarrow.parquet as pq

    column = ctx.table.key
    if not column:
        return bool(paths)  # a table without keys: no way to tell, so not independent
    for path in paths:
        with ctx.storage.open_input(path) as handle:
            found = pl.from_arrow(pq.read_table(handle, columns=[column]).column(column))
        assert isinstance(found, pl.Series)
        if found.cast(pl.String).is_in(keys.implode()).any():
            return True
    return False
