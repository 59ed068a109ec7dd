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
from delta_release.contract.parts import ENV_MAX_PART
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


# -- independence decided from the evidence's key filters (issue 34 item 3) ---------------------------------

def added_by(lake: dr.Lake, version: int) -> list[str]:
    evidence = _delta.version_evidence(lake.table_uri("orders"), lake.options, version)
    assert evidence is not None
    return [f["path"] for f in evidence["files"]]


def checked_without(lake: dr.Lake, monkeypatch: pytest.MonkeyPatch, hidden: list[int]) -> list[bool]:
    """Spy on the rebase check: while it runs, the data files the commits `hidden` added are moved away
    (a check that read them would fail or see nothing), and reading any file's keys is an error."""
    checked: list[bool] = []
    real = rebase.independent_since
    root = Path(lake.table_uri("orders"))

    def spy(*args: Any, **kwargs: Any) -> bool:
        paths = [p for v in hidden for p in added_by(lake, v)]
        for p in paths:
            (root / p).rename(root / (p + ".away"))
        try:
            checked.append(real(*args, **kwargs))
        finally:
            for p in paths:
                (root / (p + ".away")).rename(root / p)
        return checked[-1]

    def no_reads(*args: Any, **kwargs: Any) -> bool:
        raise AssertionError("the rebase check read a data file")

    monkeypatch.setattr("delta_release.ingest.independent_since", spy)
    monkeypatch.setattr(rebase, "_any_key_in", no_reads)
    return checked


def test_a_rebase_over_recorded_filters_reads_no_data_file(lake: dr.Lake, monkeypatch: pytest.MonkeyPatch) -> None:
    first = base(lake)
    b = jsonl([up("ord-b1", 20, 333, day=2), up("ord-b2", 21, 334, day=2)])
    a = jsonl([up("ord-a1", 10, 111, day=1), up("ord-new", 11, 555, day=1)])
    race = Race(monkeypatch, lambda: lake.ingest(b))
    checked = checked_without(lake, monkeypatch, hidden=[2])
    report = lake.ingest(a)
    assert checked == [True] and race.builds == 1
    assert report.stale_parents == [{"expected": 1, "found": 2, "rebased": True}]
    assert view(lake) == fold([first, b, a])


def test_overlapping_keys_rebuild_from_the_filter_alone(lake: dr.Lake, monkeypatch: pytest.MonkeyPatch) -> None:
    """The same new order placed in two new days: no file is shared, only B's recorded filter names it."""
    first = base(lake)
    b = jsonl([up("ord-twice", 20, 999, day=8)])
    a = jsonl([up("ord-twice", 10, 111, day=9), up("ord-a1", 11, 123, day=1)])
    race = Race(monkeypatch, lambda: lake.ingest(b))
    checked = checked_without(lake, monkeypatch, hidden=[2])
    report = lake.ingest(a)
    assert checked == [False] and race.builds == 2
    assert report.stale_parents[0]["rebased"] is False
    assert view(lake) == fold([first, b, a])


