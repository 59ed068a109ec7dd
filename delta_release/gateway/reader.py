"""The query boundary: every scan checks the reader's metadata cache against the catalog first.

`Gateway.check` compares the cached generation and location with the catalog's. A stale cache is
refreshed (policy "refresh") or refused with `FreshnessError` (policy "error"): a reader never gets an
older generation, or an empty answer from a stale file list, without an error. A pinned version newer
than the published one is refused (it may be a commit whose publication has not completed), so is a
version that holds an erased subject (the context's erasure read side) or whose files a vacuum removed
(erasure/vacuumlog.py); the current view of orders hides tombstones. `read_duckdb` reads the gateway's
file list with the second engine and fails when the engines' file sets differ. A read of a resolved
version that failed is diagnosed here (`diagnose`, gateway/diagnosis.py).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import polars as pl

from .. import _delta
from ..clock import iso
from ..erasure.vacuumlog import check_readable
from ..errors import FreshnessError, InputError, NotFoundError
from ..views import current_rows
from .cache import CachedTable, Requests
from .diagnosis import missing_files_error
from .engines import FileSetReport, compare_file_sets, duckdb_glob, duckdb_read, file_uri

if TYPE_CHECKING:
    from ..context import LakeContext

POLICIES = ("refresh", "error")
PINNED_SNAPSHOTS = 16  # opened snapshots kept per gateway (current + recent pins)


class Gateway:
    def __init__(self, lake: LakeContext, *, policy: str = "refresh") -> None:
        if policy not in POLICIES:
            raise InputError(f"unknown freshness policy {policy!r} (refresh or error)", policy=policy)
        self.lake = lake
        self.policy = policy
        self.cache: dict[str, CachedTable] = {}
        self.requests = Requests()
        self._pinned: dict[tuple[str, int], tuple[Any, tuple[_delta.FileEntry, ...]]] = {}

    # -- freshness -------------------------------------------------------------------------------
    def check(self, table: str) -> CachedTable:
        """The cache entry a query may use now: current with the catalog, refreshed, or FreshnessError."""
        entry = self.lake.catalog.table(table)
        pub = self.lake.catalog.current(table)
        self.requests.catalog_reads += 2
        if entry is None:
            raise NotFoundError(f"table {table!r} is not in the catalog", table=table)
        if pub is None:
            raise NotFoundError(f"table {table} has no published version", table=table)
        location = self.lake.entry_uri(entry)
        cached = self.cache.get(table)
        if cached is not None and cached.generation == pub.generation and cached.location == location:
            return cached
        self.lake.verify_publication(table, pub, location)
        if cached is not None and self.policy == "error":
            what = (f"location changed from {cached.location} to {location}"
                    if cached.location != location else
                    f"cached generation {cached.generation}, published {pub.generation}")
            raise FreshnessError(f"metadata cache of {table} is stale: {what}", table=table,
                                 cached_generation=cached.generation, published_generation=pub.generation,
                                 cached_version=cached.version, published_version=pub.version,
                                 cached_location=cached.location, location=location)
        return self._load(table, location, pub.generation, pub.version)

    def refresh(self, table: str) -> CachedTable:
        """Refresh the cache entry of `table` to the catalog's current generation, whatever the policy."""
        self.cache.pop(table, None)
        return self.check(table)

    def clear(self) -> None:
        """Forget every cache entry and resolved file list (the next query refreshes)."""
        self.cache.clear()
        self._pinned.clear()

    def _load(self, table: str, location: str, generation: int, version: int) -> CachedTable:
        started = iso(self.lake.clock.now())
        files = self._resolve_files(location, version)
        cached = CachedTable(table=table, generation=generation, location=location, version=version,
                             files=files, refresh_started=started, refresh_completed=iso(self.lake.clock.now()))
        self.cache[table] = cached  # only a completed refresh is recorded
        return cached

    def _snapshot(self, location: str, version: int) -> tuple[Any, tuple[_delta.FileEntry, ...]]:
        """The pinned Delta snapshot and its file list; a version at a location never changes, so kept."""
        key = (location, version)
        if key not in self._pinned:
            self.requests.log_resolutions += 1
            handle = _delta.open_snapshot(location, self.lake.options, version)
            self._pinned[key] = (handle, tuple(_delta.snapshot_entries(handle)))
            while len(self._pinned) > PINNED_SNAPSHOTS:
                self._pinned.pop(next(iter(self._pinned)))
        return self._pinned[key]

    def _resolve_files(self, location: str, version: int) -> tuple[_delta.FileEntry, ...]:
        return self._snapshot(location, version)[1]

    # -- resolution ------------------------------------------------------------------------------
    def resolve(self, table: str, version: int | None) -> tuple[str, int]:
        """(table location, version) a reader may use, checked against the catalog now."""
        cached = self.check(table)
        if version is None:
            version = cached.version
        elif version < 0:  # not a version at all, rather than one not published yet
            raise InputError(f"version {version} of {table} is invalid: versions count up from 0 (published:"
                             f" {cached.version})", table=table, version=version, argument="version")
        elif version > cached.version:
            raise NotFoundError(f"version {version} of {table} is not published (published: {cached.version})",
                                table=table, version=version, published=cached.version)
        self.lake.erasure_reader.check_snapshot(table, version)
        if version != cached.version:  # vacuum never removes the published version's files
            check_readable(self.lake, table, version)
        return cached.location, version

    def files(self, table: str, version: int | None = None) -> list[_delta.FileEntry]:
        """The file list the gateway resolves for `version` (default: published) after the freshness check."""
        uri, version = self.resolve(table, version)
        return list(self._resolve_files(uri, version))

    def diagnose(self, table: str, version: int | None, exc: BaseException) -> BaseException:
        """For a read of `version` (None: published) that failed with `exc`: VacuumedVersionError (its
        files are gone), GateError (one is damaged), else `exc` itself (gateway/diagnosis.py)."""
        return missing_files_error(self.lake, table, version, exc)

    # -- engines ---------------------------------------------------------------------------------
    def scan(self, table: str, version: int | None, *, include_tombstones: bool = False) -> pl.LazyFrame:
        uri, version = self.resolve(table, version)
        handle, _ = self._snapshot(uri, version)  # the checked snapshot: no second log replay
        return self._view(table, _delta.scan_snapshot(handle), include_tombstones)

    def _view(self, table: str, lf: pl.LazyFrame, include_tombstones: bool) -> pl.LazyFrame:
        tdef = self.lake.tables.get(table)
        if tdef is not None and not include_tombstones:
            return current_rows(lf, tdef)
        return lf

    def engine_files(self, table: str, version: int | None = None) -> FileSetReport:
        """The gateway's file list against what each engine reads for the same version."""
        uri, version = self.resolve(table, version)
        entries = self._resolve_files(uri, version)
        self.requests.log_resolutions += 1
        polars_files = _delta.file_uris(uri, self.lake.options, version)  # what pl.scan_delta reads
        _, duck_files = duckdb_read(uri, entries, self._schema(table), self._partition(table), self.lake.options)
        return compare_file_sets({file_uri(uri, e.path) for e in entries},
                                 {"polars": set(polars_files), "duckdb": duck_files})

    def read_duckdb(self, table: str, version: int | None = None, *,
                    include_tombstones: bool = False) -> pl.DataFrame:
        """Rows of `version` read by DuckDB from exactly the gateway's file list; same columns as polars."""
        uri, version = self.resolve(table, version)
        entries = self._resolve_files(uri, version)
        frame, duck_files = duckdb_read(uri, entries, self._schema(table), self._partition(table), self.lake.options)
        self.requests.log_resolutions += 1
        report = compare_file_sets({file_uri(uri, e.path) for e in entries},
                                   {"polars": set(_delta.file_uris(uri, self.lake.options, version)),
                                    "duckdb": duck_files})
        report.raise_for_mismatch(table, version)
        return self._view(table, frame.lazy(), include_tombstones).collect()

    def glob_partition(self, table: str, value: int | str | None, version: int | None = None) -> FileSetReport:
        """A DuckDB glob over one partition directory against the files registered for it."""
        uri, version = self.resolve(table, version)
        column = self._partition(table)
        registered = [e for e in self._resolve_files(uri, version)
                      if _same(e.partition_values.get(column), value)]
        dirs = sorted({e.path.rsplit("/", 1)[0] for e in registered}) or [f"{column}={value}"]
        self.requests.object_lists += len(dirs)
        seen: set[str] = set()
        for d in dirs:
            seen |= duckdb_glob(file_uri(uri, d) + "/*.parquet", self.lake.options)
        return compare_file_sets({file_uri(uri, e.path) for e in registered}, {"duckdb_glob": seen})

    def _schema(self, table: str) -> dict[str, str]:
        return dict(self.lake.table_def(table).columns)

    def _partition(self, table: str) -> str:
        return self.lake.table_def(table).partition


def _same(a: object, b: object) -> bool:
    if a is None or b is None:
        return a is None and b is None
    try:
        return int(str(a)) == int(str(b))
    except ValueError:
        return str(a) == str(b)
