"""Does a piece of text (a rejected line read from its raw batch) name an erased subject, anywhere in it?

The product never keeps plain ids of erased subjects, only their keyed hashes, so the only way to tell is
to hash every string the text could be naming and look the hashes up. An id may be glued to any other
text (`https://crm.example/orders/<id>/view`, `REF#<id>#END`, `customer<<id>>`, `C:\\orders\\<id>.pdf`,
`xx<id>yy`), so the strings hashed are **every substring** of the text whose length is the length of an
erased id: the ledger keeps each id's length sealed under the lake key (`ErasureLedger.id_lengths`); for
entries written before it did, every length an order id may have (1 to `MAX_ORDER_ID` characters).

Substrings of these forms of the line are hashed (each deduplicated):
- the line's text as read (UTF-8; an invalid byte cannot be part of an id, so windows never span one);
- the line with every JSON escape decoded (`ord\\u002d1` is `ord-1`, inside quotes or not);
- the forms the caller prints (`quarantine --show` passes its terminal-escaped and JSON-escaped forms):
  a printed form must not spell an id either.

Cost: (length of the forms) x (number of distinct erased-id lengths) keyed hashes per line, hashed in
bulk in Rust (`ErasureLedger.subject_digests`), about 1 us each: a 200-character line against ids of one
length is ~400 hashes; with unrecorded lengths, ~128 times that. A line needing more than
`MAX_WINDOWS` hashes counts as naming a subject (once a subject is erased, a line that odd is withheld,
never shown cut or partly masked). Used by `quarantine --show`; ingest and erasure never need it.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable, Iterator

import polars as pl

from ..contract.decode import MAX_ORDER_ID

MAX_WINDOWS = 1 << 22  # substrings hashed for one line at most (~4 s); beyond, the line is withheld
_CHUNK = 1 << 18  # substrings hashed per call
_ESCAPES = re.compile(r'(?:\\(?:u[0-9a-fA-F]{4}|["\\/bfnrt]))+')
_SURROGATE = re.compile("[\ud800-\udfff]")  # lone surrogates (a JSON escape of half a pair): never in an id


def unescaped(text: str) -> str:
    """`text` with every JSON escape sequence decoded, wherever it stands (in a string literal or not)."""
    return _ESCAPES.sub(lambda m: str(json.loads(f'"{m.group(0)}"')), text)


def windows(forms: Iterable[str], lengths: Iterable[int]) -> Iterator[str]:
    """Every substring of each form with one of `lengths` characters (may repeat)."""
    sizes = sorted(set(lengths))
    for form in forms:
        for segment in _SURROGATE.split(form):
            n = len(segment)
            for size in sizes:
                if size > n:
                    break
                yield from (segment[i:i + size] for i in range(n - size + 1))


class ErasedText:
    """Finds erased ids inside texts: `digests(ids)` is the ledger's bulk keyed hash (32 bytes per id,
    concatenated), `erased` the subjects' hex hashes, `lengths` the erased ids' lengths (None: unknown)."""

    def __init__(self, erased: set[str], digests: Callable[[pl.Series], bytes],
                 lengths: set[int] | None) -> None:
        self._erased = {bytes.fromhex(s) for s in erased if len(s) == 64}
        self._digests = digests
        self._lengths = sorted(lengths) if lengths is not None else list(range(1, MAX_ORDER_ID + 1))

    def names_erased(self, text: str, *shown: str) -> bool:
        """True when `text`, its JSON-unescaped form or one of the `shown` forms (how the caller prints it)
        holds an erased id as a substring, or when that is too costly to rule out."""
        if not self._erased or not self._lengths:
            return False
        forms = {text, unescaped(text), *shown}
        if sum(max(0, len(f) - self._lengths[0] + 1) * len(self._lengths) for f in forms) > MAX_WINDOWS:
            return True  # an upper bound; the exact count is not worth computing for a line this long
        batch: set[str] = set()
        for window in windows(forms, self._lengths):
            batch.add(window)
            if len(batch) >= _CHUNK and self._hit(batch):
                return True
            if len(batch) >= _CHUNK:
                batch = set()
        return bool(batch) and self._hit(batch)

    def _hit(self, batch: set[str]) -> bool:
        raw = self._digests(pl.Series(list(batch), dtype=pl.String))
        return any(raw[i:i + 32] in self._erased for i in range(0, len(raw), 32))


def names_erased_subject(text: str, erased: set[str], subject_key: Callable[[str], str],
                         lengths: set[int] | None = None) -> bool:
    """True when some substring of `text` (see the module docstring) hashes under the lake key to a
    subject in `erased`; one text at a time, hashed by `subject_key` (tests, small callers)."""
    def digests(ids: pl.Series) -> bytes:
        return b"".join(bytes.fromhex(subject_key(i)) for i in ids.to_list())

    return ErasedText(erased, digests, lengths).names_erased(text)
