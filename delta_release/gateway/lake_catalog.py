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
from ..errors import CatalogIntegrityError, GenerationConflictError, InputError, NotFoundError
from ..faults import crash_point
from ..storage import ObjectInfo, Storage
from ..tables import DEFAULT_TABLE
from .catalog import Catalog, Publication, SqliteCatalog, TableEntry
from .locations import table_location

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


class CatalogFormatError(CatalogIntegrityError):
    """A catalog object in the lake is not what this format says (damaged, hand-edited, foreign, stray or
    out of its chain): exit 3, naming the object and how to repair it."""


RESTORE = "restore it from a backup of the lake"  # what repairs an object only its writer could make
_RECORD_KEY = re.compile(rf"\d{{{WIDTH}}}\.json")


def _load(data: bytes, path: str, fmt: str, repair: str = RESTORE) -> dict[str, Any]:
    try:
        record = json.loads(data)
    except (ValueError, RecursionError) as exc:  # (UnicodeDecodeError is a ValueError)
        raise CatalogFormatError(f"catalog object {path} is damaged (not JSON: {str(exc)[:120]})", path=path,
                                 repair=repair) from None
    if not isinstance(record, dict) or record.get("format") != fmt:
        raise CatalogFormatError(f"catalog object {path} is damaged (not a {fmt} record)", path=path,
                                 repair=repair)
    return record


def _field(record: Mapping[str, Any], key: str, kind: type, path: str, *, optional: bool = False,
           repair: str = RESTORE) -> Any:
    """`record[key]` when it has the JSON type `kind` (an int is never a bool, never a float), else
    CatalogFormatError naming the object."""
    value = record.get(key)
    if value is None and optional:
        return value
    if isinstance(value, kind) and not isinstance(value, bool) and (not isinstance(value, int) or 0 <= value < 1 << 63):
        return value
    raise CatalogFormatError(f"catalog object {path} is damaged: {key} is {str(value)[:40]!r}", path=path,
                             repair=repair)


