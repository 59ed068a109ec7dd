"""A pinned read or a rollback of a version whose files a vacuum removed: exit 3, one line naming the
version, the vacuum that removed it and the nearest readable version (delta_release/erasure/vacuumlog.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

import delta_release as dr
from delta_release.cli.main import cli
from delta_release.erasure.vacuumlog import vacuum_records
from tests.conftest import jsonl, up


@pytest.fixture
def vacuumed(lake: dr.Lake) -> tuple[dr.Lake, str]:
    for i in range(1, 6):  # versions 1..5 each rewrite day 47; version 0 is the empty table
        lake.ingest(jsonl([up("a", i, amount=i)]))
    report = lake.vacuum(apply=True, retain_versions=2, replay_horizon_hours=0).to_json()
    assert report["removed"] and report["vacuum_id"]
    return lake, report["vacuum_id"]


def invoke(lake: dr.Lake, *args: str):  # type: ignore[no-untyped-def]
    return CliRunner().invoke(cli, ["--lake", lake.storage.root, *args])


def refusal(res, version: int, vacuum: str | None, nearest: int) -> None:  # type: ignore[no-untyped-def]
    assert res.exit_code == 3, res.output
    assert res.stderr.count("\n") == 1 and "Traceback" not in res.output, res.stderr
    assert f"version {version} of orders" in res.stderr
    assert (vacuum or "no vacuum record") in res.stderr
    assert f"nearest readable version: {nearest}" in res.stderr


def test_vacuum_records_what_it_removed(vacuumed: tuple[dr.Lake, str]) -> None:
    lake, vacuum_id = vacuumed
    [rec] = vacuum_records(lake, "orders")
    assert rec["vacuum"] == vacuum_id and rec["unreadable"] == [[1, 3]]
    assert all(not Path(lake.table_uri("orders"), p).exists() for p in rec["removed"])
    assert lake.vacuum(apply=True, retain_versions=2, replay_horizon_hours=0).vacuum_id is None  # nothing left
    assert len(vacuum_records(lake, "orders")) == 1


@pytest.mark.parametrize("engine", ["polars", "duckdb"])
def test_pinned_read_of_a_vacuumed_version_is_a_refusal(vacuumed: tuple[dr.Lake, str], engine: str) -> None:
    lake, vacuum_id = vacuumed
    refusal(invoke(lake, "read", "--version", "2", "--engine", engine), 2, vacuum_id, 4)  # tie: the newer
    refusal(invoke(lake, "read", "--version", "1", "--engine", engine), 1, vacuum_id, 0)
    ok = invoke(lake, "--json", "read", "--version", "4", "--engine", engine)
    assert ok.exit_code == 0 and json.loads(ok.stdout)["rows"][0]["amount_cents"] == 4


def test_lake_read_raises_vacuumed_version_error(vacuumed: tuple[dr.Lake, str]) -> None:
    lake, vacuum_id = vacuumed
    with pytest.raises(dr.VacuumedVersionError,
                       match=r"reading version 3 of orders is impossible: its files were removed by vacuum .*; nearest"
                             r" readable version: 4") as err:
        lake.read(version=3)
    assert err.value.exit_code == 3 and isinstance(err.value, dr.SafetyError)
    assert err.value.facts == {"table": "orders", "version": 3, "vacuum": vacuum_id, "nearest_readable": 4}
    with pytest.raises(dr.VacuumedVersionError, match=r"removed by vacuum .*; nearest readable version: 4"):
        lake.scan("orders", version=3)  # refused at the query boundary, before any file is opened


@pytest.mark.parametrize("repair", [False, True])
def test_rollback_to_a_vacuumed_version_is_a_refusal(vacuumed: tuple[dr.Lake, str], repair: bool) -> None:
    lake, vacuum_id = vacuumed
    latest = lake.latest_version("orders")
    res = invoke(lake, "rollback", "--to", "2", *(["--repair-forward"] if repair else []))
    refusal(res, 2, vacuum_id, 4)
    assert "rolling back to version 2" in res.stderr
    assert lake.latest_version("orders") == latest  # nothing committed
    assert lake.rollback(4).version == latest + 1  # a readable version still restores


def test_files_removed_by_someone_else_are_a_refusal_too(lake: dr.Lake) -> None:
    for i in range(1, 4):
        lake.ingest(jsonl([up("a", i, amount=i)]))
    v1 = {f.path for f in lake.gateway.files("orders", 1)} - {f.path for f in lake.gateway.files("orders", 3)}
    assert v1
    for path in v1:
        Path(lake.table_uri("orders"), path).unlink()  # not our vacuum: no record
    refusal(invoke(lake, "read", "--version", "1"), 1, None, 2)
    refusal(invoke(lake, "read", "--version", "1", "--engine", "duckdb"), 1, None, 2)
    with pytest.raises(dr.VacuumedVersionError,
                       match=r"removed outside delta-release: no vacuum record\); nearest readable version: 2"):
        lake.read(version=1)
