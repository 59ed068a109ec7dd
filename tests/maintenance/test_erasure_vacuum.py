"""vacuum: dry run by default; keeps what the published, retained and replay-horizon snapshots need;
removes files holding erased subjects as soon as that allows; orphans only after their grace period."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import polars as pl
import pyarrow.parquet as pq
import pytest

import delta_release as dr
from delta_release.clock import FixedClock
from delta_release.erasure.lineage import table_lineage
from tests.conftest import jsonl, rm, up

SUBJECT = "ord-subject-47"


def parquet_files(lake: dr.Lake) -> dict[str, Path]:
    root = Path(lake.table_uri("orders"))
    return {p.relative_to(root).as_posix(): p for p in root.rglob("*.parquet") if "_delta_log" not in p.parts}


def holding(lake: dr.Lake, order_id: str = SUBJECT) -> list[str]:
    return sorted(rel for rel, p in parquet_files(lake).items()
                  if order_id in pq.read_table(p, columns=["order_id"]).column("order_id").to_pylist())


@pytest.fixture
def erased(lake: dr.Lake) -> dr.Lake:
    lake.ingest(jsonl([up(SUBJECT, 1), up("a", 2), up("b", 3, day=48)]))   # v1
    lake.ingest(jsonl([up(SUBJECT, 4, day=49), up("c", 5, day=50)]))        # v2 (subject moves)
    lake.ingest(jsonl([rm(SUBJECT, 6), up("a", 7, amount=9)]))              # v3 (tombstone)
    lake.ingest(jsonl([up("d", 8, day=48)]))                                # v4
    lake.erase(SUBJECT)                                                     # v5
    lake.ingest(jsonl([up("e", 9, day=51)]))                                # v6
    lake.ingest(jsonl([up("b", 10, amount=11, day=48)]))                    # v7
    return lake


def test_dry_run_is_the_default_and_deletes_nothing(erased: dr.Lake) -> None:
    before = set(parquet_files(erased))
    report = erased.vacuum(retain_versions=2, replay_horizon_hours=0)
    assert report.dry_run and report.removed
    assert set(parquet_files(erased)) == before


def test_vacuum_after_erasure_leaves_no_subject_file_and_retained_snapshots_read(erased: dr.Lake) -> None:
    lake = erased
    assert holding(lake)
    readable_before = {v: lake.read(version=v).to_dicts() for v in (5, 6, 7)}
    report = lake.vacuum(apply=True, retain_versions=3, replay_horizon_hours=0)
    assert report.needed_versions == {5: "retained", 6: "retained", 7: "latest"}
    assert holding(lake) == []                                         # nothing in the table dir holds it
    reasons = {r["reason"] for r in report.removed}
    assert "erased_subject" in reasons and "expired" in reasons
    for v, rows in readable_before.items():                            # every retained snapshot still reads
        assert lake.read(version=v).to_dicts() == rows
    kept = {k["path"] for k in report.kept}
    lineage = table_lineage(lake, "orders")
    needed_files = set().union(*(lineage.files_at(v) for v in (5, 6, 7)))
    assert needed_files <= set(parquet_files(lake)) and kept <= needed_files
    with pytest.raises(FileNotFoundError):                             # the refused version's files are gone
        pl.read_delta(lake.table_uri("orders"), version=4)


def test_retained_versions_that_hold_an_erased_subject_are_not_needed(erased: dr.Lake) -> None:
    lake = erased
    lineage = table_lineage(lake, "orders")
    report = lake.vacuum(apply=True, retain_versions=8, replay_horizon_hours=0)
    assert report.refused_versions == [1, 2, 3, 4]                      # they may never be read again
    assert holding(lake) == []
    for v in (0, 5, 6, 7):
        lake.read(version=v)
    for r in report.removed:  # only files no allowed version references (expired ones too)
        assert lineage.referenced(r["path"], {0, 5, 6, 7}) == set()
        assert lineage.referenced(r["path"], {1, 2, 3, 4})


def test_replay_horizon_keeps_recent_versions(tmp_path: Path) -> None:
    now = datetime.now(UTC)
    lake = dr.Lake.create(tmp_path / "lake", clock=FixedClock(now))
    lake.ingest(jsonl([up("a", 1)]))
    lake.ingest(jsonl([up("a", 2, amount=2)]))
    lake.ingest(jsonl([up("a", 3, amount=3)]))
    within = lake.vacuum(retain_versions=1, replay_horizon_hours=24)
    assert within.removed == [] and {k["reason"] for k in within.kept} == {"replay_horizon"}
    lake.clock.advance(48 * 3600)  # type: ignore[attr-defined]
    beyond = lake.vacuum(retain_versions=1, replay_horizon_hours=24, apply=True)
    assert [r["reason"] for r in beyond.removed] == ["expired", "expired"]
    assert lake.read()["amount_cents"].to_list() == [3]


def test_orphans_wait_for_their_grace_period(lake: dr.Lake) -> None:
    lake.ingest(jsonl([up("a", 1)]))
    root = Path(lake.table_uri("orders"))
    orphan = root / "event_day=47" / "part-staged-by-a-killed-writer-0000.parquet"
    orphan.write_bytes(b"PAR1 not really")
    kept = lake.vacuum(apply=True, replay_horizon_hours=0, orphan_grace_hours=10_000)
    assert orphan.exists() and [k["reason"] for k in kept.kept] == ["in_flight"]
    gone = lake.vacuum(apply=True, replay_horizon_hours=0, orphan_grace_hours=0)
    assert not orphan.exists() and [r["reason"] for r in gone.removed] == ["orphan"]
    assert lake.read()["order_id"].to_list() == ["a"]
