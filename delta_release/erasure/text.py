"""Does a piece of text (a rejected line read from its raw batch) name an erased subject?

The product never keeps plain ids of erased subjects, only their keyed hashes, so the only way to tell is
to hash every string the text could be naming and look the hashes up. A rejected line may be broken in
any way, so "every string" is taken broadly:

- the whole line (stripped), and every JSON string literal in it, decoded (`"ord\\u002d1"` is `ord-1`);
- the tail after an unterminated `"` (raw and decoded);
- every substring of at most `MAX_ORDER_ID` characters that starts and ends at a token boundary (the
  start or end of the line, or next to a character that is not a letter or digit): an id written unquoted,
  in single quotes, inside a sentence, or with spaces or punctuation of its own.

A line with more candidates than `MAX_CANDIDATES` counts as naming one (once a subject is erased, a line
that odd is withheld rather than shown). Used by `quarantine --show`; ingest and erasure never need it.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterator

from ..contract.decode import MAX_ORDER_ID

_STRING = re.compile(r'"((?:[^"\\]|\\.)*)"')
MAX_CANDIDATES = 200_000


def _decoded(token: str) -> str | None:
    if "\\" not in token:
        return None
    try:
        out = json.loads(f'"{token}"')
    except ValueError:
        return None
    return out if isinstance(out, str) else None


def _unterminated_tail(text: str) -> str | None:
    """What follows a `"` that no closing quote matches (an unterminated string), if any."""
    end = 0
    for match in _STRING.finditer(text):
        end = match.end()
    rest = text[end:]
    cut = rest.find('"')
    return rest[cut + 1:] if cut >= 0 else None


def _boundaries(text: str) -> tuple[list[int], list[int]]:
    starts = [0]
    ends = []
    for i, ch in enumerate(text):
        if not ch.isalnum():
            starts.append(i + 1)
            ends.append(i)
    ends.append(len(text))
    return starts, sorted(set(ends))


def candidates(text: str, limit: int = MAX_ORDER_ID) -> Iterator[str]:
    """Every string `text` could be naming (may repeat); see the module docstring."""
    yield text
    yield text.strip()
    for match in _STRING.finditer(text):
        yield match.group(1)
        dec = _decoded(match.group(1))
        if dec is not None:
            yield dec
    tail = _unterminated_tail(text)
    if tail is not None:
        yield tail
        yield tail.rstrip()
        dec = _decoded(tail)
        if dec is not None:
            yield dec
    starts, ends = _boundaries(text)
    lo = 0
    for s in starts:
        while lo < len(ends) and ends[lo] <= s:
            lo += 1
        for j in range(lo, len(ends)):
            e = ends[j]
            if e - s > limit:
                break
            token = text[s:e]
            yield token
            dec = _decoded(token)
            if dec is not None:
                yield dec


def names_erased_subject(text: str, erased: set[str], subject_key: Callable[[str], str]) -> bool:
    """True when some string in `text` hashes (under the lake key) to a subject in `erased`."""
    if not erased or not text:
        return False
    seen: set[str] = set()
    for token in candidates(text):
        if not token or token in seen:
            continue
        seen.add(token)
        if len(seen) > MAX_CANDIDATES:
            return True
        try:
            if subject_key(token) in erased:
                return True
        except UnicodeEncodeError:  # a lone surrogate cannot be an order id we stored
            continue
    return False
