"""The Delta log across many versions (issue 14.1, 14.6a): old log entries stay (pinned reads of every
allowed version), the newest version is found without listing `_delta_log`, and strict commits still
see a commit made by another handle."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

import delta_release as dr
from delta_release import _delta
from delta_release.contract import decode_batch
from delta_release.errors import StaleParentError
from delta_release.ingest import commit_candidate, prepare_candidate
from tests.conftest import jsonl, up

DAY_S = 86_400


def _log(lake: dr.Lake, version: int) -> Path:
    return Path(lake.storage.root) / "orders" / "_delta_log" / f"{version:020d}.json"


def _empty_commits(lake: dr.Lake, upto: int) -> None:
    """Commits with no files until the table is at `upto` (each through the strict commit)."""
    ctx = lake.table("orders")
    version = ctx.latest_version()
    assert version is not None
    while version < upto:
        version = _delta.commit(ctx.uri, ctx.storage_options, table="orders", parent=version, adds=[],
                                removes=[], evidence={}, partition_by=[ctx.table.partition])


def test_log_entries_older_than_the_log_retention_survive_checkpoints(lake: dr.Lake) -> None:
    """delta-rs by default deletes log entries older than 30 days that precede a checkpoint, after every
    commit; a pinned read of such a version (allowed, never vacuumed) must still work."""
    lake.ingest(jsonl([up("a", 1, amount=111), up("b", 2, amount=222)]))
    expected = lake.read(version=1).sort("order_id")
    _empty_commits(lake, 101)  # delta-rs writes a checkpoint at 99
    assert (_log(lake, 0).parent / f"{99:020d}.checkpoint.parquet").exists()
    old = time.time() - 40 * DAY_S  # 40 days pass: every entry so far is past the 30-day log retention
    for v in range(102):
        os.utime(_log(lake, v), (old, old))
    _empty_commits(lake, 103)  # commits whose post-commit hook would delete the entries before 99
    assert _log(lake, 0).exists() and _log(lake, 1).exists()
    _delta.forget_handles()  # a new process: opens version 1 from the log alone
    assert lake.read(version=1).sort("order_id").equals(expected)
    assert {0, 1} <= {e["version"] for e in lake.history()}


def test_latest_version_reads_no_listing_when_nothing_is_newer(lake: dr.Lake,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """While a table's state is cached, the newest version is probed one stat past it: no listing of
    `_delta_log` (delta-rs's or ours). A new process lists the entry names once, not delta-rs's snapshot."""
    lake.ingest(jsonl([up("a", 1)]))
    ctx = lake.table("orders")
    calls: list[str] = []
    monkeypatch.setattr(_delta, "_latest_handle", lambda *a: calls.append("delta-rs") or None)
    real_listdir = os.listdir
    monkeypatch.setattr(_delta.os, "listdir", lambda p: calls.append("list") or real_listdir(p))
    assert ctx.latest_version() == 1 and ctx.latest_version() == 1
    lake.ingest(jsonl([up("b", 2)]))  # our own commit: the next call must see it
    assert ctx.latest_version() == 2
    assert calls == []
    _delta.forget_handles()  # a new process
    assert ctx.latest_version() == 2 and ctx.latest_version() == 2
    assert calls == ["list"]


def test_a_commit_by_another_handle_is_seen_and_makes_the_parent_stale(lake: dr.Lake) -> None:
    """The newest version comes from a stat of the next log entry: a commit this process did not make
    (another writer's own handle) is still seen, and a candidate staged on the old parent is refused."""
    lake.ingest(jsonl([up("a", 1)]))
    ctx = lake.table("orders")
    assert ctx.latest_version() == 1
    staged = prepare_candidate(lake, decode_batch(jsonl([up("b", 2, day=60)])).events, parent=1,
                               batch_ids=["x"], operation="test")
    other = _delta.open_snapshot(ctx.uri, ctx.storage_options, 1)  # another writer's own handle
    other.create_write_transaction([], mode="append", schema=other.schema(), partition_by=["event_day"])
    assert ctx.latest_version() == 2
    with pytest.raises(StaleParentError) as err:
        commit_candidate(lake, staged)
    assert (err.value.expected, err.value.found) == (1, 2)
    assert ctx.latest_version() == 2
