"""The source event contract: decode v2/v3 JSON Lines, normalise, reject with a stable reason code."""

from .decode import DecodedBatch, Reject, decode_batch
from .reasons import REASON_CODES, Reason

__all__ = ["REASON_CODES", "DecodedBatch", "Reason", "Reject", "decode_batch"]
