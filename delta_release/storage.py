"""One lake root on local disk or an S3-compatible store, through pyarrow's filesystem layer.

Everything the product writes outside the Delta log (raw batches, quarantine, evidence) goes through
`Storage`, so the same code runs on a local directory and on `s3://bucket/prefix`.
"""

from __future__ import annotations

import os
import uuid
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlparse

import pyarrow.fs as pafs

from .errors import InputError


@dataclass(frozen=True, slots=True, kw_only=True)
class ObjectInfo:
    path: str  # relative to the storage root, '/'-separated
    size: int


def _s3_filesystem(options: dict[str, str]) -> pafs.S3FileSystem:
    endpoint = options.get("AWS_ENDPOINT_URL") or options.get("endpoint_url")
    scheme = "https"
    endpoint_override = None
    if endpoint:
        parsed = urlparse(endpoint)
        scheme = parsed.scheme or "https"
        endpoint_override = parsed.netloc or parsed.path
    return pafs.S3FileSystem(
        access_key=options.get("AWS_ACCESS_KEY_ID"),
        secret_key=options.get("AWS_SECRET_ACCESS_KEY"),
        region=options.get("AWS_REGION", "us-east-1"),
        endpoint_override=endpoint_override,
        scheme=scheme,
        allow_bucket_creation=False,
    )


class Storage:
    """A root URI plus the filesystem that serves it. Paths given to methods are relative to the root."""

    def __init__(self, root: str, storage_options: dict[str, str] | None = None) -> None:
        self.storage_options = dict(storage_options or {})
        if root.startswith("s3://"):
            parsed = urlparse(root)
            self.is_local = False
            self.fs: pafs.FileSystem = _s3_filesystem(self.storage_options)
            self._base = (parsed.netloc + parsed.path).rstrip("/")
            self.root = "s3://" + self._base
        elif "://" in root and not root.startswith("file://"):
            raise InputError(f"unsupported lake URI scheme: {root!r} (use a local path or s3://)", uri=root)
        else:
            local = Path(root.removeprefix("file://")).resolve()
            self.is_local = True
            self.fs = pafs.LocalFileSystem()
            self._base = str(local)
            self.root = str(local)

    def child(self, rel: str) -> Storage:
        """A Storage rooted at a sub-path (a table's own root)."""
        return Storage(self.uri(rel), self.storage_options)

    def uri(self, rel: str = "") -> str:
        rel = rel.strip("/")
        return f"{self.root}/{rel}" if rel else self.root

    def _full(self, rel: str) -> str:
        rel = rel.strip("/")
        return f"{self._base}/{rel}" if rel else self._base

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

    def open_input(self, rel: str) -> pafs.NativeFile:
        return self.fs.open_input_file(self._full(rel))

    @staticmethod
    def _write_temp(parent: str, data: bytes) -> str:
        """Write `data` durably under a fresh temporary name in `parent` (local disk); returns that name."""
        tmp = f"{parent}/.tmp-{uuid.uuid4().hex}"
        with open(tmp, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        return tmp

    def write_bytes(self, rel: str, data: bytes) -> None:
        """Write (or replace) a small file; on local disk through a temporary name and a rename."""
        full = self._full(rel)
        parent = full.rsplit("/", 1)[0]
        self._ensure_dir(parent)
        if self.is_local:
            os.replace(self._write_temp(parent, data), full)
        else:
            with self.fs.open_output_stream(full) as out:
                out.write(data)

    def write_once(self, rel: str, data: bytes) -> bool:
        """Create `rel` with `data` unless it exists. Returns True when this call created it.

        On local disk the final name is taken with a hard link, which fails if the name exists, so two
        writers can never replace each other's bytes.
        """
        full = self._full(rel)
        parent = full.rsplit("/", 1)[0]
        self._ensure_dir(parent)
        if self.is_local:
            tmp = self._write_temp(parent, data)
            try:
                os.link(tmp, full)
                return True
            except FileExistsError:
                return False
            finally:
                os.unlink(tmp)
        if self.exists(rel):
            return False
        with self.fs.open_output_stream(full) as out:
            out.write(data)
        return True

    def _ensure_dir(self, full_dir: str) -> None:
        # An object store has no directories: pyarrow's create_dir on S3 PUTs an empty `dir/` marker for
        # every level, on every write (extra requests, and zero-byte objects inside partition prefixes).
        if self.is_local:
            self.fs.create_dir(full_dir, recursive=True)

    def delete(self, rel: str) -> None:
        try:
            self.fs.delete_file(self._full(rel))
        except FileNotFoundError:
            pass

    def list(self, prefix: str = "", *, recursive: bool = True) -> list[ObjectInfo]:
        base = self._full(prefix)
        selector = pafs.FileSelector(base, recursive=recursive, allow_not_found=True)
        out: list[ObjectInfo] = []
        cut = len(self._base) + 1
        for info in self.fs.get_file_info(selector):
            if info.type == pafs.FileType.File:
                out.append(ObjectInfo(path=info.path[cut:], size=int(info.size)))
        return sorted(out, key=lambda o: o.path)
