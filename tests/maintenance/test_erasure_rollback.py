"""rollback --to N: a clean restore, a refusal when N holds an erased subject, and repair-forward."""

from __future__ import annotations

from pathlib import Path

import polars as pl
import pytest

import delta_release as dr
from delta_release import _delta
from delta_release.errors import ErasureExposureError, GateError, InputError
from tests.conftest import jsonl, rm, up

SUBJECT = "ord-subject-47"


def all_rows(lake: dr.Lake, version: int | None = None) -> pl.DataFrame:
    v = lake.latest_version("orders") if version is None else version
    return pl.read_delta(lake.table_uri("orders"), version=v).sort("order_id")


def file_set(lake: dr.Lake, version: int) -> dict[str, dict[str, object]]:
    return {e.path: e.partition_values for e in _delta.file_entries(lake.table_uri("orders"), {}, version)}


@pytest.fixture
def three(lake: dr.Lake) -> dr.Lake:
    lake.ingest(jsonl([up("a", 1), up("b", 2, day=48)]))          # v1
    lake.ingest(jsonl([up("a", 3, amount=300), rm("b", 4)]))      # v2
    lake.ingest(jsonl([up("c", 5, day=49)]))                      # v3
    return lake


def test_clean_restore_brings_back_the_file_set_of_n(three: dr.Lake) -> None:
    lake = three
    report = lake.rollback(1)
    assert report.mode == "restore" and report.restored_to == 1 and report.version == 4
    assert lake.published("orders").version == 4
    assert file_set(lake, 4) == file_set(lake, 1)  # the same immutable files, re-added
    assert all_rows(lake).to_dicts() == all_rows(lake, 1).to_dicts()
    assert lake.read()["amount_cents"].to_list() == [100, 100]  # b is back, a's old amount
    assert report.to_json()["restored_to"] == 1 and report.to_json()["version"] == 4
    hist = lake.history()[-1]
    assert hist["operation"] == "rollback" and hist["restored_to"] == 1 and hist["allowed"]


def test_restore_refuses_a_tampered_file(three: dr.Lake) -> None:
    lake = three
    victim = sorted(set(file_set(lake, 1)) - set(file_set(lake, 3)))[0]
    path = Path(lake.table_uri("orders")) / victim
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF  # same size, different bytes
    path.write_bytes(bytes(data))
    with pytest.raises(GateError, match=r"cannot restore event_day=47/.*: checksum_mismatch: expected sha256 ") as info:
        lake.rollback(1)
    assert info.value.mismatch == "checksum_mismatch" and info.value.path == victim
    assert lake.latest_version("orders") == 3 and lake.published("orders").version == 3
    path.unlink()
    with pytest.raises(GateError,
                       match=r"cannot restore event_day=47/.*: missing: file does not exist \(vacuumed\?\)") as missing:
        lake.rollback(1)
    assert missing.value.mismatch == "missing"


def test_rollback_target_must_be_an_earlier_version(three: dr.Lake) -> None:
    for bad in (3, 7, -1):
        with pytest.raises(InputError,
                           match=r"rollback target must be an earlier version of orders: expected 0 to 2, found -?\d+"):
            three.rollback(bad)
    assert three.latest_version("orders") == 3


@pytest.fixture
def erased(lake: dr.Lake) -> dr.Lake:
    lake.ingest(jsonl([up("a", 1), up(SUBJECT, 2), up("x", 3, day=48)]))   # v1 (subject on day 47)
    lake.ingest(jsonl([up("b", 4, day=49)]))                                # v2
    lake.ingest(jsonl([up("a", 5, amount=555)]))                            # v3
    lake.erase(SUBJECT)                                                     # v4
    lake.ingest(jsonl([up("c", 6, day=50)]))                                # v5
    return lake


def test_rollback_to_a_version_holding_an_erased_subject_is_refused(erased: dr.Lake) -> None:
    lake = erased
    with pytest.raises(ErasureExposureError,
                       match=r"nearest readable version is 4; use --repair-forward to restore it without the erased"
                             r" subjects") as info:
        lake.rollback(2)
    err = info.value
    assert err.exit_code == 3 and err.facts["version"] == 2
    assert "would expose an erased subject" in err.message and SUBJECT not in err.message
    assert lake.latest_version("orders") == 5 and lake.published("orders").version == 5


def test_repair_forward_commits_n_minus_every_erased_subject(erased: dr.Lake) -> None:
    lake = erased
    report = lake.rollback(2, repair_forward=True)
    assert report.mode == "repair-forward" and report.restored_to == 2 and report.version == 6
    assert report.rows_dropped == 1 and report.erased_subjects == 1
    expected = all_rows(lake, 2).filter(pl.col("order_id") != SUBJECT)
    assert all_rows(lake).to_dicts() == expected.to_dicts()
    assert lake.read(version=6)["order_id"].to_list() == ["a", "b", "x"]
    # partitions of N that never held the subject are the very same files; day 47 was rewritten
    v2, v6 = file_set(lake, 2), file_set(lake, 6)
    same = {p for p, pv in v2.items() if pv["event_day"] != 47}
    assert same <= set(v6) and not {p for p, pv in v2.items() if pv["event_day"] == 47} & set(v6)
    assert [h["allowed"] for h in lake.history()][-1] is True


def test_rollback_to_an_allowed_version_before_the_subject_restores(erased: dr.Lake) -> None:
    lake = erased
    lake.ingest(jsonl([up("a", 7, amount=777)]))                             # v6
    report = lake.rollback(5)                                                # after the erasure: allowed
    assert report.mode == "restore" and file_set(lake, report.version) == file_set(lake, 5)
    with pytest.raises(ErasureExposureError,
                       match=r"nearest readable version is 0; use --repair-forward to restore it without the erased"
                             r" subjects"):
        lake.rollback(1)
    assert lake.rollback(0).mode == "restore" and lake.read().height == 0
