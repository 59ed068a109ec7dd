"""Freshness gateway: catalog generations, the reader's metadata cache, external manifests, engines."""

from .cache import CachedTable, Requests
from .catalog import Catalog, MemoryCatalog, Publication, SqliteCatalog, TableEntry
from .engines import EngineMismatchError, FileSetReport
from .external import PublishReport, publish_manifest
from .lake_catalog import LakeCatalog, catalog_for
from .manifest import GateReport, Manifest, gate_manifest, load_manifest

__all__ = ["CachedTable", "Catalog", "EngineMismatchError", "FileSetReport", "GateReport", "LakeCatalog",
           "Manifest", "MemoryCatalog", "Publication", "PublishReport", "Requests", "SqliteCatalog", "TableEntry",
           "catalog_for", "gate_manifest", "load_manifest",
           "publish_manifest"]
