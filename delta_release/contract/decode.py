"""Decode a JSON Lines batch of order events (schema versions 2 and 3).

Every line is accounted for: it becomes an accepted event or a `Reject` with its line number, one reason
code, a detail that never echoes the payload, and the raw text. Parsing is strict: floats, NaN, duplicate
keys and numbers that are not plain integers are rejected rather than coerced.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, BinaryIO

import numpy as np
import polars as pl

from . import fast
from .fast import EVENT_SCHEMA
from .lines import CHUNK_BYTES, Chunk, LongLine, iter_chunks, iter_memory_chunks
from .lines import max_line_bytes as line_limit
from .reasons import Reason

_FIELDS = {
    2: {"schema_version", "order_id", "position", "kind", "amount_cents", "event_day"},
    3: {"schema_version", "order_id", "position", "kind", "amount_cents", "event_day", "currency"},
}
EVENT_FIELDS = frozenset(set().union(*_FIELDS.values()))  # every field name of every schema version
_CURRENCY = re.compile(r"[A-Z]{3}")
MAX_ORDER_ID = 128
MAX_INT64 = 2**63 - 1
MAX_DAY = 2**31 - 1
BOM = b"\xef\xbb\xbf"


@dataclass(frozen=True, slots=True, kw_only=True)
class Reject:
    line: int
    reason: Reason
    detail: str
    raw: str | None  # None for a line over the length limit: it is never held whole
    order_id: str | None = None  # used by the erasure filter; never written to the ledger
    offset: int | None = None  # where the line starts in the raw batch (bytes; a leading BOM counts)
    length: int | None = None  # its length in bytes, without the '\n' or '\r\n' that ends it


def count_reasons(rejects: list[Reject]) -> dict[str, int]:
    """reason code -> how many rejects carry it, sorted by code."""
    out: dict[str, int] = {}
    for r in rejects:
        out[r.reason.value] = out.get(r.reason.value, 0) + 1
    return dict(sorted(out.items()))


@dataclass(slots=True, kw_only=True)
class DecodedBatch:
    extracted: int
    events: pl.DataFrame
    rejects: list[Reject] = field(default_factory=list)
    schema_versions: list[int] = field(default_factory=list)
    # per line (index = line - 1): byte offset in the batch and length without the terminator
    offsets: np.ndarray = field(default_factory=lambda: np.empty(0, dtype=np.int64))
    lengths: np.ndarray = field(default_factory=lambda: np.empty(0, dtype=np.int64))

    def span(self, line: int) -> tuple[int, int]:
        """(offset, length) of a line in the raw batch."""
        return int(self.offsets[line - 1]), int(self.lengths[line - 1])

    @property
    def accepted(self) -> int:
        return self.events.height

    def reasons(self) -> dict[str, int]:
        return count_reasons(self.rejects)


class _Rejected(Exception):
    def __init__(self, reason: Reason, detail: str) -> None:
        self.reason = reason
        self.detail = detail


class _Float:
    """Marks a JSON number written with a fraction or exponent; never accepted where an integer is due."""

    __slots__ = ("text",)

    def __init__(self, text: str) -> None:
        self.text = text


def _no_constant(name: str) -> Any:
    raise _Rejected(Reason.MALFORMED_JSON, f"{name} is not valid JSON")


_FIELD_NAME = re.compile(r"[a-z_]{1,40}")


def _field_name(key: str) -> str:
    """A key named in a detail: only field-like names (lower-case letters and '_', at most 40) are echoed.

    Anything else (a megabyte-long key, control characters, an order id used as a key) is described, not
    echoed: details are never scrubbed by an erasure, so they must not carry payload text.
    """
    return repr(key) if _FIELD_NAME.fullmatch(key) else f"(a {len(key)}-character name that is not a field)"


def _pairs(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise _Rejected(Reason.MALFORMED_JSON, f"duplicate key {_field_name(key)} in one object")
        out[key] = value
    return out


def _int(text: str) -> int:
    if len(text) > 40:
        raise _Rejected(Reason.BAD_VALUE, f"number with {len(text)} digits is out of range")
    return int(text)


_KEY_COLON = re.compile(r'"\s*:')
_PLAIN = (str, int, type(None))


def _parse_fast(text: str) -> Any:
    """The C parser without hooks, for the common flat event; None when the strict parser must decide.

    Taken only when the result is a flat object of strings, integers and nulls whose key count equals the
    number of `"` + `:` tokens in the text: a duplicate key makes that count larger (the later key would be
    lost by a plain parse), strings containing `":` only make it larger, nested objects likewise. Floats,
    NaN, Infinity and huge numbers all go to the strict parser."""
    try:
        obj = json.loads(text)
    except (ValueError, RecursionError):
        return None
    if type(obj) is not dict or len(_KEY_COLON.findall(text)) != len(obj):
        return None
    for value in obj.values():
        if not isinstance(value, _PLAIN) or (type(value) is int and not -MAX_INT64 <= value <= MAX_INT64):
            return None
    return obj


# json.loads with these hooks builds a decoder (and its scanner) per call, a third of a rejected line's cost
_STRICT = json.JSONDecoder(object_pairs_hook=_pairs, parse_float=_Float, parse_int=_int, parse_constant=_no_constant)


def _strict_loads(text: str) -> Any:
    """json.loads(text, the strict hooks), with one decoder for every line."""
    if text.startswith("\ufeff"):  # json.loads' own check, for its message
        raise json.JSONDecodeError("Unexpected UTF-8 BOM (decode using utf-8-sig)", text, 0)
    return _STRICT.decode(text)


def _parse(text: str) -> Any:
    fast = _parse_fast(text)
    if fast is not None:
        return fast
    try:
        return _strict_loads(text)
    except _Rejected:
        raise
    except RecursionError:
        raise _Rejected(Reason.MALFORMED_JSON, "nesting too deep") from None
    except ValueError as exc:
        msg = str(exc).split(":")[0]
        raise _Rejected(Reason.MALFORMED_JSON, f"not valid JSON ({msg})") from None


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _type_name(value: Any) -> str:
    if isinstance(value, _Float):
        return "a number with a fraction or exponent"
    return {bool: "a boolean", str: "a string", list: "an array", dict: "an object",
            type(None): "null"}.get(type(value), type(value).__name__)


def _nonneg_int(obj: dict[str, Any], name: str, limit: int) -> int:
    value = obj[name]
    if not _is_int(value):
        raise _Rejected(Reason.BAD_TYPE, f"{name} must be an integer, got {_type_name(value)}")
    if value < 0 or value > limit:
        raise _Rejected(Reason.BAD_VALUE, f"{name} must be between 0 and {limit}")
    return int(value)


def decode_record(obj: Any) -> dict[str, Any]:
    """Validate one parsed JSON value and return the normalised event, or raise `_Rejected`."""
    if not isinstance(obj, dict):
        raise _Rejected(Reason.NOT_AN_OBJECT, f"expected a JSON object, got {_type_name(obj)}")
    if "schema_version" not in obj:
        raise _Rejected(Reason.MISSING_FIELD, "schema_version is missing")
    version = obj["schema_version"]
    if not _is_int(version):
        raise _Rejected(Reason.BAD_TYPE, f"schema_version must be an integer, got {_type_name(version)}")
    if version not in _FIELDS:
        raise _Rejected(Reason.UNKNOWN_SCHEMA_VERSION, f"schema_version {version} is not 2 or 3")
    extra = sorted(set(obj) - _FIELDS[version])
    if extra:
        raise _Rejected(Reason.UNEXPECTED_FIELD,
                        f"field {_field_name(extra[0])} is not allowed in schema version {version}")
    for name in ("order_id", "position", "kind"):
        if name not in obj:
            raise _Rejected(Reason.MISSING_FIELD, f"{name} is missing")
    order_id = obj["order_id"]
    if not isinstance(order_id, str):
        raise _Rejected(Reason.BAD_TYPE, f"order_id must be a string, got {_type_name(order_id)}")
    if not order_id or len(order_id) > MAX_ORDER_ID or not order_id.isprintable():
        raise _Rejected(Reason.BAD_VALUE, f"order_id must be 1 to {MAX_ORDER_ID} printable characters")
    position = _nonneg_int(obj, "position", MAX_INT64)
    kind = obj["kind"]
    if not isinstance(kind, str):
        raise _Rejected(Reason.BAD_TYPE, f"kind must be a string, got {_type_name(kind)}")
    if kind not in ("upsert", "delete"):
        raise _Rejected(Reason.BAD_VALUE, "kind must be 'upsert' or 'delete'")
    event: dict[str, Any] = {"order_id": order_id, "position": position, "kind": kind,
                             "amount_cents": None, "currency": None, "event_day": None,
                             "schema_version": version}
    if kind == "upsert":
        for name in ("amount_cents", "event_day"):
            if name not in obj:
                raise _Rejected(Reason.MISSING_FIELD, f"{name} is missing for an upsert")
        amount = obj["amount_cents"]
        if isinstance(amount, bool) or amount is None or isinstance(amount, (list, dict)):
            raise _Rejected(Reason.BAD_TYPE, f"amount_cents must be an integer, got {_type_name(amount)}")
        if not _is_int(amount):
            raise _Rejected(Reason.AMOUNT_UNIT,
                            f"amount_cents must be a JSON integer of cents, got {_type_name(amount)}")
        if amount < 0 or amount > MAX_INT64:
            raise _Rejected(Reason.BAD_VALUE, "amount_cents must be >= 0")
        event["amount_cents"] = int(amount)
        if version == 3:
            if "currency" not in obj:
                raise _Rejected(Reason.MISSING_FIELD, "currency is missing (required by schema version 3)")
            currency = obj["currency"]
            if not isinstance(currency, str) or not _CURRENCY.fullmatch(currency):
                raise _Rejected(Reason.BAD_CURRENCY, "currency must be three upper-case letters")
            event["currency"] = currency
        else:
            event["currency"] = "INR"
    else:
        if "amount_cents" in obj:
            raise _Rejected(Reason.UNEXPECTED_FIELD, "amount_cents is not allowed on a delete")
        if "currency" in obj:
            currency = obj["currency"]
            if not isinstance(currency, str) or not _CURRENCY.fullmatch(currency):
                raise _Rejected(Reason.BAD_CURRENCY, "currency must be three upper-case letters")
    if "event_day" in obj:
        event["event_day"] = _nonneg_int(obj, "event_day", MAX_DAY)
    return event


def _subject_like(value: Any) -> bool:
    """Whether a rejected record's order_id can name a subject (be hashed, and so be erased later).

    A JSON string may hold a lone surrogate ("\\ud800"), which is no valid UTF-8 and no order id; hashing it
    for the quarantine ledger raised UnicodeEncodeError and aborted the whole ingest.
    """
    if not isinstance(value, str) or not value:
        return False
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def split_lines(data: bytes) -> list[bytes]:
    """Lines of a batch: '\\n'-separated, a trailing newline ends the last line, CRLF and a BOM tolerated."""
    if data.startswith(BOM):
        data = data[len(BOM):]
    if not data:
        return []
    lines = data.split(b"\n")
    if lines[-1] == b"":
        lines.pop()
    return [ln[:-1] if ln.endswith(b"\r") else ln for ln in lines]


def _decode_line(number: int, raw: bytes, offset: int | None = None) -> dict[str, Any] | Reject:
    """The strict path for one line: the normalised event, or a Reject with its reason."""
    raw_text = raw.decode("utf-8", errors="backslashreplace")
    obj: Any = None
    try:
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise _Rejected(Reason.MALFORMED_JSON, f"invalid UTF-8 at byte {exc.start}") from None
        if not text.strip():
            raise _Rejected(Reason.MALFORMED_JSON, "empty line")
        obj = _parse(text)
        event = decode_record(obj)
    except _Rejected as rej:
        oid = obj.get("order_id") if isinstance(obj, dict) else None
        return Reject(line=number, reason=rej.reason, detail=rej.detail, raw=raw_text,
                      order_id=oid if _subject_like(oid) else None, offset=offset, length=len(raw))
    event["line"] = number
    return event




CONTENT = ["order_id", "kind", "amount_cents", "currency", "event_day"]  # what a position holds


def differing_repeats(events: pl.DataFrame, by: Sequence[str] = ()) -> pl.Series:
    """Per event: whether it is a later line of a position (within each group of `by`, e.g. a batch)
    whose content differs from that position's first line. The decoder rejects these; exact repeats stay
    accepted (apply deduplicates them). One definition for the decoder and the release oracle."""
    group = [*by, "position"]
    differs = pl.any_horizontal([pl.col(c).ne_missing(pl.col(c).sort_by("line").first().over(group))
                                 for c in CONTENT])
    return events.select(((pl.len().over(group) > 1) & differs).alias("differing_repeat")).to_series()


def _position_conflicts(events: pl.DataFrame, text: Callable[[int], tuple[str, int, int]]
                        ) -> tuple[pl.DataFrame, list[Reject]]:
    """Same position, different content: the first accepted line of a position stands, later lines whose
    content differs are rejected (`differing_repeats`)."""
    if events.height == 0 or events["position"].n_unique() == events.height:
        return events, []
    bad = events.filter(differing_repeats(events)).sort("line")
    rejects = []
    for line, pos, oid in bad.select("line", "position", "order_id").iter_rows():
        raw, offset, length = text(line)
        rejects.append(Reject(line=line, reason=Reason.POSITION_CONFLICT,
                              detail=f"position {pos} already holds a different event in this batch",
                              raw=raw, order_id=oid, offset=offset, length=length))
    if not rejects:
        return events, []
    return events.filter(pl.col("line").is_in(pl.Series([r.line for r in rejects]).implode()).not_()), rejects


def _too_long(line: int, offset: int, length: int, limit: int) -> Reject:
    return Reject(line=line, reason=Reason.BAD_VALUE, raw=None, offset=offset, length=length,
                  detail=f"line is {length} bytes, over the {limit}-byte line limit (not decoded)")


class Decoder:
    """Decodes a batch chunk by chunk (`lines.iter_chunks`); `finish` adds the batch-wide position check.

    Holds the accepted events, the rejects and two integers per line; never the batch's bytes."""

    def __init__(self, *, max_line: int) -> None:
        self.max_line = max_line
        self._events: list[pl.DataFrame] = []
        self._rejects: list[Reject] = []
        self._offsets: list[np.ndarray] = []
        self._lengths: list[np.ndarray] = []
        self.lines = 0

    def feed(self, item: Chunk | LongLine) -> None:
        if isinstance(item, LongLine):
            self._rejects.append(_too_long(item.line, item.offset, item.length, self.max_line))
            self._offsets.append(np.array([item.offset], dtype=np.int64))
            self._lengths.append(np.array([item.length], dtype=np.int64))
            self.lines += 1
            return
        data, first = item.data, item.first_line
        starts = item.starts
        ends = starts[1:] - 1  # index of each line's '\n'
        lengths = ends - starts[:-1]
        if len(ends):
            cr = np.frombuffer(data, dtype=np.uint8)[np.maximum(ends - 1, 0)] == 13
            lengths -= cr & (lengths > 0)
        self._offsets.append(starts[:-1] + item.offset)
        self._lengths.append(lengths)
        self.lines += len(lengths)
        fits = lengths <= self.max_line
        events, slow = _fast_chunk(data, starts, first, None if fits.all() else fits)
        strict: list[dict[str, Any]] = []
        for i in slow.tolist():
            start, length = int(starts[i]), int(lengths[i])
            if length > self.max_line:
                self._rejects.append(_too_long(first + i, item.offset + start, length, self.max_line))
                continue
            result = _decode_line(first + i, data[start:start + length], item.offset + start)
            if isinstance(result, Reject):
                self._rejects.append(result)
            else:
                strict.append(result)
        if strict:
            events = pl.concat([events, pl.DataFrame(strict, schema=EVENT_SCHEMA, orient="row")]).sort("line")
        if events.height:
            self._events.append(events)

    def events_before_position_check(self) -> pl.DataFrame:
        """The accepted events fed so far, before `finish`'s batch-wide position check: for a caller that
        feeds several batches as one stream (no per-batch setup) and applies that check per batch itself."""
        return pl.concat(self._events) if self._events else pl.DataFrame(schema=EVENT_SCHEMA)

    def finish(self, read: Callable[[int, int], bytes]) -> DecodedBatch:
        """The batch: `read(offset, length)` returns bytes of the batch (for position-conflict rejects)."""
        events = self.events_before_position_check()
        offsets = np.concatenate(self._offsets) if self._offsets else np.empty(0, dtype=np.int64)
        lengths = np.concatenate(self._lengths) if self._lengths else np.empty(0, dtype=np.int64)

        def text(line: int) -> tuple[str, int, int]:
            off, length = int(offsets[line - 1]), int(lengths[line - 1])
            return read(off, length).decode("utf-8", errors="backslashreplace"), off, length

        events, conflicts = _position_conflicts(events, text)
        rejects = sorted([*self._rejects, *conflicts], key=lambda r: r.line)
        versions = sorted(int(v) for v in events["schema_version"].unique().to_list()) if events.height else []
        return DecodedBatch(extracted=self.lines, events=events, rejects=rejects, schema_versions=versions,
                            offsets=offsets, lengths=lengths)


