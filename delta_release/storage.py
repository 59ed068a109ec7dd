"""One lake root on local disk or an S3-compatible store, through pyarrow's filesystem layer.

Everything the product writes outside the Delta log (raw batches, quarantine, evidence) goes through
`Storage`, so the same code runs on a local directory and on `s3://bucket/prefix`.

Writes that must not race are conditional, and really so on both stores:
- `write_once` (create-only): local disk takes the final name with a hard link (fails if the name
  exists); S3 sends `PUT` with `If-None-Match: *` (through `obstore`, the Python binding of the same Rust
  `object_store` crate deltalake commits with; pyarrow's S3 filesystem cannot send the header).
- `replace_if` (compare-and-swap): S3 sends `PUT` with `If-Match: <etag>`; local disk compares and
  replaces under an exclusive `flock` on a sibling lock file.
`read_tagged` and `list_after` (a listing that starts after a key, S3's `start-after`) serve the
lake-resident catalog, which must find the newest record without listing all of history.
"""

from __future__ import annotations

import errno
import fcntl
import hashlib
import io
import mmap
import os
import re
import shutil
import socket
import tempfile
import time
import uuid
from collections.abc import Callable, Collection, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager, suppress
from dataclasses import dataclass, replace
from datetime import timedelta
from pathlib import Path
from typing import Any, BinaryIO
from urllib.parse import unquote

import pyarrow.fs as pafs

from . import s3config
from .errors import InputError
from .faults import crash_point

# Temporary files: `<root>/_tmp/.tmp-<host>-<pid>-<uuid>`, ONE flat folder per storage root (a `child`
# storage shares its parent's; the folder is created on demand), written, fsynced, then renamed or linked
# to the final name: the folder is under the root, so on the same filesystem as every final name. A writer
# killed in between leaves one behind, holding whatever it was writing, so every writer start lists the
# temp folders of the roots it writes into (quarantine/temp_sweep.py: never a walk of the lake), and every
# erasure and `vacuum` walk the whole lake (`temp_files`, `sweep_temp` without `under`: `_tmp` and the
# temp files an earlier version left next to their final names). A temp file is stale when the process
# that wrote it is gone (same host, pid not running) or it is older than the grace. A temp FOLDER of the
# same name (an ingest's spill, parts.py) is one temp file to the sweeps: stale once its process is gone,
# never while that process runs on this host (a long ingest plans from it for hours), removed whole.
# Durability is what it was when temps sat next to their final names: the data is fsynced before the
# rename/link (except `write_once(durable=False)`, whose caller syncs the file and its folder later: staged
# files, `sync`, docs/architecture.md decision 12) and no other directory is fsynced, before or now (a
# rename or link across two directories of one filesystem is one journal transaction on ext4/xfs, as it
# was within one; after a power cut a new name may be missing, as before, never half-written). A `_tmp`
# lost in a power cut costs nothing: no reader looks there.
# Another filesystem below a root (a disk mounted at, or a symlink from, `lake/_index` or `lake/_raw`): a
# rename or link from the root's `_tmp` fails with EXDEV. The write then learns the folder just below the
# filesystem boundary (the topmost folder of the final name's path, below the root, on the final name's
# device: `_OTHER_FS`), writes again into that folder's `_tmp` and renames/links from there; every later
# write of the process below that folder goes there directly (the common case pays nothing: no stat, no
# lookup unless something was learned). Same guarantees: a link never overwrites, the crash points keep
# their names, the data is fsynced first, a killed write leaves a `.tmp-*` file in a `_tmp` folder. The
# writer start lists the `_tmp` of every top-level folder of the lake root and of every index root too
# (temp_sweep.py); a boundary deeper than those is covered by the full walks of vacuum and erasure only.
TEMP_PREFIX = ".tmp-"
TEMP_DIR = "_tmp"  # under every storage root (Delta readers and delta-rs ignore `_`-prefixed folders)
TEMP_GRACE_SECONDS = 3600.0
HOST_TAG = hashlib.sha256(socket.gethostname().encode()).hexdigest()[:8]
_TEMP_NAME = re.compile(r"\.tmp-(?:(?P<host>[0-9a-f]{8})-(?P<pid>\d{1,10})-)?[0-9a-f]{32}")
# What a write stores: bytes, or a function that writes them through a seekable binary file (a large file
# made a piece at a time, e.g. a key index merge: never whole in memory on local disk; on S3 it is
# collected into one buffer, as a single PUT needs). The function may be called again (a retried write).
Body = bytes | bytearray | Callable[[BinaryIO], None]
_SKIP_DIRS = frozenset({"_delta_log", "_catalog"})
# a root's temp folder -> the folders below that root that sit on another filesystem, deepest first
_OTHER_FS: dict[str, tuple[str, ...]] = {}


