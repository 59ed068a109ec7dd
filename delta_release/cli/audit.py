"""audit --days A:B"""

from __future__ import annotations

import click

from .base import Options, command_options, emit, open_lake


@click.command()
@click.option("--days", required=True, metavar="A:B", help="Days A to B inclusive.")
@click.option("--table", default="orders", show_default=True)
@click.option("--version", type=int, default=None, help="Pinned version (default: published).")
@command_options
def audit(opts: Options, days: str, table: str, version: int | None) -> None:
    """Candidate files and row groups for a day-bounded audit, bytes scanned vs a full scan."""
    r = open_lake(opts).audit(days, table=table, version=version)
    a, b = r["days"]
    pct = 100.0 * r["fraction"]
    emit(opts, r, f"audit days {a}..{b} at version {r['version']}: files {r['files']['candidate']}/"
                  f"{r['files']['total']}, row groups {r['row_groups']['candidate']}/{r['row_groups']['total']}, "
                  f"bytes {r['bytes']['scanned']}/{r['bytes']['full_scan']} ({pct:.1f}%), rows {r['rows']}")
