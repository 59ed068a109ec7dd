"""The lake-resident catalog: tables and publications as small create-only JSON objects in the lake.

A reader on any machine, given only the lake URI and credentials, resolves the published generation,
Delta version and table location from these objects (plain JSON; docs/catalog-format.md):

    <lake>/_catalog/tables/<name>/<revision, 20 digits>.json        one per location change, create-only
    <lake>/_catalog/publications/<name>/<generation, 20 digits>.json  one per publication, create-only
    <lake>/_catalog/current/<name>.json                              a hint: a byte copy of a recent
                                                                     publication record (never trusted alone)

Publishing generation g+1 is "create `.../<g+1>.json` unless it exists" (S3 `If-None-Match: *`, a hard
link on local disk), after checking that record g exists: two publishers that both expect g race for
the same name and exactly one wins; the other gets `GenerationConflictError`. Records are never
replaced or deleted, so generations are contiguous from 1 and the newest record is the current one.

Finding the newest record without listing history: read the pointer (generation p, a hint written
after each publication and possibly behind, never ahead of a record that exists), list the
publications prefix starting after record p-1 (one request), and take the last key. When the last key
is p and its ETag equals the pointer's (the pointer is a byte copy), the pointer's bytes are the record
and no further read is needed: two requests on S3 for a cold reader.
"""

from __future__ import annotations

import json
import os
import re
import uuid
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from .. import _delta
from ..errors import DeltaReleaseError, GenerationConflictError, InputError, NotFoundError
from ..storage import Storage
from ..tables import DEFAULT_TABLE
from .catalog import Catalog, Publication, SqliteCatalog, TableEntry

ROOT = "_catalog"
TABLES = f"{ROOT}/tables"
PUBLICATIONS = f"{ROOT}/publications"
CURRENT = f"{ROOT}/current"
MARKER = f"{ROOT}/format.json"
TABLE_FORMAT = "delta-release/catalog-table/1"
PUBLICATION_FORMAT = "delta-release/catalog-publication/1"
MARKER_FORMAT = "delta-release/catalog/1"
WIDTH = 20
SQLITE_PATH = f"{ROOT}/catalog.sqlite"
CATALOG_ENV = "DELTA_RELEASE_CATALOG"

TABLE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,127}")  # what a catalog stores


def _key(n: int) -> str:
    return f"{n:0{WIDTH}d}.json"


def _number(path: str) -> int:
    return int(path.rsplit("/", 1)[-1].removesuffix(".json"))


def _dump(record: Mapping[str, Any]) -> bytes:
    return (json.dumps(record, sort_keys=True, separators=(",", ":")) + "\n").encode()


class CatalogFormatError(DeltaReleaseError):
    """A catalog object in the lake is not what this format says (hand-edited or foreign)."""


def _load(data: bytes, path: str, fmt: str) -> dict[str, Any]:
    try:
        record = json.loads(data)
    except ValueError as exc:
        raise CatalogFormatError(f"catalog object {path} is not JSON: {exc}", path=path) from None
    if not isinstance(record, dict) or record.get("format") != fmt:
        raise CatalogFormatError(f"catalog object {path} is not a {fmt} record", path=path)
    return record


