"""What a Delta log references, read straight from `_delta_log/` (JSON commits and parquet checkpoints).

Two readings, both inventories rather than readers (the table's state at a version comes from deltalake's
own log replay, in `_delta`):

- `read_log`: every path any retained commit, checkpoint or sidecar names (adds, removes, change files,
  their deletion vectors), for reporting unreferenced files. It is tolerant: a log file it cannot parse
  is listed in `unreadable` and skipped, because a commit that a checkpoint supersedes does not decide
  the table's state (deltalake does not read it either); a file that does decide it fails deltalake's
  replay, which refuses the table with the reason.
- `version_deletion_vectors`: the deletion vector each live file carries at one version, from the same
  log segment a reader replays (the newest complete checkpoint at or before it, single or multi-part,
  or a v2 checkpoint and its sidecars, and the commits after it), so superseded commits are never read.
  A logical file is keyed by its path and its deletion vector's unique id, as the protocol says: a
  checkpoint holds `remove` tombstones of the same path with an older vector, and a commit that
  replaces a vector adds the new one and removes the old (in either order); keyed by path alone, either
  erased the live vector (the regression of issue 37).

Checkpoints are read from a native pyarrow file without threads. `pq.read_table(io.BytesIO(...))` reads
the Python object from pyarrow's I/O thread pool, and a pool thread still holding it at interpreter exit
aborts the process ("terminate called without an active exception", exit 134; apache/arrow#34314).
"""

from __future__ import annotations

import json
import re
import uuid
from dataclasses import dataclass, field
from typing import Any

import pyarrow.parquet as pq

from ..storage import Storage
from .paths import LOG_DIR, SIDECAR_DIR, is_absolute, sidecar_relative, table_relative

_COMMIT = re.compile(r"^(\d{20})\.json$")
_CHECKPOINT = re.compile(r"^(\d{20})\.checkpoint(\.\d+\.\d+|\.[0-9a-f-]{36})?\.(parquet|json)$")
_Z85 = "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ.-:+=^!/*?&<>()[]{}@%$#"
_Z85_INDEX = {c: i for i, c in enumerate(_Z85)}


@dataclass(frozen=True, slots=True, kw_only=True)
class DeletionVectorRef:
    """A deletion vector stored in a file: where, and how many bytes of it the descriptor needs."""

    path: str  # storageType 'u': relative to the table root (not encoded); 'p': the absolute URI as logged
    offset: int
    size: int

    @property
    def needed_bytes(self) -> int:
        # at `offset`: a 4-byte length, the serialized bitmap, a 4-byte checksum
        return self.offset + 4 + self.size + 4


@dataclass(slots=True)
class LogInventory:
    referenced: set[str] = field(default_factory=set)  # decoded, relative to the root (absolute: as logged)
    versions: list[int] = field(default_factory=list)  # commit versions present as JSON
    unreadable: list[str] = field(default_factory=list)  # log files that could not be parsed


def z85_decode(text: str) -> bytes:
    if len(text) % 5:
        raise ValueError(f"z85 text length {len(text)} is not a multiple of 5")
    out = bytearray()
    for i in range(0, len(text), 5):
        value = 0
        for ch in text[i:i + 5]:
            value = value * 85 + _Z85_INDEX[ch]
        out += value.to_bytes(4, "big")
    return bytes(out)


