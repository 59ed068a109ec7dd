"""A large batch reads its days' files while its keys are hashed, and keeps the rows it read (up to a
budget) for the rewrite of the same files. Whatever the prefetch and the budget, the table equals the
reference fold and every file of the parent is still read when it is needed."""

from __future__ import annotations

import random
import uuid
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import delta_release as dr
import delta_release.apply.bucketed as bucketed
from delta_release.apply import reference_fold
from tests.conftest import examples, jsonl, rm, up


def _batches(seed: int) -> list[list[dict]]:  # type: ignore[type-arg]
    rnd = random.Random(seed)
    pos = 0
    out = []
    for _ in range(4):
        batch = []
        for _ in range(300):
            pos += 1
            oid = f"o{rnd.randrange(400)}"
            if rnd.random() < 0.2:
                batch.append(rm(oid, pos, rnd.choice([None, 47, 48])))
            else:
                batch.append(up(oid, pos, amount=rnd.randrange(1000), day=rnd.choice([47, 48, 49])))
        out.append(batch)
    return out


def _current(lake: dr.Lake) -> dict[str, tuple[int, int, int]]:
    return {r["order_id"]: (r["amount_cents"], r["event_day"], r["position"]) for r in lake.read().to_dicts()}


@pytest.mark.parametrize(("prefetch", "budget"), [(0, None), (0, 50), (10**9, 50), (10**9, None)])
def test_prefetch_and_kept_rows_give_the_reference_fold(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                       prefetch: int, budget: int | None) -> None:
    monkeypatch.setattr(bucketed, "PREFETCH_KEYS_PER_BUCKET", prefetch)
    prefetched: list[int] = []
    real_prefetch = bucketed._Kept.prefetch
    monkeypatch.setattr(bucketed._Kept, "prefetch",
                        lambda self, *a: prefetched.append(1) or real_prefetch(self, *a))
    if budget is not None:
        cap = budget
        real_init = bucketed._Kept.__init__
        monkeypatch.setattr(bucketed._Kept, "__init__", lambda self, budget=0: real_init(self, cap))
    lake = dr.Lake.create(tmp_path / "lake")
    events: list[dict] = []  # type: ignore[type-arg]
    for batch in _batches(7):
        lake.ingest(jsonl(batch))
        events += batch
    want = {k: (v["amount_cents"], v["event_day"], v["position"])
            for k, v in reference_fold([{**e, "currency": e.get("currency", "INR")} for e in events]).items()}
    assert _current(lake) == want
    assert bool(prefetched) == (prefetch == 0)


