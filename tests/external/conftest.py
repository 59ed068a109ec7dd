"""A producer's hour of telemetry staged and published through its manifest, and the third-party tables
under tests/data/golden/ that `register` takes."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import delta_release as dr
from delta_release.external import load_manifest, publish_manifest
from delta_release.external.producer import produce_hour, upload, write_manifest


def stage(lake: dr.Lake, tmp: Path, hour: int, generation: str, *, files: int = 3, rows: int = 4,
          skip: set[int] = frozenset(), corrected: bool = False) -> tuple[Path, dict[str, bytes]]:  # type: ignore[assignment]
    """Producer: write the hour's objects (except `skip` indexes) into the lake and a manifest into `tmp`."""
    doc, objects = produce_hour(hour, generation, files=files, rows=rows, corrected=corrected)
    names = sorted(objects)
    upload(lake.table_storage("telemetry"), objects, skip={names[i] for i in skip})
    return write_manifest(tmp / f"{generation}.json", doc), objects


def publish(lake: dr.Lake, path: Path) -> Any:
    return publish_manifest(lake, load_manifest(path, lake.tables))


GOLDEN = Path(__file__).resolve().parents[1] / "data" / "golden"


SPARK = "basic-with-inserts-deletes-checkpoint"  # Spark 3.4 / Delta 3.0: appends, deletes, checkpoint at 10


# rows per version of SPARK, from the generator (GoldenTables.scala) and checked by three engines
SPARK_COUNTS = [10, 20, 30, 40, 50, 45, 40, 35, 30, 25, 35, 45, 55, 41]