def deletion_vector_ref(dv: dict[str, Any] | None) -> DeletionVectorRef | None:
    """The file a deletion-vector descriptor points at (None for inline vectors or no vector).

    PROTOCOL.md, Deletion Vector Descriptor: `storageType` 'u' (a file in the table root named from a
    z85-encoded UUID after an optional random prefix, which is a folder), 'p' (an absolute path, as the
    `path` field) or 'i' (inline in the log: no file); `offset` is optional (Delta Kernel reads a
    missing one as 1, just past the file's version byte), `sizeInBytes` required, `cardinality` and
    `maxRowIndex` are not needed here. ValueError for a descriptor that names no file it could be.
    """
    if not dv or not dv.get("storageType"):
        return None
    kind, where = dv["storageType"], dv.get("pathOrInlineDv")
    if kind == "i":
        return None
    if kind not in ("u", "p"):
        raise ValueError(f"unknown deletion vector storage type {kind!r}")
    if not isinstance(where, str) or dv.get("sizeInBytes") is None:
        raise ValueError(f"deletion vector descriptor without pathOrInlineDv or sizeInBytes: {dv}")
    offset = 1 if dv.get("offset") is None else int(dv["offset"])
    size = int(dv["sizeInBytes"])
    if offset < 0 or size < 0:
        raise ValueError(f"deletion vector descriptor with a negative offset or size: {dv}")
    if kind == "p":
        return DeletionVectorRef(path=where, offset=offset, size=size)
    if len(where) < 20:
        raise ValueError(f"deletion vector path {where!r} is shorter than its 20-character UUID")
    prefix, encoded = where[:-20], where[-20:]
    try:
        name = f"deletion_vector_{uuid.UUID(bytes=z85_decode(encoded))}.bin"
    except KeyError as exc:
        raise ValueError(f"deletion vector path {where!r} does not end in a z85-encoded UUID") from exc
    return DeletionVectorRef(path=f"{prefix}/{name}" if prefix else name, offset=offset, size=size)


def deletion_vector_id(dv: dict[str, Any] | None) -> str:
    """The descriptor's unique id (PROTOCOL.md: storageType, pathOrInlineDv and `@offset` when present);
    with the path, the key of a logical file. "" for a file without a deletion vector."""
    if not dv or not dv.get("storageType"):
        return ""
    offset = dv.get("offset")
    return f"{dv['storageType']}{dv.get('pathOrInlineDv')}" + ("" if offset is None else f"@{int(offset)}")


class LogParseError(ValueError):
    """A log file (commit, checkpoint or sidecar) that cannot be parsed."""

    def __init__(self, path: str, detail: str) -> None:
        super().__init__(f"{path}: {detail}")
        self.path = path
        self.detail = detail


_ACTION_COLUMNS = ("add", "remove", "cdc", "sidecar")


def _actions_from_parquet(storage: Storage, path: str) -> list[dict[str, Any]]:
    try:
        with storage.open_input(path) as handle:  # native file: no Python object on pyarrow's threads
            reader = pq.ParquetFile(handle)
            present = [c for c in _ACTION_COLUMNS if c in reader.schema_arrow.names]
            table = reader.read(columns=present, use_threads=False)
    except (OSError, ValueError) as exc:  # pyarrow's ArrowInvalid is a ValueError, ArrowIOError an OSError
        raise LogParseError(path, str(exc).splitlines()[0] if str(exc) else type(exc).__name__) from exc
    actions: list[dict[str, Any]] = []
    for kind in present:
        actions += [{kind: row} for row in table.column(kind).to_pylist() if row is not None]
    return actions


def _actions_from_json(storage: Storage, path: str) -> list[dict[str, Any]]:
    try:
        text = storage.read_bytes(path).decode("utf-8")
        actions = [json.loads(line) for line in text.splitlines() if line.strip()]
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise LogParseError(path, str(exc)) from exc
    if not all(isinstance(a, dict) for a in actions):
        raise LogParseError(path, "a line is not a JSON object")
    return actions


def _actions(storage: Storage, path: str) -> list[dict[str, Any]]:
    if path.endswith(".parquet"):
        return _actions_from_parquet(storage, path)
    return _actions_from_json(storage, path)


def _file_actions(actions: list[dict[str, Any]]) -> list[tuple[str, dict[str, Any]]]:
    out = []
    for action in actions:
        for kind in ("add", "remove", "cdc"):
            body = action.get(kind)
            if isinstance(body, dict) and body.get("path"):
                out.append((kind, body))
    return out


def _sidecars(storage: Storage, actions: list[dict[str, Any]]) -> list[str]:
    out = []
    for action in actions:
        body = action.get("sidecar")
        if isinstance(body, dict) and body.get("path"):
            rel = sidecar_relative(str(body["path"]), storage.root)
            if rel is None:
                raise LogParseError(str(body["path"]), "sidecar outside _delta_log/_sidecars")
            out.append(rel)
    return out


def _reference(storage: Storage, path: str) -> str:
    """A log path as the inventory keys it: decoded relative path, or the absolute URI as logged."""
    rel = table_relative(path, storage.root)
    return path if rel is None else rel


