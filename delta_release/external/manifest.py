"""Producer manifests for external partitions: parse, validate paths, and gate them against storage.

A manifest names one partition of an external table, a producer generation and the files of that
generation (paths relative to the table root, sizes, record counts, sha256). Anything that is not a
well-formed manifest (bad JSON, unknown keys, absolute paths, `..`, a path outside the partition
directory, a link leaving the table root) is an `InputError` naming the file and the dotted key. The
gate proper compares the manifest with the object inventory of the partition and reports mismatches as
values: `missing`, `unexpected`, `size_mismatch`, `count_mismatch`, `checksum_mismatch`,
`schema_mismatch`. Files of earlier generations that were registered before are retained, not unexpected.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from functools import partial
from operator import itemgetter
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

import pyarrow as pa
import pyarrow.parquet as pq

from ..errors import InputError
from ..index.files import recorded_sha256
from ..stage.candidate import file_stats
from ..storage import Storage
from ..tables import TableDef
from .filecheck import LazyStats, SchemaCheck, inspect, local_names, paused_gc, scan_directory

if TYPE_CHECKING:
    from ..context import LakeContext

_KEYS = {"table", "partition", "generation", "files"}
_FILE_KEYS = {"path", "size_bytes", "records", "sha256"}
_FILE_KEY_VIEW = dict.fromkeys(_FILE_KEYS).keys()  # compares equal to a dict's keys() with exactly these keys
_SHA = re.compile(r"[0-9a-f]{64}")  # used with fullmatch: `$` would let a trailing newline through
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._=-]*\.parquet$")


class ManifestFile(NamedTuple):
    """One file of a manifest. A named tuple, not a frozen dataclass: a manifest of 10,000 files built
    its entries in ~15 ms through the frozen dataclass's per-field __setattr__, a third of the parse."""

    path: str
    size_bytes: int
    records: int
    sha256: str


@dataclass(frozen=True, slots=True, kw_only=True)
class Manifest:
    source: str
    table: str
    column: str
    value: int
    generation: str
    files: tuple[ManifestFile, ...]

    @property
    def directory(self) -> str:
        return partition_directory(self.column, self.value)

    def digest(self) -> str:
        doc = {"table": self.table, "partition": {self.column: self.value}, "generation": self.generation,
               "files": [[f.path, f.size_bytes, f.records, f.sha256] for f in self.files]}
        return hashlib.sha256(json.dumps(doc, sort_keys=True).encode()).hexdigest()


def partition_directory(column: str, value: int) -> str:
    """The one spelling of an hour directory: `hour=09`. Polars' hive parsing reads `09` as 9."""
    return f"{column}={value:02d}"


def _bad(source: str, key: str, what: str) -> InputError:
    return InputError(f"manifest {source}: {key} {what}", file=source, key=key)


def _int(doc: dict[str, Any], key: str, source: str, dotted: str) -> int:
    value = doc.get(key)
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise _bad(source, dotted, f"must be an integer >= 0, found {value!r}")
    return value


def check_path(path: Any, *, directory: str, source: str, key: str) -> str:
    """A manifest path must be `<partition dir>/<file>.parquet`, relative, with no `..` and no tricks."""
    if not isinstance(path, str) or not path:
        raise _bad(source, key, f"must be a non-empty string, found {path!r}")
    if path.startswith(("/", "\\")) or "://" in path or re.match(r"^[A-Za-z]:", path):
        raise _bad(source, key, f"{path!r} is absolute; paths are relative to the table root")
    parts = path.split("/")
    if ".." in parts or "\\" in path:
        raise _bad(source, key, f"{path!r} leaves the table root")
    if len(parts) != 2 or parts[0] != directory or not _NAME.match(parts[1]):
        raise _bad(source, key, f"{path!r} is not a parquet file directly under {directory}/")
    return path