class LakeCatalog:
    """`Catalog` stored in the lake itself (local directory or S3); safe across processes and machines."""

    def __init__(self, storage: Storage, *, marking: bool = True) -> None:
        self.storage = storage
        # readers never write: the marker is created by the first write, except during `catalog migrate`
        # (marking=False), which creates it last, once every publication is copied and verified
        self._marked = not marking

    def _mark(self) -> None:
        if not self._marked:
            self.mark()

    def mark(self) -> None:
        """Create `_catalog/format.json` unless it exists: from then on the lake's readers use this catalog."""
        if not self.storage.exists(MARKER):
            self.storage.write_once(MARKER, _dump({"format": MARKER_FORMAT, "tables": TABLES,
                                                   "publications": PUBLICATIONS, "current": CURRENT,
                                                   "doc": "docs/catalog-format.md"}))
        self._marked = True

    def _read(self, path: str) -> bytes:
        """One GET (read_tagged; pyarrow's reader sends a HEAD first). Records are never deleted."""
        got = self.storage.read_tagged(path)
        if got is None:
            raise CatalogFormatError(f"catalog object {self.storage.uri(path)} was listed but is gone",
                                     path=self.storage.uri(path), repair=RESTORE)
        return got[0]

    def _records(self, listing: list[ObjectInfo], prefix: str) -> list[ObjectInfo]:
        """`listing` (under `prefix/`), every object in it a record name (20 digits `.json`), numbered without
        a gap; a stray object (`zzz.json`, a copy, a folder) or a gap is refused, never skipped or taken as
        the newest record."""
        for o in listing:
            if not _RECORD_KEY.fullmatch(o.path[len(prefix) + 1:]):
                uri = self.storage.uri(o.path)
                raise CatalogFormatError(f"catalog object {uri} is stray: not a record of this catalog", path=uri,
                                         repair=f"remove {uri} (records are named <20 digits>.json)")
        for before, after in zip(listing, listing[1:], strict=False):
            if _number(after.path) != _number(before.path) + 1:
                missing = self.storage.uri(f"{prefix}/{_key(_number(before.path) + 1)}")
                raise CatalogFormatError(f"catalog object {missing} is missing (records have no gaps)",
                                         path=missing, repair=RESTORE)
        return listing

    # -- tables ----------------------------------------------------------------------------------
    @staticmethod
    def _check(name: str) -> str:
        if not TABLE_NAME.fullmatch(name):
            raise InputError(f"table name {name!r} cannot be stored in the lake catalog "
                             "(letters, digits, '_', '.', '-'; at most 128)", table=name)
        return name

    def _latest_table(self, name: str) -> tuple[int, TableEntry] | None:
        prefix = f"{TABLES}/{self._check(name)}"
        records = self._records(self.storage.list_after(prefix), prefix)
        if not records:
            return None
        path = records[-1].path
        uri, revision = self.storage.uri(path), _number(path)
        repair = f"`delta-release --lake {self.storage.root} catalog repair` writes the entry of {name} anew"
        rec = _load(self._read(path), uri, TABLE_FORMAT, repair)
        if (_field(rec, "name", str, uri, repair=repair) != name
                or _field(rec, "revision", int, uri, repair=repair) != revision):
            raise CatalogFormatError(f"catalog object {uri} is damaged: it says table {str(rec['name'])[:80]!r} "
                                     f"revision {rec['revision']}", path=uri, repair=repair)
        return revision, TableEntry(name=name, location=_field(rec, "location", str, uri, repair=repair),
                                    kind=_field(rec, "kind", str, uri, repair=repair), origin=uri)

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

    def reset_table(self, name: str, *, location: str, kind: str) -> None:
        """A new revision with `location` and `kind`, whatever the newest one holds (`catalog repair`: a
        damaged or refused record stays as history; the new one is the entry from now on)."""
        prefix = f"{TABLES}/{self._check(name)}"
        for _ in range(100):
            numbers = [_number(o.path) for o in self.storage.list_after(prefix)
                       if _RECORD_KEY.fullmatch(o.path[len(prefix) + 1:])]
            if self._create_table_revision(name, max(numbers, default=0) + 1, location, kind):
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
    def _pub(self, rec: Mapping[str, Any], uri: str, name: str, generation: int | None = None) -> Publication:
        """A publication record, checked against its name: its table and generation are the object's."""
        pub = Publication(table=_field(rec, "table", str, uri), generation=_field(rec, "generation", int, uri),
                          version=_field(rec, "version", int, uri), completed=_field(rec, "completed", str, uri),
                          digest=_field(rec, "digest", str, uri), label=_field(rec, "label", str, uri, optional=True),
                          origin=uri)
        if pub.table != name or (generation is not None and pub.generation != generation):
            raise CatalogFormatError(f"catalog object {uri} is damaged: it says table {pub.table[:80]!r} generation "
                                     f"{pub.generation}", path=uri, repair=RESTORE)
        return pub

    def _pub_path(self, name: str, generation: int) -> str:
        return f"{PUBLICATIONS}/{name}/{_key(generation)}"

    def current(self, name: str) -> Publication | None:
        """The newest publication, verified: the records listed from the pointer's generation on exist without
        a gap, the newest is its own name's record and equals the pointer's bytes when the pointer names it
        (a deleted newest record, or one rewritten, is refused, never served; the gateway also checks its
        commit digest against the lake's commit, `gateway/reader.py`)."""
        self._check(name)
        pointer = f"{CURRENT}/{name}.json"
        hint: tuple[bytes, str] | None = self.storage.read_tagged(pointer)
        pointed: Publication | None = None
        if hint is not None:
            uri = self.storage.uri(pointer)
            pointed = self._pub(_load(hint[0], uri, PUBLICATION_FORMAT, repair=(
                f"replace {uri} with a byte copy of the newest record in {self.storage.uri(PUBLICATIONS)}/{name}/")),
                uri, name)
        first = 1 if pointed is None else pointed.generation
        prefix = f"{PUBLICATIONS}/{name}"
        listing = self._records(self.storage.list_after(
            prefix, self._pub_path(name, first - 1) if first > 1 else None), prefix)
        if not listing or _number(listing[0].path) != first:
            if pointed is None and not listing:
                return None
            missing = self.storage.uri(self._pub_path(name, first))
            repair = (f"copy {self.storage.uri(pointer)} (a byte copy of it) to {missing}" if pointed is not None
                      and not listing else RESTORE)
            raise CatalogFormatError(f"catalog object {missing} is missing"
                                     + (" (the current pointer names it)" if pointed is not None else ""),
                                     path=missing, repair=repair, table=name)
        newest = listing[-1]
        uri, generation = self.storage.uri(newest.path), _number(newest.path)
        if hint is not None and generation == first and newest.tag is not None and newest.tag == hint[1]:
            data = hint[0]  # the pointer is a byte copy of the newest record (same ETag)
        else:
            data = self._read(newest.path)
            if hint is not None and generation == first and data != hint[0]:
                raise CatalogFormatError(f"catalog object {uri} differs from its copy {self.storage.uri(pointer)}: "
                                         "one of them was rewritten", path=uri, repair=RESTORE, table=name)
        return self._pub(_load(data, uri, PUBLICATION_FORMAT), uri, name, generation)

    def publications(self, name: str) -> list[Publication]:
        """Every publication, oldest first, each checked against its name; generations 1, 2, ... without a
        gap."""
        self._check(name)
        prefix = f"{PUBLICATIONS}/{name}"
        listing = self._records(self.storage.list_after(prefix), prefix)
        if listing and _number(listing[0].path) != 1:
            missing = self.storage.uri(self._pub_path(name, 1))
            raise CatalogFormatError(f"catalog object {missing} is missing (records have no gaps)", path=missing,
                                     repair=RESTORE, table=name)
        out: list[Publication] = []
        for o in listing:
            uri = self.storage.uri(o.path)
            out.append(self._pub(_load(self._read(o.path), uri, PUBLICATION_FORMAT), uri, name, _number(o.path)))
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
        return self._pub(record, self.storage.uri(path), name, generation)

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
        uri = self.storage.uri(path)
        stored = self._pub(_load(self._read(path), uri, PUBLICATION_FORMAT), uri, pub.table, pub.generation)
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
    uri = (storage.uri(DEFAULT_TABLE) if entry is None else
           table_location(storage, entry, own={DEFAULT_TABLE: (entry.kind, DEFAULT_TABLE)}))
    current = catalog.current(DEFAULT_TABLE)
    if current is not None:
        if compare_digest and not commit_agrees(uri, storage.storage_options, current):
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


