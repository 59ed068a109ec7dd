"""The hot path's indexes (issue 14): the key index (keyed hashes -> partition) and the applied-batch index.
Both are caches: results equal the reference fold with and without them, missing or stale ones are rebuilt
or caught up from the table, and an erasure takes its subject out of the key index."""

from __future__ import annotations

import json
import random
import shutil
from pathlib import Path
from typing import Any

import pytest

import delta_release as dr
from delta_release import _delta, index
from delta_release.ingest import applied_batches
from tests.apply.conftest import current, oracle
from tests.conftest import jsonl, rm, up
from tests.index.conftest import stream


def key_index(lake: dr.Lake) -> index.KeyIndex:
    ki = index.key_index(lake.table("orders"))
    assert ki is not None
    return ki


def index_dir(lake: dr.Lake) -> Path:
    table_id = _delta.table_id(lake.table_uri("orders"), lake.options)
    return lake.storage.local_path(f"_index/orders/{table_id}")


def located(lake: dr.Lake) -> dict[str, int | None]:
    """Where the key index says each order of the current view lives."""
    rows = lake.read().to_dicts()
    return key_index(lake).locate([r["order_id"] for r in rows], upto=lake.latest_version("orders") or 0)


def test_results_equal_the_reference_fold_with_and_without_the_index(tmp_path: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    batches = stream(1)
    events = [e for b in batches for e in b]
    with_index = dr.Lake.create(tmp_path / "with")
    for b in batches:
        with_index.ingest(jsonl(b))
    monkeypatch.setenv(index.ENV_OFF, "1")
    without = dr.Lake.create(tmp_path / "without")
    for b in batches:
        without.ingest(jsonl(b))
    assert not (tmp_path / "without" / "_index").exists()
    monkeypatch.delenv(index.ENV_OFF)
    assert current(with_index) == current(without) == oracle(events)
    # the index names the partition each current order is in
    assert located(with_index) == {r["order_id"]: r["event_day"] for r in with_index.read().to_dicts()}


def test_a_missing_index_is_rebuilt_from_the_table(tmp_path: Path) -> None:
    batches = stream(2)
    lake = dr.Lake.create(tmp_path / "lake")
    for b in batches[:3]:
        lake.ingest(jsonl(b))
    shutil.rmtree(index_dir(lake))
    for b in batches[3:]:
        lake.ingest(jsonl(b))
    assert current(lake) == oracle([e for b in batches for e in b])
    assert (index_dir(lake) / "keys" / "complete.json").exists()
    assert located(lake) == {r["order_id"]: r["event_day"] for r in lake.read().to_dicts()}
    # the batch index was rebuilt too: a re-sent batch is a duplicate
    assert lake.ingest(jsonl(batches[0])).duplicate


def test_a_rebuild_in_pieces_writes_the_base_a_whole_rebuild_writes(tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """A rebuild hashes and sorts the table's keys a few at a time into pieces (temp files), then merges
    them: the base is the same bytes as with one piece for the whole table, and no piece is left behind."""
    from delta_release.index import keys as kx

    lake = dr.Lake.create(tmp_path / "lake")
    for b in stream(4, n_batches=5, per_batch=30):
        lake.ingest(jsonl(b))
    version = lake.latest_version("orders") or 0
    bases, made = {}, []
    piece_of = kx.KeyIndex._piece

    def piece(self: kx.KeyIndex, run: Any, temps: list[str]) -> Any:
        made.append(len(run[0]))
        return piece_of(self, run, temps)

    monkeypatch.setattr(kx.KeyIndex, "_piece", piece)
    for size in (1 << 21, 3, 1):
        shutil.rmtree(index_dir(lake))
        monkeypatch.setattr(kx, "REBUILD_KEYS", size)
        made.clear()
        key_index(lake).rebuild(version)
        bases[size] = (index_dir(lake) / "keys" / f"b-{version:012d}.kx2").read_bytes()
        assert len(made) == 1 if size > 100 else len(made) >= 4  # (pieces of a file or two each)
        assert not list((tmp_path / "lake").rglob(".tmp-*"))  # every piece's temp file is gone
    assert bases[3] == bases[1] == bases[1 << 21]
    assert located(lake) == {r["order_id"]: r["event_day"] for r in lake.read().to_dicts()}


def test_a_stale_index_is_caught_up_from_the_commits_it_missed(tmp_path: Path) -> None:
    lake = dr.Lake.create(tmp_path / "lake")
    lake.ingest(jsonl([up("a", 1, day=1), up("b", 2, day=2)]))
    saved = tmp_path / "saved-index"
    shutil.copytree(index_dir(lake), saved)
    # commits the saved index does not know: "a" moves to day 5, "c" appears on day 3
    lake.ingest(jsonl([up("a", 10, day=5), up("c", 11, day=3)]))
    shutil.rmtree(index_dir(lake))
    shutil.copytree(saved, index_dir(lake))  # the index is now behind the table
    assert key_index(lake).locate(["a", "b", "c"], upto=lake.latest_version("orders") or 0) == {
        "a": 5, "b": 2, "c": 3}
    # a batch that needs to know where "a" lives (it deletes it without a day) folds right
    lake.ingest(jsonl([rm("a", 20), up("c", 21, day=4)]))
    assert current(lake) == oracle([up("a", 1, day=1), up("b", 2, day=2), up("a", 10, day=5), up("c", 11, day=3),
                                    rm("a", 20), up("c", 21, day=4)])
    rows = lake.scan("orders").collect()
    assert rows.filter(rows["order_id"] == "a").height == 0  # the view hides the tombstone
    full = _delta.scan(lake.table_uri("orders"), lake.options).collect()
    assert full.filter(full["order_id"] == "a")["event_day"].to_list() == [5]  # tombstone in a's partition


def test_erasure_removes_the_subject_from_the_key_index(tmp_path: Path) -> None:
    lake = dr.Lake.create(tmp_path / "lake")
    lake.ingest(jsonl([up("ord-47", 1, day=1), up("ord-48", 2, day=1), up("ord-47", 3, day=2)]))
    lake.ingest(jsonl([up("ord-49", 4, day=2)]))
    subject = lake.erasures.subject_key("ord-47")
    assert key_index(lake).holds(subject)
    lake.erase("ord-47")
    assert not key_index(lake).holds(subject)
    files = [p for p in index_dir(lake).rglob("*") if p.is_file()]
    assert files and not any(subject.encode() in p.read_bytes() for p in files)
    assert not any(bytes.fromhex(subject) in p.read_bytes() for p in files)  # the stored form: raw bytes
    assert not any(b"ord-47" in p.read_bytes() for p in files)  # never a plain id
    assert "ord-47" not in key_index(lake).locate(["ord-47"], upto=lake.latest_version("orders") or 0)
    assert set(current(lake)) == {"ord-48", "ord-49"}


def test_applied_batches_equal_the_history_with_and_without_the_index(tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    lake = dr.Lake.create(tmp_path / "lake")
    ids = [lake.ingest(jsonl(b)).batch_id for b in stream(3, n_batches=4)]
    for b in ids[1:]:  # behind: it knows version 1 only
        (index_dir(lake) / "batches" / b).unlink()
    mark = json.loads((index_dir(lake) / "batches.version").read_text())
    (index_dir(lake) / "batches.version").write_text(json.dumps({**mark, "version": 1}))
    assert applied_batches(lake) == set(ids)
    shutil.rmtree(index_dir(lake) / "batches")  # missing: rebuilt from the history
    (index_dir(lake) / "batches.version").unlink()
    assert applied_batches(lake) == set(ids)
    monkeypatch.setenv(index.ENV_OFF, "1")
    assert applied_batches(lake) == set(ids)


def test_an_index_left_by_another_table_at_the_same_uri_is_not_trusted(tmp_path: Path) -> None:
    lake = dr.Lake.create(tmp_path / "lake")
    data = jsonl([up("a", 1, day=1)])
    lake.ingest(data)
    shutil.rmtree(tmp_path / "lake" / "orders")  # the table goes; its indexes stay
    _delta.forget_handles()
    again = dr.Lake.create(tmp_path / "lake")
    report = again.ingest(data)
    assert not report.duplicate and report.version == 1
    assert current(again) == oracle([up("a", 1, day=1)])


def test_lookups_read_a_bounded_number_of_files_after_many_commits(tmp_path: Path) -> None:
    """300 small commits: one file per commit, writers compact, a lookup reads <= 16 + 8 + 1 files, every
    answer equals a model of where each order is, and an erasure still reaches every file."""
    from delta_release.index import keys as kx

    lake = dr.Lake.create(tmp_path / "lake")
    lake.ingest(jsonl([up("k0", 1, day=1)]))
    ki = key_index(lake)
    rng = random.Random(7)
    model: dict[str, int | None] = {"k0": 1}
    listed, at_296 = [], {}
    for version in range(2, 302):
        moves = {f"k{rng.randint(0, 400)}": rng.choice([None, *range(1, 30)]) for _ in range(5)}
        gone = [k for k in (f"k{rng.randint(0, 400)}",) if rng.random() < 0.2 and k not in moves]
        ki.record(version, moves, gone)
        model.update(moves)
        for k in gone:
            model.pop(k, None)
        listed.append(len(list((index_dir(lake) / "keys").iterdir())))
        if version == 296:
            at_296 = dict(model)
    bound = kx.DELTAS_PER_RUN + 2 * kx.RUNS_PER_LEVEL + 1
    assert max(listed[50:]) <= 2 * bound + kx.GRACE_VERSIONS  # superseded files are deleted, not kept
    assert any(p.name.startswith("b-") and int(p.name[2:14]) >= 256
               for p in (index_dir(lake) / "keys").iterdir())  # a writer folded 256 commits into a new base
    asked = [f"k{i}" for i in range(401)]
    fresh = key_index(lake)
    assert fresh.locate(asked, upto=301) == model
    assert 1 <= fresh.files_read <= bound
    assert key_index(lake).locate(asked, upto=296) == at_296  # a parent inside the grace: as of it
    subject = next(k for k in model if k != "k0")
    subject_hash = lake.erasures.subject_key(subject)
    assert fresh.holds(subject_hash)
    fresh.forget(subject, 301)
    assert not fresh.holds(subject_hash)
    raw = bytes.fromhex(subject_hash)
    assert not any(raw in p.read_bytes() for p in index_dir(lake).rglob("*") if p.is_file())
    assert fresh.locate(asked, upto=301) == {k: v for k, v in model.items() if k != subject}


def test_a_lake_many_commits_behind_is_caught_up_in_one_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    lake = dr.Lake.create(tmp_path / "lake")
    lake.ingest(jsonl([up("a", 1, day=1)]))
    monkeypatch.setenv(index.ENV_OFF, "1")  # commits by a path that keeps no index
    for i, day in enumerate([2, 3, 4, 5], start=2):
        lake.ingest(jsonl([up("a", i, day=day), up(f"n{i}", 100 + i, day=day)]))
    monkeypatch.delenv(index.ENV_OFF)
    assert key_index(lake).locate(["a", "n2", "n5", "zz"], upto=5) == {"a": 5, "n2": 2, "n5": 5}
    names = sorted(p.name for p in (index_dir(lake) / "keys").iterdir())
    assert "d-000000000002-000000000005.kx2" in names  # one file for the four missed commits
    assert not [n for n in names if n.startswith("d-000000000003")]


def test_the_index_of_the_previous_layout_is_replaced(tmp_path: Path) -> None:
    """An index left in the per-shard layout (keys/<shard>/*.arrow, keys/v/*), with a `.kx` file that
    cannot be converted (cut short), is rebuilt, and its files go."""
    lake = dr.Lake.create(tmp_path / "lake")
    lake.ingest(jsonl([up("a", 1, day=1), up("b", 2, day=2)]))
    keys_dir = index_dir(lake) / "keys"
    for p in keys_dir.glob("*.kx2"):
        p.unlink()
    (keys_dir / "ab").mkdir()
    (keys_dir / "ab" / "b-000000000001.arrow").write_bytes(lake.erasures.subject_key("a").encode())
    (keys_dir / "b-000000000001.kx").write_bytes(b"DRKEYS01 but cut short")
    assert key_index(lake).locate(["a", "b"], upto=1) == {"a": 1, "b": 2}
    assert sorted(p.name for p in keys_dir.rglob("*") if p.is_file()) == ["b-000000000001.kx2", "complete.json"]


def test_an_index_of_the_previous_layout_is_converted_not_rebuilt(tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """Files of the previous layout (`.kx`: DRKEYS01, hashes then partitions) are written again in this
    one under the same names (not rebuilt from the table: they are trusted, as before), and deleted; a
    lookup and a catch-up after more commits then answer from them."""
    import struct

    import numpy as np

    from delta_release.index import keys as kx

    lake = dr.Lake.create(tmp_path / "lake")
    lake.ingest(jsonl([up("a", 1, day=1), up("b", 2, day=2)]))
    lake.ingest(jsonl([up("c", 3, day=3)]))
    keys_dir = index_dir(lake) / "keys"
    names = sorted(p.name for p in keys_dir.glob("*.kx2"))
    assert len(names) >= 2
    for p in keys_dir.glob("*.kx2"):
        h, day = kx._decode(p.read_bytes(), p.name).run()
        day = np.where(h == np.frombuffer(bytes.fromhex(lake.erasures.subject_key("b")), dtype=kx.HASH), 7, day)
        old = b"DRKEYS01" + struct.pack("<Q", len(h)) + h.tobytes() + day.astype(kx.DAY).tobytes()
        p.with_suffix(".kx").write_bytes(old)
        p.unlink()
    (keys_dir / "d-000000000009-000000000009.kx").write_bytes(b"not a key file")
    monkeypatch.setattr(kx.KeyIndex, "rebuild", lambda *a: pytest.fail("rebuilt from the table"))
    assert key_index(lake).locate(["a", "b", "c", "z"], upto=2) == {"a": 1, "b": 7, "c": 3}  # (b: as converted)
    assert sorted(p.name for p in keys_dir.glob("*.kx2")) == names and not list(keys_dir.glob("*.kx"))
    lake.ingest(jsonl([up("a", 4, day=5)]))
    assert key_index(lake).locate(["a", "b", "c"], upto=3) == {"a": 5, "b": 7, "c": 3}



def test_a_first_commit_that_looked_nothing_up_leaves_the_index_built(tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """A plan that writes whole partitions into the new table (no lookup, so no index yet) builds it in
    its own commit: the writers after it look up without rebuilding from the table (issue 34 item 3)."""
    import polars as pl

    from delta_release.commit import Plan, replace_partitions, write
    from delta_release.index.keys import KeyIndex

    lake = dr.Lake.create(tmp_path / "lake")
    frame = pl.DataFrame({"order_id": ["a", "b", "c"], "position": [1, 2, 3], "amount_cents": [5, 6, 7],
                          "currency": ["USD"] * 3, "deleted": [False] * 3, "event_day": [1, 1, 2]},
                         schema_overrides={"event_day": pl.Int32})
    parts = {k[0]: df for k, df in frame.partition_by("event_day", as_dict=True).items()}

    class Load(Plan):
        def build(self, ctx: Any, parent: int) -> Any:
            return replace_partitions(ctx, parent, parts, operation="load", batch_ids=["load"])

    assert write(lake.table("orders"), Load()).version == 1
    rebuilds: list[int] = []
    real = KeyIndex.rebuild
    monkeypatch.setattr(KeyIndex, "rebuild", lambda self, v: (rebuilds.append(v), real(self, v))[1])
    assert key_index(lake).locate(["a", "c", "zz"], upto=1) == {"a": 1, "c": 2}
    lake.ingest(jsonl([up("b", 9, day=3), up("d", 10, day=1)]))
    assert rebuilds == []  # nothing rebuilt from the table
    assert located(lake) == {r["order_id"]: r["event_day"] for r in lake.read().to_dicts()}
