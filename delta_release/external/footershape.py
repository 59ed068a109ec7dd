"""Footer shapes: the row count of a parquet footer from a few byte comparisons, for the footers of a
producer's files, which differ only in their numbers and statistics.

A footer is a thrift compact-protocol FileMetaData. Learned from a footer that pyarrow's reader accepted,
a `Shape` is that footer's bytes with every value inside `row_groups` (integers, the bytes of a binary,
doubles) made a slot, and FileMetaData.num_rows a slot too; everything else is literal: field headers,
list and map headers, binary lengths, and, whole, the schema, the key-value metadata, created_by and
every other field outside the row groups. A footer has the shape when it is as long as the learned one
and equal to it in every literal byte and in the continuation bit of every varint byte (so every varint
has the learned length); the bytes of a binary or double slot may be anything.

Such a footer has the learned footer's thrift structure token for token, at the same offsets, with the
same schema and key-value metadata byte for byte. pyarrow's reader decodes it along the same path
(thrift compact decoding is deterministic; a varint of at most 9 bytes fits its i16, i32 and i64
readers; a binary's bytes are not interpreted when a file is opened) and builds the same schema from
it, so it accepts it too, with the same Arrow schema; what differs is the row count, read from its
slot, and values that opening a file never reads. A footer of no learned shape goes to pyarrow's reader,
as every footer did before: a shape only ever answers for footers the reader would accept, and as it
would.

Learning walks the footer in Python (bounded: nesting depth, lengths within the bytes; anything
unexpected means no shape, never an exception). Testing a footer costs two `bytes` comparisons and one
big-integer mask over the span between the first and the last slot, whatever the bytes.
"""

from __future__ import annotations

from typing import Any

MAX_DEPTH = 16  # nesting of structs and containers (parquet's FileMetaData has 5 levels)
MAX_VARINT = 9  # bytes of a slot's varint: 63 bits, read alike by thrift's i16, i32 and i64 readers
_ROWS = 3  # FileMetaData.num_rows (i64)
_ROW_GROUPS = 4  # FileMetaData.row_groups (list<RowGroup>)
_BOOL_TRUE, _BOOL_FALSE, _BYTE, _I16, _I32, _I64, _DOUBLE, _BINARY, _LIST, _SET, _MAP, _STRUCT = range(1, 13)
_UUID = 13
_INTS = (_I16, _I32, _I64)


class _NoShape(Exception):
    """The footer is not one a shape is learned from."""


