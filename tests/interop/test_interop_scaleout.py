"""The scale-out path (issue 9, part 3): one strict committer per table, many readers of any engine.

Writers stay one strict committer per table: a candidate prepared on a parent that has moved is refused.
Readers ask the catalog for the published version and the table's location, then read that pinned
version with whatever engine they scale to: Sail's Spark API here (any Spark with Delta the same way),
or DuckDB's delta extension. A commit that is not published yet is invisible to them.
"""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import polars as pl
import pytest

import delta_release as dr
from delta_release.clock import FixedClock
from delta_release.contract import decode_batch
from delta_release.ingest import commit_candidate, prepare_candidate
from tests.conftest import jsonl, rm, up
from tests.interop.conftest import CURRENT_SQL, assert_same_rows
from tests.interop_engines import run_engine

pytestmark = pytest.mark.interop


def _events(events: list[dict[str, object]]) -> pl.DataFrame:
    return decode_batch(jsonl(events)).events  # type: ignore[arg-type]


def test_one_strict_committer_and_readers_on_the_published_version(tmp_path: Path) -> None:
    lake = dr.Lake.create(tmp_path / "lake", clock=FixedClock(datetime(2026, 11, 29, 12, 0, tzinfo=UTC)))
    lake.ingest(jsonl([up(f"ord-{i}", i, 100 + i, day=40 + i % 3) for i in range(12)]))
    lake.ingest(jsonl([rm("ord-4", 20), up("ord-5", 21, 555, day=41)]))
    parent = lake.latest_version("orders")
    assert parent == 2

    # two writers prepare on the same parent; the second to commit is refused, nothing of it is visible
    a = prepare_candidate(lake, _events([up("ord-1", 30, 1)]), parent=parent, batch_ids=["a"], operation="ingest")
    b = prepare_candidate(lake, _events([up("ord-2", 31, 2)]), parent=parent, batch_ids=["b"], operation="ingest")
    assert commit_candidate(lake, a) == 3
    with pytest.raises(dr.StaleParentError) as info:
        commit_candidate(lake, b)
    assert (info.value.expected, info.value.found) == (2, 3)
    # version 3 is committed but not published: readers must not see it yet

    # what a remote reader (a Spark driver, a DuckDB job) does: ask the catalog, then read that version
    reader_lake = dr.Lake.open(tmp_path / "lake")
    location, version = reader_lake.gateway.resolve("orders", None)
    assert (location, version) == (str(tmp_path / "lake" / "orders"), 2)
    jobs = [{"id": "published", "uri": location, "version": version, "sql": CURRENT_SQL["orders"]},
            {"id": "latest-unpublished", "uri": location, "version": 3, "sql": CURRENT_SQL["orders"]}]
    expected = lake.read("orders")
    assert 30 not in expected["position"].to_list() and expected.height == 11
    for engine in ("sail", "duckdb"):
        run = run_engine(engine, jobs, tmp_path / "engines")
        if not run.installed:
            pytest.skip(f"{engine} is not installed: {run.error}")
        assert not run.error, run.error
        published = pl.DataFrame(pl.from_arrow(run.table("published")))
        assert_same_rows(published, expected)
        unpublished = pl.DataFrame(pl.from_arrow(run.table("latest-unpublished")))
        assert unpublished.filter(pl.col("order_id") == "ord-1")["amount_cents"].to_list() == [1]
        assert published.filter(pl.col("order_id") == "ord-1")["amount_cents"].to_list() == [101]

    # publishing moves every reader at once
    lake.publish_version("orders", 3, digest="test")
    assert reader_lake.gateway.resolve("orders", None) == (location, 3)
