"""`Lake`: one root holding the tables, raw batches, the quarantine, the erasure ledger and the catalog.

This is the Python API a Polars analyst uses. It wires the stages of DESIGN.md's data flow together;
each stage lives in its own subpackage and never calls back up into this module.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import polars as pl

from . import _delta
from .clock import Clock, SystemClock, iso
from .erasure import ErasureLedger, load_key
from .errors import InputError, NotFoundError
from .faults import crash_point
from .gateway.catalog import Catalog, Publication, SqliteCatalog
from .quarantine import QuarantineLedger
from .raw import RawStore
from .storage import Storage
from .tables import DEFAULT_TABLES_DIR, TableDef, load_table_defs

CATALOG_ENV = "DELTA_RELEASE_CATALOG"


class Lake:
    """A lake root. Create or open it with `Lake.open(uri)`."""

    def __init__(self, storage: Storage, *, catalog: Catalog, clock: Clock, tables: dict[str, TableDef],
                 freshness: str = "refresh") -> None:
        self.storage = storage
        self.catalog = catalog
        self.clock = clock
        self.tables = tables
        self.raw = RawStore(storage)
        self.quarantine = QuarantineLedger(storage)
        self.erasures = ErasureLedger(storage, load_key(storage, create=True))
        from .gateway.reader import Gateway

        self.gateway = Gateway(self, policy=freshness)

    @classmethod
    def open(cls, uri: str | os.PathLike[str] = "lake", *, storage_options: dict[str, str] | None = None,
             clock: Clock | None = None, tables_dir: Path | None = None, catalog: Catalog | None = None,
             freshness: str = "refresh") -> Lake:
        """Open the lake at `uri`, creating its layout (and the orders table, version 0) if new."""
        storage = Storage(os.fspath(uri), storage_options)
        if storage.is_local:
            storage.local_path().mkdir(parents=True, exist_ok=True)
        if catalog is None:
            if storage.is_local:
                catalog = SqliteCatalog(storage.local_path("_catalog/catalog.sqlite"))
            elif os.environ.get(CATALOG_ENV):
                catalog = SqliteCatalog(Path(os.environ[CATALOG_ENV]))
            else:
                raise InputError(f"an s3:// lake needs a catalog: pass catalog= or set {CATALOG_ENV}",
                                 uri=storage.root)
        if freshness not in ("refresh", "error"):
            raise InputError(f"unknown freshness policy {freshness!r} (refresh or error)")
        lake = cls(storage, catalog=catalog, clock=clock or SystemClock(),
                   tables=load_table_defs(tables_dir or DEFAULT_TABLES_DIR), freshness=freshness)
        for table in lake.tables.values():
            lake.catalog.register(table.name, location=lake.default_location(table), kind=table.kind)
        orders = lake.tables["orders"]
        _delta.create_table(lake.table_uri("orders"), storage.storage_options, orders.arrow_schema(),
                            [orders.partition], name="orders")
        if lake.catalog.current("orders") is None:
            lake.publish_version("orders", 0, digest="empty")
        return lake

    # -- locations -------------------------------------------------------------------------------
    def default_location(self, table: TableDef) -> str:
        """What the catalog records: a path relative to the lake root for tables inside the lake (so a
        copied or moved lake points at its own tables, never the original's), else the absolute URI."""
        return table.location or table.name

    def resolve_location(self, location: str) -> str:
        """A catalog location as a URI: relative locations are inside this lake's root."""
        return location if "://" in location or location.startswith("/") else self.storage.uri(location)

    def table_def(self, name: str) -> TableDef:
        if name not in self.tables:
            entry = self.catalog.table(name)
            if entry is None:
                raise NotFoundError(f"unknown table {name!r}", table=name)
            raise InputError(f"table {name!r} is {entry.kind} (written by others): it has no table definition",
                             table=name, kind=entry.kind)
        return self.tables[name]

    def table_uri(self, name: str) -> str:
        entry = self.catalog.table(name)
        if entry is None:
            raise NotFoundError(f"table {name!r} is not in the catalog", table=name)
        return self.resolve_location(entry.location)

    def table_storage(self, name: str) -> Storage:
        return Storage(self.table_uri(name), self.storage.storage_options)

    @property
    def options(self) -> dict[str, str]:
        return self.storage.storage_options

    def latest_version(self, name: str) -> int | None:
        return _delta.latest_version(self.table_uri(name), self.options)

    # -- publication -----------------------------------------------------------------------------
    def published(self, name: str) -> Publication | None:
        return self.catalog.current(name)

    def publish_version(self, name: str, version: int, *, digest: str, label: str | None = None) -> Publication:
        """Point the catalog at `version` (compare-and-swap; never moves a table backwards by accident)."""
        from .errors import GenerationConflictError

        for _ in range(20):
            current = self.catalog.current(name)
            # A labelled publication may re-publish the current version, but never an older one (I8).
            if current is not None and (current.version > version or (current.version == version and label is None)):
                return current
            crash_point("publish.before_swap")
            try:
                return self.catalog.publish(name, expected_generation=None if current is None
                                            else current.generation, version=version, digest=digest,
                                            completed=iso(self.clock.now()), label=label)
            except GenerationConflictError:
                continue
        raise GenerationConflictError(name, None, None)

    def recover_publication(self, name: str) -> Publication | None:
        """Publish a commit of ours that landed but whose catalog update was interrupted."""
        latest = self.latest_version(name)
        current = self.catalog.current(name)
        if latest is None or (current is not None and current.version >= latest):
            return current
        entry = _delta.history(self.table_uri(name), self.options, 1)[0]
        if entry["evidence"] is None or entry["evidence"].get("publication") == "deferred":
            return current  # not ours, or a release run's commit that waits for its ship decision
        return self.publish_version(name, latest, digest=str(entry["evidence"].get("digest", "")))

    # -- the user's verbs ------------------------------------------------------------------------
    def ingest(self, source: str | os.PathLike[str] | bytes, **kw: Any) -> Any:
        from .ingest import ingest_batch

        data = source if isinstance(source, bytes) else _read_source(source)
        return ingest_batch(self, data, **kw)

    def replay(self, batch_id: str | None = None, *, all_batches: bool = False) -> list[Any]:
        from .ingest import replay_batches

        return replay_batches(self, batch_id, all_batches=all_batches)

    def scan(self, table: str = "orders", version: int | None = None, *,
             include_tombstones: bool = False) -> pl.LazyFrame:
        """A LazyFrame of the table at the published (or pinned) version, checked at the query boundary."""
        entry = self.catalog.table(table)
        if entry is not None and entry.kind == "registered":  # written by others: re-gated, engine chosen
            from .register import scan_registered

            return scan_registered(self, table, version)
        return self.gateway.scan(table, version, include_tombstones=include_tombstones)

    def read(self, table: str = "orders", version: int | None = None) -> pl.DataFrame:
        return self.scan(table, version).collect()

    def history(self, table: str = "orders") -> list[dict[str, Any]]:
        from .history import table_history

        return table_history(self, table)

    # -- erasure, rollback, vacuum (delta_release/erasure) ----------------------------------------
    def erase(self, order_id: str, *, table: str = "orders", **kw: Any) -> Any:
        """Erase one subject: one strict commit without its rows; blocked from then on. ErasureReport."""
        from .erasure.erase import erase_subject

        return erase_subject(self, order_id, table=table, **kw)

    def rollback(self, to: int, *, repair_forward: bool = False, table: str = "orders") -> Any:
        """Restore version `to` as a new version if allowed; else refuse, or repair forward. RollbackReport."""
        from .erasure.rollback import rollback

        return rollback(self, to, repair_forward=repair_forward, table=table)

    def vacuum(self, table: str = "orders", *, apply: bool = False, **kw: Any) -> Any:
        """Retention- and erasure-aware cleanup; a dry run unless apply=True. VacuumReport."""
        from .erasure.vacuum import vacuum_table

        return vacuum_table(self, table=table, apply=apply, **kw)

    def erasure_pending(self, **kw: Any) -> list[dict[str, Any]]:
        """Pending evidence for every erased subject: what still holds it, and until when."""
        from .erasure.pending import pending_all

        return pending_all(self, **kw)


def _read_source(path: str | os.PathLike[str]) -> Any:
    from .contract.source import read_batch_file  # streamed: hashed and decoded in bounded chunks

    return read_batch_file(path)
