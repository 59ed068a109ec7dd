"""Does a piece of text (a rejected line read from its raw batch) name an erased subject?

The product never keeps plain ids of erased subjects, only their keyed hashes, so the only way to tell is
to hash every string the text could be naming and look the hashes up. A rejected line may be broken in
any way, so "every string" is taken broadly:

- the whole line (stripped), and every JSON string literal in it, decoded (`"ord\\u002d1"` is `ord-1`);
- the tail after an unterminated `"` (raw and decoded);
- every single-quoted string, and every token between delimiters (whitespace, quotes, `,:;={}[]`), with
  and without surrounding punctuation, alone and joined with up to `SPAN - 1` following tokens (an id
  written unquoted, inside a sentence, or with spaces or commas of its own), when at most `MAX_ORDER_ID`
  characters long.

A line with more candidates than `MAX_CANDIDATES` counts as naming one (once a subject is erased, a line
that odd is withheld rather than shown). Used by `quarantine --show`; ingest and erasure never need it.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterator

from ..contract.decode import MAX_ORDER_ID

_STRING = re.compile(r'"((?:[^"\\]|\\.)*)"')
MAX_CANDIDATES = 20_000


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


_SINGLE = re.compile(r"'([^']*)'")
_TOKEN = re.compile(r"""[^\s"',:;={}\[\]]+""")
_PUNCT = ".!?()<>`"
SPAN = 4


def candidates(text: str, limit: int = MAX_ORDER_ID) -> Iterator[str]:
    """Every string `text` could be naming (may repeat); see the module docstring."""
    yield text
    yield text.strip()
    for match in _STRING.finditer(text):
        yield match.group(1)
        dec = _decoded(match.group(1))
        if dec is not None:
            yield dec
    for match in _SINGLE.finditer(text):
        yield match.group(1)
    tail = _unterminated_tail(text)
    if tail is not None:
        for t in (tail, tail.rstrip(), tail.rstrip().rstrip("}]),")):
            yield t
            dec = _decoded(t)
            if dec is not None:
                yield dec
    spans = [(m.start(), m.end()) for m in _TOKEN.finditer(text)]
    for i, (start, _) in enumerate(spans):
        for j in range(i, min(i + SPAN, len(spans))):
            end = spans[j][1]
            if end - start > limit:
                break
            token = text[start:end]
            yield token
            stripped = token.strip(_PUNCT)
            if stripped != token:
                yield stripped
            dec = _decoded(token)
            if dec is not None:
                yield dec


def names_erased_subject(text: str, erased: set[str], subject_key: Callable[[str], str]) -> bool:
    """True when some string in `text` hashes (under the lake key) to a subject in `erased`."""
    if not erased or not text:
        return False
    seen: set[str] = set()
    for count, token in enumerate(candidates(text)):
        if count >= MAX_CANDIDATES:
            return True
        if not token or token in seen:
            continue
        seen.add(token)
        try:
            if subject_key(token) in erased:
                return True
        except UnicodeEncodeError:  # a lone surrogate cannot be an order id we stored
            continue
    return False
