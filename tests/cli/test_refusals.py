"""Every input error is exit 2 with one line naming the file and the key or argument; nothing is created
or committed. One case per hostile argument found by trying each command (issue 17, item 3)."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest
from click.testing import CliRunner

import delta_release as dr
from delta_release.cli.main import cli
from tests.conftest import ORDERS, jsonl, up


@pytest.fixture(scope="module")
def work(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("refusals")
    lake = dr.Lake.create(root / "lake")
    for i in range(1, 4):
        lake.ingest(jsonl([up("a", i, amount=i), up(f"b{i}", 10 + i, day=48)]))
    (root / "deep.json").write_text("[" * 100_000 + "]" * 100_000)
    (root / "deep-object.json").write_text('{"table": ' * 100_000 + "1" + "}" * 100_000)
    (root / "bigint.json").write_text('{"table": "telemetry", "partition": {"hour": ' + "9" * 5000
                                      + '}, "generation": "g", "files": []}')
    (root / "a-directory").mkdir()
    return root


def state(root: Path) -> dict[str, str]:
    """Every file under the work directory with its content hash: 'nothing created or changed'."""
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()[:16]
            for p in sorted(root.rglob("*")) if p.is_file()}


def refused(work: Path, args: list[str], *, lake: str | None = None, code: int = 2, names: tuple[str, ...] = ()) -> str:
    before = state(work)
    latest = dr.Lake.open(work / "lake").latest_version("orders")
    res = CliRunner().invoke(cli, ["--lake", str(work / "lake") if lake is None else lake, *args])
    assert res.exit_code == code, res.output
    assert res.stderr.count("\n") == 1 and res.stderr.startswith("error: "), res.stderr
    assert "Traceback" not in res.output and "internal error" not in res.stderr
    for name in names:
        assert name in res.stderr, (name, res.stderr)
    assert state(work) == before  # nothing created, deleted or changed
    assert dr.Lake.open(work / "lake").latest_version("orders") == latest  # nothing committed
    return str(res.stderr)


@pytest.mark.parametrize(("option", "value"), [("--orphan-grace-hours", "nan"), ("--replay-horizon-hours", "inf"),
                                               ("--replay-horizon-hours", "1e400"), ("--orphan-grace-hours", "-1")])
def test_vacuum_hours_must_be_finite_and_not_negative(work: Path, option: str, value: str) -> None:
    refused(work, ["vacuum", "--apply", option, value], names=(option, value))


def test_vacuum_retain_versions_must_not_be_negative(work: Path) -> None:
    refused(work, ["vacuum", "--apply", "--retain-versions", "-3"], names=("--retain-versions", "-3"))


@pytest.mark.parametrize(("option", "value"), [("--raw-retention-days", "nan"), ("--backup-expiry-days", "-inf")])
def test_erase_days_must_be_finite(work: Path, option: str, value: str) -> None:
    refused(work, ["erase", "a", option, value], names=(option, value))
    assert dr.Lake.open(work / "lake").erasures.entries() == []


def test_python_api_refuses_non_finite_hours_and_days(work: Path) -> None:
    lake = dr.Lake.open(work / "lake")
    before = state(work)
    for kw in ({"orphan_grace_hours": float("nan")}, {"replay_horizon_hours": float("inf")},
               {"retain_versions": -1}):
        with pytest.raises(dr.InputError, match=next(iter(kw))):
            lake.vacuum(apply=True, **kw)  # type: ignore[arg-type]
    with pytest.raises(dr.InputError, match="raw_retention_days"):
        lake.erase("a", raw_retention_days=float("inf"))
    assert state(work) == before and lake.erasures.entries() == []


@pytest.mark.parametrize("args", [["read"], ["ingest", str(ORDERS / "v2.jsonl")], ["vacuum", "--apply"]])
def test_lake_that_is_a_file(work: Path, args: list[str]) -> None:
    refused(work, args, lake="/dev/null", names=("/dev/null", "not a directory"))


@pytest.mark.parametrize(("lake", "names"), [("", ("--lake", "empty")), ("  ", ("--lake", "empty")),
                                             ("s3://", ("s3://", "bucket")), ("ftp://host/lake", ("ftp://host/lake",))])
def test_lake_uri_that_names_no_place(work: Path, lake: str, names: tuple[str, ...]) -> None:
    refused(work, ["ingest", str(ORDERS / "v2.jsonl")], lake=lake, names=names)


@pytest.mark.parametrize("command", ["gate", "publish"])
@pytest.mark.parametrize("name", ["deep.json", "deep-object.json"])
def test_manifest_nested_100000_levels(work: Path, command: str, name: str) -> None:
    refused(work, [command, str(work / name)], names=(str(work / name), "nested too deeply"))


def test_manifest_with_a_5000_digit_integer(work: Path) -> None:
    refused(work, ["gate", str(work / "bigint.json")], names=(str(work / "bigint.json"), "4300 digits"))


@pytest.mark.parametrize("command", ["gate", "publish"])
def test_manifest_that_is_a_directory(work: Path, command: str) -> None:
    refused(work, [command, str(work / "a-directory")], names=(str(work / "a-directory"),))


def test_batch_that_is_a_directory(work: Path) -> None:
    refused(work, ["ingest", str(work / "a-directory")], names=(str(work / "a-directory"), "is a directory"))


def test_unknown_engine_is_one_line(work: Path) -> None:
    err = refused(work, ["read", "--engine", "spark"], names=("--engine", "spark"))
    assert "Usage:" not in err and "--help" not in err


def test_unknown_engine_with_json_is_one_json_object(work: Path) -> None:
    res = CliRunner().invoke(cli, ["--lake", str(work / "lake"), "--json", "read", "--engine", "spark"])
    assert res.exit_code == 2 and res.stderr == ""
    error = json.loads(res.stdout)["error"]
    assert error["type"] == "BadParameter" and "--engine" in error["message"] and "spark" in error["message"]


@pytest.mark.parametrize(("args", "names"), [
    (["bogus"], ("bogus",)), (["rollback"], ("--to",)), (["ingest"], ("BATCH",)), (["read", "--version", "x"],
                                                                                    ("--version", "x")),
    (["vacuum", "--apply", "--dry-run"], ("--apply", "--dry-run")), (["drill", "nope"], ("nope",)),
    (["drill", "freshness", "--runs", "5"], ("--runs",)), (["audit", "--days"], ("--days",))])
def test_click_usage_errors_are_one_line(work: Path, args: list[str], names: tuple[str, ...]) -> None:
    err = refused(work, args, names=names)
    assert "Usage:" not in err and "Try '" not in err


def test_a_bare_group_still_prints_its_help(work: Path) -> None:
    res = CliRunner().invoke(cli, ["drill"])
    assert res.exit_code == 2 and "Usage:" in res.output and "conflict" in res.output


@pytest.mark.parametrize("lake", ["/dev/null", "s3://bucket/scratch"])
def test_drill_needs_a_local_scratch_directory(work: Path, lake: str, tmp_path: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.chdir(tmp_path)
    refused(work, ["drill", "conflict"], lake=lake, names=(lake,))
    assert list(tmp_path.iterdir()) == []  # no local 's3:' directory


def test_a_readable_version_still_reads_after_all_of_this(work: Path) -> None:
    res = CliRunner().invoke(cli, ["--lake", str(work / "lake"), "--json", "read"])
    assert res.exit_code == 0 and len(json.loads(res.stdout)["rows"]) == 4
