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
    from ..release.status import lake_status, status_text

    with progress.step("read lake state"):
        s = lake_status(open_lake(opts))
    emit(opts, s, status_text(s, progress.table))
