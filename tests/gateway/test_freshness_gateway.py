"""The query boundary: a reader's cache is checked against the catalog at every scan (I8)."""

from __future__ import annotations

import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import polars as pl
import pytest

import delta_release as dr
from delta_release.clock import FixedClock, iso
from delta_release.errors import FreshnessError, InputError, NotFoundError
from tests.conftest import ROOT, jsonl, up


def test_a_stale_cache_is_refreshed_at_the_next_scan(lake: dr.Lake, tmp_path: Path) -> None:
    reader = dr.Lake.open(tmp_path / "lake")
    assert reader.read().height == 0
    cached = reader.gateway.cache["orders"]
    lake.ingest(jsonl([up("a", 1), up("b", 2)]))
    assert reader.gateway.cache["orders"] == cached  # nothing moves the cache but a query
    assert reader.read()["order_id"].to_list() == ["a", "b"]
    fresh = reader.gateway.cache["orders"]
    assert fresh.generation == lake.published("orders").generation > cached.generation  # type: ignore[union-attr]
    assert fresh.version == lake.published("orders").version  # type: ignore[union-attr]


def test_error_policy_raises_instead_of_answering_from_a_stale_cache(lake: dr.Lake, tmp_path: Path) -> None:
    reader = dr.Lake.open(tmp_path / "lake", freshness="error")
    reader.read()
    lake.ingest(jsonl([up("a", 1)]))
    with pytest.raises(FreshnessError,
                       match="metadata cache of orders is stale: cached generation 1, published 2") as err:
        reader.scan()
    facts = err.value.facts
    assert (facts["cached_generation"], facts["published_generation"]) == (1, 2)
    assert err.value.exit_code == 3
    reader.gateway.refresh("orders")
    assert reader.read()["order_id"].to_list() == ["a"]


def test_unknown_policy_is_an_input_error(lake: dr.Lake, tmp_path: Path) -> None:
    # (on an existing lake: on a missing one the "holds no lake" error answered first, whatever the policy)
    with pytest.raises(InputError, match=r"unknown freshness policy 'sometimes' \(refresh or error\)"):
        dr.Lake.open(tmp_path / "lake", freshness="sometimes")


def test_every_scan_asks_the_catalog(lake: dr.Lake) -> None:
    lake.read()
    before = lake.gateway.requests.snapshot()
    for _ in range(3):
        lake.scan()
    after = lake.gateway.requests.since(before)
    assert after["catalog_reads"] == 6 and after["log_resolutions"] == 0  # warm: no log replay


def test_cache_records_when_the_refresh_completed(tmp_path: Path, clock: FixedClock) -> None:
    lake = dr.Lake.create(tmp_path / "lake", clock=clock)
    clock.advance(60)
    lake.read()
    entry = lake.gateway.cache["orders"]
    assert entry.refresh_completed == iso(clock.now())
    assert entry.files == () and entry.location == lake.table_uri("orders")


def test_a_version_newer_than_the_published_one_is_refused(lake: dr.Lake) -> None:
    published = lake.ingest(jsonl([up("a", 1)])).version
    pending = lake.ingest(jsonl([up("b", 2)]), publish=False).version  # committed, not published
    assert pending == published + 1 and lake.published("orders").version == published  # type: ignore[union-attr]
    assert pl.scan_delta(lake.table_uri("orders"), version=pending).collect().height == 2  # it is readable
    refused = rf"version {pending} of orders is not published \(published: {published}\)"
    with pytest.raises(NotFoundError, match=refused):
        lake.scan("orders", pending)
    assert lake.read()["order_id"].to_list() == ["a"]


PUBLISHER = textwrap.dedent("""
    import sys
    sys.path.insert(0, {root!r})
    import delta_release as dr
    from tests.conftest import jsonl, up
    lake = dr.Lake.open({lake!r})
    report = lake.ingest(jsonl([up("late", 9, amount=4242, day=48)]))
    print(report.version)
""")


@pytest.mark.parametrize("policy", ["refresh", "error"])
def test_a_lake_opened_before_another_process_publishes(lake: dr.Lake, tmp_path: Path, policy: str) -> None:
    lake.ingest(jsonl([up("a", 1)]))
    reader = dr.Lake.open(tmp_path / "lake", freshness=policy)
    assert reader.read()["order_id"].to_list() == ["a"]
    script = PUBLISHER.format(root=str(ROOT), lake=str(tmp_path / "lake"))
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120, check=True)
    assert done.stdout.strip() == "2"
    if policy == "refresh":
        rows = reader.read()
        assert rows["order_id"].to_list() == ["a", "late"]  # never the old generation, never empty
    else:
        with pytest.raises(FreshnessError, match="metadata cache of orders is stale: cached generation 2, published 3"):
            reader.read()


def test_a_changed_location_is_caught_with_a_stale_cache(lake: dr.Lake, tmp_path: Path) -> None:
    lake.ingest(jsonl([up("a", 1)]))
    refresh = dr.Lake.open(tmp_path / "lake")
    strict = dr.Lake.open(tmp_path / "lake", freshness="error")
    for reader in (refresh, strict):
        reader.read()
    old = lake.table_uri("orders")
    new = str(tmp_path / "lake" / "relocated" / "orders")  # (inside the lake: locations are confined)
    shutil.copytree(old, new)
    lake.catalog.set_location("orders", new)
    # the new location moves on; the old copy still answers, with the old rows
    lake.ingest(jsonl([up("b", 2)]))
    assert pl.scan_delta(old).collect().height == 1
    assert refresh.read()["order_id"].to_list() == ["a", "b"]
    assert refresh.gateway.cache["orders"].location == new
    with pytest.raises(FreshnessError, match="metadata cache of orders is stale: location changed from ") as err:
        strict.read()
    assert (err.value.facts["cached_location"], err.value.facts["location"]) == (old, new)


def test_location_change_alone_is_stale(lake: dr.Lake, tmp_path: Path) -> None:
    strict = dr.Lake.open(tmp_path / "lake", freshness="error")
    strict.read()
    new = str(tmp_path / "lake" / "moved")
    shutil.copytree(lake.table_uri("orders"), new)
    lake.catalog.set_location("orders", new)
    with pytest.raises(FreshnessError, match="location changed"):
        strict.scan()


def test_a_labelled_publication_never_moves_the_table_backwards(lake: dr.Lake) -> None:
    lake.ingest(jsonl([up("a", 1)]))
    lake.ingest(jsonl([up("b", 2)]))
    current = lake.published("orders")
    assert current is not None and current.version == 2
    assert lake.publish_version("orders", 1, digest="late", label="slow-publisher") == current
    assert lake.published("orders") == current
    relabel = lake.publish_version("orders", 2, digest="same", label="relabel")
    assert relabel.version == 2 and relabel.generation == current.generation + 1