class LakeCatalog:
    """`Catalog` stored in the lake itself (local directory or S3); safe across processes and machines."""

    def __init__(self, storage: Storage) -> None:
        self.storage = storage
        self._marked = False  # readers never write: the marker is created by the first write

    def _mark(self) -> None:
        if not self._marked and not self.storage.exists(MARKER):
            self.storage.write_once(MARKER, _dump({"format": MARKER_FORMAT, "tables": TABLES,
                                                   "publications": PUBLICATIONS, "current": CURRENT,
                                                   "doc": "docs/catalog-format.md"}))
        self._marked = True

    def _read(self, path: str) -> bytes:
        """One GET (read_tagged; pyarrow's reader sends a HEAD first). Records are never deleted."""
        got = self.storage.read_tagged(path)
        if got is None:
            raise CatalogFormatError(f"catalog object {path} was listed but cannot be read", path=path)
        return got[0]

    # -- tables ----------------------------------------------------------------------------------
    @staticmethod
    def _check(name: str) -> str:
        if not TABLE_NAME.fullmatch(name):
            raise InputError(f"table name {name!r} cannot be stored in the lake catalog "
                             "(letters, digits, '_', '.', '-'; at most 128)", table=name)
        return name

    def _latest_table(self, name: str) -> tuple[int, TableEntry] | None:
        listing = self.storage.list_after(f"{TABLES}/{self._check(name)}")
        records = [o for o in listing if o.path.endswith(".json")]
        if not records:
            return None
        path = records[-1].path
        rec = _load(self._read(path), path, TABLE_FORMAT)
        return _number(path), TableEntry(name=str(rec["name"]), location=str(rec["location"]),
                                         kind=str(rec["kind"]))

    def _create_table_revision(self, name: str, revision: int, location: str, kind: str) -> bool:
        self._mark()
        record = {"format": TABLE_FORMAT, "name": name, "revision": revision, "location": location,
                  "kind": kind, "writer": uuid.uuid4().hex}
        return self.storage.write_once(f"{TABLES}/{name}/{_key(revision)}", _dump(record))

    def register(self, name: str, *, location: str, kind: str) -> TableEntry:
        for _ in range(100):
            latest = self._latest_table(name)
            if latest is not None:
                return latest[1]
            if self._create_table_revision(name, 1, location, kind):
                return TableEntry(name=name, location=location, kind=kind)
        raise GenerationConflictError(name, None, None)

    def set_location(self, name: str, location: str) -> None:
        for _ in range(100):
            latest = self._latest_table(name)
            if latest is None:
                raise NotFoundError(f"table {name} is not in the catalog", table=name)
            revision, entry = latest
            if self._create_table_revision(name, revision + 1, location, entry.kind):
                return
        raise GenerationConflictError(name, None, None)

    def table(self, name: str) -> TableEntry | None:
        latest = self._latest_table(name)
        return None if latest is None else latest[1]

    def tables(self) -> list[TableEntry]:
        names = sorted({o.path[len(TABLES) + 1:].split("/", 1)[0]
                        for o in self.storage.list(TABLES) if o.path.endswith(".json")})
        out = [self.table(n) for n in names if TABLE_NAME.fullmatch(n)]
        return [t for t in out if t is not None]

    # -- publications ----------------------------------------------------------------------------
    @staticmethod
    def _pub(rec: Mapping[str, Any]) -> Publication:
        label = rec.get("label")
        return Publication(table=str(rec["table"]), generation=int(rec["generation"]),
                           version=int(rec["version"]), completed=str(rec["completed"]),
                           digest=str(rec["digest"]), label=None if label is None else str(label))

    def _pub_path(self, name: str, generation: int) -> str:
        return f"{PUBLICATIONS}/{name}/{_key(generation)}"

    def current(self, name: str) -> Publication | None:
        self._check(name)
        hint: tuple[bytes, str] | None = self.storage.read_tagged(f"{CURRENT}/{name}.json")
        pointed = 0
        if hint is not None:
            try:
                pointed = int(json.loads(hint[0])["generation"])
            except (ValueError, KeyError, TypeError):
                pointed, hint = 0, None  # a damaged hint: fall back to the full listing
        prefix = f"{PUBLICATIONS}/{name}"
        listing = [o for o in self.storage.list_after(
            prefix, self._pub_path(name, pointed - 1) if pointed > 1 else None) if o.path.endswith(".json")]
        if not listing and pointed > 1:  # the hint names a record that does not exist: ignore it
            listing = [o for o in self.storage.list_after(prefix) if o.path.endswith(".json")]
            hint = None
        if not listing:
            return None
        newest = listing[-1]
        if (hint is not None and not self.storage.is_local and _number(newest.path) == pointed
                and newest.tag is not None and newest.tag == hint[1]):
            data = hint[0]  # the pointer is a byte copy of the newest record (same ETag)
        else:
            data = self._read(newest.path)
        return self._pub(_load(data, newest.path, PUBLICATION_FORMAT))

    def publications(self, name: str) -> list[Publication]:
        self._check(name)
        out = []
        for o in self.storage.list_after(f"{PUBLICATIONS}/{name}"):
            if o.path.endswith(".json"):
                out.append(self._pub(_load(self.storage.read_bytes(o.path), o.path, PUBLICATION_FORMAT)))
        return out

    def publish(self, name: str, *, expected_generation: int | None, version: int, digest: str,
                completed: str, label: str | None = None) -> Publication:
        self._check(name)
        if expected_generation is not None and not self.storage.exists(self._pub_path(name, expected_generation)):
            found = self.current(name)
            raise GenerationConflictError(name, expected_generation, None if found is None else found.generation)
        generation = (expected_generation or 0) + 1
        record = {"format": PUBLICATION_FORMAT, "table": name, "generation": generation, "version": version,
                  "completed": completed, "digest": digest, "label": label, "writer": uuid.uuid4().hex}
        data = _dump(record)
        path = self._pub_path(name, generation)
        self._mark()
        if not self.storage.write_once(path, data):
            stored = self.storage.read_tagged(path)
            if stored is None or stored[0] != data:  # (equal bytes: our own PUT, retried after it landed)
                found = self.current(name)
                raise GenerationConflictError(name, expected_generation,
                                              None if found is None else found.generation)
        self._point(name, data)
        return self._pub(record)

    def _point(self, name: str, data: bytes) -> None:
        """Move the hint forward (best effort: a hint that lags only costs a longer listing)."""
        self.storage.put(f"{CURRENT}/{name}.json", data)

    # -- migration -------------------------------------------------------------------------------
    def import_publication(self, pub: Publication) -> str:
        """Store `pub` with its own generation: 'moved', 'present' (same record already here) or raise."""
        self._check(pub.table)
        record = {"format": PUBLICATION_FORMAT, "table": pub.table, "generation": pub.generation,
                  "version": pub.version, "completed": pub.completed, "digest": pub.digest,
                  "label": pub.label, "writer": "migrated"}
        data = _dump(record)
        path = self._pub_path(pub.table, pub.generation)
        self._mark()
        if self.storage.write_once(path, data):
            return "moved"
        stored = self._pub(_load(self.storage.read_bytes(path), path, PUBLICATION_FORMAT))
        if stored != pub:
            raise GenerationConflictError(pub.table, pub.generation - 1, pub.generation)
        return "present"

    def point_current(self, name: str) -> None:
        pub = self.current(name)
        if pub is not None:
            self._point(name, self.storage.read_bytes(self._pub_path(name, pub.generation)))


