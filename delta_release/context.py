"""What the layers below the facade are given instead of the `Lake`: plain resources, no verbs.

- `TableContext`: one table as a writer sees it (name, URI, storage options, definition, clock, the
  publisher, the erasure ledger; the lake it belongs to, for the writer's lake-wide upkeep).
  `delta_release.commit.writer` takes nothing else.
- `LakeContext`: the lake-wide resources (root storage, catalog, clock, table definitions, raw store,
  quarantine, erasure ledger, publisher, the freshness gateway) and the lookups every layer needs
  (`table_def`, `table_uri`, `table_storage`, `latest_version`, `table(name) -> TableContext`).
- Two interfaces, so the context names what it offers without importing the modules that implement it
  (they take a context): `ErasureReads`, the erasure ledger's read side (erasure/reader.py), and
  `GatewayReads`, the freshness gateway as the layers below the facade use it (gateway/reader.py).

`delta_release.lake.Lake` is a `LakeContext` with the user's verbs on top; nothing below it imports
`lake.py`, and no import, not even under TYPE_CHECKING, closes a loop (tests/house/test_architecture.py).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

import polars as pl

from . import _delta
from .clock import Clock, iso
from .erasure.ledger import ErasureEntry
from .erasure.records import Lineage, PendingItem
from .errors import CatalogIntegrityError, GenerationConflictError, InputError, NotFoundError
from .faults import crash_point
from .gateway.cache import CachedTable, Requests
from .gateway.catalog import Catalog, Publication, TableEntry
from .gateway.lake_catalog import commit_agrees
from .gateway.locations import table_location
from .retention import BACKUP_EXPIRY_DAYS, RAW_RETENTION_DAYS
from .storage import Storage
from .tables import TableDef

if TYPE_CHECKING:
    from .erasure.ledger import ErasureLedger
    from .quarantine.ledger import QuarantineLedger
    from .raw.store import RawStore

PUBLISH_ATTEMPTS = 20


class Publisher(Protocol):
    """Moves the catalog's publication pointer of a table (what readers resolve)."""

    def current(self, table: str) -> Publication | None: ...

    def publish(self, table: str, version: int, *, digest: str, label: str | None = None) -> Publication: ...


class CatalogPublisher:
    """Publication as a compare-and-swap on the catalog's generation; never moves a table backwards."""

    def __init__(self, catalog: Catalog, clock: Clock) -> None:
        self.catalog = catalog
        self.clock = clock

    def current(self, table: str) -> Publication | None:
        return self.catalog.current(table)

    def publish(self, table: str, version: int, *, digest: str, label: str | None = None) -> Publication:
        """Point the catalog at `version`. A labelled publication may re-publish the current version, but
        never an older one (I8); an unlabelled one is a no-op below the current version, and at it unless
        the digests differ (the commit at that version is another table's: its folder was replaced, and the
        old publication would now be refused as not the commit's)."""
        for _ in range(PUBLISH_ATTEMPTS):
            current = self.catalog.current(table)
            if current is not None and (current.version > version or (
                    current.version == version and label is None and current.digest == digest)):
                return current
            crash_point("publish.before_swap")
            try:
                return self.catalog.publish(table, expected_generation=None if current is None
                                            else current.generation, version=version, digest=digest,
                                            completed=iso(self.clock.now()), label=label)
            except GenerationConflictError:
                continue
        raise GenerationConflictError(table, None, None)


class ErasureReads(Protocol):
    """The erasure ledger's read side (SQLMesh's StateReader; its writer is maintenance/erase.py): the
    ledger (ledger.py), snapshot permission (permission.py), lineage (lineage.py), pending evidence
    (pending.py) and text (text.py), answered by erasure/reader.py `ErasureReader`."""

    def subject_key(self, subject_id: str) -> str: ...

    def entries(self) -> list[ErasureEntry]: ...

    def exposing(self, table: str, version: int, *,
                 entries: list[ErasureEntry] | None = None) -> list[ErasureEntry]: ...

    def allowed(self, table: str, version: int) -> bool: ...

    def check_snapshot(self, table: str, version: int) -> None:
        """ErasureExposureError when `version` of `table` still holds an erased subject."""

    def lineage(self, table: str) -> Lineage: ...

    def pending(self, *, raw_retention_days: float = RAW_RETENTION_DAYS,
                backup_expiry_days: float | None = BACKUP_EXPIRY_DAYS) -> list[PendingItem]: ...

    def names_erased_subject(self, text: str) -> bool: ...


class GatewayReads(Protocol):
    """The freshness gateway (gateway/reader.py `Gateway`) as the layers below the facade use it."""

    requests: Requests

    def resolve(self, table: str, version: int | None) -> tuple[str, int]: ...

    def files(self, table: str, version: int | None = None) -> list[_delta.FileEntry]: ...

    def scan(self, table: str, version: int | None, *, include_tombstones: bool = False) -> pl.LazyFrame: ...

    def refresh(self, table: str) -> CachedTable: ...


