"""The raw store: batch bytes written once under their sha256, never modified."""

from .store import RawBatch, RawStore, batch_id_of

__all__ = ["RawBatch", "RawStore", "batch_id_of"]
