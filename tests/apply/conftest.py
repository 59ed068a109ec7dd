"""The apply tests' oracle (the reference fold of the events against the table read back) and the bucket
helpers (the tags every file must hold, the table definitions as they were before buckets); the index and
parts tests use them too."""

from __future__ import annotations

import shutil
from pathlib import Path

import pyarrow.parquet as pq

import delta_release as dr
from delta_release import _delta
from delta_release.apply import reference_fold
from delta_release.stage.buckets import bucket_of_keys, bucket_of_path
from delta_release.tables import DEFAULT_TABLES_DIR


def orders_files(lake: dr.Lake) -> list[_delta.FileEntry]:
    return _delta.file_entries(lake.table_uri("orders"), {}, lake.latest_version("orders") or 0)


def keys_of(lake: dr.Lake, path: str) -> list[str]:
    return pq.read_table(lake.storage.local_path("orders") / path, columns=["order_id"])["order_id"].to_pylist()


def assert_tags_hold(lake: dr.Lake) -> int:
    """Every tagged file holds only keys of its bucket; returns how many files are untagged."""
    n = lake.table_def("orders").buckets
    untagged = 0
    for e in orders_files(lake):
        b = bucket_of_path(e.path, n)
        if b is None:
            untagged += 1
            continue
        assert set(bucket_of_keys(keys_of(lake, e.path), n or 1, lake.erasures.subject_key)) <= {b}, e.path
    return untagged


def legacy_defs(tmp_path: Path) -> Path:
    """The table definitions as they were before buckets (no `buckets:` key)."""
    out = tmp_path / "legacy_defs"
    shutil.copytree(DEFAULT_TABLES_DIR, out)
    orders = out / "orders.yaml"
    orders.write_text("".join(line for line in orders.read_text().splitlines(keepends=True)
                              if not line.startswith("buckets:")))
    return out


def current(lake: dr.Lake) -> dict[str, tuple[int, str, int, int]]:
    return {r["order_id"]: (r["amount_cents"], r["currency"], r["event_day"], r["position"])
            for r in lake.read().to_dicts()}


def oracle(events: list[dict]) -> dict[str, tuple[int, str, int, int]]:  # type: ignore[type-arg]
    norm = [{**e, "currency": e.get("currency", "INR")} for e in events]
    return {k: (v["amount_cents"], v["currency"], v["event_day"], v["position"])
            for k, v in reference_fold(norm).items()}
