"""quarantine: list the quarantine ledger; --show reads each line's text from its raw batch."""

from __future__ import annotations

import click

from .base import Options, command_options, emit, open_lake


@click.command()
@click.option("--batch", "batch_id", default=None, metavar="ID", help="Only this batch's records.")
@click.option("--reason", default=None, metavar="R", help="Only records with this reason code.")
@click.option("--show", is_flag=True,
              help="Read each line's text from its raw batch (lines naming an erased subject are withheld).")
@command_options
def quarantine(opts: Options, batch_id: str | None, reason: str | None, show: bool) -> None:
    """List rejected lines: batch, line, byte span in the raw batch, reason, detail, subject hash."""
    listing = open_lake(opts).quarantined(batch_id=batch_id, reason=reason, show=show)
    emit(opts, listing.to_json(), listing.text())
