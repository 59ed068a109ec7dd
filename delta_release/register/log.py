"""What a Delta log references, read straight from `_delta_log/` (JSON commits and parquet checkpoints).

This is an inventory, not a reader: it collects every data file and deletion-vector file that any
retained commit or checkpoint names (adds, removes, change files), and the deletion vector each file
carries at a given version. It does not go through `deltalake`, so a file the log names but delta-rs'
replay would drop still counts as referenced, which is the safe side for reporting unreferenced files.
"""

from __future__ import annotations

import io
import json
import re
import uuid
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import unquote

import pyarrow.parquet as pq

from ..storage import Storage

LOG_DIR = "_delta_log"
_COMMIT = re.compile(r"^(\d{20})\.json$")
_CHECKPOINT = re.compile(r"^(\d{20})\.checkpoint(\.\d+\.\d+|\.[0-9a-f-]{36})?\.(parquet|json)$")
_Z85 = "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ.-:+=^!/*?&<>()[]{}@%$#"
_Z85_INDEX = {c: i for i, c in enumerate(_Z85)}


@dataclass(frozen=True, slots=True, kw_only=True)
class DeletionVectorRef:
    """A deletion vector stored in a file: where, and how many bytes of it the descriptor needs."""

    path: str  # relative to the table root when the vector lives under it, else an absolute URI
    offset: int
    size: int

    @property
    def needed_bytes(self) -> int:
        # at `offset`: a 4-byte length, the serialized bitmap, a 4-byte checksum
        return self.offset + 4 + self.size + 4


@dataclass(slots=True)
class LogInventory:
    referenced: set[str] = field(default_factory=set)  # every path any retained log entry names
    deletion_vectors: dict[str, DeletionVectorRef] = field(default_factory=dict)  # data file -> its DV
    versions: list[int] = field(default_factory=list)  # commit versions present as JSON


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
        return DeletionVectorRef(path=unquote(where), offset=offset, size=size)
    if kind == "u":
        prefix, encoded = where[:-20], where[-20:]
        name = f"deletion_vector_{uuid.UUID(bytes=z85_decode(encoded))}.bin"
        return DeletionVectorRef(path=f"{prefix}/{name}" if prefix else name, offset=offset, size=size)
    raise ValueError(f"unknown deletion vector storage type {kind!r}")


def _actions_from_checkpoint(data: bytes) -> list[dict[str, Any]]:
    table = pq.read_table(io.BytesIO(data))
    actions: list[dict[str, Any]] = []
    for kind in ("add", "remove", "cdc"):
        if kind in table.column_names:
            actions += [{kind: row} for row in table.column(kind).to_pylist() if row is not None]
    return actions


def _actions_from_json(data: bytes) -> list[dict[str, Any]]:
    return [json.loads(line) for line in data.decode("utf-8").splitlines() if line.strip()]


def read_log(storage: Storage, *, upto: int | None = None) -> LogInventory:
    """Inventory of the log at `storage` (a table root), counting entries up to version `upto`."""
    entries: list[tuple[int, int, list[dict[str, Any]]]] = []  # (version, 0 commit / 1 checkpoint, actions)
    inventory = LogInventory()
    for obj in storage.list(LOG_DIR):
        rel = obj.path[len(LOG_DIR) + 1:]
        name = rel.rsplit("/", 1)[-1]
        commit = _COMMIT.match(rel)
        checkpoint = _CHECKPOINT.match(rel)
        if commit:
            version, order = int(commit.group(1)), 0
            inventory.versions.append(version)
        elif checkpoint:
            version, order = int(checkpoint.group(1)), 1
        elif rel.startswith("_sidecars/") and name.endswith(".parquet"):
            version, order = -1, 1  # sidecars belong to v2 checkpoints: referenced, version unknown
        else:
            continue
        if upto is not None and version > upto:
            continue
        data = storage.read_bytes(obj.path)
        actions = _actions_from_checkpoint(data) if name.endswith(".parquet") else _actions_from_json(data)
        entries.append((version, order, actions))
    entries.sort(key=lambda e: (e[0], e[1]))
    for _, _, actions in entries:
        for action in actions:
            for kind in ("add", "remove", "cdc"):
                body = action.get(kind)
                if not body or not body.get("path"):
                    continue
                path = unquote(str(body["path"]))
                inventory.referenced.add(path)
                dv = deletion_vector_ref(body.get("deletionVector"))
                if dv is not None:
                    inventory.referenced.add(dv.path)
                if kind == "add":
                    if dv is None:
                        inventory.deletion_vectors.pop(path, None)
                    else:
                        inventory.deletion_vectors[path] = dv
    inventory.versions.sort()
    return inventory