def parse_manifest(doc: Any, *, source: str, tables: dict[str, TableDef]) -> Manifest:
    if not isinstance(doc, dict):
        raise InputError(f"manifest {source}: must be a JSON object", file=source)
    for key in doc:
        if key not in _KEYS:
            raise _bad(source, str(key), "is not a manifest key")
    for key in sorted(_KEYS - set(doc)):
        raise _bad(source, key, "is missing")
    name = doc["table"]
    tdef = tables.get(name) if isinstance(name, str) else None
    if tdef is None or tdef.kind != "external":
        raise _bad(source, "table", f"{name!r} is not an external table")
    part = doc["partition"]
    if not isinstance(part, dict) or set(part) != {tdef.partition}:
        raise _bad(source, "partition", f"must be {{\"{tdef.partition}\": <int>}}, found {part!r}")
    value = _int(part, tdef.partition, source, f"partition.{tdef.partition}")
    generation = doc["generation"]
    if not isinstance(generation, str) or not re.match(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$", generation):
        raise _bad(source, "generation", f"must be a short name of letters, digits, '.', '_', '-': {generation!r}")
    directory = partition_directory(tdef.partition, value)
    raw_files = doc["files"]
    if not isinstance(raw_files, list) or not raw_files:
        raise _bad(source, "files", "must be a non-empty list")
    files = _well_formed(raw_files, directory)
    if files is None:  # some entry is not: find the first and name what is wrong with it
        files = []
        seen: set[str] = set()
        for i, f in enumerate(raw_files):
            files.append(_parse_file(f, f"files[{i}]", directory, source, seen))
    return Manifest(source=source, table=tdef.name, column=tdef.partition, value=value, generation=generation,
                    files=tuple(files))


def _well_formed(raw_files: list[Any], directory: str) -> list[ManifestFile] | None:
    """The files of a manifest whose every entry is well-formed (the common case), checked a whole column at
    a time (one regex over the joined paths, the digests' lengths and hex digits, exact int types); None when any
    entry is not, and `_parse_file` then finds and names it. Accepts nothing `_parse_file` refuses."""
    # whole columns at a time, in C loops (map), not a Python statement per entry
    if set(map(type, raw_files)) != {dict} or not all(map(_FILE_KEY_VIEW.__eq__, map(dict.keys, raw_files))):
        return None
    paths, sizes, records, shas = (list(map(itemgetter(k), raw_files)) for k in ("path", "size_bytes", "records",
                                                                                  "sha256"))
    if (set(map(type, paths)) != {str} or set(map(type, shas)) != {str} or set(map(type, sizes)) != {int}
            or set(map(type, records)) != {int} or min(sizes) < 0 or min(records) < 0
            or len(set(paths)) != len(paths)):
        return None
    name = re.escape(directory) + r"/[A-Za-z0-9][A-Za-z0-9._=-]*\.parquet"  # no newline in a name
    if re.fullmatch(f"{name}(?:\n{name})*", "\n".join(paths)) is None:
        return None
    # 64 lower-case hex digits each: every length 64, and nothing left of the joined digests once the hex
    # digits are deleted (8x faster than a pattern over them)
    hexes = "".join(shas)
    if set(map(len, shas)) != {64} or not hexes.isascii() or hexes.encode().translate(None, b"0123456789abcdef"):
        return None
    # tuple.__new__ straight from the zipped columns: a C call per entry (the named tuple's own __new__ and
    # _make are Python functions, ~1 us each); zip of four equal columns gives exactly the four fields
    return list(map(partial(tuple.__new__, ManifestFile), zip(paths, sizes, records, shas, strict=True)))


def _parse_file(f: Any, key: str, directory: str, source: str, seen: set[str]) -> ManifestFile:
    if not isinstance(f, dict):
        raise _bad(source, key, "must be an object")
    for k in f:
        if k not in _FILE_KEYS:
            raise _bad(source, f"{key}.{k}", "is not a file key")
    for k in sorted(_FILE_KEYS - set(f)):
        raise _bad(source, f"{key}.{k}", "is missing")
    path = check_path(f["path"], directory=directory, source=source, key=f"{key}.path")
    if path in seen:
        raise _bad(source, f"{key}.path", f"{path!r} is listed twice")
    seen.add(path)
    sha = f["sha256"]
    if not isinstance(sha, str) or not _SHA.fullmatch(sha):
        raise _bad(source, f"{key}.sha256", "must be 64 lower-case hex digits")
    return ManifestFile(path=path, size_bytes=_int(f, "size_bytes", source, f"{key}.size_bytes"),
                        records=_int(f, "records", source, f"{key}.records"), sha256=sha)


class _RepeatedKey(ValueError):
    pass


def _no_repeated_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise _RepeatedKey(key)
        out[key] = value
    return out


def load_manifest(path: str | os.PathLike[str], tables: dict[str, TableDef]) -> Manifest:
    p = Path(path)
    if not p.is_file():
        raise InputError(f"manifest not found: {p}", file=str(p))
    try:
        with paused_gc():
            doc = json.loads(p.read_text(encoding="utf-8"), object_pairs_hook=_no_repeated_keys)
    except _RepeatedKey as exc:  # which value counts would be a guess: refused, as the release config does
        raise InputError(f"manifest {p}: key {exc.args[0][:80]!r} appears twice in one object", file=str(p)) from None
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise InputError(f"manifest {p}: not valid JSON ({exc})", file=str(p)) from exc
    except RecursionError:  # e.g. 100,000 nested arrays: no manifest is nested more than 3 levels
        raise InputError(f"manifest {p}: nested too deeply to be a manifest", file=str(p)) from None
    except ValueError as exc:  # e.g. an integer of more than 4,300 digits
        raise InputError(f"manifest {p}: not a valid manifest value ({exc})", file=str(p)) from None
    with paused_gc():
        return parse_manifest(doc, source=str(p), tables=tables)


@dataclass(slots=True, kw_only=True)
class GateReport:
    table: str
    partition: dict[str, int]
    generation: str
    files: int
    missing: list[str] = field(default_factory=list)
    unexpected: list[str] = field(default_factory=list)
    size_mismatch: list[str] = field(default_factory=list)
    count_mismatch: list[str] = field(default_factory=list)
    checksum_mismatch: list[str] = field(default_factory=list)
    schema_mismatch: list[str] = field(default_factory=list)
    retained: list[str] = field(default_factory=list)  # earlier generations' registered files, kept
    inventory: list[dict[str, Any]] = field(default_factory=list)
    details: dict[str, list[str]] = field(default_factory=dict)
    stats: dict[str, str] = field(default_factory=dict)  # path -> Delta stats JSON, for the commit

    @property
    def ok(self) -> bool:
        return not (self.missing or self.unexpected or self.size_mismatch or self.count_mismatch
                    or self.checksum_mismatch or self.schema_mismatch)

    def note(self, kind: list[str], path: str, detail: str) -> None:
        if path not in kind:
            kind.append(path)
        self.details.setdefault(path, []).append(detail)

    @property
    def directory(self) -> str:
        """The partition as its directories name it: `hour=09`, not {'hour': 9}."""
        return " ".join(partition_directory(k, v) for k, v in self.partition.items())

    def to_json(self) -> dict[str, Any]:
        return {"ok": self.ok, "table": self.table, "partition": self.partition, "generation": self.generation,
                "files": self.files, "missing": self.missing, "unexpected": self.unexpected,
                "size_mismatch": self.size_mismatch, "count_mismatch": self.count_mismatch,
                "checksum_mismatch": self.checksum_mismatch, "schema_mismatch": self.schema_mismatch,
                "retained": self.retained, "inventory": self.inventory, "details": self.details}


def registered_files(lake: LakeContext, table: str, paths: Iterable[str]) -> dict[str, str | None]:
    """For each of `paths` that some version of `table` registered through us: path -> the sha256 the newest
    such commit recorded. From the file index (index/files.py), not a replay of every commit."""
    return recorded_sha256(lake, table, paths)


def _check_links(storage: Storage, manifest: Manifest, paths: list[str], entries: list[os.DirEntry[str]] | None = None,
                 ) -> None:
    """On local disk, refuse a partition directory or file that is a link leaving the table root.
    `entries`: the partition directory's entries when the caller has read them (`scan_directory`)."""
    if not storage.is_local:
        return
    root = os.path.realpath(storage.local_path())
    # Only links can leave the root: resolve the directory once, and a file only when it is a link
    # (one directory read tells which) or when it is not directly in that directory. A directory that
    # cannot be read: every file is resolved.
    candidates = [manifest.directory]
    if entries is None:
        entries = scan_directory(storage, manifest.directory)
    links = None if entries is None else {f"{manifest.directory}/{e.name}" for e in entries if e.is_symlink()}
    prefix = manifest.directory + "/"
    for rel in paths:
        if links is None or not rel.startswith(prefix) or "/" in rel[len(prefix):] or rel in links:
            candidates.append(rel)
    for rel in candidates:
        full = storage.local_path(rel)
        if not os.path.lexists(full):
            continue
        real = os.path.realpath(full)
        if real != root and not real.startswith(root + os.sep):
            raise InputError(f"manifest {manifest.source}: {rel} is a link that leaves the table root (-> {real})",
                             file=manifest.source, path=rel)


def gate_manifest(lake: LakeContext, manifest: Manifest) -> GateReport:
    """Compare the manifest with the partition's object inventory; nothing is registered here."""
    with paused_gc():
        return _gate(lake, manifest)


def _gate(lake: LakeContext, manifest: Manifest) -> GateReport:
    tdef = lake.table_def(manifest.table)
    storage = lake.table_storage(manifest.table)
    paths = [f.path for f in manifest.files]
    entries = scan_directory(storage, manifest.directory)  # one directory read: the links check and the listing
    _check_links(storage, manifest, paths, entries)  # before any listed file is read
    expected_schema = tdef.file_schema()
    schema_ok = SchemaCheck(expected_schema)
    # read + sha256 + footer of every listed file (filecheck.py: in this thread for small local files,
    # threads for large or remote ones); a listed name with no regular file behind it comes back `missing`.
    with inspect(storage, paths, check=schema_ok, total_bytes=sum(f.size_bytes for f in manifest.files)) as answers:
        names = local_names(entries, manifest.directory)
        # path -> size from the listing; a local directory of plain files is listed by name alone, and a
        # file's size is then the number of bytes its read hashed (the size check compares those)
        listing: dict[str, int | None] = (dict.fromkeys(names) if names is not None else
                                          {o.path: o.size for o in storage.list(manifest.directory)})
        lake.gateway.requests.object_lists += 1
        listed = set(paths)
        extra = sorted(listing.keys() - listed)
        if extra:
            _check_links(storage, manifest, extra)
        known = registered_files(lake, manifest.table, [*paths, *extra])
        report = GateReport(table=manifest.table, partition={manifest.column: manifest.value},
                            generation=manifest.generation, files=len(manifest.files))
        for path in extra:
            if path in known:
                report.retained.append(path)
            else:
                report.note(report.unexpected, path, "on storage but not in the manifest, and never registered")
        report.stats = stats = LazyStats(expected_schema.names, lambda path: file_stats(
            pq.read_table(io.BytesIO(storage.read_bytes(path))).cast(expected_schema)))
        accepted: list[tuple[str, Any]] = []  # (path, footer) of each file that passed every check
        keep = accepted.append
        read_sizes: dict[str, int] = {}  # path -> bytes read, of each listed file that was read
        for f, (digest, rows, verdict, footer, error, _, size) in zip(manifest.files, answers, strict=True):
            path = f.path
            if path not in listing or not digest:
                report.note(report.missing, path, "not on storage")
                continue
            read_sizes[path] = size  # type: ignore[assignment]  # a digest comes with its size
            # the common case first, in one test: every check passes (the branches below name each failure)
            if (digest == f.sha256 and size == f.size_bytes and rows == f.records and verdict is not None
                    and verdict[0] and footer is not None and (not known or known.get(path) in (None, digest))):
                keep((path, footer))
                continue
            if size != f.size_bytes:
                report.note(report.size_mismatch, path, f"expected {f.size_bytes} bytes, found {size}")
            if digest != f.sha256:
                report.note(report.checksum_mismatch, path,
                            f"expected sha256 {f.sha256[:16]}..., found {digest[:16]}...")
            elif known and known.get(path) not in (None, f.sha256):
                report.note(report.checksum_mismatch, path, "an immutable name registered before with other content")
            if error is not None or verdict is None or footer is None:
                # the footer answers count, schema and (usually) stats without decoding the data
                report.note(report.count_mismatch, path, f"parquet footer cannot be read: {error}")
                continue
            if rows != f.records:
                report.note(report.count_mismatch, path, f"expected {f.records} records, found {rows}")
            if not verdict[0]:
                report.note(report.schema_mismatch, path, f"expected columns {expected_schema.names} with the "
                            f"table's types, found {verdict[1]}")
                continue
            keep((path, footer))
        stats.keep_all(accepted)
        lake.gateway.requests.object_reads += len(read_sizes)
        report.inventory = _inventory(storage, listing, read_sizes)
    return report


def _inventory(storage: Storage, listing: dict[str, int | None], read_sizes: dict[str, int]) -> list[dict[str, Any]]:
    """The partition's objects, sorted by path, with their sizes: as read, else as listed, else (a listed
    name the gate did not read, on a local store listed by name) one stat; a name gone since is left out."""
    sizes = dict(listing)
    sizes.update(read_sizes)
    for path in [p for p, size in sizes.items() if size is None]:
        size = storage.size(path)
        if size is None:
            del sizes[path]
        else:
            sizes[path] = size
    return [{"path": path, "size": sizes[path]} for path in sorted(sizes)]


def _same_schema(found: pa.Schema, expected: pa.Schema) -> bool:
    return [(f.name, f.type) for f in found] == [(f.name, f.type) for f in expected]
