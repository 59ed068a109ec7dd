"""init: create a lake, the one command whose job that is (writers create one only with --create)."""

from __future__ import annotations

import click

from ..errors import InputError
from .base import Options, command_options, emit, lake_at


@click.command()
@click.argument("uri", required=False, metavar="[URI]")
@command_options
def init(opts: Options, uri: str | None) -> None:
    """Create a lake at URI (default: --lake, ./lake): its erasure key, catalog and empty orders table.

    A URI that already holds a lake is left as it is (exit 0)."""
    if uri is not None:
        if opts.lake_given and opts.lake != uri:
            raise InputError(f"init takes the lake as URI or as --lake, not both (got {uri!r} and --lake "
                             f"{opts.lake!r})", argument="URI")
        opts.lake = uri
    lake = lake_at(opts, create=True)
    root = lake.storage.root
    text = f"created a new lake at {root}" if lake.created else f"{root} already holds a lake; nothing changed"
    emit(opts, {"lake": root, "created": lake.created}, text)
