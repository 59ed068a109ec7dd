"""docs/ stays honest: the analyst guide's Python runs, and every CLI option the docs name exists."""

from __future__ import annotations

import re
import subprocess
import sys
import textwrap
from pathlib import Path

import click
import pytest

from delta_release.cli.main import cli

REPO = Path(__file__).resolve().parents[2]
DOCS = REPO / "docs"


def _options(command: click.Command) -> set[str]:
    names = {opt for p in command.params for opt in getattr(p, "opts", [])}
    if isinstance(command, click.Group):
        for sub in command.commands.values():
            names |= _options(sub)
    return names


def _commands(command: click.Group, prefix: str = "") -> set[str]:
    out = set()
    for name, sub in command.commands.items():
        out.add(prefix + name)
        if isinstance(sub, click.Group):
            out |= _commands(sub, prefix + name + " ")
    return out


def _headed_commands(text: str) -> set[str]:
    """Commands named in `#### `cmd ...` / `cmd2 ...`` headings."""
    return {c for line in re.findall(r"^#### (.*)$", text, re.M) for c in re.findall(r"`([a-z]+)[ `]", line)}


def test_every_documented_option_and_command_exists() -> None:
    known = _options(cli) | {"--help", "--version"}
    commands = _commands(cli)
    for doc in [*DOCS.glob("*.md"), REPO / "README.md"]:
        text = doc.read_text(encoding="utf-8")
        # options written as `--name` inside a command line or table cell (not mypy --strict, a benchmark's --rows
        # or `ray start --head --port / --address`, Ray's own command in README's "Running on a cluster")
        for opt in set(re.findall(r"(?<![\w-])(--[a-z][a-z-]+)", text)) - {"--strict", "--rows", "--head", "--port",
                                                                           "--address"}:
            assert opt in known, f"{doc.name} documents {opt}, which no command has"
        for heading in _headed_commands(text):
            assert heading in commands, f"{doc.name} documents command {heading!r}, which does not exist"
    documented = _headed_commands((DOCS / "contract.md").read_text(encoding="utf-8"))
    assert {c for c in commands if " " not in c} <= documented, "a command is missing from docs/contract.md"


@pytest.mark.slow
def test_analyst_guide_python_runs_on_a_lake(tmp_path: Path) -> None:
    pytest.importorskip("duckdb_ext")  # the guide loads DuckDB's delta extension from the interop wheel
    fixtures = REPO / "fixtures" / "orders"
    for args in (["init"], ["ingest", str(fixtures / "v3.jsonl")], ["erase", "ord-007"]):
        done = subprocess.run([sys.executable, "-m", "delta_release", *args], cwd=tmp_path,
                              capture_output=True, text=True, timeout=120, check=False)
        assert done.returncode == 0, done.stderr
    text = (DOCS / "analyst-guide.md").read_text(encoding="utf-8")
    blocks = [textwrap.dedent(b) for b in re.findall(r"```python\n(.*?)```", text, re.S)]
    assert len(blocks) >= 5
    checks = textwrap.dedent("""
        # the guide's recipe for the current view over the raw latest version equals the gateway's answer
        assert latest == published and current.collect().height == df.height
        assert raw.filter(pl.col("deleted")).collect().height >= 1  # tombstones are rows
        assert raw_v1.filter(pl.col("order_id") == "ord-007").collect().height == 1  # version 1 holds it
        assert "ord-007" not in df["order_id"].to_list()
        print("ok")
    """)
    script = tmp_path / "guide.py"
    script.write_text("\n".join(blocks) + checks, encoding="utf-8")
    ran = subprocess.run([sys.executable, str(script)], cwd=tmp_path, capture_output=True, text=True,
                         timeout=120, check=False)
    assert ran.returncode == 0, ran.stdout[-2000:] + ran.stderr[-2000:]
    assert ran.stdout.rstrip().endswith("ok")
