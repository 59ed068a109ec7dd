"""Entry point: `delta-release` and `python -m delta_release`."""

from __future__ import annotations

import os
import sys

import click

from .. import __version__
from .audit import audit
from .base import Options
from .catalog import catalog
from .drills import drill
from .erasure import erase, rollback, vacuum
from .gateway import gate, publish
from .init import init
from .orders import history, ingest, read, replay
from .quarantine import quarantine
from .register import register
from .release import run
from .status import status
from .usage import OneLineGroup


@click.group(cls=OneLineGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--lake", default="lake", show_default=True, metavar="URI", help="Lake root.")
@click.option("--json", "as_json", is_flag=True, help="Machine output on stdout.")
@click.option("--debug", is_flag=True, help="Show tracebacks.")
@click.version_option(__version__)
@click.pass_context
def cli(ctx: click.Context, lake: str, as_json: bool, debug: bool) -> None:
    """Publish versioned Delta Lake tables that are complete, current, replay-safe and erasure-safe."""
    ctx.obj = Options(lake=lake, json=as_json, debug=debug,
                      lake_given=ctx.get_parameter_source("lake") is not click.core.ParameterSource.DEFAULT)


for command in (init, ingest, replay, read, history, audit, drill, register, gate, publish, erase, rollback,
                vacuum, run, quarantine, catalog, status):
    cli.add_command(command)


def main() -> None:
    try:
        cli(prog_name="delta-release")
    except SystemExit as done:
        _end_after_engine_failure(done)
        raise


def _end_after_engine_failure(done: SystemExit) -> None:
    """The crash guard of a registered table's read, in this one process: when an engine raised during the
    command (its answer, or the refusal naming the table, is already written), end the process now with the
    command's exit code, without the interpreter's shutdown. An engine's worker threads can outlive its
    failed read, and tearing the interpreter down under them killed the process by SIGSEGV or SIGBUS after
    it had printed the refusal (docs/architecture.md, "A registered table's engine")."""
    reader = sys.modules.get("delta_release.register.reader")
    if reader is None or not reader.engine_failed():
        return
    code = done.code if isinstance(done.code, int) else (0 if done.code is None else 1)
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    os._exit(code)
