"""Bucketed files within a day (issue 14.2): a batch rewrites only the (day, bucket) files holding its keys;
untagged (legacy) files are split on first touch; results equal the reference fold; erasure leaves no file
holding the id. The bucket is a keyed hash under the lake secret, so it differs per lake: the tests ask
the lake which bucket a key has rather than hard-coding one."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import polars as pl
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import delta_release as dr
from delta_release.apply import reference_fold
from delta_release.stage.buckets import bucket_of_keys, bucket_of_path, tag
from tests.apply.conftest import assert_tags_hold, keys_of, legacy_defs, orders_files
from tests.conftest import examples, jsonl, rm, up


def _bucket(lake: dr.Lake, key: str) -> int:
    n = lake.table_def("orders").buckets
    assert n
    return bucket_of_keys([key], n, lake.erasures.subject_key)[0]


def test_orders_has_buckets_and_files_carry_the_tag_in_name_and_evidence(lake: dr.Lake) -> None:
    n = lake.table_def("orders").buckets
    assert n == 8
    report = lake.ingest(jsonl([up(f"o{i:03d}", i, day=47) for i in reversed(range(200))]))
    assert len(report.files) == n  # 200 keys fill every bucket of the day
    for f in report.files:
        b = bucket_of_path(f["path"], n)
        assert b is not None and f["bucket"] == tag(b, n)
    assert assert_tags_hold(lake) == 0
    for f in report.files:  # each file's rows sorted by key (the events came in another order)
        keys = keys_of(lake, f["path"])
        assert keys == sorted(keys) and len(keys) > 1
    # The Delta schema is unchanged: no bucket column for readers.
    assert set(lake.read().columns) == {"order_id", "position", "amount_cents", "currency", "event_day"}


def test_a_commit_removes_only_the_touched_day_bucket_files(lake: dr.Lake) -> None:
    lake.ingest(jsonl([up(f"o{i:03d}", i, day=d) for i in range(200) for d in (47, 48) if i % 2 == d % 2]
                      + [up(f"p{i:03d}", 1000 + i, day=48) for i in range(100)]))
    before = {e.path for e in orders_files(lake)}
    assert len(before) == 16
    target = "o011"  # odd: lives in day 47
    report = lake.ingest(jsonl([up(target, 5000, amount=7, day=47)]))
    b, n = _bucket(lake, target), lake.table_def("orders").buckets
    assert len(report.removed) == 1
    assert report.removed[0].startswith("event_day=47/") and bucket_of_path(report.removed[0], n) == b
    assert [bucket_of_path(f["path"], n) for f in report.files] == [b]
    after = {e.path for e in orders_files(lake)}
    assert before - after == set(report.removed)  # every other file is untouched
    rows = lake.read().filter(pl.col("order_id") == target)
    assert rows["amount_cents"].to_list() == [7]
    assert lake.read().height == 300


def test_a_move_rewrites_the_old_and_new_day_bucket_only(lake: dr.Lake) -> None:
    lake.ingest(jsonl([up(f"o{i:03d}", i, day=d) for i in range(100) for d in (47, 48)][:200:2]
                      + [up(f"q{i:03d}", 500 + i, day=48) for i in range(100)]))
    n = lake.table_def("orders").buckets
    report = lake.ingest(jsonl([up("o000", 9000, day=48)]))
    b = _bucket(lake, "o000")
    assert {(p.split("/")[0], bucket_of_path(p, n)) for p in report.removed} <= {("event_day=47", b),
                                                                                 ("event_day=48", b)}
    assert ("event_day=47", b) in {(p.split("/")[0], bucket_of_path(p, n)) for p in report.removed}
    raw = lake.scan("orders", include_tombstones=True).collect()
    assert raw.filter(pl.col("order_id") == "o000")["event_day"].to_list() == [48]
    assert raw["order_id"].is_unique().all()
    assert assert_tags_hold(lake) == 0


def test_a_legacy_untagged_file_is_split_on_first_touch(tmp_path: Path) -> None:
    legacy = dr.Lake.create(tmp_path / "lake", tables_dir=legacy_defs(tmp_path))
    assert legacy.table_def("orders").buckets is None
    legacy.ingest(jsonl([up(f"o{i:03d}", i, day=47) for i in range(100)]
                        + [up(f"p{i:03d}", 200 + i, day=48) for i in range(100)]))
    old = orders_files(legacy)
    assert len(old) == 2 and all(bucket_of_path(e.path, 8) is None for e in old)

    lake = dr.Lake.open(tmp_path / "lake")  # the same lake, now with buckets
    assert lake.table_def("orders").buckets == 8
    report = lake.ingest(jsonl([up("o005", 1000, amount=9, day=47)]))
    day47 = [e.path for e in old if e.path.startswith("event_day=47/")]
    assert report.removed == day47  # the untagged file holds every bucket: replaced whole
    assert len(report.files) == 8 and all(f["path"].startswith("event_day=47/") for f in report.files)
    assert assert_tags_hold(lake) == 1  # day 48's legacy file is untouched until a batch touches it
    assert sum(f["rows"] for f in report.files) == 100
    current = lake.read()
    assert current.height == 200
    assert current.filter(pl.col("order_id") == "o005")["amount_cents"].to_list() == [9]
    # Day 48 next: split as well; then no untagged file is left.
    lake.ingest(jsonl([rm("p001", 2000)]))
    assert assert_tags_hold(lake) == 0
    assert lake.read().height == 199


def test_erasure_leaves_no_file_holding_the_id(lake: dr.Lake) -> None:
    lake.ingest(jsonl([up(f"o{i:03d}", i, day=47 + i % 3) for i in range(120)]))
    lake.ingest(jsonl([up("o007", 500, day=48)]))  # the subject moved: its old bucket file was rewritten
    report = lake.erase("o007")
    assert report.rows_removed == 1
    for e in orders_files(lake):
        assert "o007" not in keys_of(lake, e.path)
    assert assert_tags_hold(lake) == 0
    assert lake.read().height == 119
    # a later batch touching the subject's old bucket still works on the erased lake
    lake.ingest(jsonl([up("o010", 900, day=48)]))
    assert lake.read().height == 119 and assert_tags_hold(lake) == 0


def _oracle(events: list[dict[str, Any]]) -> dict[str, tuple[Any, ...]]:
    norm = [{**e, "currency": e.get("currency", "INR")} for e in events]
    return {k: (v["amount_cents"], v["currency"], v["event_day"], v["position"])
            for k, v in reference_fold(norm).items()}


@st.composite
def _legacy_then_bucketed(draw: st.DrawFn) -> tuple[list[dict[str, Any]], int]:
    n = draw(st.integers(2, 24))
    positions = draw(st.lists(st.integers(0, 10_000), min_size=n, max_size=n, unique=True))
    events: list[dict[str, Any]] = []
    for pos in positions:
        oid = draw(st.sampled_from([f"k{i}" for i in range(10)]))
        if draw(st.integers(0, 4)) == 0:
            events.append(rm(oid, pos, draw(st.one_of(st.none(), st.sampled_from([47, 48])))))
        else:
            events.append(up(oid, pos, amount=draw(st.integers(0, 999)), day=draw(st.sampled_from([47, 48, 49]))))
    return events, draw(st.integers(0, n))


@settings(max_examples=examples(12, 60), deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(case=_legacy_then_bucketed())
def test_legacy_then_bucketed_batches_give_the_reference_fold(tmp_path: Path, case: Any) -> None:
    events, cut = case
    root = tmp_path / f"lake-{abs(hash(json.dumps(case)))}"
    legacy = dr.Lake.create(root, tables_dir=legacy_defs(tmp_path / root.name))
    if events[:cut]:
        legacy.ingest(jsonl(events[:cut]))
    lake = dr.Lake.open(root)
    for i in range(cut, len(events), 3):
        lake.ingest(jsonl(events[i:i + 3]))
    assert {r["order_id"]: (r["amount_cents"], r["currency"], r["event_day"], r["position"])
            for r in lake.read().to_dicts()} == _oracle(events)
    raw = lake.scan("orders", include_tombstones=True).collect()
    assert raw["order_id"].is_unique().all()
    assert_tags_hold(lake)


def test_bucket_count_must_be_a_positive_integer(tmp_path: Path) -> None:
    defs = legacy_defs(tmp_path)
    (defs / "orders.yaml").write_text((defs / "orders.yaml").read_text() + "buckets: 0\n")
    with pytest.raises(dr.ConfigError, match="buckets must be an integer"):
        dr.Lake.create(tmp_path / "lake", tables_dir=defs)


def test_backfill_shortcut_only_when_every_file_is_in_the_touched_days(lake: dr.Lake,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    from delta_release.apply import bucketed

    monkeypatch.setattr(bucketed, "MANY_KEYS", 1)  # take the backfill path for any batch
    lake.ingest(jsonl([up("a", 1, day=47), up("b", 2, day=48)]))
    report = lake.ingest(jsonl([up("a", 3, amount=5, day=48), up("c", 4, day=48)]))  # a lives in day 47
    raw = lake.scan("orders", include_tombstones=True).collect()
    assert raw["order_id"].is_unique().all()
    assert dict(raw.select("order_id", "event_day").iter_rows()) == {"a": 48, "b": 48, "c": 48}
    assert any(p.startswith("event_day=47/") for p in report.removed)
    lake.ingest(jsonl([up("a", 2, amount=9, day=48), up("b", 5, amount=6, day=48)]))  # all files in day 48
    rows = {r["order_id"]: r["amount_cents"] for r in lake.read().to_dicts()}
    assert rows == {"a": 5, "b": 6, "c": 100}


def test_a_first_load_gives_the_files_and_key_index_of_a_load_onto_rows(tmp_path: Path) -> None:
    """A table without files folds a batch without looking its keys up and hashes the winners after the
    fold (`bucketed._fold_rows`); the same batch onto a copy of the lake (same secret, so same buckets)
    holding one other order, which takes the lookup path, gives the same keys in the same (day, bucket)
    files and the same key index locations: repeats, an older position and a delete included."""
    from delta_release import index

    first = dr.Lake.create(tmp_path / "first")
    shutil.copytree(tmp_path / "first", tmp_path / "onto")
    onto = dr.Lake.open(tmp_path / "onto")
    onto.ingest(jsonl([up("other", 1, day=300)]))
    events = [up(f"o{i}", i, day=40 + i % 5) for i in range(200)]
    events += [up("o3", 900, amount=7, day=44), rm("o5", 901), up("o7", 2, amount=1, day=41)]
    n = first.table_def("orders").buckets
    keys = [f"o{i}" for i in range(200)]

    def layout(lake: dr.Lake) -> tuple[dict[tuple[str, int | None], list[str]], dict[str, int | None]]:
        lake.ingest(jsonl(events))
        files = {(e.path.split("/")[0], bucket_of_path(e.path, n)): sorted(keys_of(lake, e.path))
                 for e in orders_files(lake) if not e.path.startswith("event_day=300/")}
        ctx = lake.table("orders")
        found = index.key_index(ctx)
        assert found is not None
        return files, found.locate(keys, upto=lake.latest_version("orders") or 0)

    assert layout(first) == layout(onto)
    assert assert_tags_hold(first) == 0
    assert {r["order_id"]: r["amount_cents"] for r in first.read().to_dicts() if r["order_id"] in {"o3", "o5", "o7"}} \
        == {"o3": 7, "o7": 100}


@pytest.fixture(scope="module")
def hash_lake(tmp_path_factory: pytest.TempPathFactory) -> dr.Lake:
    return dr.Lake.create(tmp_path_factory.mktemp("hash-lake"))


@settings(max_examples=40, deadline=None)
@given(ids=st.lists(st.text(min_size=1, max_size=12), max_size=60), groups=st.sampled_from([1, 3, 8, 24, 40]))
def test_each_events_group_holds_keys_of_its_bucket_only(hash_lake: dr.Lake, ids: list[str], groups: int) -> None:
    """A file's map hashes every event's key (repeats again, `digest_array`: the same digests as the ledger's
    per id) and puts it in a group (`groups_of`): at most `buckets` groups are whole buckets (bucket %
    groups); past them, sub-groups of ONE bucket (group % buckets), so a bucket's files are the union of its
    sub-groups' rows and no two buckets meet in a group."""
    from delta_release.stage.buckets import digest_array, groups_of

    hasher = hash_lake.erasures.subject_key
    hashes = digest_array(pl.Series("order_id", ids, dtype=pl.String), hasher)
    raw = hashes.tobytes()  # (not .tolist(): numpy drops an S32 item's trailing zero bytes)
    assert [raw[32 * i:32 * i + 32].hex() for i in range(len(ids))] == [hasher(i) for i in ids]
    buckets = bucket_of_keys(ids, 8, hasher)
    got = groups_of(hashes, 8, groups).tolist()
    for bucket, group in zip(buckets, got, strict=True):
        assert group % min(groups, 8) == bucket % min(groups, 8) and 0 <= group < groups
        if groups > 8:
            assert group % 8 == bucket


