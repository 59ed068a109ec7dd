"""`Lake`: the facade. One root holding the tables, raw batches, the quarantine, the erasure ledger and
the catalog; the Python API a Polars analyst uses.

`Lake` is a `LakeContext` (delta_release/context.py) with the user's verbs on top. The verbs call down
into the rooms of the data flow; nothing below imports this module (tests/house/test_architecture.py).
"""

from __future__ import annotations

import os
from contextlib import suppress
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import polars as pl

from . import _delta, s3config
from ._malloc import use_system_arrow_pool
from .audit import audit_days, parse_days
from .clock import Clock, SystemClock
from .commit.writer import recover_publication
from .context import CatalogPublisher, LakeContext
from .contract.parts import max_part_bytes
from .distributed import check_executor, folder_on, ingest_file_on
from .distributed.catalog import WorkerCatalog
from .erasure import ErasureLedger, load_key
from .erasure.reader import ErasureReader
from .erasure.records import PendingItem
from .errors import ConfigError, InputError, rust_panic
from .external import GateReport, PublishReport, gate_manifest, load_manifest, publish_manifest
from .external.publish import check_publish_target
from .gateway.catalog import Catalog, Publication, SqliteCatalog, TableEntry
from .gateway.lake_catalog import SQLITE_PATH, LakeCatalog, catalog_for, check_own_catalog
from .gateway.locations import inside
from .gateway.reader import Gateway
from .history import HistoryEntry, table_history
from .ingest import IngestReport, ingest_batch
from .lakeroot import holds_lake, open_root
from .maintenance.catalog import CatalogMigration, migrate_sqlite_catalog, repair_own_entries
from .maintenance.erase import ErasureReport, check_request, erase_subject
from .maintenance.rollback import RollbackReport, rollback
from .maintenance.upkeep import Upkeep, before_work
from .maintenance.vacuum import VacuumReport, vacuum_table
from .parts import ingest_file, replay_batches
from .quarantine import QuarantineLedger
from .quarantine.view import QuarantineListing, quarantine_records
from .raw import RawStore
from .register import Registration, read_registered, register_table, scan_registered
from .register.registry import check_source
from .retention import (
    BACKUP_EXPIRY_DAYS,
    ORPHAN_GRACE_HOURS,
    RAW_RETENTION_DAYS,
    REPLAY_HORIZON_HOURS,
    RETAIN_VERSIONS,
)
from .status import LakeStatus, lake_status
from .storage import Storage
from .tables import DEFAULT_TABLE, DEFAULT_TABLES_DIR, TableDef, load_table_defs

CATALOG_ENV = "DELTA_RELEASE_CATALOG"


@dataclass(frozen=True, slots=True, kw_only=True)
class _Reopen:
    """The driver's lake, opened again in a worker process (distributed/: picklable, so Ray ships it to each
    task), with the driver's table entries as its catalog (workers resolve locations, never publish)."""

    root: str
    storage_options: dict[str, str]
    tables: dict[str, TableDef]
    clock: Clock
    entries: tuple[TableEntry, ...]

    def __call__(self) -> Lake:
        use_system_arrow_pool()
        return Lake(Storage(self.root, self.storage_options or None), catalog=WorkerCatalog(self.entries),
                    clock=self.clock, tables=self.tables)


