"""Does a piece of text (a rejected line's raw text) name an erased subject?

A rejected line whose JSON could not be parsed has no known subject, yet its raw text may hold an id.
Every JSON string literal in it is decoded and hashed with the lake key; the line names an erased
subject when one of those hashes is in the ledger. Used by ingest and replay, which never see plain
ids of erased subjects, to keep such raw text out of the quarantine.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable

_STRING = re.compile(r'"((?:[^"\\]|\\.)*)"')
MAX_TOKENS = 10_000


def names_erased_subject(text: str, erased: set[str], subject_key: Callable[[str], str]) -> bool:
    if not erased or '"' not in text:
        return False
    for i, match in enumerate(_STRING.finditer(text)):
        if i >= MAX_TOKENS:
            return True  # a line this odd is not worth keeping verbatim once subjects are erased
        token = match.group(1)
        try:
            token = json.loads(f'"{token}"')
        except ValueError:
            pass
        try:
            if subject_key(token) in erased:
                return True
        except UnicodeEncodeError:  # a lone surrogate cannot be an order id we stored
            continue
    return False
