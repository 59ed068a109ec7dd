"""status"""

from __future__ import annotations

import click

from .base import Options, command_options, emit, open_lake


@click.command()
@command_options
def status(opts: Options) -> None:
    """The lake at a glance: per table the published version and generation, the latest commit, what is
    committed but not published and vacuum debt; pending erasures and when they clear; the last run."""
    from .. import progress

    with progress.step("read lake state"):
        s = open_lake(opts).status()
    emit(opts, s.to_json(), s.text())
