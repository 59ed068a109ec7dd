"""A large batch reads its days' files while its keys are hashed, and keeps the rows it read (up to a
budget) for the rewrite of the same files. Whatever the prefetch and the budget, the table equals the
reference fold and every file of the parent is still read when it is needed."""

from __future__ import annotations

import random
from pathlib import Path

import pytest
from conftest import jsonl, rm, up

import delta_release as dr
import delta_release.apply.bucketed as bucketed
from delta_release.apply import reference_fold


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