class Lake(LakeContext):
    """A lake root: tables, raw batches, the quarantine, the erasure ledger and the catalog.

    Open it with `Lake.open(uri)`; create it with `Lake.create(uri)` (readers never create a lake).
    Every verb returns a typed report (`.to_json()` gives the CLI's JSON);
    errors are the exceptions exported by `delta_release` (InputError, NotFoundError, SafetyError and
    its subclasses StaleParentError, GateError, ErasureExposureError, FreshnessError, ...).
    """

    gateway: Gateway  # the full gateway (the context offers its read side: context.GatewayReads)

    def __init__(self, storage: Storage, *, catalog: Catalog, clock: Clock, tables: dict[str, TableDef],
                 freshness: str = "refresh") -> None:
        self.storage = storage
        self.catalog = catalog
        self.clock = clock
        self.tables = tables
        self.created = False  # True when Lake.open(create=True) made this lake
        self.raw = RawStore(storage)
        self.quarantine = QuarantineLedger(storage)
        self.erasures = ErasureLedger(storage, load_key(storage, create=True))
        self.erasure_reader = ErasureReader(self)
        self.publisher = CatalogPublisher(catalog, self.clock)
        self.gateway = Gateway(self, policy=freshness)

    @classmethod
    def open(cls, uri: str | os.PathLike[str] = "lake", *, storage_options: dict[str, str] | None = None,
             clock: Clock | None = None, tables_dir: Path | None = None, catalog: Catalog | None = None,
             freshness: str = "refresh", create: bool = False) -> Lake:
        """Open the lake at `uri` (a directory or `s3://bucket/prefix`); `create=True` creates its layout
        (and the default table, version 0) if new, else a URI that holds no lake raises LakeNotFoundError
        and nothing is written (lakeroot.py). `freshness`: "refresh" (stale readers refresh) or "error"
        (stale readers get FreshnessError). An s3:// lake needs `catalog=` or DELTA_RELEASE_CATALOG."""
        storage = Storage(os.fspath(uri), storage_options)
        use_system_arrow_pool()  # before the first table read: Arrow's mimalloc keeps freed pages (_malloc.py)
        created = open_root(storage, create=create)
        try:
            return cls._open(storage, created, clock=clock, tables_dir=tables_dir, catalog=catalog,
                             freshness=freshness)
        except OSError as exc:
            if not created:
                raise
            if not storage.is_local:  # e.g. a bucket that does not exist: the setting to check
                raise s3config.storage_error(f"cannot create a lake at {storage.root}", exc,
                                             storage.storage_options, uri=storage.root) from None
            raise InputError(f"cannot create a lake at {storage.root}: {exc.strerror or exc}",
                             uri=storage.root) from None  # e.g. /proc: a directory nothing can be written in

    @classmethod
    def _open(cls, storage: Storage, created: bool, *, clock: Clock | None, tables_dir: Path | None,
              catalog: Catalog | None, freshness: str) -> Lake:
        if catalog is None:  # gateway/lake_catalog.py: lake-resident for s3://, env selects
            catalog = catalog_for(storage, new_lake=created)
        if freshness not in ("refresh", "error"):
            raise InputError(f"unknown freshness policy {freshness!r} (refresh or error)")
        lake = cls(storage, catalog=catalog, clock=clock or SystemClock(),
                   tables=load_table_defs(tables_dir or DEFAULT_TABLES_DIR), freshness=freshness)
        if not created:
            try:
                _check_own_catalog(lake)  # before anything is registered or published in it
            except InputError:
                if isinstance(lake.catalog, SqliteCatalog) and lake.catalog.created:  # (made just now, empty)
                    lake.catalog.path.unlink(missing_ok=True)
                    with suppress(OSError):
                        lake.catalog.path.parent.rmdir()  # only when empty
                raise
        for table in lake.tables.values():
            if inside(storage, lake.default_location(table)) is None:  # the rule every catalog location obeys
                raise ConfigError(f"table {table.name}: location {table.location!r} is not a folder of its own "
                                  f"inside the lake {storage.root}", file=f"table_defs/{table.name}.yaml",
                                  key="location")
            lake.catalog.register(table.name, location=lake.default_location(table), kind=table.kind)
        default = lake.tables[DEFAULT_TABLE]
        _delta.create_table(lake.table_uri(DEFAULT_TABLE), storage.storage_options, default.arrow_schema(),
                            [default.partition], name=DEFAULT_TABLE)
        if lake.catalog.current(DEFAULT_TABLE) is None:
            lake.publish_version(DEFAULT_TABLE, 0, digest="empty")
        lake.created = created
        return lake

    @classmethod
    def create(cls, uri: str | os.PathLike[str] = "lake", *, storage_options: dict[str, str] | None = None,
               clock: Clock | None = None, tables_dir: Path | None = None, catalog: Catalog | None = None,
               freshness: str = "refresh") -> Lake:
        """Open the lake at `uri`, creating it when the URI holds none (`Lake.open(uri, create=True)`); the
        keyword arguments are `Lake.open`'s."""
        return cls.open(uri, storage_options=storage_options, clock=clock, tables_dir=tables_dir, catalog=catalog,
                        freshness=freshness, create=True)

    def recover_publication(self, name: str) -> Publication | None:
        """Publish a commit of ours that landed but whose catalog update was interrupted; returns the
        table's publication afterwards."""
        return recover_publication(self.table(name))

    # -- the user's verbs ------------------------------------------------------------------------
    def ingest(self, source: str | os.PathLike[str] | bytes, *, table: str = DEFAULT_TABLE,
               publish: bool = True, executor: str = "local") -> IngestReport:
        """Ingest one JSONL batch (a path or its bytes): decode, keep raw, quarantine rejects, apply by
        position, stage, gate, commit strictly, publish. Re-ingesting a batch is a no-op (`duplicate`).

        publish=False commits without publishing (a release run publishes on ship). Raises InputError
        (unreadable file), ReconciliationError, StaleParentError (after bounded retries). A file larger
        than the part limit (256 MiB, DELTA_RELEASE_MAX_PART_BYTES) is received in parts and published
        once, after the last (delta_release/parts.py); the report's `parts` lists them.

        executor="ray" runs such a file (on a bucketed table) on a Ray cluster: the one `RAY_ADDRESS` names,
        else a local one with this machine's cores. Workers decode and stage, this process gates and makes
        the one commit (distributed/); the table and counts are those of "local". Needs the extra
        `delta-release[distributed]` (else InputError naming it); a lake on local disk with a cluster
        that has nodes on other machines is refused (InputError)."""
        check_executor(executor)
        if isinstance(source, bytes):
            return ingest_batch(self, source, table=table, publish=publish)
        if executor == "local":
            return ingest_file(self, source, table=table, publish=publish)  # in parts past the part limit
        return ingest_file_on(executor, self, source, table=table, publish=publish, opener=self._reopener())

    @staticmethod
    def check_executor(executor: str) -> str:
        """`executor` ("local" or "ray") if it can run here: InputError (exit 2) naming what to install
        for "ray" without Ray, or an unknown name."""
        return check_executor(executor)

    def _reopener(self) -> _Reopen:
        return _Reopen(root=self.storage.root, storage_options=dict(self.storage.storage_options or {}),
                       tables=dict(self.tables), clock=self.clock,
                       entries=tuple(e for name in self.tables if (e := self.catalog.table(name)) is not None))

    @staticmethod
    def part_limit() -> int:
        """The size past which `ingest` receives a file in parts: $DELTA_RELEASE_MAX_PART_BYTES, else 256 MiB;
        InputError naming the variable for a value that is not a size."""
        return max_part_bytes()

    def replay(self, batch_id: str | None = None, *, all_batches: bool = False,
               table: str = DEFAULT_TABLE, executor: str = "local") -> list[IngestReport]:
        """Re-apply retained raw batches (one by id, or all: folded into one commit, each batch applied as if
        committed after the ones before); idempotent, and erased subjects stay out.

        executor="ray" folds all the batches (on a bucketed table) on a Ray cluster as `ingest` does with a
        file in parts: workers read the raw batches from the lake's raw store, decode, fold and stage; this
        process gates and makes the one commit. Same table, commit and reports as "local"."""
        folder = None if executor == "local" else folder_on(executor, self._reopener())  # (checks the name)
        return replay_batches(self, batch_id, all_batches=all_batches, table=table, folder=folder)

    def scan(self, table: str = DEFAULT_TABLE, version: int | None = None, *,
             include_tombstones: bool = False) -> pl.LazyFrame:
        """A LazyFrame of the table's current rows at the published (or pinned) version, checked at the
        query boundary: FreshnessError (policy "error"), ErasureExposureError (a version that holds an
        erased subject), NotFoundError (unknown table or version)."""
        from .api_checks import check_table, check_version

        table, version = check_table(table), check_version(version)
        entry = self.catalog.table(table)
        if entry is not None and entry.kind == "registered":  # written by others: re-gated, engine chosen
            return scan_registered(self, table, version)
        return self.gateway.scan(table, version, include_tombstones=include_tombstones)

    def read(self, table: str = DEFAULT_TABLE, *, version: int | None = None) -> pl.DataFrame:
        """`scan(table, version=version).collect()`; `version` is keyword-only (`read(3)` is not a version).
        VacuumedVersionError when the version's files are gone. A registered table whose engine fails is
        refused (exit 3) naming the table, or the damaged file (register/reader.py `collect_checked`)."""
        from .api_checks import check_table, check_version

        table, version = check_table(table), check_version(version)
        entry = self.catalog.table(table)
        if entry is not None and entry.kind == "registered":
            return read_registered(self, table, version, engine="polars")[0]
        try:
            return self.gateway.scan(table, version).collect()
        except OSError as exc:  # files gone from storage: VacuumedVersionError (gateway/diagnosis.py)
            err = self.gateway.diagnose(table, version, exc)
            if err is exc:
                raise
            raise err from exc

    def read_with(self, engine: str, table: str = DEFAULT_TABLE, *,
                  version: int | None = None) -> tuple[pl.DataFrame, str]:
        """`read` by the engine asked for ("polars" or "duckdb"); returns the rows and the engine that read
        them (a registered table is re-gated and read by the engine its protocol and data allow). Files
        gone or damaged are a refusal naming the version (VacuumedVersionError, GateError)."""
        entry = self.catalog.table(table)
        if entry is not None and entry.kind == "registered":  # written by others: re-gated, engine chosen
            return read_registered(self, table, version, engine=engine)
        try:
            return (self.gateway.read_duckdb(table, version) if engine == "duckdb"
                    else self.scan(table, version).collect()), engine
        except BaseException as exc:  # files gone from storage or damaged: a refusal naming the version
            if not isinstance(exc, Exception) and not rust_panic(exc):
                raise
            err = self.gateway.diagnose(table, version, exc)
            if err is exc:
                raise
            raise err from exc

    def history(self, table: str = DEFAULT_TABLE) -> list[HistoryEntry]:
        """Every version, oldest first: what it did, which generations published it, whether it may be read."""
        return table_history(self, table)

    # -- erasure and maintenance -----------------------------------------------------------------
    def erase(self, order_id: str, *, table: str = DEFAULT_TABLE, raw_retention_days: float = RAW_RETENTION_DAYS,
              backup_expiry_days: float | None = BACKUP_EXPIRY_DAYS, force: bool = False) -> ErasureReport:
        """Erase one subject: one strict commit without its rows; blocked from then on; earlier versions
        that hold it become unreadable. The report's `pending` says what still holds it, until when.
        An id this lake never saw is refused (UnknownSubjectError, exit 3) unless `force=True`."""
        subject_id, raw_retention_days, backup_expiry_days = check_request(
            self, order_id, table=table, raw_retention_days=raw_retention_days, backup_expiry_days=backup_expiry_days)
        if not force:
            from .api_checks import require_seen

            require_seen(self, subject_id, table)
        upkeep = before_work(self.table(table))  # the writers' upkeep: completes a killed erasure (this one's too)
        report = erase_subject(self, subject_id, table=table, raw_retention_days=raw_retention_days,
                               backup_expiry_days=backup_expiry_days)
        report.temp_files_removed = upkeep.temp_files_removed + report.temp_files_removed
        report.erasures_completed = upkeep.erasures_completed
        return report

    def rollback(self, to: int, *, repair_forward: bool = False, table: str = DEFAULT_TABLE,
                 dry_run: bool = False) -> RollbackReport:
        """Restore version `to` as a new version if it holds no erased subject; else ErasureExposureError,
        or with repair_forward=True its content minus every erased subject. dry_run=True: the plan only
        (files added and removed, erased rows left out), nothing written."""
        return rollback(self, to, repair_forward=repair_forward, table=table, dry_run=dry_run)

    def vacuum(self, table: str = DEFAULT_TABLE, *, apply: bool = False, retain_versions: int = RETAIN_VERSIONS,
               replay_horizon_hours: float = REPLAY_HORIZON_HOURS,
               orphan_grace_hours: float = ORPHAN_GRACE_HOURS) -> VacuumReport:
        """Retention- and erasure-aware cleanup of data files no needed snapshot references; a dry run
        unless apply=True. Writes no Delta commit."""
        return vacuum_table(self, table=table, apply=apply, retain_versions=retain_versions,
                            replay_horizon_hours=replay_horizon_hours, orphan_grace_hours=orphan_grace_hours)

    def erasure_pending(self, *, raw_retention_days: float = RAW_RETENTION_DAYS,
                        backup_expiry_days: float | None = BACKUP_EXPIRY_DAYS) -> list[PendingItem]:
        """Pending evidence for every erased subject: what still holds it, and until when."""
        return self.erasure_reader.pending(raw_retention_days=raw_retention_days,
                                           backup_expiry_days=backup_expiry_days)

    def resume_erasures(self, table: str = DEFAULT_TABLE) -> Upkeep:
        """Complete erasures a killed writer left pending (`erase --resume`): the writers' upkeep alone
        (temp files swept, a legacy quarantine migrated, a landed-but-unpublished commit published),
        which every writer also runs before its own work."""
        return before_work(self.table(table))

    # -- tables and files written by others ------------------------------------------------------
    @staticmethod
    def exists(uri: str | os.PathLike[str], *, storage_options: dict[str, str] | None = None) -> bool:
        """Whether `uri` holds a lake (what `open` needs and `create` makes)."""
        return holds_lake(Storage(str(uri), storage_options))

    @staticmethod
    def check_registrable(name: str, uri: str, *, storage_options: dict[str, str] | None = None) -> None:
        """What `register` checks of the table at `uri` before it needs a lake (name, table, inventory
        gate): run it before creating a lake for the table, so a refused table creates none."""
        check_source(name, uri, storage_options or {})

    def register(self, name: str, uri: str) -> Registration:
        """Catalog the Delta table at `uri` (written by anyone) as `name`, once every file its latest
        version references is present with its size (GateError, exit 3, otherwise); reads of it are
        re-gated and go through the engine its protocol and data allow."""
        return register_table(self, name, uri)

    @staticmethod
    def check_manifest(uri: str | os.PathLike[str], manifest: str | os.PathLike[str], *,
                       storage_options: dict[str, str] | None = None, create: bool = False) -> None:
        """Before `publish` opens (or with `create`, creates) the lake at `uri`: the manifest parses
        (InputError otherwise), and a lake is created only where the manifest's objects are."""
        check_publish_target(str(uri), manifest, storage_options, create=create)

    def gate(self, manifest: str | os.PathLike[str]) -> GateReport:
        """Check a producer manifest against its partition's object inventory; registers nothing."""
        return gate_manifest(self, load_manifest(manifest, self.tables))

    def publish(self, manifest: str | os.PathLike[str]) -> PublishReport:
        """Gate a producer manifest, then one strict Delta commit of its files, the catalog generation and
        the cache refresh; a failed gate commits and publishes nothing (the report says why)."""
        return publish_manifest(self, load_manifest(manifest, self.tables))

    # -- inspection ------------------------------------------------------------------------------
    def audit(self, days: str | tuple[int, int], *, table: str = DEFAULT_TABLE,
              version: int | None = None) -> dict[str, object]:
        """Candidate files and row groups for days A..B ("A:B", "A" or (A, B)) at the published (or
        pinned) version, and the bytes scanned against a full scan."""
        first, last = parse_days(days) if isinstance(days, str) else days
        return audit_days(self, table, first, last, version)

    # -- the catalog, on a lake not opened (opening refuses what repair fixes) --------------------
    @staticmethod
    def migrate_catalog(uri: str | os.PathLike[str], *, source: str | os.PathLike[str] | None = None,
                        storage_options: dict[str, str] | None = None) -> CatalogMigration:
        """Move every table entry and publication of a SQLite catalog (`source`, else $DELTA_RELEASE_CATALOG
        naming a file, else the lake's `_catalog/catalog.sqlite`) into the lake-resident catalog;
        create-only and idempotent, the lake switching to it only once every publication is verified."""
        return migrate_sqlite_catalog(Storage(str(uri), storage_options), None if source is None else Path(source))

    @staticmethod
    def repair_catalog(uri: str | os.PathLike[str], *, storage_options: dict[str, str] | None = None) -> dict[str, Any]:
        """Point each of the lake's own tables back at its folder in the lake (an entry outside the lake,
        of another kind or unreadable is refused by every command); publications are never rewritten."""
        return repair_own_entries(Storage(str(uri), storage_options))

    def status(self) -> LakeStatus:
        """The lake at a glance: per table the published version and generation, the latest commit, what
        is committed but not published and the vacuum debt; pending erasures and when they clear; the
        last release run."""
        return LakeStatus(lake_status(self))

    def quarantined(self, *, batch_id: str | None = None, reason: str | None = None,
                   show: bool = False) -> QuarantineListing:
        """The rejected lines (batch, line, byte span, reason, detail, subject hash), optionally of one
        batch (an id prefix) or reason; `show` reads each line's text from its raw batch, withholding
        lines that name an erased subject."""
        return QuarantineListing(quarantine_records(self, batch_id=batch_id, reason=reason, show=show), show)


def _check_own_catalog(lake: Lake) -> None:
    """Refuse a catalog that is not the existing lake's own (gateway/lake_catalog.py `check_own_catalog`):
    opening would register the tables in it and publish version 0, and every reader would then see an
    empty table (InputError, exit 2; nothing is written)."""
    hint = ("move the lake's SQLite catalog into the lake with `delta-release catalog migrate`"
            if isinstance(lake.catalog, LakeCatalog) and lake.storage.is_local
            and lake.storage.local_path(SQLITE_PATH).is_file()
            else f"unset {CATALOG_ENV} or point it at the catalog this lake publishes to")
    check_own_catalog(lake.catalog, lake.storage, hint=hint, compare_digest=bool(os.environ.get(CATALOG_ENV)))
