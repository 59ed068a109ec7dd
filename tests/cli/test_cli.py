"""The CLI contract: --help everywhere, one error funnel, exit codes, python -m."""

from __future__ import annotations

import json
import subprocess
import sys

import click
from click.testing import CliRunner

from delta_release import Lake
from delta_release.cli.main import cli


def _commands(group: click.Group, prefix: list[str]) -> list[list[str]]:
    out = []
    for name, cmd in group.commands.items():
        out.append([*prefix, name])
        if isinstance(cmd, click.Group):
            out += _commands(cmd, [*prefix, name])
    return out


def test_every_command_has_help() -> None:
    runner = CliRunner()
    assert runner.invoke(cli, ["--help"]).exit_code == 0
    for path in _commands(cli, []):
        res = runner.invoke(cli, [*path, "--help"])
        assert res.exit_code == 0 and "Usage" in res.output, path


def test_missing_batch_is_exit_2_one_line(tmp_path) -> None:  # type: ignore[no-untyped-def]
    res = CliRunner().invoke(cli, ["--lake", str(tmp_path / "l"), "ingest", str(tmp_path / "nope.jsonl")])
    assert res.exit_code == 2
    assert res.stderr.count("\n") == 1 and "nope.jsonl" in res.stderr
    Lake.create(tmp_path / "l")
    res = CliRunner().invoke(cli, ["--lake", str(tmp_path / "l"), "--json", "read", "--version", "99"])
    assert res.exit_code == 2 and json.loads(res.stdout)["error"]["type"] == "NotFoundError"


def test_python_dash_m_and_options_after_the_command(tmp_path) -> None:  # type: ignore[no-untyped-def]
    # readers never create a lake (contract change, issue 17): a missing one is exit 2, a created one reads
    cmd = [sys.executable, "-m", "delta_release", "read", "--lake", str(tmp_path / "l"), "--json"]
    missing = subprocess.run(cmd, capture_output=True, text=True)
    assert missing.returncode == 2 and json.loads(missing.stdout)["error"]["type"] == "LakeNotFoundError"
    Lake.create(tmp_path / "l")
    out = subprocess.run(cmd, capture_output=True, text=True, check=True)
    assert json.loads(out.stdout) ["rows"] == []