def read_log(storage: Storage, *, upto: int | None = None) -> LogInventory:
    """Every path the retained log at `storage` (a table root) names, counting entries up to version `upto`."""
    inventory = LogInventory()
    for obj in storage.list(LOG_DIR):
        rel = obj.path[len(LOG_DIR) + 1:]
        commit = _COMMIT.match(rel)
        checkpoint = _CHECKPOINT.match(rel)
        if commit:
            version = int(commit.group(1))
            inventory.versions.append(version)
        elif checkpoint:
            version = int(checkpoint.group(1))
        elif obj.path.startswith(SIDECAR_DIR + "/") and rel.endswith(".parquet"):
            version = -1  # sidecars belong to v2 checkpoints: referenced, version unknown
        else:
            continue
        if upto is not None and version > upto:
            continue
        try:
            actions = _actions(storage, obj.path)
        except LogParseError:
            inventory.unreadable.append(obj.path)
            continue
        for _, body in _file_actions(actions):
            inventory.referenced.add(_reference(storage, str(body["path"])))
            try:
                dv = deletion_vector_ref(body.get("deletionVector"))
            except (ValueError, TypeError):
                continue  # names no file; at a version the inventory refuses it (version_deletion_vectors)
            if dv is not None:
                inventory.referenced.add(_reference(storage, dv.path) if is_absolute(dv.path) else dv.path)
    inventory.versions.sort()
    inventory.unreadable.sort()
    return inventory


def _checkpoint_parts(names: list[str], version: int) -> list[list[str]]:
    """Complete checkpoints of `version` among log file names (each a list of its files), v2 first."""
    single: list[list[str]] = []
    parts: dict[int, list[str]] = {}
    for name in names:
        match = _CHECKPOINT.match(name)
        if not match or int(match.group(1)) != version:
            continue
        tail = match.group(2) or ""
        if tail.count(".") == 2:  # classic multi-part: .<part>.<parts>
            count = int(tail.split(".")[2])
            parts.setdefault(count, []).append(name)
        else:
            single.append([name])
    complete = [sorted(files) for count, files in parts.items() if len(set(files)) == count]
    return sorted(single, key=lambda f: "checkpoint." not in f[0]) + complete


def version_deletion_vectors(storage: Storage, version: int) -> dict[str, list[DeletionVectorRef]]:
    """Live data file (as `_reference` keys it) -> the deletion vectors its live adds carry, at `version`,
    from the log segment (one per file in a valid log).

    Raises LogParseError when a file of that segment cannot be parsed or a descriptor names no file.
    """
    names = sorted(n for n in (o.path[len(LOG_DIR) + 1:] for o in storage.list(LOG_DIR)) if "/" not in n)
    found = (_CHECKPOINT.match(n) for n in names)
    checkpoints = sorted({int(m.group(1)) for m in found if m and int(m.group(1)) <= version}, reverse=True)
    segment: list[list[dict[str, Any]]] = []
    start = 0
    for candidate in checkpoints:
        complete = _checkpoint_parts(names, candidate)
        if not complete:
            continue
        for name in complete[0]:
            actions = _actions(storage, f"{LOG_DIR}/{name}")
            segment.append(actions)
            segment += [_actions(storage, sidecar) for sidecar in _sidecars(storage, actions)]  # v2 checkpoints
        start = candidate + 1
        break
    segment += [_actions(storage, f"{LOG_DIR}/{v:020d}.json") for v in range(start, version + 1)
                if f"{v:020d}.json" in names]
    live: dict[tuple[str, str], DeletionVectorRef | None] = {}
    for actions in segment:  # checkpoint rows first, then commits oldest first
        for kind, body in _file_actions(actions):
            if kind == "cdc":
                continue
            descriptor = body.get("deletionVector")
            key = (_reference(storage, str(body["path"])), deletion_vector_id(descriptor))
            if kind == "remove":
                live.pop(key, None)
                continue
            try:
                live[key] = deletion_vector_ref(descriptor)
            except (ValueError, TypeError) as exc:
                raise LogParseError(str(body["path"]), f"deletion vector: {exc}") from exc
    out: dict[str, list[DeletionVectorRef]] = {}
    for (path, _), dv in live.items():
        if dv is not None:
            out.setdefault(path, []).append(dv)
    return out