@dataclass(frozen=True, slots=True, kw_only=True)
class TableContext:
    """One table, as a writer needs it. Cheap to build; build a new one rather than mutate it."""

    name: str
    uri: str
    storage_options: dict[str, str]
    table: TableDef
    clock: Clock
    publisher: Publisher
    erasures: ErasureLedger
    lake: LakeContext | None = field(default=None, compare=False, repr=False)  # for the writer's lake-wide upkeep
    index_root: Storage | None = None  # <lake>/_index/<table>/: the hot path's indexes (issue 14)
    _root: Storage | None = field(default=None, init=False, compare=False, repr=False)

    @property
    def storage(self) -> Storage:
        """The table root as a Storage (paths relative to it, as the Delta log writes them): one object per
        context, made on first use. A new one per access resolved the root path each time (and on S3 built
        a filesystem): ~180 accesses and 35 ms of an ingest that rewrites 76 small files."""
        if self._root is None:
            object.__setattr__(self, "_root", Storage(self.uri, self.storage_options))
        assert self._root is not None
        return self._root

    def latest_version(self) -> int | None:
        return _delta.latest_version(self.uri, self.storage_options)

    def now_ms(self) -> int:
        return int(self.clock.now().timestamp() * 1000)


class LakeContext:
    """The lake's resources and lookups. `Lake` extends it with the user's verbs."""

    storage: Storage
    catalog: Catalog
    clock: Clock
    tables: dict[str, TableDef]
    raw: RawStore
    quarantine: QuarantineLedger
    erasures: ErasureLedger
    erasure_reader: ErasureReads  # the ledger's read side (erasure/reader.py)
    publisher: Publisher
    gateway: GatewayReads

    # -- locations -------------------------------------------------------------------------------
    def default_location(self, table: TableDef) -> str:
        """What the catalog records: a path relative to the lake root for tables inside the lake (so a
        copied or moved lake points at its own tables, never the original's), else the absolute URI."""
        return table.location or table.name

    def resolve_location(self, location: str) -> str:
        """A table definition's location as a URI: relative locations are inside this lake's root."""
        return self.storage.location_uri(location)

    def entry_uri(self, entry: TableEntry) -> str:
        """The URI a catalog entry names, confined (gateway/locations.py): every location read from the
        catalog becomes a URI here, before anything is read or written there; CatalogIntegrityError (exit 3)
        for one outside the lake."""
        own = {n: (t.kind, self.default_location(t)) for n, t in self.tables.items()}
        return table_location(self.storage, entry, own=own)

    def table_def(self, name: str) -> TableDef:
        """The definition of a table we write (table_defs/*.yaml); NotFoundError / InputError otherwise."""
        if name not in self.tables:
            entry = self.catalog.table(name)
            if entry is None:
                raise NotFoundError(f"unknown table {name!r}", table=name)
            raise InputError(f"table {name!r} is {entry.kind} (written by others): it has no table definition",
                             table=name, kind=entry.kind)
        return self.tables[name]

    def table_uri(self, name: str) -> str:
        """The table's root URI, from the catalog."""
        entry = self.catalog.table(name)
        if entry is None:
            raise NotFoundError(f"table {name!r} is not in the catalog", table=name)
        return self.entry_uri(entry)

    def table_roots(self) -> list[str]:
        """The root URI of every table we write: where the catalog points (a table moved outside the lake
        by `set_location`) and its default location. For the full temp-file walks of vacuum and erasure."""
        roots = {self.resolve_location(self.default_location(t)) for t in self.tables.values()}
        for name in self.tables:
            entry = self.catalog.table(name)
            if entry is not None:
                roots.add(self.entry_uri(entry))
        return sorted(roots)

    def table_storage(self, name: str) -> Storage:
        """The table root as a Storage."""
        return Storage(self.table_uri(name), self.storage.storage_options)

    @property
    def options(self) -> dict[str, str]:
        """The lake's storage options (passed to every engine)."""
        return self.storage.storage_options

    def latest_version(self, name: str) -> int | None:
        """The newest Delta version of a table (committed, not necessarily published); None if no table."""
        return _delta.latest_version(self.table_uri(name), self.options)

    def table(self, name: str) -> TableContext:
        """The writer's context for one of our tables."""
        return TableContext(name=name, uri=self.table_uri(name), storage_options=self.options,
                            table=self.table_def(name), clock=self.clock, publisher=self.publisher,
                            erasures=self.erasures, lake=self, index_root=self.storage.child(f"_index/{name}"))

    # -- publication -----------------------------------------------------------------------------
    def published(self, name: str) -> Publication | None:
        """The catalog's current publication of a table (what readers get), verified, or None."""
        pub = self.publisher.current(name)
        if pub is not None:
            self.verify_publication(name, pub)
        return pub

    def verify_publication(self, name: str, pub: Publication, uri: str | None = None) -> None:
        """A publication of one of our Delta tables (at `uri`, default: the catalog's) is checked against the
        lake's commit digests before it is used, once per generation: a record rewritten to another version
        is refused (CatalogIntegrityError, exit 3), never served. Other tables' publications carry no commit
        digest."""
        tdef = self.tables.get(name)
        done: set[tuple[str, int, int, str]] = self.__dict__.setdefault("_verified_publications", set())
        key = (name, pub.generation, pub.version, pub.digest)
        if tdef is None or tdef.kind != "delta" or key in done:
            return
        if not commit_agrees(uri or self.table_uri(name), self.options, pub):
            where = pub.origin or f"the catalog's publication {pub.generation} of {name}"
            raise CatalogIntegrityError(
                f"catalog object {where} publishes {name} version {pub.version} with digest {pub.digest[:64]!r}, "
                f"which is not the digest of the table's commit at version {pub.version}", path=where,
                repair="restore it from a backup of the lake", table=name, generation=pub.generation,
                version=pub.version)
        done.add(key)

    def publish_version(self, name: str, version: int, *, digest: str, label: str | None = None) -> Publication:
        """Point the catalog at `version` (compare-and-swap; never moves a table backwards by accident)."""
        return self.publisher.publish(name, version, digest=digest, label=label)
