"""The gate's own listing (one scandir, names only; a read file's size is the bytes its read hashed) answers
exactly as the storage's listing, and falls back to it whenever the directory holds anything but plain
files; the gate pauses cyclic GC and always restores it."""

from __future__ import annotations

import gc
import hashlib
import json
import os
from pathlib import Path
from typing import Any

import pytest

import delta_release as dr
import delta_release.external.filecheck as fc
import delta_release.external.manifest as mf
from delta_release.external import gate_manifest, load_manifest
from delta_release.external.producer import produce_hour, upload, write_manifest


def staged(lake: dr.Lake, tmp: Path, files: int = 12) -> tuple[Path, list[str]]:
    doc, objects = produce_hour(9, "telemetry-48", files=files, rows=4)
    upload(lake.table_storage("telemetry"), objects)
    return write_manifest(tmp / "m.json", doc), sorted(objects)


def both_ways(lake: dr.Lake, path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[dict[str, Any], dict[str, Any]]:
    """The gate's report with its own listing, and with the storage's listing only."""
    manifest = load_manifest(path, lake.tables)
    used: list[bool] = []
    real = mf.local_names

    def spy(entries: Any, prefix: str) -> Any:
        out = real(entries, prefix)
        used.append(out is not None)
        return out

    monkeypatch.setattr(mf, "local_names", spy)
    own = gate_manifest(lake, manifest)
    monkeypatch.setattr(mf, "local_names", lambda entries, prefix: None)
    listed = gate_manifest(lake, manifest)
    assert {f.path for f in manifest.files if f.path in own.stats} == {
        f.path for f in manifest.files if f.path in listed.stats}
    return {**own.to_json(), "fast_listing": used == [True]}, listed.to_json()


def test_own_listing_reports_as_the_storage_listing(lake: dr.Lake, tmp_path: Path,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    path, names = staged(lake, tmp_path)
    storage = lake.table_storage("telemetry")
    doc = json.loads(path.read_text())
    by_path = {f["path"]: f for f in doc["files"]}
    storage.delete(names[0])  # missing
    by_path[names[1]]["size_bytes"] += 3  # the manifest lies about the size
    storage.write_bytes(names[2], storage.read_bytes(names[2]) + b"x")  # the file grew: size and checksum
    storage.write_bytes("hour=09/stray.parquet", b"stray")
    storage.write_bytes("hour=09/.tmp-leftover", b"tmp")
    write_manifest(path, doc)
    own, listed = both_ways(lake, path, monkeypatch)
    assert own.pop("fast_listing") is True
    assert own == listed
    assert own["missing"] == [names[0]]
    assert own["size_mismatch"] == [names[1], names[2]] and own["checksum_mismatch"] == [names[2]]
    grown = len(storage.read_bytes(names[2]))
    assert f"found {grown}" in own["details"][names[2]][0]
    assert own["unexpected"] == ["hour=09/.tmp-leftover", "hour=09/stray.parquet"]
    on_disk = sorted(p for p in os.listdir(storage.local_path("hour=09")))
    assert [e["path"] for e in own["inventory"]] == [f"hour=09/{n}" for n in on_disk]
    assert all(e["size"] == os.path.getsize(storage.local_path(e["path"])) for e in own["inventory"])


@pytest.mark.parametrize("odd", ["subdirectory", "inner link"])
def test_a_directory_with_more_than_plain_files_is_listed_by_the_storage(
        lake: dr.Lake, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, odd: str) -> None:
    path, names = staged(lake, tmp_path, files=4)
    hour = lake.table_storage("telemetry").local_path("hour=09")
    if odd == "subdirectory":
        (hour / "nested").mkdir()
        (hour / "nested" / "deep.parquet").write_bytes(b"deep")
    else:  # a link to a file inside the table root: allowed, and the storage's listing follows it
        os.symlink(hour / names[0].split("/")[1], hour / "alias.parquet")
    own, listed = both_ways(lake, path, monkeypatch)
    assert own.pop("fast_listing") is False
    assert own == listed
    extra = "hour=09/nested/deep.parquet" if odd == "subdirectory" else "hour=09/alias.parquet"
    assert own["unexpected"] == [extra] and extra in [e["path"] for e in own["inventory"]]


def test_local_names_and_scan(tmp_path: Path) -> None:
    storage = fc.Storage(str(tmp_path))
    assert fc.scan_directory(storage, "absent") == [] and fc.local_names([], "absent") == []
    (tmp_path / "d").mkdir()
    for name in ("b.parquet", "a.parquet", ".hidden"):
        (tmp_path / "d" / name).write_bytes(name.encode())
    entries = fc.scan_directory(storage, "d")
    assert sorted(fc.local_names(entries, "d") or []) == sorted(o.path for o in storage.list("d"))
    (tmp_path / "d" / "sub").mkdir()
    assert fc.local_names(fc.scan_directory(storage, "d"), "d") is None
    assert fc.local_names(None, "d") is None
    (tmp_path / "f").write_bytes(b"")
    assert fc.scan_directory(storage, "f") is None  # not a directory: the storage decides


@pytest.mark.parametrize("enabled", [True, False])
def test_paused_gc_restores_the_collector(enabled: bool) -> None:
    was = gc.isenabled()
    try:
        (gc.enable if enabled else gc.disable)()
        with fc.paused_gc():
            assert not gc.isenabled()
        assert gc.isenabled() is enabled
        with pytest.raises(RuntimeError), fc.paused_gc():
            raise RuntimeError("boom")
        assert gc.isenabled() is enabled
    finally:
        (gc.enable if was else gc.disable)()


def test_manifest_entries_are_named_and_compare_by_value(lake: dr.Lake, tmp_path: Path) -> None:
    path, names = staged(lake, tmp_path, files=3)
    manifest = load_manifest(path, lake.tables)
    doc = json.loads(path.read_text())
    assert [(f.path, f.size_bytes, f.records, f.sha256) for f in manifest.files] == [
        (f["path"], f["size_bytes"], f["records"], f["sha256"]) for f in doc["files"]]
    data = lake.table_storage("telemetry").read_bytes(names[0])
    assert manifest.files[0] == mf.ManifestFile(path=names[0], size_bytes=len(data), records=4,
                                                sha256=hashlib.sha256(data).hexdigest())