@settings(max_examples=40, deadline=None)
@given(ids=st.lists(st.text(min_size=1, max_size=12), min_size=1, max_size=60), data=st.data())
def test_known_digests_give_each_keys_hash_by_its_line(hash_lake: dr.Lake, ids: list[str], data: Any) -> None:
    """A fold of a file in parts looks its winners' keyed hashes up by line (`KnownDigests`, the map's
    hashes) instead of hashing them again: lines in any order; a line it does not know, or none (a key the
    sequence fold decided), is hashed then. Every answer is the ledger's hash of the key."""
    import numpy as np

    from delta_release.stage.buckets import KnownDigests, digest_array

    hasher = hash_lake.erasures.subject_key
    lines = data.draw(st.permutations(range(10, 10 + 3 * len(ids), 3)))
    known = KnownDigests.of(np.array(lines, dtype=np.int64), digest_array(pl.Series(ids, dtype=pl.String), hasher))
    asked = data.draw(st.lists(st.integers(0, len(ids) - 1), max_size=40))
    other = data.draw(st.lists(st.tuples(st.sampled_from([None, 0, 11, 10_000]), st.text(max_size=8)), max_size=6))
    at = [lines[i] for i in asked] + [line for line, _ in other]
    keys = [ids[i] for i in asked] + [key for _, key in other]
    got = known.lookup(pl.Series(at, dtype=pl.Int64), pl.Series(keys, dtype=pl.String), hasher)
    raw = got.tobytes()  # (not item by item: numpy drops an S32 item's trailing zero bytes)
    assert got.dtype == "S32" and [raw[32 * i:32 * i + 32].hex() for i in range(len(keys))] == [hasher(k) for k in keys]
    with pytest.raises(ValueError, match="hashes for"):
        KnownDigests.of(np.array(lines[:-1], dtype=np.int64), known.hashes)
