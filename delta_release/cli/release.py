"""run CONFIG.yaml"""

from __future__ import annotations

import sys

import click

from .base import Options, command_options, emit


@click.command("run")
@click.argument("config")
@command_options
def run(opts: Options, config: str) -> None:
    """The YAML-configured release run: ingest, checks, drills, packet; ship or hold (exit 3)."""
    from ..release.run import run_release

    show = sys.stderr.isatty() or not opts.json

    def progress(line: str) -> None:
        if show:
            click.echo(line, err=True)

    result = run_release(config, progress=progress)
    if result.get("lake_created") and not show:  # always said, even when progress is off
        click.echo(f"note: created a new lake (lake.create: true in {config})", err=True)
    snap = result["snapshot"]
    text = (f"decision: {result['decision'].upper()}  (orders version {snap['version']}, generation "
            f"{snap['generation']})\n" + (f"failed checks: {', '.join(result['failed_checks'])}\n"
                                          if result["failed_checks"] else "")
            + f"packet: {result['packet']} (sha256 {result['packet_sha256'][:16]}...)\nreport: {result['report']}")
    emit(opts, result, text, exit_code=0 if result["decision"] == "ship" else 3)
