"""Upkeep belongs to the writers (issue 38, item 2): every writer, not the committer, completes pending
erasures before its own commit; the retry policy is an argument of the write.

A pending ledger entry is what a killed `erase` leaves behind at `erase.after_ledger` (the entry is
written, nothing committed; tests/erasure/test_erasure_resume.py kills a real one): its owner is gone.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import polars as pl
import pytest

import delta_release as dr
from delta_release import _delta
from delta_release.clock import iso
from delta_release.commit.writer import DEFAULT_RETRY, Change, Plan, RetryPolicy, replace_partitions, write
from delta_release.context import TableContext
from delta_release.erasure.ledger import ErasureEntry
from delta_release.external import load_manifest, publish_manifest
from delta_release.external.producer import produce_hour, upload, write_manifest
from delta_release.release.candidate import ship, stage_run
from tests.conftest import jsonl, up

SUBJECT = "ord-gone"


def _pending(lake: dr.Lake) -> ErasureEntry:
    """The ledger entry a killed erasure of SUBJECT leaves (pending, its process gone)."""
    entry = ErasureEntry(subject=lake.erasures.subject_key(SUBJECT), version=None, erased_at=iso(lake.clock.now()),
                         table="orders", state="pending", owner="gone-host-1")
    return lake.erasures.write(entry)


def _ingest(lake: dr.Lake, tmp: Path) -> int | None:
    return lake.ingest(jsonl([up("ord-new", 10, day=42)])).version


def _replay(lake: dr.Lake, tmp: Path) -> int | None:
    batch = lake.raw.list()[-1].batch_id  # the batch that holds ord-keep (and the subject)
    return lake.replay(batch)[0].version


def _rollback(lake: dr.Lake, tmp: Path) -> int | None:
    return lake.rollback(1, repair_forward=True).version


def _erase_another(lake: dr.Lake, tmp: Path) -> int | None:
    return lake.erase("ord-other").version


def _release_ship(lake: dr.Lake, tmp: Path) -> int | None:
    candidate = stage_run(lake, [jsonl([up("ord-new", 10, day=42)])], run_id="r1")
    return ship(candidate).version


def _publish(lake: dr.Lake, tmp: Path) -> int | None:
    doc, objects = produce_hour(9, "telemetry-1", files=1, rows=2)
    upload(lake.table_storage("telemetry"), objects)
    publish_manifest(lake, load_manifest(write_manifest(tmp / "m.json", doc), lake.tables))
    return None  # a commit of another table: its version says nothing about the orders' erasure commit


WRITERS: dict[str, Callable[[dr.Lake, Path], int | None]] = {
    "ingest": _ingest, "replay": _replay, "rollback": _rollback, "erase": _erase_another,
    "release run": _release_ship, "external publish": _publish,
}


@pytest.mark.parametrize("writer", sorted(WRITERS))
def test_every_writer_completes_a_pending_erasure_before_its_commit(tmp_path: Path, writer: str) -> None:
    lake = dr.Lake.create(tmp_path / "lake")
    lake.ingest(jsonl([up(SUBJECT, 1, day=40), up("ord-keep", 2, day=40)]))
    lake.ingest(jsonl([up("ord-other", 3, day=41)]))
    before = lake.latest_version("orders")
    _pending(lake)
    with pytest.raises(dr.ErasureExposureError, match="erase --resume"):
        lake.read()  # the published version holds the subject of a pending erasure

    version = WRITERS[writer](lake, tmp_path)

    entry = lake.erasures.get(lake.erasures.subject_key(SUBJECT))
    assert entry is not None and entry.done
    assert entry.version is not None and before is not None and entry.version > before  # the erasure commit
    if version is not None:
        assert entry.version < version  # ... came before the writer's own
    assert SUBJECT not in lake.read()["order_id"].to_list()


def test_the_committer_leaves_upkeep_to_the_writers(tmp_path: Path) -> None:
    """`write` itself completes nothing: a pending erasure stays pending through a bare write."""
    lake = dr.Lake.create(tmp_path / "lake")
    lake.ingest(jsonl([up(SUBJECT, 1, day=40)]))
    _pending(lake)

    class Nothing(Plan):
        def build(self, ctx: TableContext, parent: int) -> Change:
            return Change(operation="noop")

    write(lake.table("orders"), Nothing())
    entry = lake.erasures.get(lake.erasures.subject_key(SUBJECT))
    assert entry is not None and entry.state == "pending"


class _Racing(Plan):
    """Rewrites day 40 with its own rows; each attempt, another writer commits first (a stale parent)."""

    def __init__(self, lake: dr.Lake) -> None:
        self.lake, self.builds = lake, 0

    def build(self, ctx: TableContext, parent: int) -> Change:
        self.builds += 1
        self.lake.ingest(jsonl([up(f"ord-race-{self.builds}", 100 + self.builds, day=43)]))
        rows = _delta.scan(ctx.uri, ctx.storage_options, parent).filter(pl.col("event_day") == 40).collect()
        return replace_partitions(ctx, parent, {40: rows}, operation="rewrite")


def test_the_retry_policy_is_an_argument_of_the_write(tmp_path: Path) -> None:
    lake = dr.Lake.create(tmp_path / "lake")
    lake.ingest(jsonl([up("ord-a", 1, day=40)]))
    plan = _Racing(lake)
    with pytest.raises(dr.StaleParentError):
        write(lake.table("orders"), plan, retry=RetryPolicy(max_attempts=3, backoff_max_s=0.0))
    assert plan.builds == 3  # three attempts, as asked (the default goes on to 64)
    assert DEFAULT_RETRY == RetryPolicy(max_attempts=64, backoff_max_s=0.5, backoff_base_s=0.01)


@pytest.mark.parametrize("bad", [{"max_attempts": 0}, {"max_attempts": True}, {"max_attempts": 2.0},
                                 {"backoff_max_s": -1.0}, {"backoff_base_s": float("nan")}])
def test_a_bad_retry_policy_is_an_input_error_naming_the_field(bad: dict[str, Any]) -> None:
    with pytest.raises(dr.InputError, match=next(iter(bad))):
        RetryPolicy(**bad)
