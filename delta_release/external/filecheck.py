"""The manifest gate's per-file work at the speed of hashing: read, sha256 and parquet footer of every
file, on every core, with the Python work per file cut to what the gate needs.

- Local files are read once, in CHUNK_BYTES `os.read` calls (no buffered-IO objects; a small file is one
  read), each chunk hashed as it arrives, so a large file is never held whole; S3 objects through the
  storage's filesystem. Only regular files are read (a FIFO under a listed name does not block).
- The footer comes from the bytes already read (the whole small file, or the magic + footer of a large
  one: no second read unless a footer is longer than two chunks). A footer of a shape learned earlier in
  the same inspection (`Footers`, `footershape`: a producer's footers differ only in their row-group
  numbers and statistics) is answered from a few byte comparisons (~1.5 us); any other is parsed by
  pyarrow's reader (~30-45 us), without `pq.read_metadata`'s Python wrapping, and teaches a shape.
- Where the work runs (`pool_for`): large or remote files on a thread pool (hashlib and the store
  release the GIL), small local files in the calling thread (the footer reader holds the GIL, so threads
  never ran two at once). See `inspect`.
- The schema is converted to Arrow once per distinct parquet schema, not once per file; the cache key
  is a ParquetSchema made without FileMetaData.schema's reference cycle (`_schema`).
- Small local files are read a chunk at a time, then hashed and footer-checked (`_inspect_files`).
- The partition is listed by one `os.scandir` (`scan_directory`, `local_names`): names only, a read
  file's size being the number of bytes its read hashed.
- Footer statistics become the Delta stats JSON only when `publish` commits (`LazyStats`), in one pass
  with row groups and column chunks fetched once (the same document as
  `stage.candidate.footer_stats`, which stays the reference).
"""

from __future__ import annotations

import errno
import gc
import hashlib
import json
import os
import stat
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from ..stage.candidate import STATS_COLUMNS
from ..storage import Storage
from . import footershape

try:  # the reader under pq.ParquetFile; fall back to the public API if a pyarrow release moves it
    from pyarrow._parquet import ParquetReader as _Reader
except ImportError:  # pragma: no cover
    _Reader = None
try:  # a ParquetSchema made directly holds its FileMetaData, and FileMetaData.schema holds it back: that
    # cycle kept every footer's C++ metadata alive until a garbage collection (~15 us more per file)
    from pyarrow._parquet import ParquetSchema as _ParquetSchema
except ImportError:  # pragma: no cover
    _ParquetSchema = None
WORKERS = max(2, min(4, os.cpu_count() or 2))  # hashlib and the footer decoder release the GIL
CHUNK = 64  # paths per task
CHUNK_BYTES = 8 << 20  # bytes per read: a large file is hashed as it streams, never held whole
MAGIC = b"PAR1"
PARALLEL_MIN_BYTES = 256 << 10  # average local file size from which the thread pool pays
FILES_CHUNK = 256  # small local files read, then hashed and footer-checked, at a time (`_inspect_files`)
MAX_SHAPES = 16  # footer shapes learned per inspection (`Footers`): a producer's files have one or a few


Verdict = tuple[bool, list[str]]  # SchemaCheck's answer: (schema ok, the file's column names)
# One file's answer: (sha256, or "" when no regular file has the name; rows; schema verdict; the footer,
# as FileMetaData or as its bytes (magic, thrift, length, magic) to parse when asked; footer error, the
# exception's type name; the file's bytes when kept; the number of bytes read and hashed, None with "")
Answer = tuple[str, int | None, Verdict | None, "pq.FileMetaData | bytes | None", str | None, bytes | None,
               int | None]


class FileFacts:
    """One file's answer with names: its sha256, and from its parquet footer the row count and the schema
    verdict (`check=`), or the footer error. `meta` is the footer object, parsed from the footer's bytes
    when first asked for if a footer shape answered for the file (bytes the reader would accept)."""

    __slots__ = ("path", "sha256", "rows", "verdict", "_footer", "error", "data", "size")

    def __init__(self, path: str, answer: Answer) -> None:
        self.path = path
        self.sha256, self.rows, self.verdict, self._footer, self.error, self.data, self.size = answer

    @property
    def missing(self) -> bool:
        return not self.sha256

    @property
    def meta(self) -> pq.FileMetaData | None:
        if isinstance(self._footer, bytes):
            self._footer = _footer(self._footer)
        return self._footer


