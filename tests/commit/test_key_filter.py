"""The key filter a commit records of the keys it changed (evidence.KeyFilter, issue 34 item 3): no false
negative (a rebase over a commit that changed one of our keys would resurrect or duplicate an order), rare
false matches, a size bound whatever the batch, and nothing an id or the
erasure ledger's hash could be matched against."""

from __future__ import annotations

import hashlib
import random

import polars as pl
import pytest

import delta_release as dr
from delta_release.commit import writer
from delta_release.evidence import (
    FILTER_MAX_BYTES,
    FILTER_MAX_KEYS,
    CommitEvidence,
    KeyFilter,
)


def digests(n: int, seed: int) -> bytes:
    rng = random.Random(seed)
    return b"".join(hashlib.sha256(rng.randbytes(16)).digest() for _ in range(n))


def test_every_key_put_in_is_found_and_foreign_keys_are_not() -> None:
    for n, width in ((200, 4), (3_000, 8)):  # short values up to FILTER_SHORT_KEYS keys, then long
        inside = digests(n, n)
        f = KeyFilter.of(inside)
        assert f.keys == n and f.width == width and not f.all
        assert all(f.may_hold(inside[i:i + 32]) for i in range(0, len(inside), 32))
        assert f.may_hold(digests(2_000, 2) + inside[-32:])  # one of ours among foreign keys
        # a batch of foreign keys matches with odds 2_000 x n / 2**(8 x width) (<= 0.01%; seeded: no flake)
        assert not f.may_hold(digests(2_000, 2))


def test_an_empty_filter_holds_nothing_and_all_holds_everything() -> None:
    assert not KeyFilter.of(b"").may_hold(digests(3, 3))
    assert KeyFilter(keys=10**7, all=True).may_hold(digests(1, 4))
    assert not KeyFilter(keys=10**7, all=True).may_hold(b"")


def test_the_filter_is_bounded_and_a_larger_change_records_all(lake: dr.Lake,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    biggest = KeyFilter.of(digests(FILTER_MAX_KEYS, 5))
    assert not biggest.all and len(biggest.data) <= FILTER_MAX_BYTES
    assert KeyFilter.of(digests(FILTER_MAX_KEYS + 1, 5)).all
    ctx = lake.table("orders")
    monkeypatch.setattr(writer, "FILTER_MAX_KEYS", 3)
    over = writer.key_filter_of(ctx, pl.Series(["a", "b", "c", "d"]))
    assert over is not None and over.all and over.keys == 4
    assert writer.key_filter_of(ctx, None) is None
    under = writer.key_filter_of(ctx, pl.Series(["a", "b", "b"]))
    assert under is not None and under.keys == 2 and not under.all


def test_evidence_round_trips_with_and_without_a_filter() -> None:
    old = {"operation": "ingest", "table": "orders", "parent": 3, "candidate": "c", "batch_ids": ["b"],
           "files": [], "removed": [], "publication": "immediate", "changed_keys": 2}
    parsed = CommitEvidence.from_json(old)
    assert parsed.key_filter is None and parsed.body() == old  # old commits: same body, same digest
    new = CommitEvidence(operation="ingest", table="orders", parent=3, key_filter=KeyFilter.of(digests(40, 6)))
    again = CommitEvidence.from_json(new.to_json())
    assert again.key_filter == new.key_filter and again.digest == new.digest
    unknown = {**old, "key_filter": {"hash": "some-later-hash", "x": 1}}
    kept = CommitEvidence.from_json(unknown)
    assert kept.key_filter is None and kept.body() == unknown  # unread, yet the digest still holds


def test_filter_digests_are_not_the_ledgers_hashes(lake: dr.Lake) -> None:
    """The log keeps filters after an erasure and a vacuum; the ledger keeps the erased subject's hash:
    a filter made of those hashes would let anyone with the ledger test which commits changed it."""
    ledger = lake.erasures
    ids = ["ord-1", "ord-2"]
    ours = ledger.filter_digests(pl.Series(ids))
    assert ours == ledger.filter_digests(ids)  # the column path and the per-id path agree
    assert ours[:32] != bytes.fromhex(ledger.subject_key("ord-1"))
    assert KeyFilter.of(ours).may_hold(ours[32:])
