"""Raw batches, write-once, named by the sha256 of their bytes.

`<lake>/_raw/<sha256>.jsonl` holds the bytes exactly as received; `<sha256>.meta.json` a small record
(extracted count, received time, schema versions seen). Identical bytes map to the same name, so a
second ingest is detected; different bytes have a different name, so nothing can replace a stored batch.
Nothing in the product, erasure included, rewrites these files.
"""

from __future__ import annotations

import errno
import fcntl
import hashlib
import json
import mmap
import os
import weakref
from dataclasses import asdict, dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import numpy as np

from ..clock import iso
from ..errors import InputError, NotFoundError, SafetyError
from ..faults import crash_point
from ..storage import Storage

PREFIX = "_raw"


def batch_id_of(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()[:16]


@dataclass(frozen=True, slots=True, kw_only=True)
class RawBatch:
    batch_id: str
    sha256: str
    size: int
    extracted: int
    received: str
    schema_versions: list[int]


class RawStore:
    def __init__(self, storage: Storage) -> None:
        self._storage = storage

    def _data_path(self, sha: str) -> str:
        return f"{PREFIX}/{sha}.jsonl"

    def _meta_path(self, sha: str) -> str:
        return f"{PREFIX}/{sha}.meta.json"

    def local_file(self, sha: str) -> Path | None:
        """The file holding a batch's bytes on a local lake (None on an object store): read it in place."""
        return self._storage.local_path(self._data_path(sha)) if self._storage.is_local else None

    def put(self, data: bytes, *, extracted: int, schema_versions: list[int],
            received: datetime) -> tuple[RawBatch, bool]:
        """Store the batch if new. Returns its record and whether this call stored it."""
        sha = hashlib.sha256(data).hexdigest()
        created = self._storage.write_once(self._data_path(sha), data)
        if not created:
            stored = self._storage.read_bytes(self._data_path(sha))
            if hashlib.sha256(stored).hexdigest() != sha:
                raise SafetyError(f"raw batch {sha[:16]} on storage does not match its name (damaged); refused",
                                  batch_id=sha[:16])
        record = RawBatch(batch_id=sha[:16], sha256=sha, size=len(data), extracted=extracted,
                          received=iso(received), schema_versions=list(schema_versions))
        meta = json.dumps(asdict(record), sort_keys=True).encode()
        if not self._storage.write_once(self._meta_path(sha), meta) and not created:
            record = self.get(sha[:16])
        return record, created

    def put_file(self, path: str | os.PathLike[str], *, sha256: str, extracted: int, schema_versions: list[int],
                 received: datetime, offset: int = 0, length: int | None = None,
                 tee: RawTee | None = None) -> tuple[RawBatch, bool]:
        """Store a batch file if new, streaming it (see `_put_file`): the whole file, or the `length` bytes
        at `offset` (one part of a file received in parts), stored byte-identical to that slice; `tee`: the
        copy made while the batch was read and hashed, linked in instead of copying again. Returns its
        record and whether this call stored it."""
        try:
            return _put_file(self, path, sha256=sha256, extracted=extracted, schema_versions=schema_versions,
                             received=received, offset=offset, length=length, tee=tee)
        finally:
            if tee is not None:
                tee.discard()

    def tee(self) -> RawTee | None:
        """A temp file on the raw store's filesystem for the copy of a batch made while it is read
        (`RawTee`); None on an object store (the batch is uploaded from the file)."""
        if not self._storage.is_local:
            return None
        return RawTee(self._storage.temp_path(str(self._storage.local_path(PREFIX))))

    def _sha_for(self, batch_id: str) -> str:
        for obj in self._storage.list(PREFIX, recursive=False):
            name = obj.path.rsplit("/", 1)[-1]
            if name.startswith(batch_id) and name.endswith(".jsonl"):
                return name.removesuffix(".jsonl")
        raise NotFoundError(f"raw batch {batch_id} is not in the raw store", batch_id=batch_id)

    def get(self, batch_id: str) -> RawBatch:
        sha = self._sha_for(batch_id)
        return self._record(sha, has_meta=self._storage.exists(self._meta_path(sha)))

    def _record(self, sha: str, *, has_meta: bool) -> RawBatch:
        if not has_meta:
            data = self._storage.read_bytes(self._data_path(sha))
            return RawBatch(batch_id=sha[:16], sha256=sha, size=len(data), extracted=-1, received="",
                            schema_versions=[])
        return RawBatch(**json.loads(self._storage.read_bytes(self._meta_path(sha))))

    def read(self, batch_id: str) -> bytes:
        return self.read_sha(self._sha_for(batch_id))

    def read_sha(self, sha: str) -> bytes:
        """A batch's bytes by its full sha256 (a `RawBatch.sha256` from `list`): no listing of the store,
        which `read(batch_id)` needs to find the name; checked against the name as `read` does."""
        data = self._storage.read_bytes(self._data_path(sha))
        if hashlib.sha256(data).hexdigest() != sha:
            raise SafetyError(f"raw batch {sha[:16]} on storage does not match its sha256 (damaged); refused",
                              batch_id=sha[:16])
        return data

    def list(self) -> list[RawBatch]:
        """Every stored batch's record, oldest received first: ONE listing of the store, then each meta
        record read by its name (before: `get` per batch re-listed the whole store, quadratic in batches)."""
        names = {obj.path.rsplit("/", 1)[-1] for obj in self._storage.list(PREFIX, recursive=False)}
        out = [self._record(name.removesuffix(".jsonl"), has_meta=f"{name.removesuffix('.jsonl')}.meta.json" in names)
               for name in names if name.endswith(".jsonl")]
        return sorted(out, key=lambda b: (b.received, b.batch_id))


COPY_BLOCK = 8 << 20


class RawTee:
    """The copy of a batch's bytes made while they are read and hashed (`read_batch_file(..., tee=)`: each
    block written after it is hashed), so the store links this file in (`put_file(..., tee=)`) instead of
    reading the batch again, hashing it again and writing it: every input byte is read and hashed once,
    and the stored bytes are the ones hashed, by construction. A temp file in `_tmp` (host and pid in its
    name: the next writer sweeps it if we die), removed when the store is done with it or when the tee is
    dropped unused. A write that fails (a full disk) only makes it unusable: the store then copies the
    batch as before, and reports that copy's error."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.size = 0
        self._handle: Any = _open_copy(path)
        self._failed = False
        self._gone = weakref.finalize(self, _remove_tee, self._handle, path)

    def write(self, block: bytes | memoryview) -> None:
        if self._failed:
            return
        try:
            self._handle.write(block)
            self.size += len(block)
        except OSError:
            self._failed = True

    def durable(self, size: int) -> bool:
        """Flush and fsync the copy; False (unusable) when a write failed or it does not hold `size` bytes."""
        if self._failed or self.size != size:
            return False
        try:
            self._handle.flush()
            os.fsync(self._handle.fileno())
        except (OSError, ValueError):
            return False
        return True

    def discard(self) -> None:
        self._gone()


DIRECT_BLOCK = 8 << 20  # the read-time copy's writes past the page cache: whole blocks of this size
DIRECT_ALIGN = 4096  # the offset, length and buffer address alignment O_DIRECT asks for (any block device's)


def _open_copy(path: str) -> Any:
    """The read-time copy's file: written past the page cache (`DirectWriter`) where the filesystem allows
    O_DIRECT, else a plain buffered file."""
    flag = getattr(os, "O_DIRECT", 0)
    if flag:
        try:
            return DirectWriter(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC | flag, 0o666))
        except OSError:  # EINVAL: a filesystem without O_DIRECT (tmpfs before Linux 6.6, some FUSE)
            pass
    return open(path, "wb")  # noqa: SIM115 - closed by close/discard or the finalizer


class DirectWriter:
    """A write-only file written with O_DIRECT: the bytes are gathered in one page-aligned buffer and written
    DIRECT_BLOCK at a time; `flush` writes the rest padded to DIRECT_ALIGN and cuts the file back to its
    length. The raw copy is written once and never read back while it is hot, so the page cache only cost:
    a buffered write of the 20M-event file's 2.7 GB took 4.5-9 s of kernel CPU on this machine, O_DIRECT
    0.4-0.5 s (`fsync` still makes it durable: the file's size and extents). A write the device refuses
    (EINVAL: an alignment it does not take) turns O_DIRECT off for the rest of the file."""

    def __init__(self, fd: int) -> None:
        self._fd = fd
        self._buffer = mmap.mmap(-1, DIRECT_BLOCK)  # anonymous: page-aligned
        self._bytes: Any = np.frombuffer(self._buffer, dtype=np.uint8)  # copies release the GIL
        self._fill = 0
        self._direct = True

    def write(self, block: bytes | memoryview) -> int:
        data = np.frombuffer(block, dtype=np.uint8)
        done = 0
        while done < len(data):
            n = min(len(data) - done, DIRECT_BLOCK - self._fill)
            self._bytes[self._fill:self._fill + n] = data[done:done + n]
            self._fill += n
            done += n
            if self._fill == DIRECT_BLOCK:
                self._drain(DIRECT_BLOCK)
        return done

    def flush(self) -> None:
        """Everything written so far onto the file (not yet durable: `fsync`)."""
        if not self._fill:
            return
        size = os.lseek(self._fd, 0, os.SEEK_CUR) + self._fill
        padded = -(-self._fill // DIRECT_ALIGN) * DIRECT_ALIGN if self._direct else self._fill
        self._bytes[self._fill:padded] = 0
        self._drain(padded)
        os.ftruncate(self._fd, size)
        os.lseek(self._fd, size, os.SEEK_SET)

    def _drain(self, n: int) -> None:
        view = memoryview(self._buffer)[:n]
        try:
            written = 0
            while written < n:
                try:
                    written += os.write(self._fd, view[written:])
                except OSError as exc:
                    if not (self._direct and exc.errno == errno.EINVAL):
                        raise
                    fcntl.fcntl(self._fd, fcntl.F_SETFL, fcntl.fcntl(self._fd, fcntl.F_GETFL) & ~os.O_DIRECT)
                    self._direct = False
        finally:
            view.release()
        self._fill = 0

    def fileno(self) -> int:
        return self._fd

    def close(self) -> None:
        if self._fd >= 0:
            fd, self._fd = self._fd, -1
            os.close(fd)


def _remove_tee(handle: Any, path: str) -> None:
    try:
        handle.close()
    except OSError:
        pass
    Path(path).unlink(missing_ok=True)


def _link_tee(storage: Storage, tee: RawTee, final: Path, *, size: int) -> bool | None:
    """Hard-link the read-time copy (`RawTee`) to `final` once it is durable (write-once: False when another
    writer stored the same name first); None when it cannot serve (a failed write, another filesystem):
    the caller copies the batch."""
    if not tee.durable(size):
        return None
    crash_point("storage.after_temp:_raw")
    try:
        os.link(tee.path, final)
        return True
    except FileExistsError:
        return False
    except OSError as exc:
        if storage.cross_device(exc, str(final.parent)):
            return None
        raise


def _link_copy(storage: Storage, path: str | os.PathLike[str], final: Path, *, offset: int, size: int,
               sha256: str, retry: bool = True) -> bool:
    """Copy the batch into a temp file on `final`'s filesystem, fsync it, check its hash and hard-link it
    to `final` (write-once: False when another writer stored the same name first). The temp file is in a
    `_tmp` folder, host and pid in its name: the next writer start sweeps it if we die; we remove it."""
    tmp = Path(storage.temp_path(str(final.parent)))
    try:
        with open(path, "rb") as src, open(tmp, "wb") as out:
            src.seek(offset)
            digest = _copy(src, out, size, reuse=True)
            out.flush()
            os.fsync(out.fileno())
        crash_point("storage.after_temp:_raw")
        _check_same(digest, sha256, path)
        try:
            os.link(tmp, final)  # write-once: fails if another writer stored the same name first
            return True
        except FileExistsError:
            return False
        except OSError as exc:  # EXDEV: `_raw` is on another filesystem; copy again into its own `_tmp`
            if not (retry and storage.cross_device(exc, str(final.parent))):
                raise
            return _link_copy(storage, path, final, offset=offset, size=size, sha256=sha256, retry=False)
    finally:
        tmp.unlink(missing_ok=True)


def _put_file(store: RawStore, path: str | os.PathLike[str], *, sha256: str, extracted: int,
              schema_versions: list[int], received: datetime, offset: int = 0,
              length: int | None = None, tee: RawTee | None = None) -> tuple[RawBatch, bool]:
    """`RawStore.put_file`: copy a batch file (or its byte range `offset`, `length`) into the store in
    blocks (memory: one block), under the sha256 the caller computed while decoding; the copy is hashed
    again, so a file that changed in between is refused rather than stored under the wrong name."""
    storage = store._storage
    rel = store._data_path(sha256)
    size = Path(path).stat().st_size - offset if length is None else length
    if storage.exists(rel):
        created = False
    elif storage.is_local:
        final = storage.local_path(rel)
        final.parent.mkdir(parents=True, exist_ok=True)
        linked = None if tee is None else _link_tee(storage, tee, final, size=size)
        created = linked if linked is not None else _link_copy(storage, path, final, offset=offset, size=size,
                                                               sha256=sha256)
    else:
        with open(path, "rb") as src, storage.fs.open_output_stream(storage.uri(rel).removeprefix("s3://")) as out:
            src.seek(offset)
            digest = _copy(src, out, size)
        _check_same(digest, sha256, path)
        created = True
    record = RawBatch(batch_id=sha256[:16], sha256=sha256, size=size, extracted=extracted,
                      received=iso(received), schema_versions=list(schema_versions))
    meta = json.dumps(asdict(record), sort_keys=True).encode()
    if not storage.write_once(store._meta_path(sha256), meta) and not created:
        record = store.get(sha256[:16])
    return record, created


def _copy(src: Any, out: Any, length: int, *, reuse: bool = False) -> str:
    """Copy `length` bytes (fewer if the file ends first: the digest check then refuses it). `reuse`: read
    every block into one buffer (`out` copies what it is given, as a local file does): a fresh 8 MiB
    block each read was 2,048 page faults, about a fifth of the raw copy's CPU. Not for an object store's
    stream, which may hold a large block by reference until it is uploaded."""
    digest = hashlib.sha256()
    view = memoryview(bytearray(min(COPY_BLOCK, max(length, 1)))) if reuse else None
    while length > 0:
        if view is not None:
            n = src.readinto(view[:min(COPY_BLOCK, length)])
            if not n:
                break
            block: Any = view[:n]
        elif not (block := src.read(min(COPY_BLOCK, length))):
            break
        digest.update(block)
        out.write(block)
        length -= len(block)
    return digest.hexdigest()


def _check_same(digest: str, sha256: str, path: str | os.PathLike[str]) -> None:
    if digest != sha256:
        raise InputError(f"batch file changed while it was being ingested: {path}", path=str(path))
