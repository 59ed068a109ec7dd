"""A stale parent rebuilds only what the intervening commit changed (issue 14 item 4).

Writer A stages its candidate; before it commits, another commit lands (run inside A's `before_commit`,
so the race is deterministic). A's strict commit fails; then either the intervening commits are
independent ingests and A commits the SAME staged files on the new parent (rebased: no second build, no
second staging), or A rebuilds on the new parent as before. Either way the result equals the reference
fold of every accepted event.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import delta_release as dr
from delta_release import _delta
from delta_release.apply import reference_fold
from delta_release.commit import rebase
from delta_release.contract import decode_batch
from delta_release.ingest import IngestPlan
from tests.conftest import jsonl, up


def fold(batches: list[bytes]) -> dict[str, tuple[int, int, int]]:
    events = [e for b in batches for e in decode_batch(b).events.to_dicts()]
    return {k: (v["position"], v["amount_cents"], v["event_day"]) for k, v in reference_fold(events).items()}


def view(lake: dr.Lake) -> dict[str, tuple[int, int, int]]:
    return {r["order_id"]: (r["position"], r["amount_cents"], r["event_day"]) for r in lake.read().to_dicts()}


class Race:
    """Runs `interloper` once, between A's staging and A's commit; counts A's builds and staged files."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, interloper: Callable[[], Any]) -> None:
        self.builds = 0
        self.staged: list[list[str]] = []
        self.fired = False
        build, before = IngestPlan.build, IngestPlan.before_commit
        race = self

        def counting_build(plan: IngestPlan, ctx: Any, parent: int) -> Any:
            race.builds += 1
            return build(plan, ctx, parent)

        def racing_before_commit(plan: IngestPlan, ctx: Any, staged: Any) -> None:
            before(plan, ctx, staged)
            race.staged.append([f.path for f in staged.staged_files])
            if not race.fired:
                race.fired = True
                monkeypatch.setattr(IngestPlan, "before_commit", before)  # the interloper's own write
                monkeypatch.setattr(IngestPlan, "build", build)
                try:
                    interloper()
                finally:
                    monkeypatch.setattr(IngestPlan, "before_commit", racing_before_commit)
                    monkeypatch.setattr(IngestPlan, "build", counting_build)

        monkeypatch.setattr(IngestPlan, "build", counting_build)
        monkeypatch.setattr(IngestPlan, "before_commit", racing_before_commit)


def base(lake: dr.Lake) -> bytes:
    data = jsonl([up("ord-a1", 1, 100, day=1), up("ord-a2", 2, 200, day=1), up("ord-b1", 3, 300, day=2),
                  up("ord-c1", 4, 400, day=3)])
    lake.ingest(data)
    return data


def files_exist(lake: dr.Lake, paths: list[str]) -> bool:
    store = lake.table_storage("orders")
    return all(store.exists(p) for p in paths)


def test_disjoint_days_rebase_the_same_staged_files(lake: dr.Lake, monkeypatch: pytest.MonkeyPatch) -> None:
    first = base(lake)
    b = jsonl([up("ord-b1", 20, 333, day=2), up("ord-b2", 21, 334, day=2)])
    a = jsonl([up("ord-a1", 10, 111, day=1), up("ord-new", 11, 555, day=1)])
    race = Race(monkeypatch, lambda: lake.ingest(b))
    checked: list[bool] = []
    real = rebase.independent_since

    def spy(*args: Any, **kwargs: Any) -> bool:
        checked.append(real(*args, **kwargs))
        return checked[-1]

    monkeypatch.setattr("delta_release.ingest.independent_since", spy)
    report = lake.ingest(a)
    assert checked == [True]
    assert race.builds == 1 and len(race.staged) == 1  # decoded, folded and staged once
    assert report.attempts == 2
    assert report.stale_parents == [{"expected": 1, "found": 2, "rebased": True}]
    assert report.version == 3
    assert sorted(f["path"] for f in report.files) == sorted(race.staged[0])  # the files committed
    assert files_exist(lake, race.staged[0])
    assert view(lake) == fold([first, b, a])
    evidence = _delta.version_evidence(lake.table_uri("orders"), lake.options, 3)
    assert evidence is not None and evidence["parent"] == 2  # strict on the new parent
    assert sorted(f["path"] for f in evidence["files"]) == sorted(race.staged[0])


