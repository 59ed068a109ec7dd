"""Freshness gateway: catalog generations, the reader's metadata cache, engines."""

from .catalog import Catalog, Publication, SqliteCatalog, TableEntry

__all__ = ["Catalog", "Publication", "SqliteCatalog", "TableEntry"]