def test_a_rust_panic_goes_through_the_funnel(tmp_path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """pyo3's PanicException (a Rust panic in Polars or delta-rs) is a BaseException, which the funnel's
    `except Exception` let through as a Python traceback: exit 1 and the one-line internal error now."""
    import polars as pl

    from delta_release.lake import Lake as LakeClass

    Lake.create(tmp_path / "l")

    def panics(*args, **kwargs):  # type: ignore[no-untyped-def]
        raise pl.exceptions.PanicException("assertion failed: range.end as u64 <= self.size")

    monkeypatch.setattr(LakeClass, "history", panics)
    runner = CliRunner()
    res = runner.invoke(cli, ["--lake", str(tmp_path / "l"), "--json", "history"])
    assert res.exit_code == 1 and "Traceback" not in res.output, res.output
    error = json.loads(res.stdout)["error"]
    assert error["type"] == "DeltaReleaseError" and error["message"].startswith("internal error: PanicException")
    res = runner.invoke(cli, ["--lake", str(tmp_path / "l"), "history"])
    assert res.exit_code == 1 and res.stderr.startswith("error: internal error: PanicException")


def test_a_damaged_data_file_is_refused_naming_it(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """A published data file overwritten with garbage made Polars panic (exit 1, a Rust backtrace and a
    Python traceback); a deleted one was already a clean exit 3. Now the damaged file is named: its size on
    storage is not the size its log entry records (GateError, exit 3)."""
    lake = Lake.create(tmp_path / "l")
    lake.ingest(b'{"schema_version": 3, "order_id": "a", "position": 1, "kind": "upsert", "amount_cents": 5, '
                b'"event_day": 3, "currency": "EUR"}\n')
    (damaged,) = (tmp_path / "l" / "orders").rglob("*.parquet")
    good = damaged.read_bytes()
    # garbage of another size (checked by size), then of the same size (by the sha256 its commit recorded)
    for garbage, mismatch in ((b"garbage\n", "size"), (b"X" * len(good), "sha256")):
        damaged.write_bytes(garbage)
        for engine in ("polars", "duckdb"):
            res = subprocess.run([sys.executable, "-m", "delta_release", "--lake", str(tmp_path / "l"), "--json",
                                  "read", "--engine", engine], capture_output=True, text=True, timeout=120)
            assert res.returncode == 3 and "Traceback" not in res.stderr, res.stderr
            error = json.loads(res.stdout)["error"]
            assert (error["type"], error["mismatch"]) == ("GateError", mismatch) and damaged.name in error["path"]
    damaged.write_bytes(good)
    res = subprocess.run([sys.executable, "-m", "delta_release", "--lake", str(tmp_path / "l"), "--json", "read"],
                         capture_output=True, text=True, timeout=120)
    assert res.returncode == 0 and len(json.loads(res.stdout)["rows"]) == 1


def test_replay_with_an_id_and_all_and_audit_of_an_hourly_table_are_usage_errors(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """`replay ID --all` used to ignore the id and replay everything; `audit --days` on the hourly telemetry
    table compared hours with days and answered 0 candidates: both are exit 2 now, naming what is wrong."""
    Lake.create(tmp_path / "l")
    runner = CliRunner()
    cases = ((["replay", "abc", "--all"], "not both"), (["audit", "--days", "47:48", "--table", "telemetry"], "'hour'"),
             (["audit", "--days", "47:48", "--table", "nope"], "not 'nope'"))
    for args, says in cases:
        res = runner.invoke(cli, ["--lake", str(tmp_path / "l"), "--json", *args])
        assert res.exit_code == 2 and says in json.loads(res.stdout)["error"]["message"], (args, res.output)
    assert runner.invoke(cli, ["--lake", str(tmp_path / "l"), "--json", "audit", "--days", "47:48"]).exit_code == 0


def test_durations_past_what_dates_hold_are_usage_errors_before_any_commit(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """`erase --backup-expiry-days 99999999999` committed the erasure, then overflowed (exit 1); `vacuum`
    with 1e300 hours overflowed too. Every duration option is capped at a million days or hours (exit 2)."""
    lake = Lake.create(tmp_path / "l")
    lake.ingest(b'{"schema_version": 3, "order_id": "a", "position": 1, "kind": "upsert", "amount_cents": 5, '
                b'"event_day": 3, "currency": "EUR"}\n')
    runner = CliRunner()
    for args in (["erase", "a", "--backup-expiry-days", "99999999999"], ["erase", "a", "--raw-retention-days", "1e7"],
                 ["vacuum", "--replay-horizon-hours", "1e300"], ["vacuum", "--orphan-grace-hours", "1e300"]):
        res = runner.invoke(cli, ["--lake", str(tmp_path / "l"), *args])
        assert res.exit_code == 2 and "1,000,000" in res.output, (args, res.output)
    assert lake.latest_version("orders") == 1 and lake.erasures.entries() == []


def test_a_damaged_raw_batch_is_refused_with_exit_3(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """A raw batch whose bytes no longer match their sha256 was exit 1 on replay: it is a safety refusal."""
    lake = Lake.create(tmp_path / "l")
    report = lake.ingest(b'{"schema_version": 3, "order_id": "a", "position": 1, "kind": "upsert", '
                         b'"amount_cents": 5, "event_day": 3, "currency": "EUR"}\n')
    (raw,) = (tmp_path / "l" / "_raw").glob("*.jsonl")
    raw.write_bytes(raw.read_bytes()[:20])
    res = CliRunner().invoke(cli, ["--lake", str(tmp_path / "l"), "--json", "replay", report.batch_id])
    assert res.exit_code == 3 and "damaged" in json.loads(res.stdout)["error"]["message"], res.output


def test_status_names_each_commit_as_history_does(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """`status` said WRITE (the Delta operation) for every commit of ours, where `history` says ingest."""
    lake = Lake.create(tmp_path / "l")
    lake.ingest(b'{"schema_version": 3, "order_id": "a", "position": 1, "kind": "upsert", "amount_cents": 5, '
                b'"event_day": 3, "currency": "EUR"}\n', publish=False)
    runner = CliRunner()
    status = json.loads(runner.invoke(cli, ["--lake", str(tmp_path / "l"), "--json", "status"]).stdout)
    history = json.loads(runner.invoke(cli, ["--lake", str(tmp_path / "l"), "--json", "history"]).stdout)
    orders = next(t for t in status["tables"] if t["table"] == "orders")
    assert orders["latest"]["operation"] == history["versions"][-1]["operation"] == "ingest"
    assert [u["operation"] for u in orders["unpublished"]] == ["ingest"]


def test_loose_arguments_that_were_taken_are_refused(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """`audit --days 1_0:20` and other scripts' digits were read as numbers (int() takes them); `ingest ""`
    said "batch file is a directory: ."; a manifest with a key twice was read last-one-wins."""
    Lake.create(tmp_path / "l")
    runner = CliRunner()
    manifest = tmp_path / "m.json"
    manifest.write_text('{"table": "telemetry", "table": "orders"}')
    for args, says in ((["audit", "--days", "1_0:20"], "A:B"), (["audit", "--days", "\u0664\u0667"], "A:B"),
                       (["audit", "--days", " 47"], "A:B"), (["ingest", ""], "batch path is empty"),
                       (["gate", str(manifest)], "appears twice")):
        res = runner.invoke(cli, ["--lake", str(tmp_path / "l"), "--json", *args])
        assert res.exit_code == 2 and says in json.loads(res.stdout)["error"]["message"], (args, res.output)
    res = runner.invoke(cli, ["--lake", str(tmp_path / "l"), "--json", "audit", "--days", "47"])
    assert res.exit_code == 0 and json.loads(res.stdout)["days"] == [47, 47]


def test_audit_names_a_damaged_data_file(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """A truncated data file made `audit` exit 1 (ArrowInvalid from the footer read): GateError, exit 3."""
    lake = Lake.create(tmp_path / "l")
    lake.ingest(b'{"schema_version": 3, "order_id": "a", "position": 1, "kind": "upsert", "amount_cents": 5, '
                b'"event_day": 47, "currency": "EUR"}\n')
    (damaged,) = (tmp_path / "l" / "orders").rglob("*.parquet")
    damaged.write_bytes(damaged.read_bytes()[:100])
    res = CliRunner().invoke(cli, ["--lake", str(tmp_path / "l"), "--json", "audit", "--days", "47:48"])
    assert res.exit_code == 3, res.output
    error = json.loads(res.stdout)["error"]
    assert error["type"] == "GateError" and error["mismatch"] == "footer" and damaged.name in error["path"]