def commit_agrees(uri: str, options: dict[str, str], pub: Publication) -> bool:
    """False when `pub`, a publication of one of our Delta tables (at `uri`), records a commit digest that
    is not the digest of the table's commit at that version (one read of that commit's log entry), or
    publishes the empty table (`empty`) at a version other than 0. Publications labelled otherwise (a
    release run's) cannot be compared and agree."""
    if pub.digest == "empty":
        return pub.version == 0
    if not _DIGEST.fullmatch(pub.digest or ""):
        return True
    return (_delta.version_evidence(uri, options, pub.version) or {}).get("digest") == pub.digest


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
    if has_lake_catalog(storage):
        return LakeCatalog(storage)
    if not storage.is_local:
        if interrupted_migration(storage):  # records without the marker: a half-copied catalog, never read
            raise CatalogFormatError(
                f"the lake catalog {storage.uri(ROOT)} has records but no {MARKER}: a `catalog migrate` was "
                "interrupted and its copy is incomplete", path=storage.uri(MARKER),
                repair=f"rerun `delta-release --lake {storage.root} catalog migrate --from sqlite PATH` "
                f"(or read with {CATALOG_ENV}=PATH meanwhile)")
        return LakeCatalog(storage)
    return SqliteCatalog(storage.local_path(SQLITE_PATH))


def interrupted_migration(storage: Storage) -> bool:
    """True when the lake holds catalog records but no `_catalog/format.json`: a `catalog migrate` that
    was killed before it finished (the marker is its last write)."""
    return not has_lake_catalog(storage) and bool(storage.list_after(PUBLICATIONS))


def migrate_catalog(source: SqliteCatalog, storage: Storage) -> dict[str, Any]:
    """Copy every table entry and publication of `source` into the lake catalog at `storage`, create-only;
    idempotent, and atomic for readers: `_catalog/format.json`, which switches the lake's readers to the
    lake catalog, is written last, after every publication is copied and read back equal, under the SQLite
    catalog's write lock (no publisher can publish in between). A migration killed at any step leaves the
    lake on SQLite; a rerun, also after more publications landed there, copies the rest.

    Publications keep their generation numbers. A record already in the lake catalog with the same content
    is 'present'; one with different content raises GenerationConflictError (nothing is overwritten). A
    table whose lake-catalog location already differs keeps the lake's ('kept').
    """
    target = LakeCatalog(storage, marking=False)
    names = sorted(set(source.table_names()))
    unstorable = [n for n in names if not TABLE_NAME.fullmatch(n)]
    if unstorable:  # before anything is written
        raise InputError(f"catalog migrate: table name(s) {', '.join(repr(n[:80]) for n in unstorable)} cannot be "
                         "stored in the lake catalog (letters, digits, '_', '.', '-'); nothing was moved",
                         tables=[n[:80] for n in unstorable])
    tables: list[dict[str, Any]] = []
    publications: dict[str, dict[str, list[int]]] = {n: {"moved": [], "present": []} for n in names}

    def copy(name: str) -> None:
        done = publications[name]
        for pub in source.publications(name):
            if pub.generation not in done["moved"] + done["present"]:
                done[target.import_publication(pub)].append(pub.generation)
                crash_point("migrate.after_publication")

    for name in names:
        entry = source.table(name)
        if entry is not None:
            there = target.table(name)
            if there is None:
                there = target.register(name, location=entry.location, kind=entry.kind)
                action = "moved" if there == entry else "kept"
                crash_point("migrate.after_table")
            else:
                action = "present" if there == entry else "kept"
            tables.append({"name": name, "action": action, "location": there.location,
                           **({"sqlite_location": entry.location} if there != entry else {})})
        copy(name)
    current: dict[str, dict[str, int] | None] = {}
    with source.held():  # no publication lands in SQLite from here until the marker is written
        for name in sorted(set(source.table_names())):
            publications.setdefault(name, {"moved": [], "present": []})
            copy(name)  # what landed since the first pass
            want, got = source.publications(name), target.publications(name)
            if got[:len(want)] != want:
                raise GenerationConflictError(name, len(want), len(got))
            if got:
                target.point_current(name)  # (also after a run killed before it moved the pointer)
            current[name] = {"generation": got[-1].generation, "version": got[-1].version} if got else None
        crash_point("migrate.before_marker")
        target.mark()
    return {"source": str(source.path), "target": storage.uri(ROOT), "tables": tables,
            "publications": publications, "current": current,
            "moved": sum(len(p["moved"]) for p in publications.values()),
            "present": sum(len(p["present"]) for p in publications.values())}
