"""The vectorised path: whole chunks of plain event lines decoded by Polars' NDJSON reader.

First proof, for the common chunk: `polars.read_ndjson` reads every line shaped `{...}` in one call (a
value of a type its column cannot hold is read as null, or as its JSON text for a String column), the
contract rules are checked as one expression, and a row that keeps them is accepted when counting three
bytes of its line shows that the line is exactly that row (`_exact`: no duplicate or unknown key, no null,
no value of another type, no array): counted over the whole chunk at once, line by line only when a sum is
off. No regular expression reads these lines.

Second proof, for the lines the first leaves undecided (a chunk Polars cannot read because one line is
not JSON, a row whose byte counts differ): a regular expression proves the shape, one flat JSON object
whose keys are contract fields, integer fields holding plain integers of at most 18 digits, string fields
holding strings without escapes or control characters, no nulls, nothing after the closing brace but
blanks, and those lines are read in one call that cannot fail on them. Key order: the canonical order
(schema_version, order_id, position, kind, amount_cents, event_day, currency) cannot hold a duplicate key;
a line in any other order is also taken when its key count equals its field count.

Every line neither proof takes, and every row that breaks a rule, goes to the strict per-line parser,
which decides its reason. A property test holds the paths equal line for line.
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np
import polars as pl
import pyarrow as pa

from .lines import blocks, count_byte, positions

EVENT_SCHEMA: dict[str, pl.DataType] = {
    "order_id": pl.String(),
    "position": pl.Int64(),
    "kind": pl.String(),
    "amount_cents": pl.Int64(),
    "currency": pl.String(),
    "event_day": pl.Int32(),
    "schema_version": pl.Int8(),
    "line": pl.Int64(),
}
MAX_DAY = 2**31 - 1

READ_SCHEMA = {"schema_version": pl.Int64, "order_id": pl.String, "position": pl.Int64, "kind": pl.String,
               "amount_cents": pl.Int64, "event_day": pl.Int64, "currency": pl.String}
_INTS = ("schema_version", "position", "amount_cents", "event_day")
_STRS = ("order_id", "kind", "currency")
_WS = r"[ \t]*"
_INT = r"-?(?:0|[1-9][0-9]{0,17})"
_STR = r'"[^"\\\x00-\x1f]*"'


def _field(name: str) -> str:
    return f'"{name}"{_WS}:{_WS}' + (_INT if name in _INTS else _STR)


_END = _WS + r"\}" + _WS + r"\r?\n$"
CANONICAL = ("^\\{" + _WS + _WS.join(f"{_field(n)}{_WS}," for n in ("schema_version", "order_id", "position"))
             + _WS + _field("kind") + "".join(f"(?:{_WS},{_WS}{_field(n)})?" for n in
                                              ("amount_cents", "event_day", "currency")) + _END)
_ANY = "(?:" + "|".join(_field(n) for n in (*_INTS, *_STRS)) + ")"
GENERAL = "^\\{" + _WS + "(?:" + _ANY + f"(?:{_WS},{_WS}{_ANY})*)?" + _END
KEY = '"' + _WS + ":"


def _utf8_lines(data: bytes, starts: np.ndarray) -> bytes:
    """`data` with every line that is not UTF-8 blanked (spaces), so that it matches no pattern, is read by
    no JSON reader and goes to the strict path. `data` itself (no copy) when every line is UTF-8."""
    # `isascii` first (one C pass, far cheaper than comparing every byte in numpy); else find the high bytes
    high = np.empty(0) if data.isascii() else np.flatnonzero(np.frombuffer(data, dtype=np.uint8) >= 0x80)
    if not len(high):
        return data
    buf: bytes | bytearray = data
    for i in np.unique(np.searchsorted(starts, high, side="right") - 1).tolist():  # check those in Python
        start, end = int(starts[i]), int(starts[i + 1]) - 1
        try:
            data[start:end].decode("utf-8")
        except UnicodeDecodeError:
            if isinstance(buf, bytes):
                buf = bytearray(data)
            buf[start:end] = b" " * (end - start)
    return bytes(buf)


def _lines_series(data: bytes, starts: np.ndarray) -> pl.Series:
    """Each line of UTF-8 `data` (terminator included) as a String, without copying the bytes."""
    arr = pa.Array.from_buffers(pa.large_binary(), len(starts) - 1,
                                [None, pa.py_buffer(starts), pa.py_buffer(data)])
    return pl.Series("text", arr).cast(pl.String)


def _bytes_within(values: pl.Series, lo: int, hi: int) -> bool:
    """Whether every byte of every value of a String column lies in lo..hi (one numpy pass)."""
    arr = values.to_arrow()
    if arr.type != pa.large_string():
        arr = arr.cast(pa.large_string())
    if arr.buffers()[2] is None:
        return True
    offsets = np.frombuffer(arr.buffers()[1], dtype=np.int64)[arr.offset:arr.offset + len(arr) + 1]
    held = np.frombuffer(arr.buffers()[2], dtype=np.uint8)[offsets[0]:offsets[-1]]
    return not any(np.count_nonzero((part < lo) | (part > hi)) for _, part in blocks(held))


def _rules(frame: pl.DataFrame | None = None) -> pl.Expr:
    """The contract's rules for a row read by Polars, as plain boolean algebra (no when/then: a third of
    the time); given the frame, the two text rules that need a regular expression per row are replaced by a
    length check when one pass over the column's bytes shows them all printable ASCII (order_id) or
    upper-case letters (currency). A null anywhere makes the row fail."""
    v, kind, cur = pl.col("schema_version"), pl.col("kind"), pl.col("currency")
    amount, day = pl.col("amount_cents"), pl.col("event_day")
    upsert, delete = kind == "upsert", kind == "delete"
    if frame is not None and _bytes_within(frame["order_id"], 0x20, 0x7E):
        order_id = pl.col("order_id").str.len_bytes().is_between(1, 128)
    else:
        order_id = pl.col("order_id").str.contains(r"^[\x20-\x7E]{1,128}$")
    if frame is not None and _bytes_within(frame["currency"], ord("A"), ord("Z")):
        currency = cur.str.len_bytes() == 3
    else:
        currency = cur.str.contains(r"^[A-Z]{3}$")
    return (
        ((v == 2) | (v == 3))
        & order_id
        & (pl.col("position") >= 0)
        # an upsert needs a non-negative amount and a day, a delete has no amount; no other kind
        & ((upsert & (amount >= 0) & day.is_not_null()) | (delete & amount.is_null()))
        & (day.is_null() | day.is_between(0, MAX_DAY))
        # v2 has no currency; v3 needs a valid one on an upsert, allows none or a valid one on a delete
        & (((v == 2) & cur.is_null()) | ((v == 3) & (currency.fill_null(False) | (delete & cur.is_null()))))
    ).fill_null(False)


def _normalise(first_line: int) -> list[pl.Expr]:
    """The event columns of rows that keep the rules (so a delete has no amount, a v2 upsert no currency:
    it is INR), `line` made 1-based from the chunk's first line; in EVENT_SCHEMA's order and types."""
    kind, cur = pl.col("kind"), pl.col("currency")
    return [pl.col("order_id"), pl.col("position"), kind, pl.col("amount_cents"),
            pl.when(kind == "upsert").then(cur.fill_null(pl.lit("INR"))).alias("currency"),
            pl.col("event_day").cast(pl.Int32), pl.col("schema_version").cast(pl.Int8),
            pl.col("line") + first_line]


EMPTY = pl.DataFrame(schema=EVENT_SCHEMA)
_LBRACE, _RBRACE, _CR = ord("{"), ord("}"), ord("\r")


def _non_null(frame: pl.DataFrame, columns: Iterable[str]) -> np.ndarray:
    """Per row: how many of `columns` are not null."""
    counts = np.zeros(frame.height, dtype=np.int64)
    for c in columns:
        counts += frame[c].is_not_null().to_numpy()
    return counts


_FEW = 2048  # at most this many lines are counted one by one in Python, more with numpy


def _read(data: bytes, starts: np.ndarray, take: np.ndarray | None) -> pl.DataFrame:
    """read_ndjson of the lines of `data` selected by `take` (all when None), in line order; a value of a
    type the column cannot hold is read as null (or, for a String column, as its JSON text)."""
    if take is not None:
        left = np.flatnonzero(~take)
        if len(left) <= _FEW:  # blank the few lines left out (Polars skips blank lines): one copy
            buf = bytearray(data)
            for i in left.tolist():
                start, end = int(starts[i]), int(starts[i + 1]) - 1
                buf[start:end] = b" " * (end - start)
            data = bytes(buf)
        else:
            data = np.frombuffer(data, dtype=np.uint8)[np.repeat(take, np.diff(starts))].tobytes()
    return pl.read_ndjson(data, schema=READ_SCHEMA, ignore_errors=True)


def _braced(arr: np.ndarray, starts: np.ndarray) -> np.ndarray:
    """Per line: whether it starts with '{' and ends with '}' (before its '\\n' or '\\r\\n')."""
    last = starts[1:] - 2  # the byte before each '\n'
    last = last - (arr[last] == _CR)
    braced: np.ndarray = (arr[starts[:-1]] == _LBRACE) & (arr[last] == _RBRACE) & (last > starts[:-1])
    return braced


class _Bytes:
    """How many times a byte occurs in a chunk: in all of it, per line, or in a few lines."""

    def __init__(self, data: bytes, starts: np.ndarray) -> None:
        self.data, self.starts = data, starts
        self.arr = np.frombuffer(data, dtype=np.uint8)
        self._picked: bytes | None = None  # the bytes of the lines `within` is asked about

    def total(self, byte: bytes) -> int:
        return count_byte(self.arr, byte[0]) if byte in self.data else 0

    def per_line(self, byte: bytes) -> np.ndarray:
        if byte not in self.data:
            return np.zeros(len(self.starts) - 1, dtype=np.int64)
        return np.diff(np.searchsorted(positions(self.arr, byte[0]), self.starts))

    def within(self, byte: bytes, lines: np.ndarray, mask: np.ndarray) -> int:
        """In `lines` (0-based indices; `mask` the same as a bool per line; the same lines at every call)."""
        if self._picked is None:  # their bytes, gathered once
            if len(lines) <= _FEW:
                view = memoryview(self.data)
                self._picked = b"".join([view[s:e] for s, e in zip(self.starts[lines].tolist(),
                                                                     self.starts[lines + 1].tolist(), strict=True)])
            else:
                self._picked = self.arr[np.repeat(mask, np.diff(self.starts))].tobytes()
        return self._picked.count(byte)


def _exact(count: _Bytes, index: np.ndarray, fields: np.ndarray, strings: np.ndarray,
           ok: np.ndarray) -> np.ndarray:
    """Which of the rows read (`index`: their lines; `ok`: the rows keeping the rules) are exactly their
    line, by counting bytes of the line. Polars parsed the line, so it is valid JSON, where every '"' opens
    or closes a string or is escaped by its own '\\', and every key is followed by a ':'. Per line:
      ':' >= fields, equal only when every key is a distinct contract field read as a non-null value (a
          duplicate key, which Polars reads first-wins, a key outside the contract, which it drops, a null
          or a value of the wrong type, read as null, and a nested object's key each leave a ':' over);
      '[' >= 0, equal only without an array (Polars reads an array into a String column as its text);
      and, where both are equal (a flat object of scalars), '"' - '\\' <= 2 * (fields + strings), equal
          only when each String column holds a JSON string (not a number, boolean or '{}' read as its
          text; escaped quotes need as many backslashes).
    So the three sums over the chunk are checked first, then the lines one by one when a sum is off."""
    lines = index[ok]
    out = np.ones(len(count.starts) - 1, dtype=bool)
    out[lines] = False
    left_out = np.flatnonzero(out)

    def total(byte: bytes) -> int:
        return count.total(byte) - count.within(byte, left_out, out) if byte in count.data else 0

    f, s = int(fields[ok].sum()), int(strings[ok].sum())
    if total(b":") == f and total(b"[") == 0 and total(b'"') - total(b"\\") == 2 * (f + s):
        return ok
    return _line_by_line(count, index, fields, strings, ok)


def _line_by_line(count: _Bytes, index: np.ndarray, fields: np.ndarray, strings: np.ndarray,
                  ok: np.ndarray) -> np.ndarray:
    colons, brackets = count.per_line(b":")[index], count.per_line(b"[")[index]
    quotes = count.per_line(b'"')[index] - count.per_line(b"\\")[index]
    exact: np.ndarray = ok & (colons == fields) & (brackets == 0) & (quotes == 2 * (fields + strings))
    return exact


def _proven(data: bytes, starts: np.ndarray, braced: np.ndarray) -> tuple[pl.DataFrame, np.ndarray, np.ndarray]:
    """Polars parses every `{...}` line of the chunk in one call; a row that keeps the contract rules and
    is exactly its line (`_exact`) is accepted with no regular expression run on it. A chunk Polars cannot
    parse (a syntax error inside braces) proves nothing. Returns (the accepted rows, `line` a 0-based
    index; the lines accepted; the lines read whose rules fail, which only the strict path can name)."""
    n = len(starts) - 1
    none = np.zeros(n, dtype=bool)
    whole = bool(braced.all())
    try:
        frame = _read(data, starts, None if whole else braced)
    except pl.exceptions.PolarsError:
        return EMPTY_READ, none, none
    index = np.arange(n) if whole else np.flatnonzero(braced)
    if frame.height != len(index):  # not expected for lines that each hold one object; stay exact regardless
        return EMPTY_READ, none, none
    ok = frame.select(_rules(frame)).to_series().to_numpy()
    exact = _exact(_Bytes(data, starts), index, _non_null(frame, READ_SCHEMA), _non_null(frame, _STRS), ok)
    accepted, failed = none.copy(), none.copy()
    accepted[index[exact]] = True
    failed[index[~ok]] = True
    frame = frame.with_columns(pl.Series("line", index, dtype=pl.Int64))
    return (frame if exact.all() else frame.filter(pl.Series(exact))), accepted, failed


EMPTY_READ = pl.DataFrame(schema={**READ_SCHEMA, "line": pl.Int64})


def _by_pattern(data: bytes, starts: np.ndarray, rest: np.ndarray) -> pl.DataFrame:
    """Lines not proven by `_proven` (another key order with a ':' inside a string, a chunk Polars could
    not parse whole...), taken when a regular expression proves their shape and the rules hold: the
    accepted rows, `line` a 0-based index."""
    n = len(starts) - 1
    sub = _lines_series(data, starts).gather(rest)
    canon = sub.str.contains(CANONICAL).fill_null(False).to_numpy()
    keys = np.full(len(rest), -1, dtype=np.int64)
    other = np.flatnonzero(~canon)
    general = np.zeros(len(rest), dtype=bool)
    if len(other):
        osub = sub.gather(other)
        hit = osub.str.contains(GENERAL).fill_null(False).to_numpy()
        general[other[hit]] = True
        keys[other[hit]] = osub.filter(pl.Series(hit)).str.count_matches(KEY).to_numpy()
    hit = canon | general
    index = rest[hit]
    if not len(index):
        return EMPTY_READ
    take = np.zeros(n, dtype=bool)
    take[index] = True
    try:
        frame = _read(data, starts, take)
    except pl.exceptions.PolarsError:  # cannot happen for lines of the proven shape; stay exact regardless
        return EMPTY_READ
    if frame.height != len(index):
        return EMPTY_READ
    counted = keys[hit]  # outside the canonical order: no duplicate key (one per field)
    ok = _rules(frame) & pl.Series((counted < 0) | (_non_null(frame, READ_SCHEMA) == counted))
    return frame.with_columns(pl.Series("line", index, dtype=pl.Int64)).filter(ok)


def fast_chunk(data: bytes, starts: np.ndarray, first_line: int,
               eligible: np.ndarray | None = None) -> tuple[pl.DataFrame, np.ndarray]:
    """Decode the lines of one chunk that the vectorised path can prove: (accepted events with their line
    numbers, 0-based indices of the lines the strict path must decide). `eligible` (a bool per line)
    excludes lines up front (over-long ones)."""
    n = len(starts) - 1
    if n == 0:
        return EMPTY, np.empty(0, dtype=np.int64)
    data = _utf8_lines(data, starts)
    braced = _braced(np.frombuffer(data, dtype=np.uint8), starts)
    if eligible is not None:
        braced &= eligible
    frame, proven, failed = _proven(data, starts, braced) if braced.any() else (EMPTY_READ, braced, braced)
    rest = ~(proven | failed)
    if eligible is not None:
        rest &= eligible
    if rest.any():
        more = _by_pattern(data, starts, np.flatnonzero(rest))
        if more.height:
            frame = pl.concat([frame, more]).sort("line")
    events = frame.select(_normalise(first_line))
    decided = np.zeros(n, dtype=bool)
    decided[frame["line"].to_numpy()] = True
    return events, np.flatnonzero(~decided)
