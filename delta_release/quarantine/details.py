"""A rejected line's detail, as the ledger keeps it: it describes the problem and never quotes the line.

The decoder's details are written not to echo payload, but some still carry a value from the line (a
position, a schema version, a key that is not a field) and the contract module changes independently. So
the ledger keeps a detail only when it matches one of the known forms below, with every part taken from
the line either checked against the contract's own vocabulary (field names, JSON's fixed parser
messages) or replaced by a description; anything else becomes a generic description of its reason.
"""

from __future__ import annotations

import re
from collections.abc import Callable

from ..contract.decode import EVENT_FIELDS as _FIELDS  # the event contract's own field names

_TYPES = r"(?:a number with a fraction or exponent|a boolean|a string|an array|an object|null|[a-z_]{1,20})"
_NOT_A_FIELD = r"\(a \d{1,9}-character name that is not a field\)"
_JSON_MSG = re.compile(r"Expecting [a-z ',:]{1,60}|Unterminated string starting at|Invalid control character at"
                       r"|Invalid \\\\?escape|Invalid \\\\?uXXXX escape|Extra data"
                       r"|Illegal trailing comma before end of (?:object|array)")


def _field(match: re.Match[str], other: str) -> str:
    """The detail as it is when the name it quotes is a contract field, else `other`."""
    return match.group(0) if match.group("name") in _FIELDS else other


Rule = tuple[re.Pattern[str], Callable[[re.Match[str]], str]]


def _keep(match: re.Match[str]) -> str:
    return match.group(0)


_RULES: list[Rule] = [(re.compile(p), f) for p, f in [
    (r"(?:NaN|-?Infinity) is not valid JSON", _keep),
    (r"duplicate key '(?P<name>[a-z_]{1,40})' in one object",
     lambda m: _field(m, "duplicate key (a name that is not a field) in one object")),
    (rf"duplicate key {_NOT_A_FIELD} in one object", _keep),
    (r"number with \d{1,12} digits is out of range", _keep),
    (r"line is \d{1,15} bytes, over the \d{1,15}-byte line limit \(not decoded\)", _keep),
    (r"nesting too deep", _keep),
    (r"not valid JSON \((?P<msg>.{1,80})\)",
     lambda m: m.group(0) if _JSON_MSG.fullmatch(m.group("msg")) else "not valid JSON"),
    (r"invalid UTF-8 at byte \d{1,12}", _keep),
    (r"empty line", _keep),
    (rf"(?P<name>[a-z_]{{1,40}}) must be (?:an integer|a string|a JSON integer of cents), got {_TYPES}",
     lambda m: _field(m, "a value has the wrong type")),
    (r"(?P<name>[a-z_]{1,40}) must be between 0 and \d{1,20}",
     lambda m: _field(m, "a value is out of range")),
    (rf"expected a JSON object, got {_TYPES}", _keep),
    (r"(?P<name>[a-z_]{1,40}) is missing(?: for an upsert| \(required by schema version 3\))?",
     lambda m: _field(m, "a required field is missing")),
    (r"schema_version -?\d{1,40} is not 2 or 3", lambda m: "schema_version is not 2 or 3"),
    (r"field '(?P<name>[a-z_]{1,40})' is not allowed in schema version (?P<v>[23])",
     lambda m: _field(m, f"a field that is not in the contract is not allowed in schema version {m.group('v')}")),
    (rf"field {_NOT_A_FIELD} is not allowed in schema version [23]", _keep),
    (r"order_id must be 1 to \d{1,6} printable characters", _keep),
    (r"kind must be 'upsert' or 'delete'", _keep),
    (r"amount_cents must be >= 0", _keep),
    (r"currency must be three upper-case letters", _keep),
    (r"amount_cents is not allowed on a delete", _keep),
    (r"position -?\d{1,40} already holds a different event (?P<where>in this batch|for this order)",
     lambda m: f"this position already holds a different event {m.group('where')}"),
    (r"the subject of this event is erased", _keep),
]]

_GENERIC = {
    "malformed_json": "the line is not valid JSON",
    "not_an_object": "the line is not a JSON object",
    "unknown_schema_version": "schema_version is not 2 or 3",
    "missing_field": "a required field is missing",
    "unexpected_field": "a field is not allowed here",
    "bad_type": "a value has the wrong type",
    "amount_unit": "amount_cents must be a JSON integer of cents",
    "bad_currency": "currency must be three upper-case letters",
    "bad_value": "a value is out of range",
    "position_conflict": "this position already holds a different event",
    "erased_subject": "the subject of this event is erased",
}


def safe_detail(reason: str, detail: str | None) -> str:
    """The detail to keep for a rejected line of `reason`: a known, payload-free form, else a description."""
    text = detail or ""
    for pattern, keep in _RULES:
        match = pattern.fullmatch(text)
        if match:
            return keep(match)
    return _GENERIC.get(reason, "rejected (the detail is withheld: it may quote the line)")
