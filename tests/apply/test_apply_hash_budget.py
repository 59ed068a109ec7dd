"""A large batch takes the bucket of a key found in its days' tagged files from the file's name, so only
the keys that are new (or found in an untagged file, or that move) are hashed. The key index still learns
every key that arrives in or leaves a partition: a later small batch that moves those keys again finds
their rows through the index (no order in two partitions), and the table equals the reference fold."""

from __future__ import annotations

from pathlib import Path

import pytest

import delta_release as dr
import delta_release.apply.bucketed as bucketed
from delta_release.apply import reference_fold
from delta_release.erasure.ledger import ErasureLedger
from tests.conftest import jsonl, rm, up


def _check(lake: dr.Lake, events: list[dict]) -> None:  # type: ignore[type-arg]
    want = {k: (v["amount_cents"], v["event_day"], v["position"])
            for k, v in reference_fold([{**e, "currency": e.get("currency", "INR")} for e in events]).items()}
    rows = lake.read().to_dicts()
    assert len(rows) == len({r["order_id"] for r in rows})  # one row per order: no order in two days
    assert {r["order_id"]: (r["amount_cents"], r["event_day"], r["position"]) for r in rows} == want


def test_found_keys_are_not_hashed_and_moves_reach_the_index(tmp_path: Path,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    hashed: list[str] = []
    real = ErasureLedger.subject_digests

    def counting(self: ErasureLedger, ids):  # type: ignore[no-untyped-def]
        ids = list(ids)
        hashed.extend(ids)
        return real(self, ids)

    monkeypatch.setattr(ErasureLedger, "subject_digests", counting)
    lake = dr.Lake.create(tmp_path / "lake")
    pos = 0
    first = []
    for i in range(800):  # 100 per bucket on average: the large-batch path
        pos += 1
        first.append(up(f"o{i}", pos, amount=i, day=47 + i % 2))
    lake.ingest(jsonl(first))

    second = []
    for i in range(800):  # every key again: 700 stay in their day, 50 move to day 49, 50 are deleted
        pos += 1
        if i % 16 == 0:
            second.append(up(f"o{i}", pos, amount=10_000 + i, day=49))
        elif i % 16 == 1:
            second.append(rm(f"o{i}", pos, None))
        else:
            second.append(up(f"o{i}", pos, amount=20_000 + i, day=47 + i % 2))
    new = [up(f"n{i}", pos + 1 + i, amount=i, day=48) for i in range(100)]
    pos += 100
    hashed.clear()
    lake.ingest(jsonl(second + new))
    moved = {f"o{i}" for i in range(800) if i % 16 == 0}
    assert set(hashed) <= moved | {e["order_id"] for e in new}  # found keys that stay: no hash
    assert {e["order_id"] for e in new} <= set(hashed) and moved <= set(hashed)

    third = []  # a small batch (the bucket-first path): the moved keys move again, a deleted one comes back
    for i in sorted(int(k[1:]) for k in moved)[:20]:
        pos += 1
        third.append(up(f"o{i}", pos, amount=30_000 + i, day=50))
    pos += 1
    third.append(up("o1", pos, amount=1, day=50))
    lake.ingest(jsonl(third))
    _check(lake, first + second + new + third)


def test_a_large_batch_over_untagged_and_tagged_files_splits_and_folds(tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """The one-scan read of a large batch's days (apply/bucketed.py `_Kept`) hashes the rows of untagged
    (legacy) files to split them, takes tagged files' buckets from their names, and folds like a small batch."""
    from tests.apply.conftest import assert_tags_hold, legacy_defs

    legacy = dr.Lake.create(tmp_path / "lake", tables_dir=legacy_defs(tmp_path))
    first = [up(f"o{i}", 1 + i, amount=i, day=47 + i % 2) for i in range(700)]
    legacy.ingest(jsonl(first))
    lake = dr.Lake.open(tmp_path / "lake")  # now bucketed: day 48 gets tagged files, day 47 stays legacy
    second = [up(f"o{i}", 1000 + i, amount=5_000 + i, day=48) for i in range(1, 700, 2)]
    lake.ingest(jsonl(second))
    assert assert_tags_hold(lake) == 1
    third = []
    for i in range(560):  # both days, a legacy file and tagged ones: updates, moves, deletes, new keys; the
        p = 3000 + i     # legacy day's rows of o560..o699 stay as they are, split into bucket files
        if i % 5 == 0:
            third.append(rm(f"o{i}", p, None))
        elif i % 5 == 1:
            third.append(up(f"o{i}", p, amount=7_000 + i, day=47))
        else:
            third.append(up(f"o{i}", p, amount=8_000 + i, day=47 + i % 2))
    third += [up(f"n{i}", 5000 + i, amount=i, day=47 + i % 2) for i in range(200)]  # 760 >= 700 rows read
    one_scan: list[bool] = []
    real = bucketed._Kept._read_whole
    monkeypatch.setattr(bucketed._Kept, "_read_whole",
                        lambda self, *a: one_scan.append(real(self, *a)) or one_scan[-1])
    lake.ingest(jsonl(third))
    assert one_scan == [True]  # the days' files (one legacy, eight tagged) were read in one scan
    assert assert_tags_hold(lake) == 0
    _check(lake, first + second + third)


@pytest.mark.parametrize("repeats", [False, True])
def test_a_large_batch_with_and_without_repeated_keys_gives_the_reference_fold(tmp_path: Path,
                                                                               repeats: bool) -> None:
    """Without repeated keys the plan skips the dedupe; with exact repeats and several events per key it
    deduplicates and folds in sequence: both equal the reference fold."""
    lake = dr.Lake.create(tmp_path / "lake")
    first = [up(f"o{i}", 1 + i, amount=i, day=47 + i % 2) for i in range(700)]
    lake.ingest(jsonl(first))
    second = [up(f"o{i}", 1000 + i, amount=2 * i, day=47 + i % 3) for i in range(0, 700, 2)]
    second += [up(f"n{i}", 2000 + i, amount=i, day=48) for i in range(300)]
    if repeats:
        second += second[:100]  # exact repeats
        second += [rm(f"o{i}", 3000 + i, None) for i in range(0, 100, 4)]  # a later delete of the same keys
        second += [up(f"n{i}", 800 + i, amount=1, day=47) for i in range(50)]  # an older upsert: loses
    report = lake.ingest(jsonl(second))
    assert report.accepted == len(second) and report.quarantined == 0
    _check(lake, first + second)


@pytest.mark.parametrize("elsewhere", [False, True])
def test_a_large_batch_folds_on_its_one_join_unless_a_prior_row_is_in_another_day(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, elsewhere: bool) -> None:
    """A large batch of distinct keys whose prior rows are all in its days' files is folded on the join that
    also gives the keys' buckets (`_folded_joined`: the rewrite drops the winners' old rows by position); a
    key whose row is in another day (found by the key index) takes the general path. Moves, deletes, new
    keys and a position conflict give the reference fold either way, with one row per order."""
    lake = dr.Lake.create(tmp_path / "lake")
    first = [up(f"o{i}", 1 + i, amount=i, day=47 + i % 2) for i in range(700)]
    first += [up(f"m{i}", 800 + i, amount=i, day=10) for i in range(40)]
    lake.ingest(jsonl(first))
    second = []
    for i in range(700):
        p = 1000 + i
        if i % 10 == 0:
            second.append(rm(f"o{i}", p, None))
        elif i % 10 == 1:
            second.append(up(f"o{i}", p, amount=3_000 + i, day=49))  # moves to a day without files
        elif i != 5:
            second.append(up(f"o{i}", p, amount=2_000 + i, day=47 + i % 2))
    second.append(up("o5", 6, amount=1, day=48))  # o5's position with other content: a conflict
    second += [up(f"n{i}", 2000 + i, amount=i, day=47 + i % 3) for i in range(100)]
    if elsewhere:  # rows in day 10, which the batch does not touch
        second += [up(f"m{i}", 3000 + i, amount=9_000 + i, day=48) for i in range(20)]
        second += [rm(f"m{i}", 3100 + i, None) for i in range(20, 25)]
    joined: list[bool] = []
    real = bucketed._folded_joined
    monkeypatch.setattr(bucketed, "_folded_joined", lambda *a: joined.append(True) or real(*a))
    report = lake.ingest(jsonl(second))
    assert joined == ([] if elsewhere else [True])
    assert report.quarantined == 1 and report.reasons == {"position_conflict": 1}
    assert report.accepted == len(second) - 1
    _check(lake, first + second)
    third = [up(f"m{i}", 4000 + i, amount=i, day=50) for i in range(25)]  # the index knows where they went
    lake.ingest(jsonl(third))
    _check(lake, first + second + third)