@dataclass(frozen=True, slots=True, kw_only=True)
class TempFile:
    path: str  # relative to the storage root
    size: int
    age_seconds: float
    state: str  # "abandoned" (its writer is gone), "expired" (older than the grace) or "in_flight"

    @property
    def stale(self) -> bool:
        return self.state != "in_flight"

    def to_json(self) -> dict[str, object]:
        return {"path": self.path, "size": self.size, "age_seconds": round(self.age_seconds, 3),
                "state": self.state}


def temp_name() -> str:
    """A fresh temp file name (no directory) that the sweeps can attribute to this host and process. Code
    writing a temp file under the lake gets a full path from `Storage.temp_path` (the storage's `_tmp`)."""
    return f"{TEMP_PREFIX}{HOST_TAG}-{os.getpid()}-{uuid.uuid4().hex}"


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OverflowError, ValueError):
        return True  # someone else's process, or a number we cannot ask about: assume it runs
    return True


def temp_state(name: str, age_seconds: float, grace_seconds: float) -> str | None:
    """The state of a temp file called `name` (None: not one of ours)."""
    match = _TEMP_NAME.fullmatch(name)
    if match is None:
        return None
    pid = match.group("pid")
    if pid is not None and match.group("host") == HOST_TAG and int(pid) != os.getpid() and not _pid_alive(int(pid)):
        return "abandoned"
    return "expired" if age_seconds > grace_seconds else "in_flight"


def _temp_folder(entry: os.DirEntry[str], now: float, grace_seconds: float) -> TempFile | None:
    """A temp folder (`.tmp-<host>-<pid>-<uuid>`: an ingest's spill) as a TempFile (path: its full path;
    size: its files' bytes). Its process still running on this host keeps it in flight whatever its age (a
    long ingest plans for hours from the same spill); else it is stale as a temp file would be."""
    match = _TEMP_NAME.fullmatch(entry.name)
    if match is None:
        return None
    try:
        st = entry.stat(follow_symlinks=False)
        files = list(os.scandir(entry.path))
        size = sum(f.stat(follow_symlinks=False).st_size for f in files if f.is_file(follow_symlinks=False))
    except FileNotFoundError:
        return None  # removed by its writer meanwhile
    age = max(0.0, now - max([st.st_mtime, *(f.stat(follow_symlinks=False).st_mtime for f in files)]))
    pid = match.group("pid")
    if pid is not None and match.group("host") == HOST_TAG and (int(pid) == os.getpid() or _pid_alive(int(pid))):
        state = "in_flight"
    else:
        state = temp_state(entry.name, age, grace_seconds) or "in_flight"
    return TempFile(path=entry.path, size=size, age_seconds=age, state=state)


SPILL_ROOT = "delta-release-spill"


def local_spill_root() -> str:
    """Where an ingest into an object-store lake spills (parts.py): a folder in the system temp folder
    (`$TMPDIR`) holding one `.tmp-<host>-<pid>-<uuid>` folder per ingest, swept by `sweep_local_spills`."""
    return os.path.join(tempfile.gettempdir(), SPILL_ROOT)


