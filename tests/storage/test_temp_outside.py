"""The temp files of a table moved to another folder (`catalog.set_location`, a table definition's
`location`) are covered by the full walks of vacuum and erasure, as the lake's own are
(quarantine/temp_sweep.py, `lake_temp_files`): an erased subject must not survive in a stale temp file of
such a table, in its `_tmp` or next to a final name. (A location outside the lake is refused before
anything is read or written there: gateway/locations.py, tests/gateway/test_catalog_trust.py.)"""

from __future__ import annotations

import os
from pathlib import Path

import delta_release as dr
from delta_release.storage import TEMP_DIR
from tests.conftest import jsonl, up
from tests.storage.conftest import plant_temp, temp_files


def _outside_orders(tmp_path: Path) -> tuple[dr.Lake, Path, Path]:
    root = tmp_path / "lake"
    lake = dr.Lake.create(root)
    lake.ingest(jsonl([up("keep-1", 1, day=3), up("gone-7", 2, day=3)]))
    outside = root / "elsewhere" / "orders"
    outside.parent.mkdir()
    os.rename(lake.table_uri("orders"), outside)
    lake.catalog.set_location("orders", str(outside))
    return lake, root, outside


def test_erasure_removes_an_outside_tables_stale_temp_files(tmp_path: Path) -> None:
    lake, root, outside = _outside_orders(tmp_path)
    held = [plant_temp(outside / TEMP_DIR, b'{"order_id": "gone-7"}'),
            plant_temp(outside / "event_day=3", b'{"order_id": "gone-7"}', fill="e")]  # an earlier version's place
    report = lake.erase("gone-7")
    assert report.rows_removed == 1
    assert sorted(report.temp_files_removed) == sorted(str(p.relative_to(root)) for p in held)
    assert temp_files(root, outside) == []


def test_vacuum_reports_and_removes_an_outside_tables_temp_files(tmp_path: Path) -> None:
    lake, root, outside = _outside_orders(tmp_path)
    held = [plant_temp(outside / TEMP_DIR), plant_temp(outside / "event_day=3", fill="e")]
    dry = lake.vacuum("orders")
    assert sorted((t["path"], t["action"]) for t in dry.temp_files) == sorted(
        (str(p.relative_to(root)), "would_remove") for p in held)
    assert all(p.exists() for p in held)
    applied = lake.vacuum("orders", apply=True)
    assert sorted(t["path"] for t in applied.temp_files) == sorted(str(p.relative_to(root)) for p in held)
    assert temp_files(root, outside) == []
