"""Issue 13, item 1: a release run commits only when it ships.

A HOLD leaves every Delta log byte-identical, its staged files gone, and the held events absent from
every later read, ingest, erasure and `replay --all`; a SHIP is exactly one commit per table, equal to
ingesting the batches one by one; a parent that moves during the checks holds with `stale_parent`.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import polars as pl
import pytest

import delta_release as dr
from delta_release.release import run as run_mod
from delta_release.release.run import run_release
from tests.conftest import ORDERS, jsonl, up
from tests.release.conftest import ingest_base, log_hashes, release_config

HELD = ["ord-held-1", "ord-held-2"]


def _held_batch(tmp: Path) -> Path:
    path = tmp / "held.jsonl"
    path.write_bytes(jsonl([up(HELD[0], 9001, amount=111, day=47), up(HELD[1], 9002, amount=222, day=48),
                            up("ord-base-1", 9003, amount=999, day=47)]) + b"not json at all\n")
    return path


def _ids_at_latest(lake: dr.Lake) -> set[str]:
    uri = lake.table_uri("orders")
    return set(pl.scan_delta(uri).select("order_id").collect()["order_id"].to_list())


def test_hold_leaves_every_log_unchanged_and_the_held_events_never_come_back(tmp_path: Path) -> None:
    root = tmp_path / "lake"
    lake = dr.Lake.create(root)
    ingest_base(lake)
    before_logs = log_hashes(root)
    before_version = lake.latest_version("orders")
    before_pub = lake.published("orders")
    held = _held_batch(tmp_path)

    out = run_release(str(release_config(tmp_path, [held], broken_v3=True)))
    assert out["decision"] == "hold" and out["failed_checks"] == ["schema_fixture_v3"]
    assert out["snapshot"]["version"] is None and out["snapshot"]["parent"] == before_version

    # the logs: byte-identical, the telemetry table not even created
    assert log_hashes(root) == before_logs
    assert not (root / "telemetry" / "_delta_log").exists()
    lake = dr.Lake.open(root)
    assert lake.latest_version("orders") == before_version and lake.published("orders") == before_pub

    # the packet says what was discarded; those files are gone; the run's telemetry uploads too
    packet = json.loads(Path(out["packet"]).read_text())
    gone = packet["discarded"]
    batch_id = packet["counts"]["batches"][0]["batch_id"]
    assert gone["batch_ids"] == [batch_id] and gone["files"] and gone["rows"] >= 3
    assert not any((root / "orders" / p).exists() for p in gone["files"])
    assert gone["telemetry_files"] and not any(
        (root / "telemetry" / item.split(":", 1)[1]).exists() for item in gone["telemetry_files"])
    assert not list((root / "telemetry").rglob("*.parquet"))

    # received evidence stays: the raw batch and its quarantine record
    assert lake.raw.read(batch_id) == held.read_bytes()
    assert lake.quarantine.rows(batch_id)["reason"].to_list() == ["malformed_json"]

    # later writers behave as if the run never happened
    ing = lake.ingest(jsonl([up("ord-after", 50, day=49)]))
    assert ing.version == before_version + 1 and not ing.duplicate
    lake.erase("ord-base-2")
    replays = lake.replay(all_batches=True)
    assert batch_id not in {r.batch_id for r in replays} and len(replays) == 2
    current = set(lake.read()["order_id"].to_list())
    assert current == {"ord-base-1", "ord-base-3", "ord-after"}
    assert _ids_at_latest(lake).isdisjoint(HELD)  # what an analyst's first pl.scan_delta shows
    assert lake.read().filter(pl.col("order_id") == "ord-base-1")["amount_cents"].to_list() == [10]
    for v in range(lake.latest_version("orders") + 1):
        ids = set(pl.scan_delta(lake.table_uri("orders"), version=v).select("order_id").collect()["order_id"])
        assert ids.isdisjoint(HELD), v
    assert all(batch_id not in h.get("batch_ids", []) for h in lake.history())


def _our_commits(lake: dr.Lake, table: str, after: int) -> list[dict[str, Any]]:
    return [h for h in lake.history(table) if h["version"] > after]


def test_ship_is_one_commit_per_table_equal_to_ingesting_one_by_one(tmp_path: Path) -> None:
    root = tmp_path / "lake"
    lake = dr.Lake.create(root)
    ingest_base(lake)
    before = lake.latest_version("orders")
    batches = [ORDERS / n for n in ("history.jsonl", "v2.jsonl", "v3.jsonl", "bad.jsonl")]

    out = run_release(str(release_config(tmp_path, batches, broken_v3=False)))
    assert out["decision"] == "ship", out["failed_checks"]
    lake = dr.Lake.open(root)
    assert out["snapshot"]["version"] == before + 1 == lake.latest_version("orders")
    assert lake.published("orders").version == before + 1
    commits = _our_commits(lake, "orders", before)
    assert len(commits) == 1
    assert len(_our_commits(lake, "telemetry", 0)) == 1

    # the same batches ingested one by one give the same current rows
    other = dr.Lake.create(tmp_path / "sequential")
    ingest_base(other)
    for b in batches:
        other.ingest(b)
    assert lake.read().equals(other.read())
    packet = json.loads(Path(out["packet"]).read_text())
    assert packet["discarded"] is None and packet["checks"]["pinned_query"]["passed"]
    seq_quarantined = sum(r.height for r in [other.quarantine.rows()])
    assert packet["counts"]["quarantined"] == seq_quarantined


def test_a_parent_that_moves_during_the_checks_holds_with_stale_parent(tmp_path: Path,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    root = tmp_path / "lake"
    lake = dr.Lake.create(root)
    ingest_base(lake)
    real = run_mod.run_check
    moved: list[int | None] = []

    def racing_check(name: str, ctx: Any) -> Any:
        if not moved:  # another writer commits while the run checks its candidate
            moved.append(dr.Lake.open(root).ingest(jsonl([up("ord-racer", 70, day=50)])).version)
        return real(name, ctx)

    monkeypatch.setattr(run_mod, "run_check", racing_check)
    before = lake.latest_version("orders")
    out = run_release(str(release_config(tmp_path, [_held_batch(tmp_path)], broken_v3=False)))
    assert out["decision"] == "hold" and out["failed_checks"] == ["stale_parent"]
    packet = json.loads(Path(out["packet"]).read_text())
    assert packet["stale_parent"] == {"expected": before, "found": before + 1}
    lake = dr.Lake.open(root)
    assert lake.latest_version("orders") == moved[0] == before + 1  # only the racer's commit
    assert not any((root / "orders" / p).exists() for p in packet["discarded"]["files"])
    assert set(lake.read()["order_id"].to_list()).isdisjoint(HELD)
    logs_after_race = log_hashes(root)
    assert not any(k.startswith("telemetry/") for k in logs_after_race)


@pytest.mark.parametrize("broken_v3", [False, True])
def test_a_parent_that_moves_while_the_run_stages_holds_with_stale_parent(tmp_path: Path, broken_v3: bool,
                                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 32, item 6: a writer commits between the run's staging and its checks. The hold is the race
    (`stale_parent`), not a data check: the reference fold uses only the batches the candidate's parent
    holds, so `pinned_query` passes on the staged candidate. A run held by a failed check anyway says that
    it raced too."""
    root = tmp_path / "lake"
    lake = dr.Lake.create(root)
    ingest_base(lake)
    real = run_mod.stage_run
    moved: list[int | None] = []

    def racing_stage(*args: Any, **kwargs: Any) -> Any:
        staged = real(*args, **kwargs)
        moved.append(dr.Lake.open(root).ingest(jsonl([up("ord-racer", 70, day=50)])).version)
        return staged

    monkeypatch.setattr(run_mod, "stage_run", racing_stage)
    before = lake.latest_version("orders")
    out = run_release(str(release_config(tmp_path, [_held_batch(tmp_path)], broken_v3=broken_v3)))
    packet = json.loads(Path(out["packet"]).read_text())
    expected = ["schema_fixture_v3", "stale_parent"] if broken_v3 else ["stale_parent"]
    assert out["decision"] == "hold" and out["failed_checks"] == expected, packet["reasons"]
    assert packet["checks"]["pinned_query"]["passed"]
    assert packet["stale_parent"] == {"expected": before, "found": before + 1}
    assert dr.Lake.open(root).latest_version("orders") == moved[0] == before + 1  # only the racer's commit