def _fast_chunk(data: bytes, starts: np.ndarray, first_line: int,
                eligible: np.ndarray | None) -> tuple[pl.DataFrame, np.ndarray]:
    """The vectorised path (`fast.fast_chunk`); the equivalence test replaces it to run strict only."""
    return fast.fast_chunk(data, starts, first_line, eligible)


def decode_chunks(items: Iterable[Chunk | LongLine], read: Callable[[int, int], bytes], *,
                  max_line: int) -> DecodedBatch:
    decoder = Decoder(max_line=max_line)
    for item in items:
        decoder.feed(item)
    return decoder.finish(read)


def decode_stream(reader: BinaryIO, read: Callable[[int, int], bytes], *, max_line_bytes: int | None = None,
                  chunk_bytes: int = CHUNK_BYTES) -> DecodedBatch:
    """Decode a batch read from `reader` in bounded chunks; `read(offset, length)` re-reads a line."""
    limit = line_limit(max_line_bytes)
    return decode_chunks(iter_chunks(reader, max_line=limit, chunk_bytes=chunk_bytes), read, max_line=limit)


def decode_batch(data: bytes, *, max_line_bytes: int | None = None, chunk_bytes: int = CHUNK_BYTES) -> DecodedBatch:
    """Decode every line of a batch. The caller enforces accepted + quarantined == extracted."""
    limit = line_limit(max_line_bytes)
    data = bytes(data)  # a memoryview or bytearray: one copy, as reading it did before
    return decode_chunks(iter_memory_chunks(data, max_line=limit, chunk_bytes=chunk_bytes),
                         lambda off, n: data[off:off + n], max_line=limit)