def _footer(data: bytes) -> pq.FileMetaData:
    """The parquet footer of `data` (a whole file, or the magic + footer of one), read by pyarrow's
    reader: it parses under `nogil`, so threads overlap, and a corrupt footer is an exception. (The
    footer-only `_reconstruct_filemetadata` is 3x cheaper but aborts the process on corrupt thrift.)"""
    if _Reader is not None:
        reader = _Reader()
        reader.open(pa.py_buffer(data))
        return reader.metadata
    return pq.read_metadata(pa.BufferReader(data))  # pragma: no cover


def _schema(meta: pq.FileMetaData) -> pq.ParquetSchema:
    """`meta.schema` without the reference cycle (see `_ParquetSchema`)."""
    return meta.schema if _ParquetSchema is None else _ParquetSchema(meta)


class FooterError(ValueError):
    """Not a parquet file, or a footer that does not fit in the file."""


class NotAFile(FileNotFoundError):
    """No regular file under this name (gone, or a directory, FIFO, socket or device)."""


def _footer_span(tail: bytes, size: int) -> int:
    """The length of the footer's thrift bytes, from the last 8 bytes of a file of `size` bytes."""
    if size < 12 or tail[-4:] != MAGIC:
        raise FooterError("no parquet magic at the end of the file")
    length = int.from_bytes(tail[-8:-4], "little")
    if length <= 0 or length + 12 > size:
        raise FooterError(f"footer length {length} does not fit in {size} bytes")
    return length


def _metadata(head: bytes, tail: bytes, size: int) -> pq.FileMetaData:
    """The footer of a file of `size` bytes: `head` holds its first 4 bytes, `tail` its last bytes (the
    whole file when it fit in one read, else at least the footer and its 8-byte trailer)."""
    if head[:4] != MAGIC:
        raise FooterError("no parquet magic at the start of the file")
    length = _footer_span(tail, size)
    if len(tail) == size:
        return _footer(tail)
    return _footer(MAGIC + tail[-8 - length:])  # the footer alone is a file the reader can open


def _local_reader(base: str) -> Any:
    """rel -> (sha256, head, tail bytes holding the footer, size, whole data if it fit in one chunk).

    One pass over the file in CHUNK_BYTES reads with os.read (no buffered-IO objects): each chunk is
    hashed as it arrives (hashlib releases the GIL for it), and the footer is taken from the bytes
    already read. Only a footer longer than the last two chunks is read again (by pread, just it)."""

    def read_local(rel: str) -> tuple[str, bytes, bytes, int, bytes | None]:
        # O_NONBLOCK: a FIFO (or device) under a listed name must not block the gate; only regular files
        # are read (a listing names only those, but the read may start before it)
        try:
            fd = os.open(base + rel, os.O_RDONLY | os.O_NONBLOCK)
        except OSError as exc:
            if exc.errno in (errno.ENOENT, errno.ENOTDIR, errno.ENXIO):
                raise NotAFile(rel) from None
            raise
        try:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode):
                raise NotAFile(rel)
            # ask for the size + 1 (never a CHUNK_BYTES buffer for a tiny file: allocating it costs more
            # than the read); a short read is the end of the file
            want = min(CHUNK_BYTES, st.st_size + 1)
            first = os.read(fd, want)
            nxt = os.read(fd, CHUNK_BYTES) if len(first) == want else b""
            if not nxt:  # the common case: the whole file in one read
                return hashlib.sha256(first).hexdigest(), first, first, len(first), first
            digest = hashlib.sha256(first)
            head, prev, last, size = first[:4], first, nxt, len(first) + len(nxt)
            digest.update(nxt)
            while True:
                block = os.read(fd, CHUNK_BYTES)
                if not block:
                    break
                digest.update(block)
                prev, last = last, block
                size += len(block)
            try:
                need = _footer_span((prev[-8:] + last)[-8:], size) + 8
            except FooterError:
                return digest.hexdigest(), head, (prev[-8:] + last)[-8:], size, None
            if need <= len(last):  # copy only the footer, never the chunks
                tail = last[-need:]
            elif need <= len(last) + len(prev):
                tail = prev[len(prev) + len(last) - need:] + last
            else:  # a footer larger than two chunks: read just it
                tail = os.pread(fd, need, size - need)
            return digest.hexdigest(), head, tail, size, None
        finally:
            os.close(fd)
    return read_local


def _remote_reader(storage: Storage) -> Any:
    def read_remote(rel: str) -> tuple[str, bytes, bytes, int, bytes | None]:
        try:
            data = storage.read_bytes(rel)
        except FileNotFoundError:
            raise NotAFile(rel) from None
        return hashlib.sha256(data).hexdigest(), data, data, len(data), data
    return read_remote


