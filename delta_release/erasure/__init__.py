"""Erasure's read side: a keyed erasure ledger (subjects are never stored in plain form), snapshot permission,
lineage, pending evidence and text, offered on the context as `ErasureReads` (reader.py). The erasure
writer is maintenance/erase.py."""

from .ledger import ErasureLedger, load_key

__all__ = ["ErasureLedger", "load_key"]