def test_days_outside_the_kept_rows_take_the_per_day_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A large batch whose winners leave days it has no event in (moves out of day 40, deletes of day 41
    rows): its own days' content is computed at once from the rows it read, the other days' a day at a
    time, and the table equals the reference fold with one row per order."""
    at_once: list[list[int]] = []
    real = bucketed._content_at_once
    monkeypatch.setattr(bucketed, "_content_at_once", lambda cols, days, *a: at_once.append(sorted(days))
                        or real(cols, days, *a))
    lake = dr.Lake.create(tmp_path / "lake")
    first = [up(f"o{i}", 1 + i, amount=i, day=40 + i % 4) for i in range(800)]  # days 40..43
    lake.ingest(jsonl(first))
    second = []
    for i in range(800):
        p = 1000 + i
        if i % 4 == 0:
            second.append(up(f"o{i}", p, amount=5_000 + i, day=42 + i % 8 // 4))  # day 40 -> 42 or 43
        elif i % 4 == 1 and i % 8 == 1:
            second.append(rm(f"o{i}", p, None))  # a tombstone in day 41, which has no event of its own
        elif i % 4 >= 2:
            second.append(up(f"o{i}", p, amount=6_000 + i, day=40 + i % 4))
    second += [up(f"n{i}", 2000 + i, amount=i, day=42) for i in range(100)]
    lake.ingest(jsonl(second))
    assert at_once[-1] == [42, 43]  # days 40 and 41 lost rows but were not read with the batch's days
    events = first + second
    want = {k: (v["amount_cents"], v["event_day"], v["position"])
            for k, v in reference_fold([{**e, "currency": e.get("currency", "INR")} for e in events]).items()}
    rows = lake.read()
    assert len(rows) == rows["order_id"].n_unique()
    assert _current(lake) == want


@st.composite
def distinct_key_batches(draw: st.DrawFn) -> list[list[dict]]:  # type: ignore[type-arg]
    """Batches whose keys are distinct within each batch (the one-join fold of a large batch), over few
    orders and days: upserts that move orders between days, deletes with and without a day, stale events
    (positions drawn at random, so a later batch may hold an older position)."""
    positions = iter(draw(st.lists(st.integers(1, 10_000), min_size=40, max_size=40, unique=True)))
    batches = []
    for _ in range(draw(st.integers(1, 4))):
        keys = draw(st.lists(st.sampled_from([f"o{i}" for i in range(8)]), min_size=1, max_size=8, unique=True))
        batch = []
        for oid in keys:
            pos = next(positions)
            if draw(st.integers(0, 3)) == 0:
                batch.append(rm(oid, pos, draw(st.one_of(st.none(), st.sampled_from([47, 48, 49])))))
            else:
                batch.append(up(oid, pos, amount=draw(st.integers(0, 999)), day=draw(st.sampled_from([47, 48, 49]))))
        batches.append(batch)
    return batches


@settings(max_examples=examples(15, fuzz=300), deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(batches=distinct_key_batches())
def test_every_batch_on_the_large_batch_path_gives_the_reference_fold(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                     batches: list[list[dict]]) -> None:  # type: ignore[type-arg]
    """With the large-batch threshold at 0 every batch reads its days at once; a batch of distinct keys
    whose prior rows all lie in its days is folded on the one join (`fold_joined`, winners dropped by
    position), one with a prior row in another day takes the general path. Both equal the reference fold,
    after a replay of everything too, with one row per order."""
    monkeypatch.setattr(bucketed, "PREFETCH_KEYS_PER_BUCKET", 0)
    lake = dr.Lake.create(tmp_path / f"lake-{uuid.uuid4().hex}")
    events = [e for b in batches for e in b]
    for batch in batches:
        report = lake.ingest(jsonl(batch))
        assert report.accepted + report.quarantined == report.extracted
    want = {k: (v["amount_cents"], v["event_day"], v["position"])
            for k, v in reference_fold([{**e, "currency": e.get("currency", "INR")} for e in events]).items()}
    assert _current(lake) == want
    lake.replay(all_batches=True)
    assert _current(lake) == want
    assert lake.scan("orders", include_tombstones=True).collect()["order_id"].is_unique().all()


@pytest.mark.parametrize("scans", [True, False])
def test_days_over_the_budget_are_read_in_scans_not_file_by_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                  scans: bool) -> None:
    """A large batch whose days hold more rows than the kept-rows budget: the lookup reads the files a chunk
    at a time in one scan each (keeping what fits) and the rewrite reads a day's remaining files in one
    scan, so no file on local disk is read on its own. With the scans unavailable (an object store, files
    Polars cannot read together) every file is read on its own instead. Both give the reference fold."""
    monkeypatch.setattr(bucketed, "PREFETCH_KEYS_PER_BUCKET", 0)
    monkeypatch.setattr(bucketed, "KEPT_MIN_ROWS", 0)
    monkeypatch.setattr(bucketed, "READ_CHUNK_FILES", 2)  # ~100 rows a chunk: the first two kept, later ones not
    if not scans:
        monkeypatch.setattr(bucketed, "scan_tagged", lambda *a: None)
    alone: list[str] = []
    real = bucketed.read_entry
    monkeypatch.setattr(bucketed, "read_entry", lambda ctx, cols, e: alone.append(e.path) or real(ctx, cols, e))
    lake = dr.Lake.create(tmp_path / "lake")
    events = [up(f"o{i}", 1 + i, amount=i, day=40 + i % 3) for i in range(1200)]
    lake.ingest(jsonl(events))
    alone.clear()
    batch = [up(f"o{i}", 5000 + i, amount=7_000 + i, day=40 + i % 3) for i in range(0, 1200, 7)]
    batch += [rm(f"o{i}", 9000 + i, None) for i in range(3, 1200, 29)] + [up("new", 9999, amount=1, day=41)]
    report = lake.ingest(jsonl(batch))  # 227 events against days of 400 rows each (24 files)
    assert report.accepted == len(batch) and report.removed
    assert alone == [] if scans else len(set(alone)) == 24  # (the lookup reads every file of the days)
    events += batch
    want = {k: (v["amount_cents"], v["event_day"], v["position"])
            for k, v in reference_fold([{**e, "currency": e.get("currency", "INR")} for e in events]).items()}
    assert _current(lake) == want
    every = lake.scan("orders", include_tombstones=True).collect()
    assert every.height == 1201 and every["order_id"].is_unique().all()  # one row per order, none repeated