def sweep_local_spills(grace_seconds: float = TEMP_GRACE_SECONDS) -> list[TempFile]:
    """Remove the stale spill folders in the local spill root (a killed ingest's into an object-store
    lake); returns them (full paths). The folders of running processes stay."""
    root = local_spill_root()
    try:
        entries = list(os.scandir(root))
    except (FileNotFoundError, NotADirectoryError):
        return []
    now = time.time()
    stale = [t for e in entries if e.is_dir(follow_symlinks=False)
             and (t := _temp_folder(e, now, grace_seconds)) is not None and t.stale]
    for t in stale:
        shutil.rmtree(t.path, ignore_errors=True)
    return stale


@dataclass(frozen=True, slots=True, kw_only=True)
class ObjectInfo:
    path: str  # relative to the storage root, '/'-separated
    size: int
    tag: str | None = None  # the object's version tag (S3 ETag) when the listing gives one


def _object_store(root_base: str, options: dict[str, str]) -> Any:
    """An obstore S3Store for `bucket/prefix` (conditional puts, start-after listings, tagged reads)."""
    from obstore.store import S3Store

    bucket, _, prefix = root_base.partition("/")
    config, client = s3config.obstore_config(options)
    # object_store retries for up to 3 minutes by default; an unreachable store should fail in seconds
    retry = {"max_retries": 3, "retry_timeout": timedelta(seconds=30)}
    return S3Store(bucket, prefix=prefix or None, config=config, client_options=client,  # type: ignore[arg-type]
                   retry_config=retry)  # type: ignore[arg-type]


def _s3_filesystem(options: dict[str, str]) -> pafs.S3FileSystem:
    return pafs.S3FileSystem(**s3config.pyarrow_s3_kwargs(options), allow_bucket_creation=False)


SPOOL_BLOCK = 8 << 20


@contextmanager
def _spooled(data: Body) -> Iterator[bytes | bytearray | mmap.mmap]:
    """The bytes of `data` for one upload: bytes as given; a writing function's output written to an unnamed
    local temp file (the system temp folder, `$TMPDIR`) and memory-mapped, so an index merge of gigabytes
    is sent from file pages the kernel can drop, never collected on the heap. The function runs to the end
    before anything is sent: one that fails leaves no object behind."""
    if not callable(data):
        yield data
        return
    with tempfile.TemporaryFile(prefix="delta-release-") as handle:
        data(handle)
        handle.flush()
        if handle.seek(0, io.SEEK_END) == 0:
            yield b""
            return
        mapped = mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ)
        try:
            yield mapped
        finally:
            mapped.close()


SYNC_THREADS = 8  # fsyncs in flight at once (`Storage.sync`)


def _fsync(path: str) -> None:
    """fsync a file or a folder by its path (a read-only descriptor: Linux and the BSDs flush through it)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def map_file(handle: BinaryIO) -> tuple[bytes | mmap.mmap, mmap.mmap | None]:
    """An open file's bytes as a read-only memory map, and the map (b"" and None for an empty file, which
    cannot be mapped); the map outlives the handle and the file's name."""
    if handle.seek(0, io.SEEK_END) == 0:
        return b"", None  # (an empty file cannot be mapped)
    mapped = mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ)
    return mapped, mapped