def describe_catalog(catalog: Catalog) -> str:
    """The catalog in a few words, for messages."""
    if isinstance(catalog, SqliteCatalog):
        return f"SQLite file {catalog.path}"
    if isinstance(catalog, LakeCatalog):
        return f"lake-resident, {catalog.storage.uri(ROOT)}"
    return type(catalog).__name__


def not_a_catalog(path: Path) -> str | None:
    """Why an existing file at `path` is not a delta-release SQLite catalog (read-only: a file that is not
    one is neither changed nor taken), or None (it is one, or it does not exist yet)."""
    import sqlite3

    if not path.exists():
        return None
    try:
        con = sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True)
        try:
            ours = con.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'publications'").fetchone()
        finally:
            con.close()
    except sqlite3.DatabaseError as exc:
        return f"{path} is not a SQLite catalog ({exc})"
    return None if ours is not None else f"{path} is not a delta-release SQLite catalog (no publications table)"


def check_own_catalog(catalog: Catalog, storage: Storage, *, hint: str, compare_digest: bool = False) -> None:
    """Refuse `catalog` as the catalog of the lake at `storage` when it has no publication of the orders
    table while that table has commits: it is some other catalog (a new, empty one, a mistyped file, a
    migration's wrong source), and using it would hide everything the lake published (InputError, exit 2,
    naming the catalog and `hint`).

    `compare_digest` (a catalog named explicitly: DELTA_RELEASE_CATALOG, `migrate --from`): also refuse one
    whose current orders publication records a commit digest that is not the digest of this lake's commit
    at that version: another lake's catalog. (One read of that commit's log entry; publications labelled
    otherwise, such as a release run's or version 0's, cannot be compared and pass.)"""
    entry = catalog.table(DEFAULT_TABLE)
    uri = storage.location_uri(entry.location if entry is not None else DEFAULT_TABLE)
    current = catalog.current(DEFAULT_TABLE)
    if current is not None:
        if compare_digest and _DIGEST.fullmatch(current.digest or ""):
            ours = (_delta.version_evidence(uri, storage.storage_options, current.version) or {}).get("digest")
            if ours != current.digest:
                raise InputError(f"the catalog ({describe_catalog(catalog)}) publishes {DEFAULT_TABLE} version "
                                 f"{current.version} with a commit digest this lake's version {current.version} does "
                                 f"not have: it is another lake's catalog; {hint}", uri=storage.root)
        return
    latest = _delta.latest_version(uri, storage.storage_options)
    if latest:  # (0 or None: no commit beyond the empty table, nothing to hide)
        raise InputError(f"the catalog ({describe_catalog(catalog)}) has no publication of {DEFAULT_TABLE}, "
                         f"whose table is at version {latest}: it is not this lake's catalog; {hint}",
                         uri=storage.root)


_DIGEST = re.compile(r"[0-9a-f]{64}")  # a commit evidence digest (other publications carry labels)


def has_lake_catalog(storage: Storage) -> bool:
    return storage.exists(MARKER)


