"""Paths named by a Delta log, decoded exactly as the Delta protocol specifies.

PROTOCOL.md (delta-io/delta), `add`/`remove`/`cdc` actions: "path: A relative path to a data file from the
root of the table or an absolute path to a file ... The path is a URI as specified by RFC 2396 URI Generic
Syntax, which needs to be decoded to get the data file path." Sidecar actions: "URI-encoded path to the
sidecar file ... must always reside in the table's own _delta_log/_sidecars directory". Deletion vectors
with storageType `p` carry an absolute path "which has the same format as the `path` field".

Decoding is percent-decoding once, never form decoding: `+` stays `+`. A partition value Spark writes
as `ts=2013-07-05 17:01:00` lives in the directory `ts=2013-07-05 17%3A01%3A00` (Hive escaping) and
the log names it `ts=2013-07-05%2017%253A01%253A00` (URI encoding on top); one decode gives the name on
storage. Partition *values* themselves come from `partitionValues`, which is not encoded at all.

Every place that turns a log path into a file on storage goes through `table_relative`.
"""

from __future__ import annotations

import re
from urllib.parse import unquote, urlsplit

LOG_DIR = "_delta_log"
SIDECAR_DIR = f"{LOG_DIR}/_sidecars"
_SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*:")


def decode(path: str) -> str:
    """RFC 2396 percent-decoding (UTF-8), the way the protocol says a log path is turned into a file path."""
    return unquote(path, encoding="utf-8", errors="strict")


def is_absolute(path: str) -> bool:
    """A URI with a scheme (`s3://b/k`, `file:/tmp/x`, `file:///tmp/x`) or an absolute local path."""
    return path.startswith("/") or bool(_SCHEME.match(path))


def _location(uri: str) -> tuple[str, str]:
    """(scheme, decoded path) of an absolute URI or path; local files have scheme 'file'."""
    if uri.startswith("/"):
        return "file", decode(uri)
    parts = urlsplit(uri)
    scheme = parts.scheme.lower()
    if scheme == "file":
        return "file", decode(parts.path)  # file:/p, file:///p and file://localhost/p
    bucket = parts.netloc
    return scheme, f"{bucket}{decode(parts.path)}"


def table_relative(path: str, root: str) -> str | None:
    """A log `path` as a '/'-separated path relative to the table `root`, decoded.

    `root` is the table root as `Storage.root` spells it (a local absolute path or `s3://bucket/prefix`).
    Returns None for an absolute reference outside the root (or a relative one climbing out of it).
    """
    if not is_absolute(path):
        rel = decode(path)
    else:
        scheme, where = _location(path)
        root_scheme, root_where = _location(root)
        if scheme in ("s3a", "s3n"):
            scheme = "s3"
        prefix = root_where.rstrip("/") + "/"
        if scheme != root_scheme or not where.startswith(prefix):
            return None
        rel = where[len(prefix):]
    if rel.startswith("/") or any(part in ("..", "") for part in rel.split("/")):
        return None
    return rel


def sidecar_relative(path: str, root: str) -> str | None:
    """Where a v2 checkpoint's `sidecar` action points, relative to the table root."""
    if is_absolute(path):
        return table_relative(path, root)
    name = decode(path)
    return None if "/" in name or name in ("", "..") else f"{SIDECAR_DIR}/{name}"
