"""Freshness gateway: catalog generations, the reader's metadata cache, engines."""

from .cache import CachedTable, Requests
from .catalog import Catalog, MemoryCatalog, Publication, SqliteCatalog, TableEntry
from .engines import EngineMismatchError, FileSetReport

__all__ = ["CachedTable", "Catalog", "EngineMismatchError", "FileSetReport", "MemoryCatalog", "Publication",
           "Requests", "SqliteCatalog", "TableEntry"]