def catalog_for(storage: Storage, env: Mapping[str, str] | None = None, *, new_lake: bool = False) -> Catalog:
    """The catalog a lake uses when the caller passes none (Lake.open(catalog=...) always wins).

    `DELTA_RELEASE_CATALOG` selects: `lake` (lake-resident), `sqlite` (the lake's own
    `_catalog/catalog.sqlite`, local lakes only), `memory`, or a path to a SQLite file. Unset: a lake
    that already holds a lake-resident catalog (its `_catalog/format.json`, e.g. after `catalog
    migrate`) and every `s3://` lake use the lake-resident catalog; other local lakes keep SQLite, the
    one-machine default that existing lakes were created with (no migration forced on them).
    A path that names no file is refused for an existing lake (`new_lake` False): a new, empty catalog
    would hide every publication the lake has (a typo must not create one).
    """
    env = os.environ if env is None else env
    choice = (env.get(CATALOG_ENV) or "").strip()
    if choice == "lake":
        return LakeCatalog(storage)
    if choice == "memory":  # (the API's catalog=MemoryCatalog() remains, for tests)
        raise InputError(f"{CATALOG_ENV}=memory would keep the lake's publications in this process only: a "
                         "lake written so is unreadable afterwards; use lake, sqlite or a SQLite file path")
    if choice == "sqlite":
        if not storage.is_local:
            raise InputError(f"{CATALOG_ENV}=sqlite needs a local lake; give a path to a SQLite file",
                             uri=storage.root)
        return SqliteCatalog(storage.local_path(SQLITE_PATH))
    if choice:
        if not new_lake and not Path(choice).is_file():
            raise InputError(f"{CATALOG_ENV}={choice} names no SQLite file; an existing lake opens with the "
                             "catalog it publishes to (a new file is made only with a new lake)", path=choice)
        problem = not_a_catalog(Path(choice))
        if problem:
            raise InputError(f"{CATALOG_ENV}={choice}: {problem}", path=choice)
        return SqliteCatalog(Path(choice))
    if not storage.is_local or has_lake_catalog(storage):
        return LakeCatalog(storage)
    return SqliteCatalog(storage.local_path(SQLITE_PATH))


def migrate_catalog(source: SqliteCatalog, target: LakeCatalog) -> dict[str, Any]:
    """Copy every table entry and publication of `source` into `target`, create-only; idempotent.

    Publications keep their generation numbers. A record already in `target` with the same content is
    'present'; one with different content raises GenerationConflictError (nothing is overwritten). A table
    whose lake-catalog location already differs keeps the lake's ('kept'). Ends by checking that every
    table's current publication is the same in both catalogs.
    """
    import sqlite3

    con = sqlite3.connect(source.path)
    try:
        names = sorted({str(r[0]) for r in con.execute("SELECT DISTINCT table_name FROM publications")}
                       | {t.name for t in source.tables()})
    finally:
        con.close()
    unstorable = [n for n in names if not TABLE_NAME.fullmatch(n)]
    if unstorable:  # before anything is written: a half-moved catalog would become the lake's default
        raise InputError(f"catalog migrate: table name(s) {', '.join(repr(n[:80]) for n in unstorable)} cannot be "
                         "stored in the lake catalog (letters, digits, '_', '.', '-'); nothing was moved",
                         tables=[n[:80] for n in unstorable])
    tables: list[dict[str, Any]] = []
    publications: dict[str, dict[str, list[int]]] = {}
    current: dict[str, dict[str, int] | None] = {}
    for name in names:
        entry = source.table(name)
        if entry is not None:
            there = target.table(name)
            if there is None:
                there = target.register(name, location=entry.location, kind=entry.kind)
                action = "moved" if there == entry else "kept"
            else:
                action = "present" if there == entry else "kept"
            tables.append({"name": name, "action": action, "location": there.location,
                           **({"sqlite_location": entry.location} if there != entry else {})})
        done: dict[str, list[int]] = {"moved": [], "present": []}
        for pub in source.publications(name):
            done[target.import_publication(pub)].append(pub.generation)
        publications[name] = done
        if done["moved"]:
            target.point_current(name)
        want, got = source.current(name), target.current(name)
        if want is not None and (got is None or got.generation < want.generation):
            raise CatalogFormatError(f"migration of {name} is incomplete: lake catalog at generation "
                                     f"{None if got is None else got.generation}, SQLite at {want.generation}",
                                     table=name)
        current[name] = None if got is None else {"generation": got.generation, "version": got.version}
    return {"source": str(source.path), "target": target.storage.uri(ROOT), "tables": tables,
            "publications": publications, "current": current,
            "moved": sum(len(p["moved"]) for p in publications.values()),
            "present": sum(len(p["present"]) for p in publications.values())}
