"""Erasure: a keyed erasure ledger; subjects are never stored in plain form."""

from .ledger import ErasureLedger, load_key

__all__ = ["ErasureLedger", "load_key"]