def test_a_run_folded_in_sub_groups_ships_the_sequential_table_and_its_key_index(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Batches past buckets x the group limit are staged in sub-groups of each bucket (each folded on its
    own, their winners written together) and shipped after the run's spill folder is gone: the table
    equals the sequential ingest's, and a later batch moving its orders to other days finds their rows
    (the key index catches up on the shipped commit; else an order would have two rows)."""
    from delta_release import parts
    from delta_release.contract.parts import ENV_MAX_GROUP
    from delta_release.release.candidate import run_sources

    monkeypatch.setenv(ENV_MAX_GROUP, "512")
    batches = [ORDERS / n for n in ("history.jsonl", "v2.jsonl", "v3.jsonl", "bad.jsonl")]
    assert parts.group_count(run_sources([str(b) for b in batches])[0], 8) > 8
    root = tmp_path / "lake"
    ingest_base(dr.Lake.create(root))
    out = run_release(str(release_config(tmp_path, batches, broken_v3=False)))
    assert out["decision"] == "ship", out["failed_checks"]
    lake = dr.Lake.open(root)
    other = dr.Lake.create(tmp_path / "sequential")
    ingest_base(other)
    for b in batches:
        other.ingest(b)
    assert lake.read().equals(other.read())
    ids = lake.read()["order_id"].to_list()
    later = jsonl([up(oid, 50_000 + i, amount=5, day=60 + i % 3) for i, oid in enumerate(ids)])
    lake.ingest(later)
    other.ingest(later)
    assert lake.read().equals(other.read())
    assert lake.scan("orders", include_tombstones=True).collect()["order_id"].is_unique().all()
