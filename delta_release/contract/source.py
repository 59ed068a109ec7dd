"""A batch as ingest receives it: decoded, identified by its sha256, and able to store itself raw.

`read_batch_file(path)` reads the file once, in bounded chunks, hashing (on a thread, one block behind at
most) and decoding as it goes: memory is about two chunks (16 MiB each) plus the line limit plus the
decoded events, never the whole file.
`store(raw)` then keeps it in the raw store (`RawStore.put_file`): given the store's `RawTee` (`tee=`),
the read writes each block to it as it is hashed and the store links that copy in, so the batch is read
and hashed once; without one (or if its write failed) the store copies the file block by block, checking
its sha256 again. `BytesBatch` gives a batch already in memory the same interface.

A `FileBatch` is a byte range of a file (`offset`, `size`; the whole file by default): a file larger than
the part limit is received as several of them (contract/parts.py), each its own batch whose bytes, id,
line numbers and offsets are those of its range alone.
"""

from __future__ import annotations

import hashlib
import os
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .. import progress
from ..errors import InputError
from .decode import DecodedBatch, decode_batch, decode_stream

if TYPE_CHECKING:
    from ..raw import RawBatch, RawStore

READ_PHASE = "read and decode"  # the phase of progress.INGEST_PHASES / RUN_PHASES this streaming read is


ALIGN_WINDOW = 64 << 10  # where a large read looks for the line break it stops after (`_RangeReader`)


class _RangeReader:
    """At most `length` bytes of a binary file (positioned at the range's start). A read of more than
    ALIGN_WINDOW bytes that stops short of the range's end stops after the last line break of its last
    ALIGN_WINDOW bytes, when there is one (found by a positioned read of that window; the rest comes with
    the next read): the decoder (`lines.iter_chunks`) then takes each block whole, instead of joining the
    line cut at the block's end to the next block, a fresh copy of every block (the 20M-event file's
    2.7 GB: about 660k page faults). Which bytes come out, and in which order, is the same either way."""

    def __init__(self, handle: Any, length: int) -> None:
        self._handle = handle
        self._left = length

    def read(self, n: int = -1) -> bytes:
        if self._left <= 0:
            return b""
        n = self._left if n is None or n < 0 else min(n, self._left)
        if ALIGN_WINDOW < n < self._left:
            n = self._to_line_end(n)
        block: bytes = self._handle.read(n)
        self._left -= len(block)
        return block

    def _to_line_end(self, n: int) -> int:
        """`n`, or fewer bytes ending at the last line break within the last ALIGN_WINDOW bytes of `n`."""
        try:
            start = self._handle.tell() + n - ALIGN_WINDOW
            window = os.pread(self._handle.fileno(), ALIGN_WINDOW, start)
        except (OSError, AttributeError, ValueError):  # not a plain file: read as asked
            return n
        cut = window.rfind(b"\n")
        return n if cut < 0 else n - ALIGN_WINDOW + cut + 1


class _HashingReader:
    """A binary reader that hashes and counts what passes through it, and hands each block after hashing it
    to `tee` (its `write`; the raw store's read-time copy, raw/store.py `RawTee`), if any. The hashing runs
    on a thread of its own (hashlib and the write release the GIL on large blocks) while the decoder works
    on the block, one block at a time: `sha256()` waits for the last. Use as a context manager (the thread
    ends on leaving)."""

    def __init__(self, handle: Any, tee: Any = None) -> None:
        self._handle = handle
        self._tee = tee
        self._digest = hashlib.sha256()
        self._hashing = ThreadPoolExecutor(max_workers=1, thread_name_prefix="batch-sha256")
        self._last: Future[None] | None = None
        self.size = 0

    def __enter__(self) -> _HashingReader:
        return self

    def __exit__(self, *exc: object) -> None:
        self._hashing.shutdown(wait=True)

    def read(self, n: int = -1) -> bytes:
        block: bytes = self._handle.read(n)
        if block:
            progress.advance(len(block), during=READ_PHASE)  # a running `progress.work`'s bar, by bytes read
            if self._last is not None:  # one block in flight: memory stays bounded when reading outruns hashing
                self._last.result()
            self._last = self._hashing.submit(self._consume, block)
        self.size += len(block)
        return block

    def _consume(self, block: bytes) -> None:
        self._digest.update(block)
        if self._tee is not None:
            self._tee.write(block)

    def sha256(self) -> str:
        if self._last is not None:
            self._last.result()
        return self._digest.hexdigest()


