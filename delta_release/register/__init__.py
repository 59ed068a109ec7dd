"""Registered tables: Delta tables written by others, catalogued after an inventory gate."""

from .inventory import InventoryReport, check_inventory
from .reader import UnreadableTableError, polars_limits, read_duckdb_delta, read_registered, scan_registered
from .registry import KIND, Registration, register_table

__all__ = [
    "KIND", "InventoryReport", "Registration", "UnreadableTableError", "check_inventory", "polars_limits",
    "read_duckdb_delta", "read_registered", "register_table", "scan_registered",
]
