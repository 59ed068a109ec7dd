"""catalog: the lake-resident catalog (docs/catalog-format.md); `catalog migrate` moves a SQLite catalog."""

from __future__ import annotations

import os
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
    from ..erasure.ledger import load_key
    from ..errors import InputError
    from ..gateway.catalog import SqliteCatalog
    from ..gateway.lake_catalog import (
        CATALOG_ENV,
        SQLITE_PATH,
        check_own_catalog,
        migrate_catalog,
        not_a_catalog,
    )
    from ..lakeroot import open_root
    from ..storage import Storage

    storage = Storage(opts.lake, lake_options(opts))
    if source is not None:
        path = Path(source[1])
    elif os.environ.get(CATALOG_ENV, "") not in ("", "lake", "sqlite", "memory"):
        path = Path(os.environ[CATALOG_ENV])
    elif storage.is_local:
        path = storage.local_path(SQLITE_PATH)
    else:
        raise InputError("catalog migrate: an s3:// lake has no SQLite catalog of its own; "
                         "name it with --from sqlite PATH", uri=storage.root)
    if not path.is_file():
        raise InputError(f"catalog migrate: no SQLite catalog at {path}", path=str(path))
    open_root(storage, create=False)  # a mistyped --lake gets no `_catalog/` (LakeNotFoundError, exit 2)
    problem = not_a_catalog(path)  # read-only first: a file that is not our catalog is neither changed nor taken
    if problem:
        raise InputError(f"catalog migrate: {problem}", path=str(path))
    load_key(storage, create=False)  # a process whose erasure key is not the lake's writes nothing (exit 3)
    sqlite = SqliteCatalog(path)
    check_own_catalog(sqlite, storage, hint="name the SQLite file this lake published to with --from",
                      compare_digest=True)
    report = migrate_catalog(sqlite, storage)
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
    from ..erasure.ledger import load_key
    from ..gateway.lake_catalog import catalog_for, describe_catalog
    from ..gateway.locations import repair_entries
    from ..lakeroot import open_root
    from ..storage import Storage
    from ..tables import DEFAULT_TABLES_DIR, load_table_defs

    storage = Storage(opts.lake, lake_options(opts))
    open_root(storage, create=False)
    load_key(storage, create=False)
    cat = catalog_for(storage)
    own = {t.name: (t.kind, t.location or t.name) for t in load_table_defs(DEFAULT_TABLES_DIR).values()}
    repaired = repair_entries(cat, storage, own)
    lines = [f"repaired {len(repaired)} table entr{'y' if len(repaired) == 1 else 'ies'} in {describe_catalog(cat)}"]
    lines += [f"  {r['table']}: -> {r['location']} ({r['kind']}), was {r['refused']}" for r in repaired]
    emit(opts, {"catalog": describe_catalog(cat), "repaired": repaired}, "\n".join(lines))


def _ranges(gens: list[int]) -> str:
    if not gens:
        return "none"
    return f"{gens[0]}" if len(gens) == 1 else f"{gens[0]}-{gens[-1]} ({len(gens)})"