def _line_text(read: Any, decoded: DecodedBatch, line: int) -> str:
    offset, length = decoded.span(line)
    return bytes(read(offset, length)).decode("utf-8", errors="backslashreplace")


@dataclass(slots=True)
class FileBatch:
    path: Path
    sha256: str
    size: int  # bytes of the batch (its range of the file)
    decoded: DecodedBatch
    offset: int = 0  # where the batch starts in the file
    tee: Any = None  # the raw store's copy made while the batch was read (`read_batch_file`), or None

    @property
    def batch_id(self) -> str:
        return self.sha256[:16]

    def read(self, offset: int, length: int) -> bytes:
        """Bytes of the batch (offsets relative to its start), never past its end."""
        length = max(0, min(length, self.size - offset))
        with open(self.path, "rb") as handle:
            handle.seek(self.offset + offset)
            return handle.read(length)

    def line_text(self, line: int) -> str:
        return _line_text(self.read, self.decoded, line)

    def store(self, raw: RawStore, *, received: datetime) -> tuple[RawBatch, bool]:
        return raw.put_file(self.path, sha256=self.sha256, extracted=self.decoded.extracted,
                            schema_versions=self.decoded.schema_versions, received=received,
                            offset=self.offset, length=self.size, tee=self.tee)


@dataclass(slots=True)
class BytesBatch:
    data: bytes
    decoded: DecodedBatch

    @property
    def batch_id(self) -> str:
        return hashlib.sha256(self.data).hexdigest()[:16]

    def line_text(self, line: int) -> str:
        return _line_text(lambda off, n: self.data[off:off + n], self.decoded, line)

    def store(self, raw: RawStore, *, received: datetime) -> tuple[RawBatch, bool]:
        return raw.put(self.data, extracted=self.decoded.extracted, schema_versions=self.decoded.schema_versions,
                       received=received)


def read_batch_file(path: str | os.PathLike[str], *, max_line_bytes: int | None = None, offset: int = 0,
                    length: int | None = None, tee: Any = None) -> FileBatch:
    """Hash and decode a batch file in one streaming pass: the whole file, or the `length` bytes at
    `offset` (a part, contract/parts.py: a batch of its own). `tee`: what each block is written to as it
    is hashed (the raw store's `RawTee`, carried by the batch to `store`; discarded if the read fails). A
    missing path or a directory is an InputError."""
    try:
        return _read_batch_file(Path(path), max_line_bytes=max_line_bytes, offset=offset, length=length, tee=tee)
    except BaseException:
        if tee is not None:
            tee.discard()
        raise


def _read_batch_file(p: Path, *, max_line_bytes: int | None, offset: int, length: int | None, tee: Any) -> FileBatch:
    if not p.is_file():
        raise InputError(f"batch file not found: {p}", path=str(p))
    try:
        if length is None:
            length = p.stat().st_size - offset
        progress.phase(READ_PHASE)
        with open(p, "rb") as handle:
            handle.seek(offset)
            with _HashingReader(_RangeReader(handle, length), tee) as reader:

                def reread(start: int, n: int) -> bytes:
                    with open(p, "rb") as again:
                        again.seek(offset + start)
                        return again.read(max(0, min(n, length - start)))

                decoded = decode_stream(reader, reread, max_line_bytes=max_line_bytes)  # type: ignore[arg-type]
                sha256 = reader.sha256()
    except OSError as exc:
        raise InputError(f"cannot read batch file {p}: {exc.strerror or exc}", path=str(p)) from None
    return FileBatch(path=p, sha256=sha256, size=reader.size, decoded=decoded, offset=offset, tee=tee)


def as_batch(source: bytes | FileBatch | BytesBatch) -> FileBatch | BytesBatch:
    """What ingest works on: bytes are decoded in memory, a file batch is already decoded."""
    if isinstance(source, (FileBatch, BytesBatch)):
        return source
    return BytesBatch(data=source, decoded=decode_batch(source))
