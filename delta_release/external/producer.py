"""A simulated external producer of hourly telemetry: deterministic files with immutable names + manifest.

Used by the freshness drill, the tests and `fixtures/telemetry/`. Each file is
`hour=HH/<generation>-<i>.parquet` (data columns only; the hour lives in the path) and the manifest lists
path, size, record count and sha256 of every file, relative to the table root.
"""

from __future__ import annotations

import hashlib
import io
import json
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from ..storage import Storage
from .manifest import partition_directory

FILE_SCHEMA = pa.schema([("sensor_id", pa.string()), ("ts_ms", pa.int64()), ("reading", pa.float64())])
BASE_MS = 1_796_083_200_000  # 2026-12-01T00:00:00Z


def telemetry_rows(hour: int, index: int, rows: int, *, corrected: bool = False) -> pa.Table:
    """Deterministic readings; `corrected` changes exactly one record (the first of file 0)."""
    sensors = [f"s-{(index * rows + r) % 7:02d}" for r in range(rows)]
    ts = [BASE_MS + hour * 3_600_000 + index * 60_000 + r * 1_000 for r in range(rows)]
    readings = [round(20.0 + hour * 0.5 + index * 0.1 + r * 0.01, 3) for r in range(rows)]
    if corrected and index == 0:
        readings[0] = round(readings[0] + 100.0, 3)
    return pa.table([pa.array(sensors), pa.array(ts, pa.int64()), pa.array(readings)], schema=FILE_SCHEMA)


def encode(table: pa.Table) -> bytes:
    sink = io.BytesIO()
    pq.write_table(table, sink, compression="snappy", write_statistics=True)
    return sink.getvalue()


def produce_hour(hour: int, generation: str, *, files: int, rows: int = 4, corrected: bool = False,
                 table: str = "telemetry") -> tuple[dict[str, Any], dict[str, bytes]]:
    """(manifest, {path: bytes}) of one hour; nothing is written."""
    directory = partition_directory("hour", hour)
    objects: dict[str, bytes] = {}
    entries = []
    for i in range(files):
        data = encode(telemetry_rows(hour, i, rows, corrected=corrected))
        path = f"{directory}/{generation}-{i}.parquet"
        objects[path] = data
        entries.append({"path": path, "size_bytes": len(data), "records": rows,
                        "sha256": hashlib.sha256(data).hexdigest()})
    manifest = {"table": table, "partition": {"hour": hour}, "generation": generation, "files": entries}
    return manifest, objects


def upload(storage: Storage, objects: dict[str, bytes], *, skip: set[str] | frozenset[str] = frozenset()) -> int:
    """Write objects under their immutable names (an existing name is never overwritten); returns bytes."""
    total = 0
    for path, data in objects.items():
        if path in skip:
            continue
        if not storage.write_once(path, data) and storage.read_bytes(path) != data:
            raise FileExistsError(f"immutable name {path} already holds other bytes")
        total += len(data)
    return total


def write_manifest(path: Path, manifest: dict[str, Any]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(manifest, indent=2) + "\n", encoding="utf-8")
    return path


def write_fixtures(directory: Path) -> list[Path]:
    """Regenerate fixtures/telemetry/: hour 9, generation telemetry-48 (3 files) and its correction."""
    out = []
    for generation, corrected in (("telemetry-48", False), ("telemetry-49", True)):
        manifest, objects = produce_hour(9, generation, files=3, rows=10, corrected=corrected)
        for path, data in objects.items():
            target = directory / path
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(data)
        out.append(write_manifest(directory / f"{generation}.manifest.json", manifest))
    return out


if __name__ == "__main__":  # python -m delta_release.external.producer fixtures/telemetry
    import sys

    for p in write_fixtures(Path(sys.argv[1] if len(sys.argv) > 1 else "fixtures/telemetry")):
        print(p)
