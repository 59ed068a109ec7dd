"""The erasure ledger's read side (issue 38, item 1): offered on the context, and deciding nothing on an
error it does not know.

A pending erasure (its writer killed before the commit) is checked by scanning the version itself. A
version whose files are gone cannot be shown free of the subject, so it is refused; any other failure of
that scan is a failure, raised as it is, not a refusal made up from it.
"""

from __future__ import annotations

from pathlib import Path

import pytest

import delta_release as dr
from delta_release import _delta
from delta_release.clock import iso
from delta_release.context import ErasureReads
from delta_release.erasure import permission
from delta_release.erasure.ledger import ErasureEntry
from tests.conftest import jsonl, up

SUBJECT = "ord-gone"


def _lake_with_a_pending_erasure(root: Path) -> dr.Lake:
    lake = dr.Lake.create(root)
    lake.ingest(jsonl([up(SUBJECT, 1, day=40), up("ord-keep", 2, day=41)]))
    lake.erasures.write(ErasureEntry(subject=lake.erasures.subject_key(SUBJECT), version=None,
                                     erased_at=iso(lake.clock.now()), table="orders", state="pending",
                                     owner="gone-host-1"))
    permission._SCAN_CACHE.clear()
    return lake


def test_a_version_whose_files_are_gone_is_held_to_expose_the_pending_subject(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    lake = _lake_with_a_pending_erasure(tmp_path / "lake")
    version = lake.latest_version("orders")
    assert version is not None
    for entry in _delta.file_entries(lake.table_uri("orders"), {}, version):  # files removed behind our back
        (tmp_path / "lake" / "orders" / entry.path).unlink()
    assert not lake.erasure_reader.allowed("orders", version)
    with pytest.raises(dr.ErasureExposureError, match="erase --resume"):
        lake.erasure_reader.check_snapshot("orders", version)


def test_an_unknown_failure_of_the_scan_is_raised_not_turned_into_a_refusal(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    lake = _lake_with_a_pending_erasure(tmp_path / "lake")

    def broken(*args: object, **kwargs: object) -> None:
        raise RuntimeError("a bug, not an unreadable version")

    monkeypatch.setattr(_delta, "scan", broken)
    with pytest.raises(RuntimeError, match="a bug"):
        lake.read()


def test_the_read_side_is_on_the_context_and_answers_from_the_ledger(tmp_path: Path) -> None:
    lake = _lake_with_a_pending_erasure(tmp_path / "lake")
    reads: ErasureReads = lake.erasure_reader
    version = lake.latest_version("orders")
    assert version is not None
    assert [e.state for e in reads.entries()] == ["pending"]
    assert [e.subject for e in reads.exposing("orders", version)] == [reads.subject_key(SUBJECT)]
    assert reads.names_erased_subject(f'{{"order_id": "{SUBJECT}"}}')
    assert not reads.names_erased_subject('{"order_id": "ord-keep"}')
    lineage = reads.lineage("orders")
    assert lineage.latest == version and lineage.files_at(version)
    lake.erase("ord-keep")  # the writers' upkeep completes the pending one first
    assert {e.state for e in reads.entries()} == {"done"}
    assert {p["subject"] for p in reads.pending(backup_expiry_days=0)} <= {e.subject[:16] for e in reads.entries()}
