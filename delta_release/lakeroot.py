"""Writers create a lake, readers never do: what "holds a lake" means, and the one place that creates one.

A root URI **holds a lake** when at least one of these exists under it:

- `_erasure/key` (the lake secret, written once when the lake is created),
- `_catalog/catalog.sqlite` (the embedded catalog of a local lake),
- an object under `orders/_delta_log/` (the orders table, version 0 onwards).

Any one is enough (a lake whose secret comes from `DELTA_RELEASE_ERASURE_KEY` and whose catalog lives
elsewhere, as on s3://, still has its orders log). A path that is not there, an empty directory, a
directory of other files, a file (`/dev/null`) and an s3:// bucket that does not exist hold no lake.

`open_root` is called first thing by `Lake.open`: without `create=True` it refuses a root that holds no
lake with `LakeNotFoundError` (exit 2) before anything is written, so a typo in `--lake` or `lake.uri`
creates no directory, no key, no catalog and no object. The checks are reads only: a stat per path on
local disk, a HEAD or a one-page listing on S3.
"""

from __future__ import annotations

from pathlib import Path

import pyarrow.fs as pafs

from . import s3config
from .errors import InputError, LakeNotFoundError
from .storage import Storage

KEY = "_erasure/key"
CATALOG = "_catalog/catalog.sqlite"
ORDERS_LOG = "orders/_delta_log"
MARKERS = (KEY, CATALOG, ORDERS_LOG)


def _unreachable(storage: Storage, exc: OSError) -> InputError:
    """An object store that did not answer (a bucket that does not exist answers "not found", no error):
    said as such, not as "holds no lake", which sent users looking for a typo (exit 2)."""
    return s3config.storage_error(f"cannot read the lake at {storage.root}", exc, storage.storage_options,
                                  uri=storage.root)


def _kind(storage: Storage, rel: str) -> pafs.FileType:
    try:
        return storage.fs.get_file_info(storage._full(rel)).type
    except OSError as exc:
        raise _unreachable(storage, exc) from None


def holds_lake(storage: Storage) -> bool:
    """True when the root has the erasure key, the embedded catalog or an orders Delta log entry."""
    if storage.is_local:
        root = storage.local_path()
        if not root.is_dir():
            return False
        return ((root / KEY).is_file() or (root / CATALOG).is_file()
                or ((root / ORDERS_LOG).is_dir() and any((root / ORDERS_LOG).iterdir())))
    if _kind(storage, KEY) == pafs.FileType.File:
        return True
    try:
        selector = pafs.FileSelector(storage._full(ORDERS_LOG), recursive=False, allow_not_found=True)
        return any(info.type == pafs.FileType.File for info in storage.fs.get_file_info(selector))
    except OSError as exc:
        raise _unreachable(storage, exc) from None


# The folders of a lake that hold its data (its tables are added from the table definitions): a new lake
# there is a mistyped --lake. Other folders of a lake (`_release/`, a packet folder someone put inside it,
# where a release run's drills make scratch lakes) may hold lakes.
_DATA_FOLDERS = ("_raw", "_index", "_catalog", "_erasure", "_quarantine", "_tmp", "_vacuum", "_upkeep")


def _inside_a_lake(root: Path) -> Path | None:
    """The lake whose data folder (a table, the raw store, an index...) `root` is in, if any."""
    for parent in root.parents:
        if holds_lake(Storage(str(parent))):
            from .tables import DEFAULT_TABLES_DIR, load_table_defs

            tables = {t.location or t.name for t in load_table_defs(DEFAULT_TABLES_DIR).values()}
            first = root.relative_to(parent).parts[0]
            return parent if first in tables or first in _DATA_FOLDERS else None
    return None


# Characters of a lake or table path that the engines cannot address: delta-rs decodes `%XX` in a table
# path (`lake%41` is read as `lakeA`), lists no history under a `#` or `?` (its URL's fragment and query),
# takes `\` for a separator and refuses control characters; Polars reads `*?[]` in a file's path as a
# glob. Any other character works end to end (spaces, non-ASCII, quotes...: `_delta._FilePaths`), on
# local disk and in an s3:// prefix alike.
UNADDRESSABLE = frozenset("%#?*[]\\") | frozenset(map(chr, [*range(0x20), 0x7F]))


def check_lake_path(path: str, what: str = "lake path") -> None:
    """Refuse (exit 2, one line naming the path and the character) a lake path (a local one, or an s3://
    prefix) the engines cannot address, before anything is written there; a lake made elsewhere at such a
    path is refused the same."""
    bad = next((c for c in path.removeprefix("s3://") if c in UNADDRESSABLE), None)
    if bad is not None:
        raise InputError(f"{what} {path!r} contains {bad!r}, which delta-rs or Polars cannot address: "
                         f"choose a path without it", uri=path)


def open_root(storage: Storage, *, create: bool) -> bool:
    """Check the root before `Lake.open` touches it. Returns True when the caller is creating a new lake.

    Without `create`, a root that holds no lake is refused; with it, a local root is made a directory
    (an existing non-directory, such as /dev/null, is refused either way). A path with a character the
    engines cannot address, or that the filesystem refuses (a name too long), is refused (exit 2).
    """
    if not storage.is_local and not storage.root.removeprefix("s3://").strip("/"):
        raise InputError("an s3:// lake URI needs a bucket: s3://<bucket>[/<prefix>]", uri=storage.root)
    check_lake_path(storage.root)
    if storage.is_local:
        root = storage.local_path()
        try:
            if root.exists() and not root.is_dir():
                raise InputError(f"lake path is not a directory: {root}", uri=str(root))
        except OSError as exc:  # ENAMETOOLONG and the like: the filesystem has no such path
            raise InputError(f"cannot use lake path {str(root)!r}: {exc.strerror or exc}", uri=str(root)) from None
    if holds_lake(storage):
        return False
    if not create:
        raise LakeNotFoundError(storage.root)
    if storage.is_local:
        inside = _inside_a_lake(storage.local_path())
        if inside is not None:  # e.g. --lake lake/orders: a lake inside a lake's table or raw store
            raise InputError(f"cannot create a lake at {storage.root}: it is inside the lake at {inside}",
                             uri=storage.root)
        try:
            storage.local_path().mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise InputError(f"cannot create a lake at {storage.root}: {exc.strerror or exc}",
                             uri=storage.root) from exc
    return True