def threads_for(storage: Storage, files: int, total_bytes: int | None) -> int:
    """How many threads `inspect_files` uses for `files` files of `total_bytes` bytes (see there)."""
    small = storage.is_local and (total_bytes is None or total_bytes < PARALLEL_MIN_BYTES * files)
    return 1 if WORKERS < 2 or files < 2 * WORKERS or small else WORKERS


def pool_for(storage: Storage, files: int, total_bytes: int | None) -> tuple[str, int]:
    """("threads" | "none", workers): how `inspect_files` spreads these files."""
    threads = threads_for(storage, files, total_bytes)
    return ("threads", threads) if threads > 1 else ("none", 1)


_MISSING: Answer = ("", None, None, None, None, None, None)


class Footers:
    """The footer check of one inspection: (rows, schema verdict, footer) of a file, or the exception of
    pyarrow's reader (FooterError when there is no footer to read).

    A footer of a shape already learned (`footershape`: a producer's footers differ only in their
    numbers and statistics) is answered from a few byte comparisons: its row count read from its slot,
    the verdict learned with the shape, the footer kept as bytes (parsed when the commit asks for its
    statistics). Any other footer goes to pyarrow's reader (`_read`), and a shape is learned from it
    when the reader accepts it (MAX_SHAPES at most). A footer has a shape only if the reader would read
    it the same way, so answers do not depend on which path gave them."""

    def __init__(self, check: SchemaCheck | None) -> None:
        self.check = check
        self.shapes: dict[int, list[footershape.Shape]] = {}  # by the length of their thrift
        self.learned = 0

    def __call__(self, head: bytes, tail: bytes, size: int) -> tuple[int, Verdict | None, pq.FileMetaData | bytes]:
        if not head.startswith(MAGIC):
            raise FooterError("no parquet magic at the start of the file")
        end = len(tail) - 8
        start = end - _footer_span(tail, size)
        for shape in self.shapes.get(end - start, ()):
            rows = shape.rows(tail, start, end)
            if rows is not None:
                return rows, shape.answer, MAGIC + tail[start:]
        rows, verdict, footer = self._read(head, tail, size, start)
        if self.learned < MAX_SHAPES:
            learned = footershape.learn(tail, start, end, verdict)
            # kept only if it answers this very footer as the reader did (a check of the learning itself)
            if learned is not None and learned.rows(tail, start, end) == rows:
                self.shapes.setdefault(end - start, []).append(learned)
                self.learned += 1
        return rows, verdict, footer

    def _read(self, head: bytes, tail: bytes, size: int, start: int) -> tuple[int, Verdict | None,
                                                                             pq.FileMetaData | bytes]:
        """The reader's answer: (rows, verdict, FileMetaData), or its exception."""
        meta = _metadata(head, tail, size)
        return meta.num_rows, self.check(meta) if self.check is not None else None, meta


def _answer(read: Any, footers: Footers, rel: str, keep_data: bool = False) -> Answer:
    """Read, hash and footer-check one file in this process; an unreadable footer is an error value,
    never an exception, and so is a name with no regular file."""
    try:
        digest, head, tail, size, data = read(rel)
    except NotAFile:
        return _MISSING
    kept = data if keep_data else None
    try:
        rows, verdict, footer = footers(head, tail, size)
    except Exception as exc:  # noqa: BLE001 - any unreadable footer is a gate failure
        return digest, None, None, None, type(exc).__name__, kept, size
    return digest, rows, verdict, footer, None, kept, size


class Answers:
    """The answers of `inspect`, in path order; `close()` (or leaving a `with` block) stops work not yet
    consumed."""

    def __init__(self, answers: Iterator[Answer]) -> None:
        self._facts = answers

    def __iter__(self) -> Iterator[Answer]:
        return self._facts  # a loop over the answers resumes the generator directly, not through __next__

    def __next__(self) -> Answer:
        return next(self._facts)

    def close(self) -> None:
        close = getattr(self._facts, "close", None)
        if close is not None:
            close()

    def __enter__(self) -> Answers:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def inspect_files(storage: Storage, paths: list[str], *, keep_data: bool = False,
                  total_bytes: int | None = None, check: SchemaCheck | None = None) -> Iterator[FileFacts]:
    """FileFacts of each path, in order (`inspect`, with names)."""
    with inspect(storage, paths, keep_data=keep_data, total_bytes=total_bytes, check=check) as answers:
        yield from map(FileFacts, paths, answers)


