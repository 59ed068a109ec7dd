"""The catalog's own upkeep, run on a lake that is not opened (opening refuses the entries `repair`
fixes): `catalog migrate` (a SQLite catalog into the lake-resident one) and `catalog repair` (each own
table's entry back to its folder in the lake). `Lake.migrate_catalog` and `Lake.repair_catalog` call them."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..erasure.ledger import load_key
from ..errors import InputError
from ..gateway.catalog import SqliteCatalog
from ..gateway.lake_catalog import (
    CATALOG_ENV,
    SQLITE_PATH,
    catalog_for,
    check_own_catalog,
    describe_catalog,
    migrate_catalog,
    not_a_catalog,
)
from ..gateway.locations import repair_entries
from ..lakeroot import open_root
from ..storage import Storage
from ..tables import DEFAULT_TABLES_DIR, load_table_defs


@dataclass(frozen=True, slots=True)
class CatalogMigration:
    """What `catalog migrate` moved from the SQLite catalog at `source`."""
    source: Path
    report: dict[str, Any]

    def to_json(self) -> dict[str, Any]:
        return self.report


def _sqlite_source(storage: Storage, source: Path | None) -> Path:
    """The SQLite catalog to move: `source`, else $DELTA_RELEASE_CATALOG when it names a file, else the
    lake's own `_catalog/catalog.sqlite` (an s3:// lake has none)."""
    if source is not None:
        path = source
    elif os.environ.get(CATALOG_ENV, "") not in ("", "lake", "sqlite", "memory"):
        path = Path(os.environ[CATALOG_ENV])
    elif storage.is_local:
        path = storage.local_path(SQLITE_PATH)
    else:
        raise InputError("catalog migrate: an s3:// lake has no SQLite catalog of its own; "
                         "name it with --from sqlite PATH", uri=storage.root)
    if not path.is_file():
        raise InputError(f"catalog migrate: no SQLite catalog at {path}", path=str(path))
    return path


def migrate_sqlite_catalog(storage: Storage, source: Path | None) -> CatalogMigration:
    """Move every table entry and publication of a SQLite catalog into the lake-resident catalog
    (create-only, idempotent; gateway/lake_catalog.py `migrate_catalog`)."""
    path = _sqlite_source(storage, source)
    open_root(storage, create=False)  # a mistyped --lake gets no `_catalog/` (LakeNotFoundError, exit 2)
    problem = not_a_catalog(path)  # read-only first: a file that is not our catalog is neither changed nor taken
    if problem:
        raise InputError(f"catalog migrate: {problem}", path=str(path))
    load_key(storage, create=False)  # a process whose erasure key is not the lake's writes nothing (exit 3)
    sqlite = SqliteCatalog(path)
    check_own_catalog(sqlite, storage, hint="name the SQLite file this lake published to with --from",
                      compare_digest=True)
    return CatalogMigration(path, migrate_catalog(sqlite, storage))


def repair_own_entries(storage: Storage) -> dict[str, Any]:
    """Point each of the lake's own tables back at its folder in the lake (gateway/locations.py
    `repair_entries`); publications are never rewritten."""
    open_root(storage, create=False)
    load_key(storage, create=False)
    cat = catalog_for(storage)
    own = {t.name: (t.kind, t.location or t.name) for t in load_table_defs(DEFAULT_TABLES_DIR).values()}
    repaired = repair_entries(cat, storage, own)
    return {"catalog": describe_catalog(cat), "repaired": repaired}
