"""register: put an existing Delta table (written by anyone) in the catalog, after the inventory gate."""

from __future__ import annotations

import click

from .base import CREATE_HELP, Options, command_options, emit, lake_options, open_lake


@click.command()
@click.argument("name")
@click.argument("uri")
@click.option("--create", is_flag=True, help=CREATE_HELP)
@command_options
def register(opts: Options, name: str, uri: str, create: bool) -> None:
    """Catalog the Delta table at URI as NAME once every file its latest version references is present.

    Exit 3 when a referenced file (data file or deletion vector) is missing, has the wrong size, or is a
    deletion vector whose bytes contradict the log. Files under the table root that no
    version references are reported, not refused. Read it with `read --table NAME [--version N]`.
    """
    from ..lake import Lake

    options = lake_options(opts)
    if create and not Lake.exists(opts.lake, storage_options=options):  # a new lake only for a table that passes
        Lake.check_registrable(name, uri, storage_options=options)
    result = open_lake(opts, create=create).register(name, uri).to_json()
    reader = result["reader"]
    how = reader["engine"] or "no installed engine (reads are refused)"
    limits = f" (Polars cannot: {'; '.join(reader['polars_limits'])})" if reader["polars_limits"] else ""
    lines = [f"registered {name} -> {result['location']}: version {result['version']}, generation "
             f"{result['generation']}, {result['files']} files, {result['bytes']} bytes, "
             f"{result['deletion_vectors']} deletion vectors",
             f"reads go through {how}{limits}"]
    for a in result["ambiguous_timestamp_partition"]:
        lines.append(f"ambiguous_timestamp_partition: {a['column']}: {a['files']} files log a timestamp with no zone"
                     f" (e.g. {a['example']!r}); read as {a['read_as']}, the writer's zone may differ")
    if result["unreferenced"]:
        lines.append(f"{len(result['unreferenced'])} files under the root that no version references:")
        lines += [f"  {p}" for p in result["unreferenced"]]
    emit(opts, result, "\n".join(lines))