def inspect(storage: Storage, paths: list[str], *, keep_data: bool = False,
            total_bytes: int | None = None, check: SchemaCheck | None = None) -> Answers:
    """The Answer of each path, in order; with `check`, each readable footer's schema verdict too.

    Where the work runs (`pool_for`):
    - remote objects (the wait for the store releases the GIL), or local files averaging
      PARALLEL_MIN_BYTES or more (`total_bytes`, from the listing; hashing large chunks releases the
      GIL): a thread pool of WORKERS threads.
    - otherwise (small local files) in this thread: pyarrow's footer reader holds the GIL, so threads
      only added hand-offs, and with footer shapes (`Footers`) a small file costs ~8 us here. (Forked
      worker processes for many small files were measured against this and removed, #38 item 6.)
    `keep_data` keeps the bytes of files that fit in one read chunk (None for larger ones)."""
    local = storage.is_local
    read = _local_reader(os.path.join(storage.local_path(), "")) if local else _remote_reader(storage)
    return Answers(_in_threads(storage, read, paths, check, keep_data, total_bytes))


def _in_threads(storage: Storage, read: Any, paths: list[str], check: SchemaCheck | None, keep_data: bool,
                total_bytes: int | None) -> Iterator[Answer]:
    footers = Footers(check)
    if threads_for(storage, len(paths), total_bytes) < 2:
        if storage.is_local and not keep_data:  # chunk by chunk: reads, then hashes and footers (`_inspect_files`)
            base = os.path.join(storage.local_path(), "")
            for i in range(0, len(paths), FILES_CHUNK):
                yield from _inspect_files(base, read, footers, paths[i:i + FILES_CHUNK])
        else:
            yield from (_answer(read, footers, rel, keep_data) for rel in paths)
        return
    # chunks of paths, so that a future per tiny file does not cost more than the file
    size = max(1, min(CHUNK, len(paths) // (4 * WORKERS)))
    chunks = [paths[i:i + size] for i in range(0, len(paths), size)]
    with ThreadPoolExecutor(WORKERS, thread_name_prefix="gate") as pool:
        for answers in pool.map(lambda chunk: [_answer(read, footers, rel, keep_data) for rel in chunk], chunks):
            yield from answers


_GONE = (errno.ENOENT, errno.ENOTDIR, errno.ENXIO)  # no regular file under the name (see `read_local`)


def _inspect_files(base: str, read: Any, footers: Footers, rels: list[str]) -> list[Answer]:
    """The Answers of these local files (no kept data).

    Two passes over the chunk: first every read (system calls only), then every hash and footer (user
    space only). Interleaved, each file's system calls left the footer decoder's code and data cold: the
    decoder took ~40 us per file instead of ~10 us. The common file (regular, smaller than a read chunk,
    not growing) is read inline: one open, fstat, read and close, with no function call or tuple per
    file; anything else goes through `read_local`, which streams (and hashes), and names a vanished or
    irregular file."""
    opn, fstat, rd, close, is_reg = os.open, os.fstat, os.read, os.close, stat.S_ISREG
    flags, limit = os.O_RDONLY | os.O_NONBLOCK, CHUNK_BYTES
    got: list[bytes | tuple[str, bytes, bytes, int, bytes | None] | None] = []  # data, read()'s answer, or None
    for rel in rels:
        data = None
        try:
            fd = opn(base + rel, flags)
        except OSError as exc:
            if exc.errno not in _GONE:
                raise
        else:
            try:
                st = fstat(fd)
                if is_reg(st.st_mode) and st.st_size < limit:
                    data = rd(fd, st.st_size + 1)
                    if len(data) > st.st_size:  # grew since the fstat: read it the general way
                        data = None
            finally:
                close(fd)
        if data is None:
            try:
                got.append(read(rel))
            except NotAFile:
                got.append(None)
        else:
            got.append(data)
    answers: list[Answer] = []
    answer = answers.append
    sha256 = hashlib.sha256
    for item in got:
        if item is None:
            answer(_MISSING)
            continue
        if isinstance(item, bytes):
            digest, head, tail, size = sha256(item).hexdigest(), item, item, len(item)
        else:
            digest, head, tail, size, _ = item
        try:
            count, verdict, footer = footers(head, tail, size)
        except Exception as exc:  # noqa: BLE001 - any unreadable footer is a gate failure
            answer((digest, None, None, None, type(exc).__name__, None, size))
            continue
        answer((digest, count, verdict, footer, None, None, size))
    return answers


class LazyStats(dict[str, str]):
    """path -> Delta stats JSON, computed from the kept footer when first asked for (by the commit of
    `publish`): the gate's decision needs the count and the schema, not the statistics."""

    def __init__(self, names: list[str], fallback: Any) -> None:
        super().__init__()
        self._names = names
        self._fallback = fallback  # path -> stats JSON from the rows, when a footer lacks statistics
        self._footers: dict[str, pq.FileMetaData | bytes] = {}

    def keep(self, path: str, meta: pq.FileMetaData | bytes) -> None:
        """The footer of an accepted file: its metadata, or its bytes (parsed when asked for)."""
        self._footers[path] = meta

    def keep_all(self, pairs: list[tuple[str, pq.FileMetaData | bytes]]) -> None:
        """`keep` of each (path, footer), in one dict update."""
        self._footers.update(pairs)

    def __contains__(self, path: object) -> bool:
        return super().__contains__(path) or path in self._footers

    def __missing__(self, path: str) -> str:
        kept = self._footers.pop(path)  # KeyError for a path the gate did not accept
        meta = _footer(kept) if isinstance(kept, bytes) else kept
        value = footer_stats_json(meta, self._names) or self._fallback(path)
        self[path] = value
        return value


class SchemaCheck:
    """Does a file's parquet schema equal the table's Arrow schema? Converted once per distinct schema."""

    def __init__(self, expected: pa.Schema) -> None:
        self.expected = [(f.name, f.type) for f in expected]
        self._seen: list[tuple[Any, bool]] = []

    def __call__(self, meta: pq.FileMetaData) -> tuple[bool, list[str]]:
        schema = _schema(meta)
        for known, ok in self._seen:
            if schema.equals(known):
                return ok, [] if ok else schema.to_arrow_schema().names
        arrow = schema.to_arrow_schema()
        ok = [(f.name, f.type) for f in arrow] == self.expected
        if len(self._seen) < 16:
            self._seen.append((schema, ok))
        return ok, [] if ok else arrow.names  # the names only matter for a mismatch (and so a cached answer)


def footer_stats_json(meta: pq.FileMetaData, names: list[str]) -> str | None:
    """`stage.candidate.footer_stats(meta)` for a file whose columns are `names` (checked schema)."""
    groups = [meta.row_group(g) for g in range(meta.num_row_groups)]
    groups = [(rg, rg.num_rows) for rg in groups if rg.num_rows != 0]
    mins: dict[str, Any] = {}
    maxs: dict[str, Any] = {}
    nulls: dict[str, int] = {}
    for i, name in enumerate(names):
        count = 0
        lo: Any = None
        hi: Any = None
        want = name in STATS_COLUMNS
        for rg, rows in groups:
            st = rg.column(i).statistics
            if st is None or not st.has_null_count:
                return None
            n = st.null_count
            count += n
            if want and rows > n:
                if not st.has_min_max:
                    return None
                a, b = st.min, st.max
                lo = a if lo is None else min(lo, a)
                hi = b if hi is None else max(hi, b)
        nulls[name] = count
        if lo is not None:
            mins[name], maxs[name] = lo, hi
    return json.dumps({"numRecords": meta.num_rows, "minValues": mins, "maxValues": maxs,
                       "nullCount": nulls}, sort_keys=True)


@contextmanager
def paused_gc() -> Iterator[None]:
    """No cyclic garbage collection inside (restored after, if it was on). The gate allocates ~10 objects
    per file (manifest JSON, answers, inventory) and no cycles; with 10,000 files those allocations set
    off full collections that walk every object of the process (pyarrow, polars, deltalake loaded): ~100
    ms at a time, a third of the parent's time at random points."""
    if not gc.isenabled():
        yield
        return
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


def scan_directory(storage: Storage, prefix: str) -> list[os.DirEntry[str]] | None:
    """The entries of a local store's directory `prefix`, from one `os.scandir` (their types come with the
    directory read: no stat per entry); [] when it does not exist; None on a remote store or when the
    directory cannot be read (the callers then ask the storage)."""
    if not storage.is_local:
        return None
    try:
        with os.scandir(storage.local_path(prefix)) as entries:
            return list(entries)
    except FileNotFoundError:
        return []
    except OSError:
        return None


def local_names(entries: list[os.DirEntry[str]] | None, prefix: str) -> list[str] | None:
    """The path of every file under `prefix`, from its `scan_directory` entries: the names
    `Storage.list(prefix)` answers, without the sizes (the gate takes a read file's size from its read).
    None when that is not certain to be the same answer (no entries; an entry that is a link, a directory
    or anything but a regular file), and the caller lists through the storage."""
    if entries is None or not all(entry.is_file(follow_symlinks=False) for entry in entries):
        return None
    base = prefix.rstrip("/") + "/"
    return [base + entry.name for entry in entries]