class _Walker:
    """Walks one footer's thrift (data[start:end]), marking its slots in `mask` (see Shape)."""

    def __init__(self, data: bytes, start: int, end: int) -> None:
        self.data, self.start, self.end = data, start, end
        self.mask = bytearray(b"\xff" * (end - start))
        self.rows_at: tuple[int, int] | None = None  # num_rows' varint: (offset in the footer, length)

    def byte(self, pos: int) -> int:
        if pos >= self.end:
            raise _NoShape
        return self.data[pos]

    def varint(self, pos: int) -> tuple[int, int]:
        value = shift = 0
        while True:
            b = self.byte(pos)
            pos += 1
            value |= (b & 0x7F) << shift
            if b < 0x80:
                return value, pos
            shift += 7
            if shift >= 7 * MAX_VARINT:
                raise _NoShape

    def slot(self, start: int, stop: int, varint: bool) -> None:
        # a varint keeps its continuation bits (so its length); anything else is free
        self.mask[start - self.start:stop - self.start] = (b"\x80" if varint else b"\x00") * (stop - start)

    def value(self, kind: int, pos: int, depth: int, slots: bool) -> int:
        """The end of a value of thrift type `kind` at `pos`; inside the row groups (`slots`) its
        numbers and bytes are slots."""
        if depth > MAX_DEPTH:
            raise _NoShape
        if kind in _INTS:
            _, stop = self.varint(pos)
            if slots:
                self.slot(pos, stop, True)
            return stop
        if kind == _BINARY:
            length, start = self.varint(pos)
            stop = start + length
            if stop > self.end:
                raise _NoShape
            if slots:
                self.slot(start, stop, False)
            return stop
        if kind == _DOUBLE:
            if pos + 8 > self.end:
                raise _NoShape
            if slots:
                self.slot(pos, pos + 8, False)
            return pos + 8
        if kind in (_BOOL_TRUE, _BOOL_FALSE, _BYTE):  # a bool or byte element of a container: one byte
            self.byte(pos)
            return pos + 1
        if kind == _UUID:
            if pos + 16 > self.end:
                raise _NoShape
            return pos + 16
        if kind == _STRUCT:
            return self.struct(pos, depth + 1, slots)
        if kind in (_LIST, _SET):
            head = self.byte(pos)
            count, pos = head >> 4, pos + 1
            if count == 15:
                count, pos = self.varint(pos)
            for _ in range(count):
                pos = self.value(head & 0x0F, pos, depth + 1, slots)
            return pos
        if kind == _MAP:
            count, pos = self.varint(pos)
            if count:
                types = self.byte(pos)
                pos += 1
                for _ in range(count):
                    pos = self.value(types >> 4, pos, depth + 1, slots)
                    pos = self.value(types & 0x0F, pos, depth + 1, slots)
            return pos
        raise _NoShape

    def struct(self, pos: int, depth: int, slots: bool, top: bool = False) -> int:
        field = 0
        while True:
            head = self.byte(pos)
            pos += 1
            if head == 0:
                return pos
            kind, delta = head & 0x0F, head >> 4
            if delta:
                field += delta
            else:
                raw, pos = self.varint(pos)
                field = (raw >> 1) ^ -(raw & 1)
            if kind in (_BOOL_TRUE, _BOOL_FALSE):
                continue  # a bool field's value is its header
            if top and field == _ROWS:
                if kind != _I64 or self.rows_at is not None:
                    raise _NoShape
                _, stop = self.varint(pos)
                self.slot(pos, stop, True)
                self.rows_at = (pos - self.start, stop - pos)
                pos = stop
            else:
                pos = self.value(kind, pos, depth, slots or (top and field == _ROW_GROUPS))


class Shape:
    """A learned footer shape (see the module) and what the gate caches with it (`answer`).

    The bytes before the first slot (`prefix`) and after the last (`suffix`) are compared whole; those
    between, masked (literal bytes whole, a varint's continuation bit, nothing of a binary's or
    double's bytes), as one big integer."""

    __slots__ = ("answer", "length", "prefix", "suffix", "slots_at", "slots_len", "mask", "expected", "rows_at",
                 "rows_len")

    def __init__(self, answer: Any, learned: bytes, mask: bytes | bytearray, rows_at: tuple[int, int]) -> None:
        self.answer = answer
        self.length = len(learned)
        free = [i for i, m in enumerate(mask) if m != 0xFF]  # never empty: num_rows is a slot
        first, last = free[0], free[-1] + 1
        self.prefix, self.suffix = learned[:first], learned[last:]
        self.slots_at, self.slots_len = first, last - first
        self.mask = int.from_bytes(mask[first:last], "little")
        self.expected = int.from_bytes(learned[first:last], "little") & self.mask
        self.rows_at, self.rows_len = rows_at

    def rows(self, data: bytes, start: int, end: int) -> int | None:
        """The row count of the footer thrift data[start:end] if it has this shape, else None."""
        at = start + self.slots_at
        if (end - start != self.length or not data.startswith(self.prefix, start)
                or not data.endswith(self.suffix, start, end)
                or int.from_bytes(data[at:at + self.slots_len], "little") & self.mask != self.expected):
            return None
        at = start + self.rows_at
        raw = data[at:at + self.rows_len]
        if len(raw) == 1:
            value = raw[0]
        else:
            value = 0
            for i, b in enumerate(raw):
                value |= (b & 0x7F) << (7 * i)
        return (value >> 1) ^ -(value & 1)  # zigzag


def learn(data: bytes, start: int, end: int, answer: Any) -> Shape | None:
    """The shape of the footer thrift at data[start:end] (which pyarrow's reader accepted), carrying
    `answer`; None when the walk does not end exactly at `end` or meets anything it does not expect."""
    walker = _Walker(data, start, end)
    try:
        stop = walker.struct(start, 0, False, top=True)
    except (_NoShape, RecursionError):  # RecursionError: never with MAX_DEPTH, but no exception escapes
        return None
    if stop != end or walker.rows_at is None:
        return None
    return Shape(answer, data[start:end], walker.mask, walker.rows_at)
