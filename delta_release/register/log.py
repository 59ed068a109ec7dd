"""What a Delta log references, read straight from `_delta_log/` (JSON commits and parquet checkpoints).

Two readings, both inventories rather than readers (the table's state at a version comes from deltalake's
own log replay, in `_delta`):

- `read_log`: every path any retained commit, checkpoint or sidecar names (adds, removes, change files,
  their deletion vectors), for reporting unreferenced files. It is tolerant: a log file it cannot parse
  is listed in `unreadable` and skipped, because a commit that a checkpoint supersedes does not decide
  the table's state (deltalake does not read it either); a file that does decide it fails deltalake's
  replay, which refuses the table with the reason.
- `version_deletion_vectors`: the deletion vector each live file carries at one version, from the same
  log segment a reader replays (the newest complete checkpoint at or before it, its sidecars, and the
  commits after it), so superseded commits are never read.

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
    """The file a deletion-vector descriptor points at (None for inline vectors or no vector)."""
    if not dv or not dv.get("storageType"):
        return None
    kind, where = dv["storageType"], str(dv["pathOrInlineDv"])
    offset, size = int(dv.get("offset") or 0), int(dv["sizeInBytes"])
    if kind == "i":
        return None
    if kind == "p":
        return DeletionVectorRef(path=where, offset=offset, size=size)
    if kind == "u":
        prefix, encoded = where[:-20], where[-20:]
        name = f"deletion_vector_{uuid.UUID(bytes=z85_decode(encoded))}.bin"
        return DeletionVectorRef(path=f"{prefix}/{name}" if prefix else name, offset=offset, size=size)
    raise ValueError(f"unknown deletion vector storage type {kind!r}")


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
            dv = deletion_vector_ref(body.get("deletionVector"))
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


def version_deletion_vectors(storage: Storage, version: int) -> dict[str, DeletionVectorRef]:
    """Live data file (as `_reference` keys it) -> its deletion vector, at `version`, from the log segment.

    Raises LogParseError when a file of that segment cannot be parsed.
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
    live: dict[str, DeletionVectorRef] = {}
    for actions in segment:
        for kind, body in _file_actions(actions):
            if kind == "cdc":
                continue
            key = _reference(storage, str(body["path"]))
            dv = deletion_vector_ref(body.get("deletionVector")) if kind == "add" else None
            if dv is None:
                live.pop(key, None)
            else:
                live[key] = dv
    return live
