from __future__ import annotations

import delta_release as dr
from tests.conftest import ORDERS, jsonl, rm, up


def test_fixtures_ingest_and_read(lake: dr.Lake) -> None:
    for name in ("v2", "v3"):
        report = lake.ingest(ORDERS / f"{name}.jsonl")
        assert report.quarantined == 0 and report.version is not None
    rows = {r["order_id"]: r for r in lake.read().to_dicts()}
    assert "ord-003" not in rows and "ord-022" not in rows  # deleted
    assert rows["ord-005"]["amount_cents"] == 7350  # the late correction wins over the stale event
    assert rows["ord-007"]["currency"] == "USD" and rows["ord-007"]["amount_cents"] == 8125
    assert rows["ord-033"]["amount_cents"] == 5555  # re-created after its delete
    assert rows["ord-001"]["currency"] == "INR"


def test_tombstone_blocks_lower_positions(lake: dr.Lake) -> None:
    lake.ingest(jsonl([up("a", 1), rm("a", 5)]))
    lake.ingest(jsonl([up("a", 3, amount=999)]))
    assert lake.read().height == 0
    lake.ingest(jsonl([up("a", 6, amount=7)]))
    assert lake.read()["amount_cents"].to_list() == [7]


def test_a_copied_lake_reads_and_writes_its_own_tables(tmp_path) -> None:  # type: ignore[no-untyped-def]
    import shutil

    original = dr.Lake.create(tmp_path / "a")
    original.ingest(jsonl([up("a", 1)]))
    shutil.copytree(tmp_path / "a", tmp_path / "b")
    copy = dr.Lake.open(tmp_path / "b")
    assert copy.table_uri("orders") == str(tmp_path / "b" / "orders")
    copy.ingest(jsonl([up("b", 2)]))
    assert sorted(copy.read()["order_id"].to_list()) == ["a", "b"]
    assert dr.Lake.open(tmp_path / "a").read()["order_id"].to_list() == ["a"]  # the original is untouched
