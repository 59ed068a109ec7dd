"""Stable reason codes for rejected records (DESIGN.md, source event contract)."""

from __future__ import annotations

from enum import StrEnum


class Reason(StrEnum):
    MALFORMED_JSON = "malformed_json"
    NOT_AN_OBJECT = "not_an_object"
    UNKNOWN_SCHEMA_VERSION = "unknown_schema_version"
    MISSING_FIELD = "missing_field"
    UNEXPECTED_FIELD = "unexpected_field"
    BAD_TYPE = "bad_type"
    AMOUNT_UNIT = "amount_unit"
    BAD_CURRENCY = "bad_currency"
    BAD_VALUE = "bad_value"
    POSITION_CONFLICT = "position_conflict"
    ERASED_SUBJECT = "erased_subject"


REASON_CODES: tuple[str, ...] = tuple(r.value for r in Reason)