def test_a_rebase_over_a_file_in_parts_reads_no_data_file(lake: dr.Lake, tmp_path: Path,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    """B ingests a file in parts (one fold of several groups of buckets, one commit): its commit records the
    keys every group changed, so A's rebase over it decides from that filter alone, reading no data file."""
    first = base(lake)
    b = jsonl([up(f"ord-p{i:03d}", 20 + i, 100 + i, day=2 + i % 3) for i in range(60)])
    path = tmp_path / "b.jsonl"
    path.write_bytes(b)
    monkeypatch.setenv(ENV_MAX_PART, str(len(b) // 3 + 1))
    a = jsonl([up("ord-a1", 10, 111, day=1), up("ord-new", 11, 555, day=1)])
    race = Race(monkeypatch, lambda: lake.ingest(path))
    checked = checked_without(lake, monkeypatch, hidden=[2])
    report = lake.ingest(a)
    evidence = _delta.version_evidence(lake.table_uri("orders"), lake.options, 2)
    assert evidence is not None and len(evidence["batch_ids"]) >= 3  # B's parts, one commit
    assert evidence["key_filter"]["keys"] == 60 and not evidence["key_filter"].get("all")
    assert checked == [True] and race.builds == 1
    assert report.stale_parents == [{"expected": 1, "found": 2, "rebased": True}]
    assert view(lake) == fold([first, b, a])


def test_the_log_entry_holds_a_filter_and_no_order_id(lake: dr.Lake) -> None:
    base(lake)
    evidence = _delta.version_evidence(lake.table_uri("orders"), lake.options, 1)
    assert evidence is not None and evidence["key_filter"]["keys"] == 4
    assert evidence["key_filter"]["hash"] == "hmac-sha256/rebase-filter/1"
    log = (Path(lake.table_uri("orders")) / "_delta_log" / f"{1:020d}.json").read_text()
    assert "key_filter" in log and "ord-" not in log


def test_a_commit_without_a_filter_falls_back_to_reading_its_files(
        lake: dr.Lake, monkeypatch: pytest.MonkeyPatch) -> None:
    """B commits as a writer before filters did (no `key_filter`): A's check reads B's files' keys; a
    disjoint batch still rebases, an order both placed in new days still rebuilds."""
    from delta_release.commit import writer

    first = base(lake)
    reads: list[list[str]] = []
    real_any = rebase._any_key_in

    def counting(ctx: Any, paths: list[str], keys: Any) -> bool:
        reads.append(paths)
        return real_any(ctx, paths, keys)

    monkeypatch.setattr(rebase, "_any_key_in", counting)
    real_filter = writer.key_filter_of

    def unfiltered(lake_: dr.Lake, data: bytes) -> Callable[[], Any]:
        def run() -> Any:
            monkeypatch.setattr(writer, "key_filter_of", lambda ctx, keys: None)
            try:
                return lake_.ingest(data)
            finally:
                monkeypatch.setattr(writer, "key_filter_of", real_filter)
        return run

    b = jsonl([up("ord-b1", 20, 333, day=2)])
    a = jsonl([up("ord-a1", 10, 111, day=1)])
    Race(monkeypatch, unfiltered(lake, b))
    report = lake.ingest(a)
    evidence = _delta.version_evidence(lake.table_uri("orders"), lake.options, 2)
    assert evidence is not None and "key_filter" not in evidence
    assert report.stale_parents[0]["rebased"] is True
    assert reads == [added_by(lake, 2)]  # B's files, read once
    assert view(lake) == fold([first, b, a])

    c = jsonl([up("ord-thrice", 30, 999, day=8)])
    d = jsonl([up("ord-thrice", 31, 111, day=9)])
    race = Race(monkeypatch, unfiltered(lake, c))
    report = lake.ingest(d)
    assert race.builds == 2 and report.stale_parents[0]["rebased"] is False
    assert len(reads) == 2
    assert view(lake) == fold([first, b, a, c, d])


def test_a_writer_hashes_its_keys_once_however_often_it_rebases(lake: dr.Lake,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """Among many writers one rebases once per commit that lands before its own: its keys' filter digests
    are computed at the first check and reused by the next (the keys have not changed)."""
    from delta_release.commit.writer import onto
    from delta_release.ingest import prepare_candidate

    base(lake)
    staged = prepare_candidate(lake, decode_batch(jsonl([up("ord-x", 10, 1, day=4)])).events, parent=1,
                               batch_ids=["mine"], operation="ingest")
    lake.ingest(jsonl([up("ord-y", 11, 2, day=5)]))
    lake.ingest(jsonl([up("ord-z", 12, 3, day=6)]))
    ctx = lake.table("orders")
    hashed: list[int] = []
    real = ctx.erasures.filter_digests
    monkeypatch.setattr(ctx.erasures, "filter_digests", lambda ids: hashed.append(len(ids)) or real(ids))
    keys = rebase.KeySet(["ord-x"])
    assert rebase.independent_since(ctx, staged, 2, keys=keys, batch_ids=["mine"])
    assert rebase.independent_since(ctx, onto(staged, 2), 3, keys=keys, batch_ids=["mine"])
    assert hashed == [1]
    assert not rebase.independent_since(ctx, onto(staged, 2), 3, keys=rebase.KeySet(["ord-z"]), batch_ids=["mine"])
