"""The quarantine ledger: every rejected record with its batch, line, reason, detail and raw text."""

from .ledger import QuarantineLedger, QuarantineRow

__all__ = ["QuarantineLedger", "QuarantineRow"]