def test_overlapping_keys_rebuild(lake: dr.Lake, monkeypatch: pytest.MonkeyPatch) -> None:
    first = base(lake)
    b = jsonl([up("ord-a1", 20, 999, day=1)])
    a = jsonl([up("ord-a1", 10, 111, day=1), up("ord-a2", 30, 222, day=1)])
    race = Race(monkeypatch, lambda: lake.ingest(b))
    report = lake.ingest(a)
    assert race.builds == 2 and len(race.staged) == 2
    assert report.stale_parents == [{"expected": 1, "found": 2, "rebased": False}]
    assert not files_exist(lake, race.staged[0])  # the first candidate was discarded
    result = view(lake)
    assert result == fold([first, b, a])
    assert result["ord-a1"] == (20, 999, 1)  # B's higher position wins over A's


def test_same_new_order_in_two_new_days_rebuilds(lake: dr.Lake, monkeypatch: pytest.MonkeyPatch) -> None:
    """No file is shared (both days are new), so only the key check sees the conflict: a rebase would
    leave the order in two partitions."""
    first = base(lake)
    b = jsonl([up("ord-twice", 20, 999, day=8)])
    a = jsonl([up("ord-twice", 10, 111, day=9)])
    race = Race(monkeypatch, lambda: lake.ingest(b))
    report = lake.ingest(a)
    assert race.builds == 2
    assert report.stale_parents[0]["rebased"] is False
    assert view(lake) == fold([first, b, a])
    assert lake.read().filter(lake.read()["order_id"] == "ord-twice").height == 1


def test_an_erasure_in_between_rebuilds_and_the_subject_stays_absent(
        lake: dr.Lake, monkeypatch: pytest.MonkeyPatch) -> None:
    first = base(lake)
    a = jsonl([up("ord-c1", 10, 111, day=3), up("ord-a1", 11, 123, day=1)])  # ord-c1 is erased meanwhile
    race = Race(monkeypatch, lambda: lake.erase("ord-c1"))
    report = lake.ingest(a)
    assert race.builds == 2
    assert report.stale_parents == [{"expected": 1, "found": 2, "rebased": False}]
    assert report.reasons.get("erased_subject") == 1
    rows = view(lake)
    assert "ord-c1" not in rows
    assert rows == {k: v for k, v in fold([first, jsonl([up("ord-a1", 11, 123, day=1)])]).items() if k != "ord-c1"}


def test_an_erasure_of_another_subject_in_between_still_rebuilds(
        lake: dr.Lake, monkeypatch: pytest.MonkeyPatch) -> None:
    """Only ordinary ingests are rebased over: an erase commit (of any subject) means a rebuild."""
    first = base(lake)
    a = jsonl([up("ord-a1", 10, 111, day=1)])
    race = Race(monkeypatch, lambda: lake.erase("ord-c1"))
    report = lake.ingest(a)
    assert race.builds == 2 and report.stale_parents[0]["rebased"] is False
    assert view(lake) == {k: v for k, v in fold([first, a]).items() if k != "ord-c1"}


def test_the_same_batch_committed_in_between_is_a_duplicate(
        lake: dr.Lake, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    first = base(lake)
    a = jsonl([up("ord-a1", 10, 111, day=1)])
    other = dr.Lake.open(tmp_path / "lake")  # the `lake` fixture's directory, opened by a second writer
    race = Race(monkeypatch, lambda: other.ingest(a))
    report = lake.ingest(a)
    assert race.builds == 2 and report.stale_parents[0]["rebased"] is False
    assert report.duplicate and report.version is None
    assert view(lake) == fold([first, a])
