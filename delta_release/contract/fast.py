"""The vectorised path: whole chunks of plain event lines decoded by Polars' NDJSON reader.

A line takes this path only when a regular expression proves its shape: one flat JSON object whose keys
are contract fields, integer fields holding plain integers of at most 18 digits, string fields holding
strings without escapes or control characters, no nulls, nothing after the closing brace but blanks.
Such a line is valid JSON that `polars.read_ndjson` decodes with the contract's column types, so the
chunk's matching lines are read in one call that cannot fail on them. Key order: the canonical order
(schema_version, order_id, position, kind, amount_cents, event_day, currency) cannot hold a duplicate
key; a line in any other order is also taken when its key count equals its field count (a duplicate key
makes the count larger). Every contract rule is then checked as one expression; every line that does not
match, or breaks a rule, goes to the strict per-line parser, which decides its reason. A property test
holds the two paths equal line for line.
"""

from __future__ import annotations

import io

import numpy as np
import polars as pl
import pyarrow as pa

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


def line_starts(data: bytes) -> np.ndarray:
    """Start offsets of the lines of `data` (every line ends in '\\n'), plus len(data) at the end."""
    nl = np.flatnonzero(np.frombuffer(data, dtype=np.uint8) == 10)
    starts = np.empty(len(nl) + 1, dtype=np.int64)
    starts[0] = 0
    starts[1:] = nl + 1
    return starts


def _lines_series(data: bytes, starts: np.ndarray) -> pl.Series:
    """Each line (terminator included) as a String; a line that is not UTF-8 is blanked (spaces) so that
    it matches no pattern and goes to the strict path. No copy of the bytes when every line is UTF-8."""
    n = len(starts) - 1
    # `isascii` first (one C pass, far cheaper than comparing every byte in numpy); else find the high bytes
    high = np.empty(0) if data.isascii() else np.flatnonzero(np.frombuffer(data, dtype=np.uint8) >= 0x80)
    if len(high):  # lines with non-ASCII bytes: check those in Python
        buf: bytes | bytearray = data
        for i in np.unique(np.searchsorted(starts, high, side="right") - 1).tolist():
            start, end = int(starts[i]), int(starts[i + 1]) - 1
            try:
                data[start:end].decode("utf-8")
            except UnicodeDecodeError:
                if isinstance(buf, bytes):
                    buf = bytearray(data)
                buf[start:end] = b" " * (end - start)
        data = bytes(buf)
    arr = pa.Array.from_buffers(pa.large_binary(), n, [None, pa.py_buffer(starts), pa.py_buffer(data)])
    return pl.Series("text", arr).cast(pl.String)


def _rules() -> pl.Expr:
    v, kind, cur = pl.col("schema_version"), pl.col("kind"), pl.col("currency")
    upsert = kind == "upsert"
    return (
        v.is_in([2, 3])
        & pl.col("order_id").str.contains(r"^[\x20-\x7E]{1,128}$")
        & (pl.col("position") >= 0)
        & kind.is_in(["upsert", "delete"])
        & pl.when(upsert).then(pl.col("amount_cents").is_not_null() & (pl.col("amount_cents") >= 0)
                               & pl.col("event_day").is_not_null())
        .otherwise(pl.col("amount_cents").is_null())
        & (pl.col("event_day").is_null() | pl.col("event_day").is_between(0, MAX_DAY))
        & pl.when(v == 2).then(cur.is_null())
        .otherwise(pl.when(upsert).then(cur.is_not_null()).otherwise(True)
                   & (cur.is_null() | cur.str.contains(r"^[A-Z]{3}$")))
    ).fill_null(False)


def _normalise() -> list[pl.Expr]:
    v, kind, cur = pl.col("schema_version"), pl.col("kind"), pl.col("currency")
    upsert = kind == "upsert"
    return [pl.col("order_id"), pl.col("position"), kind,
            pl.when(upsert).then(pl.col("amount_cents")).alias("amount_cents"),
            pl.when(upsert).then(pl.when(v == 2).then(pl.lit("INR")).otherwise(cur)).alias("currency"),
            pl.col("event_day"), v, pl.col("line")]


EMPTY = pl.DataFrame(schema=EVENT_SCHEMA)


def fast_chunk(data: bytes, starts: np.ndarray, first_line: int,
               eligible: np.ndarray | None = None) -> tuple[pl.DataFrame, np.ndarray]:
    """Decode the lines of one chunk that the vectorised path can prove: (accepted events with their line
    numbers, 0-based indices of the lines the strict path must decide). `eligible` (a bool per line)
    excludes lines up front (over-long ones)."""
    n = len(starts) - 1
    if n == 0:
        return EMPTY, np.empty(0, dtype=np.int64)
    text = _lines_series(data, starts)
    canon = text.str.contains(CANONICAL).fill_null(False).to_numpy()
    if eligible is not None:
        canon &= eligible
    keys: np.ndarray | None = None
    if canon.all():
        take = canon
        frame = pl.read_ndjson(io.BytesIO(data), schema=READ_SCHEMA)
    else:
        rest = np.flatnonzero(~canon if eligible is None else ~canon & eligible)
        general = np.zeros(n, dtype=bool)
        keys = np.full(n, -1, dtype=np.int64)
        if len(rest):
            sub = text.gather(rest)
            hit = sub.str.contains(GENERAL).fill_null(False).to_numpy()
            general[rest[hit]] = True
            keys[rest[hit]] = sub.filter(pl.Series(hit)).str.count_matches(KEY).to_numpy()
        take = canon | general
        if not take.any():
            return EMPTY, np.arange(n, dtype=np.int64)
        lengths = np.diff(starts)
        picked = np.frombuffer(data, dtype=np.uint8)[np.repeat(take, lengths)].tobytes()
        frame = pl.read_ndjson(io.BytesIO(picked), schema=READ_SCHEMA)
        keys = keys[take]
    index = np.flatnonzero(take)
    if frame.height != len(index):  # cannot happen for lines of the proven shape; stay exact regardless
        return EMPTY, np.arange(n, dtype=np.int64)
    frame = frame.with_columns(pl.Series("line", index + first_line, dtype=pl.Int64))
    ok = _rules()
    if keys is not None:  # lines outside the canonical order: no duplicate key (one key per field)
        fields = pl.sum_horizontal([pl.col(c).is_not_null().cast(pl.Int64) for c in READ_SCHEMA])
        ok = ok & ((pl.Series(keys) < 0) | (fields == pl.Series(keys)))
    checked = frame.with_columns(ok.alias("ok"))
    good = checked["ok"].to_numpy()
    events = checked.filter(pl.col("ok")).select(_normalise()).cast(EVENT_SCHEMA)  # type: ignore[arg-type]
    decided = np.zeros(n, dtype=bool)
    decided[index[good]] = True
    return events, np.flatnonzero(~decided)
