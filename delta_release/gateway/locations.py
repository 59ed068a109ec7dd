"""Where a catalog may send the writer and the readers: the one place a catalog location becomes a URI.

A catalog is data anyone who can write the lake can edit (an object in the bucket, a file on disk), so a
location it names is trusted no more than that: a location of one of the lake's own tables (orders,
telemetry: the tables the writer ingests into, vacuums, erases from) must lie inside the lake's own
store and root, in a folder of its own:

- relative (`orders`, `moved/orders`) or an absolute URI/path that starts with the lake root plus `/`
  (same scheme, same bucket, same prefix);
- no empty, `.` or `..` segment, no control character;
- not the root itself, not in a folder of the lake's own data (`_raw`, `_catalog`, `_erasure`, ...: any
  first segment starting with `_` or `.`), and neither equal to, inside nor around another of the lake's
  own tables' default locations.

A registered table (kind `registered`, `register NAME URI`: written by others) may live elsewhere, read
only: its location must be an absolute URI of the lake's own scheme (an `s3://` lake's catalog cannot
send a reader to the local disk), without `..`. No command writes or vacuums a registered table (the
writer's verbs take the lake's own table definitions only), and an own table's entry that claims kind
`registered` is refused like any other tampering. A violation is `CatalogIntegrityError` (exit 3)
naming the catalog object, raised before anything is read or written at that location.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

from ..errors import CatalogIntegrityError
from ..storage import Storage
from .catalog import Catalog, TableEntry

REGISTERED = "registered"


def _bad_text(location: object) -> bool:
    return not isinstance(location, str) or not location or any(ord(c) < 32 or ord(c) == 127 for c in location)


def _segments_ok(rel: str) -> bool:
    return all(s not in ("", ".", "..") for s in rel.split("/"))


def inside(storage: Storage, location: str) -> str | None:
    """`location` as a path relative to the lake root when it names a folder of its own inside the lake,
    else None (see the module docstring: outside, `..`, the root, a data folder)."""
    if _bad_text(location):
        return None
    root = storage.root + "/"
    if location.startswith("file://"):
        location = location.removeprefix("file://")
        if not location.startswith("/"):
            return None
    if "://" in location:
        if not location.startswith(root):
            return None
        rel = location[len(root):]
    elif location.startswith("/"):
        if not storage.is_local or ".." in location.split("/"):
            return None
        if location.startswith(root):
            rel = location[len(root):]
        else:
            real = os.path.realpath(location)
            if not real.startswith(root):
                return None
            rel = real[len(root):]
    else:
        rel = location
    rel = rel.rstrip("/")
    if not rel or not _segments_ok(rel) or rel[0] in "_.":
        return None
    return rel


def _overlap(a: str, b: str) -> bool:
    return a == b or a.startswith(b + "/") or b.startswith(a + "/")


def table_location(storage: Storage, entry: TableEntry, *, own: Mapping[str, tuple[str, str]]) -> str:
    """The URI of `entry`'s table, or CatalogIntegrityError when the catalog object names a location it may
    not (nothing is read or written there). `own`: each of the lake's own tables -> (kind, default
    location relative to the root)."""
    where = entry.origin or f"the catalog's entry of table {entry.name}"
    repair = (f"`delta-release --lake {storage.root} catalog repair` points {entry.name} back at its folder in "
              "the lake")
    if entry.name in own:
        kind, default = own[entry.name]
        if entry.kind != kind:
            raise CatalogIntegrityError(f"catalog object {where} says table {entry.name} is {entry.kind!r}; "
                                        f"the lake's own table is {kind!r}", path=where, repair=repair,
                                        table=entry.name)
        rel = inside(storage, entry.location)
        clash = [n for n, (_, loc) in own.items() if n != entry.name and rel is not None and _overlap(rel, loc)]
        if rel is None or clash:
            why = f"the folder of table {clash[0]}" if clash else f"outside the lake {storage.root}"
            raise CatalogIntegrityError(
                f"catalog object {where} names location {entry.location!r} for table {entry.name}: {why} "
                "(a table of the lake lives in a folder of its own inside the lake)", path=where, repair=repair,
                table=entry.name, location=str(entry.location)[:300])
        return storage.uri(rel)
    location = entry.location
    if entry.kind != REGISTERED:
        rel = inside(storage, location)
        if rel is not None:
            return storage.uri(rel)
    elif not _bad_text(location):
        scheme_ok = location.startswith("s3://") if not storage.is_local else (
            location.startswith("/") or location.startswith("file:///"))
        if scheme_ok and ".." not in location.split("/"):
            return location
    raise CatalogIntegrityError(
        f"catalog object {where} names location {str(location)[:300]!r} (kind {entry.kind!r}) for table "
        f"{entry.name}: a registered table must be an absolute {'s3://' if not storage.is_local else 'local'} "
        "location without '..'; any other table must be inside the lake", path=where,
        repair=f"restore {where} from a backup of the lake",
        table=entry.name, location=str(location)[:300])


def repair_entries(catalog: Catalog, storage: Storage,
                   own: Mapping[str, tuple[str, str]]) -> list[dict[str, str | None]]:
    """`catalog repair`: every own table whose entry is refused (a location outside the lake, another
    kind, a damaged record) gets its definition's location and kind back (a new revision on the lake
    catalog, the row replaced in SQLite). Returns what it repaired; entries that pass are left alone."""
    repaired: list[dict[str, str | None]] = []
    for name, (kind, default) in sorted(own.items()):
        try:
            entry = catalog.table(name)
            if entry is None:
                continue
            table_location(storage, entry, own=own)
            continue
        except CatalogIntegrityError as exc:
            was = exc.path
        catalog.reset_table(name, location=default, kind=kind)
        repaired.append({"table": name, "location": default, "kind": kind, "refused": was})
    return repaired
