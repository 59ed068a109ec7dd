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
