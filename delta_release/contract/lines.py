"""Lines of a batch, read in bounded chunks.

A batch is split on '\\n'; a trailing newline ends the last line; one '\\r' before a '\\n' is part of the
terminator (CRLF); a UTF-8 BOM at the very start of the batch is skipped. These are the rules of
`split_lines`, applied to a stream: `iter_chunks` yields runs of whole lines of about `chunk_bytes`, and a
line longer than the limit is never held whole: its bytes are counted and dropped as they stream past,
and it is reported as a `LongLine` (line number, byte offset and length in the batch).

The maximum line length is `MAX_LINE_BYTES` (1 MiB) unless the environment sets
`DELTA_RELEASE_MAX_LINE_BYTES`; callers may also pass `max_line_bytes`. Lengths count the line's bytes
without its terminator. A line of exactly the limit is accepted.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import BinaryIO

import numpy as np

BOM = b"\xef\xbb\xbf"
MAX_LINE_BYTES = 1 << 20
CHUNK_BYTES = 16 << 20
ENV_MAX_LINE = "DELTA_RELEASE_MAX_LINE_BYTES"


def max_line_bytes(value: int | None = None) -> int:
    """The line-length limit in force: `value`, else $DELTA_RELEASE_MAX_LINE_BYTES, else 1 MiB."""
    return byte_limit(value, ENV_MAX_LINE, MAX_LINE_BYTES, "the maximum line length")


def byte_limit(value: int | None, env_name: str, default: int, what: str) -> int:
    """A size limit in bytes: `value`, else the environment variable `env_name`, else `default`; a limit
    that is not a positive integer is an input error naming where it came from."""
    from ..errors import InputError

    where = what
    if value is None:
        env = os.environ.get(env_name, "").strip()
        if not env:
            return default
        where = env_name
        try:
            value = int(env)
        except ValueError:
            raise InputError(f"{env_name} must be a positive integer of bytes, got {env[:40]!r}",
                             key=env_name) from None
    if value < 1:
        raise InputError(f"{where} must be at least 1 byte, got {value}", key=env_name)
    return value


# Byte scans go a block at a time: a comparison of a whole 16 MiB chunk makes a 16 MiB temporary, a fresh
# mapping each time (ingest fixes glibc's mmap threshold at 1 MiB, _malloc.py) whose page faults cost
# more than the comparison (measured on the 12.9 MB apply batch: a count 4-18 ms whole, 1.5-2 ms by blocks).
SCAN_BLOCK = 1 << 18


def blocks(arr: np.ndarray) -> Iterator[tuple[int, np.ndarray]]:
    """(offset, slice) of `arr` in SCAN_BLOCK pieces."""
    for start in range(0, len(arr), SCAN_BLOCK):
        yield start, arr[start:start + SCAN_BLOCK]


def count_byte(arr: np.ndarray, byte: int) -> int:
    """How many elements of the uint8 array `arr` equal `byte`."""
    return sum(int(np.count_nonzero(part == byte)) for _, part in blocks(arr))


def positions(arr: np.ndarray, byte: int) -> np.ndarray:
    """Where the uint8 array `arr` holds `byte` (int64, ascending)."""
    found = [np.flatnonzero(part == byte) + start for start, part in blocks(arr)]
    return np.concatenate(found) if found else np.empty(0, dtype=np.int64)


def line_starts(data: bytes) -> np.ndarray:
    """Start offsets of the lines of `data` (every line ends in '\\n'), plus len(data) at the end."""
    nl = positions(np.frombuffer(data, dtype=np.uint8), 10)
    starts = np.empty(len(nl) + 1, dtype=np.int64)
    starts[0] = 0
    np.add(nl, 1, out=starts[1:])
    return starts


@dataclass(frozen=True, slots=True)
class Chunk:
    """Whole lines: `data` holds them, each ending in '\\n' (one is added after a last unterminated line).
    `first_line` is the 1-based number of its first line, `offset` the batch offset of data[0], `starts`
    the `line_starts` of `data` (found once, to count the lines and to split them)."""

    data: bytes
    first_line: int
    offset: int
    starts: np.ndarray = field(compare=False, repr=False)


@dataclass(frozen=True, slots=True)
class LongLine:
    line: int
    offset: int
    length: int


def iter_chunks(reader: BinaryIO, *, max_line: int, chunk_bytes: int = CHUNK_BYTES) -> Iterator[Chunk | LongLine]:
    """Chunks and over-long lines, in line order. Memory: about chunk_bytes + max_line at a time."""
    block_size = max(chunk_bytes, 1)
    first = reader.read(max(block_size, len(BOM)))
    while 0 < len(first) < len(BOM):  # a short read: the BOM check needs three bytes
        more = reader.read(len(BOM) - len(first))
        if not more:
            break
        first += more
    pos = 0  # batch offset of the first byte of `carry`
    if first.startswith(BOM):
        first, pos = first[len(BOM):], len(BOM)
        first = first or reader.read(block_size)
    line = 1
    carry = b""
    skipping: list[int] | None = None  # [line, offset, bytes so far, last byte was '\r']
    block = first
    while block:
        if skipping is not None:
            nl = block.find(b"\n")
            if nl < 0:
                skipping[2] += len(block)
                skipping[3] = block.endswith(b"\r")
                block = reader.read(block_size)
                continue
            length = skipping[2] + nl
            pos = skipping[1] + length + 1  # the next line starts after this one's '\n'
            if (block[nl - 1:nl] == b"\r") if nl else skipping[3]:
                length -= 1
            yield LongLine(skipping[0], skipping[1], length)
            line, skipping = line + 1, None
            block = block[nl + 1:]
            if not block:
                block = reader.read(block_size)
                continue
        last = block.rfind(b"\n")
        if last >= 0:  # one copy of the block's lines (the carry joined to them), not two
            whole = b"".join((carry, memoryview(block)[:last + 1])) if carry else block[:last + 1]
            starts = line_starts(whole)
            yield Chunk(whole, line, pos, starts)
            line += len(starts) - 1
            pos += len(whole)
            carry = block[last + 1:]
        else:
            carry += block
        if len(carry) > max_line + 1:  # even without a final '\r' the line is over the limit
            skipping = [line, pos, len(carry), carry.endswith(b"\r")]
            carry = b""
        block = reader.read(block_size)
    if skipping is not None:
        yield LongLine(skipping[0], skipping[1], skipping[2] - (1 if skipping[3] else 0))
    elif carry:
        yield Chunk(carry + b"\n", line, pos, np.array([0, len(carry) + 1], dtype=np.int64))


def iter_memory_chunks(data: bytes, *, max_line: int, chunk_bytes: int = CHUNK_BYTES) -> Iterator[Chunk | LongLine]:
    """`iter_chunks` for a batch already in memory: each chunk is one slice of `data` (the reader's copy and
    the join of a carried line are saved). Chunk boundaries may differ from `iter_chunks`'; what a decoder
    makes of them does not: a line over the limit is a `LongLine` here when no line ends within the block,
    else the decoder rejects it by length inside its chunk, with the same line, offset and length."""
    size, block = len(data), max(chunk_bytes, 1)
    pos = len(BOM) if data.startswith(BOM) else 0
    line = 1
    while pos < size:
        last = data.rfind(b"\n", pos, min(pos + block, size))
        if last < 0:  # no line ends within the block: the line at `pos` is longer than the block
            nl = data.find(b"\n", pos)
            end = size if nl < 0 else nl
            length = end - pos - (1 if end > pos and data[end - 1] == 13 else 0)
            if length > max_line:
                yield LongLine(line, pos, length)
                line, pos = line + 1, end + 1
                continue
            last = end
        whole = data[pos:last + 1] if last < size else data[pos:] + b"\n"
        starts = line_starts(whole)
        yield Chunk(whole, line, pos, starts)
        line += len(starts) - 1
        pos = last + 1
