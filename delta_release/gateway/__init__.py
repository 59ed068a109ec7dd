"""Freshness gateway: catalog generations, the reader's metadata cache, engines."""

from .cache import CachedTable, Requests
from .catalog import Catalog, MemoryCatalog, Publication, SqliteCatalog, TableEntry
from .engines import EngineMismatchError, FileSetReport
from .lake_catalog import LakeCatalog, catalog_for

__all__ = ["CachedTable", "Catalog", "EngineMismatchError", "FileSetReport", "LakeCatalog", "MemoryCatalog",
           "Publication", "Requests", "SqliteCatalog", "TableEntry", "catalog_for"]