class Storage:
    """A root URI plus the filesystem that serves it. Paths given to methods are relative to the root."""

    def __init__(self, root: str, storage_options: dict[str, str] | None = None) -> None:
        # an s3:// root's settings: explicit, then the AWS_* variables, then the profile (s3config.py)
        self.storage_options = s3config.resolve(root, storage_options)
        self._store: Any = None
        if root.startswith("s3://"):
            self.is_local = False
            self.fs: pafs.FileSystem = _s3_filesystem(self.storage_options)
            # as given: a `#` or `?` is part of the key (lakeroot refuses it), not a fragment or query
            self._base = root.removeprefix("s3://").rstrip("/")
            self.root = "s3://" + self._base
        elif "://" in root and not root.startswith("file://"):
            raise InputError(f"unsupported lake URI scheme: {root!r} (use a local path or s3://)", uri=root)
        else:
            # a file:// URI is percent-encoded (file:///tmp/my%20lake is /tmp/my lake); a path is as typed
            local = Path(unquote(root.removeprefix("file://")) if root.startswith("file://") else root).resolve()
            self.is_local = True
            self.fs = pafs.LocalFileSystem()
            self._base = str(local)
            self.root = str(local)
        self._temp_dir = f"{self._base}/{TEMP_DIR}"  # where its temp files go (local disk): `child` may share

    def child(self, rel: str) -> Storage:
        """A Storage rooted at a sub-path (e.g. an index root). It writes its temp files into this
        storage's `_tmp` (one temp folder for the lake's own files), unless the sub-path resolves outside
        this root (a symlink: maybe another filesystem), where it gets its own. (A mount below the root:
        the first write there learns its own `_tmp`, `cross_device`.)"""
        sub = Storage(self.uri(rel), self.storage_options)
        if sub._base.startswith(self._base + "/"):
            sub._temp_dir = self._temp_dir
        return sub

    def uri(self, rel: str = "") -> str:
        rel = rel.strip("/")
        return f"{self.root}/{rel}" if rel else self.root

    def _full(self, rel: str) -> str:
        rel = rel.strip("/")
        return f"{self._base}/{rel}" if rel else self._base

    def location_uri(self, location: str) -> str:
        """A catalog location as a URI: a relative one is under this root, an absolute path or URI as is."""
        return location if "://" in location or location.startswith("/") else self.uri(location)

    def full_path(self, rel: str = "") -> str:
        """`rel` as a path of `self.fs` (for pyarrow datasets over several files)."""
        return self._full(rel)

    def local_path(self, rel: str = "") -> Path:
        if not self.is_local:
            raise InputError("this operation needs a local lake", uri=self.root)
        return Path(self._full(rel))

    def exists(self, rel: str) -> bool:
        return bool(self.fs.get_file_info(self._full(rel)).type != pafs.FileType.NotFound)

    def size(self, rel: str) -> int | None:
        info = self.fs.get_file_info(self._full(rel))
        return None if info.type == pafs.FileType.NotFound else int(info.size)

    def read_bytes(self, rel: str) -> bytes:
        with self.fs.open_input_stream(self._full(rel)) as stream:
            return bytes(stream.read())

    def read_mapped(self, rel: str) -> tuple[bytes | mmap.mmap, mmap.mmap | None]:
        """`rel`'s bytes as a memory map, and the map (None for an empty file, read as b""): on local disk the
        file itself; on an object store a copy streamed into an unnamed local temp file (`$TMPDIR`), so a
        large object is held in file pages the kernel can drop, not on the heap, and the caller may release
        the pages of a range it is done with (madvise). The map outlives the file's name.
        FileNotFoundError when it is gone."""
        if self.is_local:
            with open(self._full(rel), "rb") as handle:
                return map_file(handle)
        with tempfile.TemporaryFile(prefix="delta-release-") as handle:
            with self.fs.open_input_stream(self._full(rel)) as stream:
                while block := stream.read(SPOOL_BLOCK):
                    handle.write(block)
            handle.flush()
            return map_file(handle)

    def open_input(self, rel: str) -> pafs.NativeFile:
        return self.fs.open_input_file(self._full(rel))

    def read_ranges(self, rel: str, ranges: list[tuple[int, int]]) -> list[bytes]:
        """The bytes [start, end) of `rel` for each range (fewer at the end of the file): on local disk by
        pread, on S3 one ranged GET each, up to 16 at a time (object_store's get_ranges would merge ranges
        up to 1 MiB apart: most of a large file for scattered blocks). FileNotFoundError when it is gone."""
        if not ranges:
            return []
        if self.is_local:
            fd = os.open(self._full(rel), os.O_RDONLY)
            try:
                return [os.pread(fd, end - start, start) for start, end in ranges]
            finally:
                os.close(fd)
        import obstore
        from obstore.exceptions import NotFoundError

        store, key = self._obstore(), rel.strip("/")

        def one(r: tuple[int, int]) -> bytes:
            return bytes(obstore.get_range(store, key, start=r[0], end=r[1])) if r[1] > r[0] else b""

        try:
            if len(ranges) == 1:
                return [one(ranges[0])]
            with ThreadPoolExecutor(max_workers=16) as pool:
                return list(pool.map(one, ranges))
        except NotFoundError as exc:
            raise FileNotFoundError(f"{self.uri(rel)} is gone") from exc

    def temp_path(self, parent: str | None = None) -> str:
        """A fresh full path in this storage's temp folder (local disk), which exists on return; with
        `parent` (the full path of the final name's directory), in the temp folder on its filesystem."""
        temp_dir = self._temp_dir if parent is None else self._temp_dir_for(parent)
        os.makedirs(temp_dir, exist_ok=True)
        return f"{temp_dir}/{temp_name()}"

    def _temp_dir_for(self, parent: str) -> str:
        if self._temp_dir not in _OTHER_FS:  # the common case: nothing learned (no EXDEV in this process)
            return self._temp_dir
        return next((f"{d}/{TEMP_DIR}" for d in _OTHER_FS[self._temp_dir]
                     if parent == d or parent.startswith(d + "/")), self._temp_dir)

    def cross_device(self, exc: OSError, parent: str) -> bool:
        """True when `exc` (from a rename or link of a temp file into the directory `parent`) says the
        temp folder is on another filesystem, and a temp folder on `parent`'s own filesystem is now
        known: the caller writes its temp file again (`temp_path(parent)`) and retries once."""
        if exc.errno != errno.EXDEV:
            return False
        before = self._temp_dir_for(parent)
        top = self._temp_dir.rsplit("/", 1)[0]  # the root that owns the temp folder
        device = os.stat(parent).st_dev
        folder = parent
        while True:  # climb to the folder just below the filesystem boundary, staying below the root
            up = folder.rsplit("/", 1)[0]
            if not up.startswith(top + "/") or os.stat(up).st_dev != device:
                break
            folder = up
        if f"{folder}/{TEMP_DIR}" == before:
            return False  # nowhere else to go (the temp folder is the mount): let the EXDEV stand
        known = {*_OTHER_FS.get(self._temp_dir, ()), folder}
        _OTHER_FS[self._temp_dir] = tuple(sorted(known, key=len, reverse=True))
        return True

    def _write_temp(self, parent: str, data: Body, mode: int | None = None, *,
                    durable: bool = True) -> str:
        """Write `data` durably (fsync; not with durable=False) under a fresh temporary name in the temp
        folder (local disk) on `parent`'s filesystem; returns that path. `parent` is the final name's
        directory: the crash point `storage.after_temp:<its top-level dir>` dies with the temp file
        written, not yet renamed."""
        tmp = self.temp_path(parent)
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666 if mode is None else mode)
        try:
            with os.fdopen(fd, "wb") as handle:
                if callable(data):
                    data(handle)
                else:
                    handle.write(data)
                handle.flush()
                if durable:
                    os.fsync(handle.fileno())
        except BaseException:  # (a writing function that fails, a full disk: no temp file is left)
            with suppress(FileNotFoundError):
                os.unlink(tmp)
            raise
        crash_point("storage.after_temp:" + parent[len(self._base) + 1:].split("/", 1)[0])
        return tmp

    def _move_in(self, parent: str, full: str, data: Body, mode: int | None = None, *,
                 durable: bool = True, link: bool = False, retry: bool = True) -> bool:
        """Write `data` to a temp file, then rename it onto `full` (replacing it), or with `link` hard-link
        it there (create-only: False when `full` exists). The temp file is gone either way. On EXDEV the
        write is done again once in the temp folder on `full`'s filesystem (`cross_device`)."""
        tmp = self._write_temp(parent, data, mode, durable=durable)
        moved = False
        try:
            if link:
                os.link(tmp, full)
            else:
                os.replace(tmp, full)
                moved = True
            return True
        except FileExistsError:
            if not link:
                raise
            return False
        except OSError as exc:
            if not (retry and self.cross_device(exc, parent)):
                raise
            return self._move_in(parent, full, data, mode, durable=durable, link=link, retry=False)
        finally:
            if not moved:
                with suppress(FileNotFoundError):
                    os.unlink(tmp)

    def write_ahead(self, folder: str, data: Body) -> str:
        """Local disk only: `data` written durably under a fresh temp name on the filesystem of `folder`, before
        anyone knows which name in it the bytes will take (`link_ahead` then takes it, or the caller removes
        the temp file; a killed writer's is swept with the temp folder)."""
        assert self.is_local, "write_ahead: local storage only"
        parent = self._full(folder)
        self._ensure_dir(parent)
        return self._write_temp(parent, data)

    def link_ahead(self, tmp: str, rel: str) -> bool | None:
        """`write_once(rel, ...)` of the bytes `write_ahead` wrote to `tmp`: True when this call created `rel`,
        False when it existed; None when `tmp` cannot be linked there (another filesystem, or it is gone: a
        sweep of the temp folder): the caller writes `rel` itself. The temp file is removed either way."""
        full = self._full(rel)
        try:
            os.link(tmp, full)
            return True
        except FileExistsError:
            return False
        except OSError as exc:
            if exc.errno in (errno.EXDEV, errno.ENOENT):
                return None
            raise
        finally:
            with suppress(FileNotFoundError):
                os.unlink(tmp)

    def write_bytes(self, rel: str, data: Body, *, durable: bool = True) -> None:
        """Write (or replace) a small file; on local disk through a temporary name and a rename (fsynced
        first unless durable=False: for a file whose loss or emptiness after a power cut is harmless)."""
        full = self._full(rel)
        parent = full.rsplit("/", 1)[0]
        self._ensure_dir(parent)
        if self.is_local:
            self._move_in(parent, full, data, durable=durable)
        else:
            with _spooled(data) as body, self.fs.open_output_stream(full) as out:  # (the body first: see _spooled)
                out.write(body)

    def put(self, rel: str, data: bytes) -> None:
        """Replace `rel` unconditionally; on S3 one single-part PUT (so its ETag is the MD5 of `data`,
        comparable with the ETag of a create-only copy of the same bytes; pyarrow uploads multipart)."""
        if self.is_local:
            self.write_bytes(rel, data)
            return
        import obstore

        obstore.put(self._obstore(), rel.strip("/"), data, mode="overwrite")

    def write_once(self, rel: str, data: Body, *, mode: int | None = None, durable: bool = True) -> bool:
        """Create `rel` with `data` unless it exists. Returns True when this call created it.

        Atomic on both stores: on local disk the final name is taken with a hard link, which fails if the
        name exists, so two writers can never replace each other's bytes and a reader never sees a
        half-written file; on S3 the PUT carries `If-None-Match: *` and the server refuses the loser
        (412). `mode` sets the local file's permission bits (e.g. 0o600 for a secret) before it appears.
        `durable=False` (local disk): the data is not fsynced here; the caller calls `sync` on the file
        before anything refers to it (staging writes a candidate's files, then syncs them all at once).
        """
        full = self._full(rel)
        parent = full.rsplit("/", 1)[0]
        self._ensure_dir(parent)
        if self.is_local:
            return self._move_in(parent, full, data, mode, link=True, durable=durable)
        import obstore
        from obstore.exceptions import AlreadyExistsError, PermissionDeniedError, PreconditionError

        try:
            with _spooled(data) as body:  # (a memory map: obstore sends it without copying)
                obstore.put(self._obstore(), rel.strip("/"), body, mode="create")
            return True
        except PermissionDeniedError as exc:  # an OSError, as on local disk (e.g. read-only credentials)
            raise PermissionError(f"{self.uri(rel)}: {str(exc).splitlines()[0]}") from None
        except (AlreadyExistsError, PreconditionError):
            # (A PUT retried after a lost response lands here too: callers that must tell "ours" from
            # "theirs" compare the stored bytes, which carry a writer id where it matters.)
            return False

    def sync(self, rels: Collection[str]) -> None:
        """Make files written with `durable=False` durable, and their names: on local disk each file is
        fsynced, then each folder holding one of them ONCE (the entry of a new name is the folder's data:
        POSIX makes it durable only by an fsync of the folder), on up to SYNC_THREADS threads (fsync
        releases the GIL, and a filesystem's journal commits concurrent fsyncs together). On an object
        store nothing: a PUT is durable when it returns."""
        if not self.is_local or not rels:
            return
        files = [self._full(rel) for rel in rels]
        folders = sorted({f.rsplit("/", 1)[0] for f in files})
        with ThreadPoolExecutor(max_workers=min(SYNC_THREADS, len(files)), thread_name_prefix="sync") as pool:
            for _ in pool.map(_fsync, files):
                pass
            crash_point("storage.sync.after_files")
            for _ in pool.map(_fsync, folders):
                pass

    def read_tagged(self, rel: str) -> tuple[bytes, str] | None:
        """The bytes of `rel` and their version tag (S3 ETag; a sha256 on local disk), or None if absent."""
        if self.is_local:
            try:
                data = Path(self._full(rel)).read_bytes()
            except (FileNotFoundError, NotADirectoryError):
                return None
            return data, hashlib.sha256(data).hexdigest()
        import obstore

        try:
            got = obstore.get(self._obstore(), rel.strip("/"))
        except FileNotFoundError:
            return None
        return bytes(got.bytes()), str(got.meta["e_tag"])

    def replace_if(self, rel: str, data: bytes, tag: str) -> bool:
        """Replace `rel` with `data` only if its current version tag is `tag` (compare-and-swap).

        Returns False, writing nothing, when `rel` changed (or vanished) since `tag` was read. S3: `PUT`
        with `If-Match`; local disk: compare and replace under an exclusive lock on `<rel>.lock`.
        """
        if self.is_local:
            full = self._full(rel)
            with self._locked(full + ".lock"):
                current = self.read_tagged(rel)
                if current is None or current[1] != tag:
                    return False
                return self._move_in(full.rsplit("/", 1)[0], full, data)
        import obstore
        from obstore.exceptions import PreconditionError

        try:
            obstore.put(self._obstore(), rel.strip("/"), data, mode={"e_tag": tag})
            return True
        except (PreconditionError, FileNotFoundError):
            return False

    @staticmethod
    @contextmanager
    def _locked(lock_path: str) -> Iterator[None]:
        fd = os.open(lock_path, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)  # closing releases the lock

    def list_after(self, prefix: str, start_after: str | None = None) -> list[ObjectInfo]:
        """Objects directly or deeper under `prefix` whose path sorts after `start_after`, sorted.

        On S3 this is one ListObjectsV2 request with `start-after` (per 1,000 keys), so a caller that
        knows roughly where the newest keys are never pages through all of history.
        """
        prefix = prefix.strip("/")
        if self.is_local:
            base = Path(self._full(prefix))
            try:
                names = os.listdir(base)
            except (FileNotFoundError, NotADirectoryError):
                return []
            out = [ObjectInfo(path=f"{prefix}/{n}", size=(base / n).stat().st_size) for n in names
                   if not n.startswith(".") and not n.endswith(".lock") and (base / n).is_file()]
            out = [o for o in out if start_after is None or o.path > start_after]
            return sorted(out, key=lambda o: o.path)
        import obstore

        metas = obstore.list(self._obstore(), prefix + "/", offset=start_after).collect()
        return sorted((ObjectInfo(path=str(m["path"]), size=int(m["size"]), tag=m.get("e_tag"))
                       for m in metas), key=lambda o: o.path)

    def _obstore(self) -> Any:
        if self._store is None:
            self._store = _object_store(self._base, self.storage_options)
        return self._store

    def _ensure_dir(self, full_dir: str) -> None:
        # An object store has no directories: pyarrow's create_dir on S3 PUTs an empty `dir/` marker for
        # every level, on every write (extra requests, and zero-byte objects inside partition prefixes).
        if self.is_local:
            self.fs.create_dir(full_dir, recursive=True)

    def delete(self, rel: str) -> None:
        if not self.is_local:  # pyarrow's delete_file PUTs a `dir/` marker when it empties a prefix
            import obstore

            try:
                obstore.delete(self._obstore(), rel.strip("/"))
            except FileNotFoundError:
                pass
            return
        try:
            self.fs.delete_file(self._full(rel))
        except FileNotFoundError:
            pass

    def temp_files(self, grace_seconds: float = TEMP_GRACE_SECONDS, *,
                   under: tuple[str, ...] | None = None) -> list[TempFile]:
        """Every temp file under the root (outside Delta logs and the catalog: `_tmp` and anything an
        earlier version left next to a final name; folders linked in from elsewhere too), with its state;
        only those under the folders `under` when given (the writer start's `_tmp` listing,
        quarantine/temp_sweep.py). Temp files exist on local disk only: object-store writes are single
        PUTs."""
        if not self.is_local:
            return []
        now = time.time()
        out: list[TempFile] = []
        stack = [self._base] if under is None else [self._full(u) for u in under]
        linked: set[str] = set()
        while stack:
            try:
                entries = list(os.scandir(stack.pop()))
            except (FileNotFoundError, NotADirectoryError):
                continue
            for entry in entries:
                if entry.is_dir(follow_symlinks=False):
                    if entry.name.startswith(TEMP_PREFIX):  # a temp folder (an ingest's spill, parts.py)
                        found = _temp_folder(entry, now, grace_seconds)
                        if found is not None:
                            out.append(replace(found, path=entry.path[len(self._base) + 1:]))
                    elif entry.name not in _SKIP_DIRS:
                        stack.append(entry.path)
                    continue
                if under is None and entry.is_symlink() and entry.is_dir() and entry.name not in _SKIP_DIRS:
                    # a folder moved to another disk and linked in: part of the lake, walked once (its
                    # target outside the root; a link back inside is walked where it really is)
                    target = os.path.realpath(entry.path)
                    if target != self._base and not target.startswith(self._base + "/") and target not in linked:
                        linked.add(target)
                        stack.append(entry.path)
                    continue
                if not entry.name.startswith(TEMP_PREFIX):
                    continue
                try:
                    st = entry.stat(follow_symlinks=False)
                except FileNotFoundError:
                    continue  # renamed or removed by its writer meanwhile
                age = max(0.0, now - st.st_mtime)
                state = temp_state(entry.name, age, grace_seconds)
                if state is not None:
                    out.append(TempFile(path=entry.path[len(self._base) + 1:], size=int(st.st_size),
                                        age_seconds=age, state=state))
        return sorted(out, key=lambda t: t.path)

    def sweep_temp(self, grace_seconds: float = TEMP_GRACE_SECONDS, *, apply: bool = True,
                   under: tuple[str, ...] | None = None) -> list[TempFile]:
        """Remove the stale temp files (abandoned, or older than the grace), under `under` only when
        given; returns them. In-flight ones belong to a running writer and are left alone."""
        stale = [t for t in self.temp_files(grace_seconds, under=under) if t.stale]
        if apply:
            for t in stale:
                self.delete_temp(t.path)
        return stale

    def delete_temp(self, rel: str) -> None:
        """Remove a temp file, or a temp folder and everything in it (a spill, parts.py)."""
        if self.is_local and os.path.isdir(full := self._full(rel)) and not os.path.islink(full):
            shutil.rmtree(full, ignore_errors=True)
            return
        self.delete(rel)

    def list(self, prefix: str = "", *, recursive: bool = True) -> list[ObjectInfo]:
        base = self._full(prefix)
        selector = pafs.FileSelector(base, recursive=recursive, allow_not_found=True)
        out: list[ObjectInfo] = []
        cut = len(self._base) + 1
        for info in self.fs.get_file_info(selector):
            if info.type == pafs.FileType.File:
                out.append(ObjectInfo(path=info.path[cut:], size=int(info.size)))
        return sorted(out, key=lambda o: o.path)
