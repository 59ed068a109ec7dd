"""catalog: the lake-resident catalog (docs/catalog-format.md); `catalog migrate` moves a SQLite catalog."""

from __future__ import annotations

from pathlib import Path

import click

from .base import Options, command_options, emit, lake_options


@click.group()
def catalog() -> None:
    """The catalog stored in the lake (tables and publications as create-only JSON objects)."""


@catalog.command()
@click.option("--from", "source", nargs=2, type=(click.Choice(["sqlite"]), str), default=None,
              metavar="sqlite PATH", help="The SQLite catalog to move (default: the lake's "
              "_catalog/catalog.sqlite, or $DELTA_RELEASE_CATALOG when it names a file).")
@command_options
def migrate(opts: Options, source: tuple[str, str] | None) -> None:
    """Move every table entry and publication of a SQLite catalog into the lake-resident catalog.

    Create-only and idempotent: a second run moves nothing. Generation numbers are kept; a generation
    present in both with different content is refused (exit 3). The lake switches to its lake-resident
    catalog only at the end, once every publication is copied and verified: a killed run leaves it on SQLite
    and a rerun completes it. The SQLite file is left in place (unless DELTA_RELEASE_CATALOG says otherwise).
    """
    from ..lake import Lake

    migration = Lake.migrate_catalog(opts.lake, source=None if source is None else Path(source[1]),
                                     storage_options=lake_options(opts))
    path, report = migration.source, migration.to_json()
    lines = [f"migrated {path} -> {report['target']}: {report['moved']} publications moved, "
             f"{report['present']} already there"]
    for t in report["tables"]:
        pubs = report["publications"].get(t["name"], {})
        cur = report["current"].get(t["name"])
        lines.append(f"  {t['name']}: table {t['action']} ({t['location']}), generations moved "
                     f"{_ranges(pubs.get('moved', []))}, present {_ranges(pubs.get('present', []))}, current "
                     + (f"generation {cur['generation']} = version {cur['version']}" if cur else "none"))
    emit(opts, report, "\n".join(lines))


@catalog.command()
@command_options
def repair(opts: Options) -> None:
    """Point each of the lake's own tables back at its folder in the lake.

    A table entry that names a location outside the lake, another kind, or that cannot be read is refused
    by every command (exit 3); this writes the entry the table definition says (a new revision on the lake
    catalog, the row replaced in SQLite) and touches nothing else. Publications are never rewritten here.
    """
    from ..lake import Lake

    result = Lake.repair_catalog(opts.lake, storage_options=lake_options(opts))
    repaired = result["repaired"]
    lines = [f"repaired {len(repaired)} table entr{'y' if len(repaired) == 1 else 'ies'} in {result['catalog']}"]
    lines += [f"  {r['table']}: -> {r['location']} ({r['kind']}), was {r['refused']}" for r in repaired]
    emit(opts, result, "\n".join(lines))


def _ranges(gens: list[int]) -> str:
    if not gens:
        return "none"
    return f"{gens[0]}" if len(gens) == 1 else f"{gens[0]}-{gens[-1]} ({len(gens)})"
