"""External telemetry partitions: manifest validation, the manifest-vs-inventory gate, publish, corrections."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any

import polars as pl
import pyarrow as pa
import pytest

import delta_release as dr
from delta_release import _delta
from delta_release.errors import InputError
from delta_release.external import gate_manifest, load_manifest
from delta_release.external.producer import encode, produce_hour, upload, write_manifest
from tests.conftest import FIXTURES
from tests.external.conftest import publish, stage

TELEMETRY = FIXTURES / "telemetry"


def hour_rows(lake: dr.Lake, hour: int) -> pl.DataFrame:
    return lake.scan("telemetry").filter(pl.col("hour") == hour).collect().sort(pl.all())


def write_doc(tmp: Path, doc: Any) -> Path:
    path = tmp / "m.json"
    path.write_text(json.dumps(doc))
    return path


# -- manifest validation --------------------------------------------------------------------------
def _doc(path: str = "hour=09/a.parquet", **over: Any) -> dict[str, Any]:
    doc = {"table": "telemetry", "partition": {"hour": 9}, "generation": "telemetry-48",
           "files": [{"path": path, "size_bytes": 10, "records": 1, "sha256": "0" * 64}]}
    doc.update(over)
    return doc


@pytest.mark.parametrize(("doc", "key", "words"), [
    (_doc("/etc/passwd"), "files[0].path", "absolute"),
    (_doc("hour=09/../../orders/x.parquet"), "files[0].path", "leaves the table root"),
    (_doc("../telemetry/hour=09/a.parquet"), "files[0].path", "leaves the table root"),
    (_doc("s3://bucket/hour=09/a.parquet"), "files[0].path", "absolute"),
    (_doc("hour=9/a.parquet"), "files[0].path", "directly under hour=09/"),
    (_doc("hour=10/a.parquet"), "files[0].path", "directly under hour=09/"),
    (_doc("hour=09/sub/a.parquet"), "files[0].path", "directly under hour=09/"),
    (_doc(extra=1), "extra", "not a manifest key"),
    (_doc(table="orders"), "table", "not an external table"),
    (_doc(partition={"hour": -1}), "partition.hour", "integer >= 0"),
    (_doc(partition={"hour": "09"}), "partition.hour", "integer >= 0"),
    (_doc(files=[]), "files", "non-empty"),
])
def test_bad_manifests_are_one_line_input_errors(lake: dr.Lake, tmp_path: Path, doc: Any, key: str,
                                                 words: str) -> None:
    with pytest.raises(InputError) as err:
        load_manifest(write_doc(tmp_path, doc), lake.tables)
    assert err.value.facts["key"] == key
    assert words in err.value.message and "\n" not in err.value.message
    assert err.value.exit_code == 2


def test_duplicate_path_and_bad_sha_are_rejected(lake: dr.Lake, tmp_path: Path) -> None:
    doc = _doc()
    doc["files"].append(dict(doc["files"][0]))
    with pytest.raises(InputError, match="listed twice"):
        load_manifest(write_doc(tmp_path, doc), lake.tables)
    doc = _doc()
    doc["files"][0]["sha256"] = "XYZ"
    with pytest.raises(InputError, match="64 lower-case hex"):
        load_manifest(write_doc(tmp_path, doc), lake.tables)


def test_symlink_leaving_the_root_is_rejected(lake: dr.Lake, tmp_path: Path) -> None:
    path, objects = stage(lake, tmp_path, 9, "telemetry-48")
    outside = tmp_path / "outside.parquet"
    first = sorted(objects)[0]
    target = lake.table_storage("telemetry").local_path(first)
    outside.write_bytes(target.read_bytes())
    target.unlink()
    os.symlink(outside, target)
    with pytest.raises(InputError, match="link that leaves the table root"):
        gate_manifest(lake, load_manifest(path, lake.tables))
    assert lake.latest_version("telemetry") is None


def test_symlinked_partition_directory_is_rejected(lake: dr.Lake, tmp_path: Path) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    root = lake.table_storage("telemetry").local_path()
    root.mkdir(parents=True, exist_ok=True)
    os.symlink(elsewhere, root / "hour=09", target_is_directory=True)
    doc, objects = produce_hour(9, "telemetry-48", files=1)
    for rel, data in objects.items():
        (elsewhere / rel.split("/")[1]).write_bytes(data)
    with pytest.raises(InputError, match="leaves the table root"):
        publish(lake, write_manifest(tmp_path / "m.json", doc))


# -- the gate ---------------------------------------------------------------------------------------
def test_gate_names_every_kind_of_mismatch(lake: dr.Lake, tmp_path: Path) -> None:
    path, objects = stage(lake, tmp_path, 9, "telemetry-48", files=5, skip={0})
    names = sorted(objects)
    doc = json.loads(path.read_text())
    doc["files"][1]["size_bytes"] += 1
    doc["files"][2]["records"] += 1
    doc["files"][3]["sha256"] = "f" * 64
    storage = lake.table_storage("telemetry")
    wrong = encode(pa.table({"sensor_id": ["a"], "ts_ms": pa.array([1], pa.int32()), "reading": [1.0]}))
    storage.write_bytes(names[4], wrong)
    doc["files"][4].update(size_bytes=len(wrong), records=1,
                           sha256=__import__("hashlib").sha256(wrong).hexdigest())
    storage.write_bytes("hour=09/stray.parquet", objects[names[1]])
    report = gate_manifest(lake, load_manifest(write_manifest(path, doc), lake.tables))
    assert not report.ok
    assert report.missing == [names[0]]
    assert report.size_mismatch == [names[1]]
    assert report.count_mismatch == [names[2]]
    assert report.checksum_mismatch == [names[3]]
    assert report.schema_mismatch == [names[4]]
    assert report.unexpected == ["hour=09/stray.parquet"]
    assert lake.latest_version("telemetry") is None  # the gate registers nothing


def test_partial_hour_is_rejected_and_the_last_hour_stays_readable(lake: dr.Lake, tmp_path: Path) -> None:
    first, _ = stage(lake, tmp_path, 8, "telemetry-47")
    assert publish(lake, first).ok
    before = hour_rows(lake, 8)
    pub = lake.published("telemetry")
    version = lake.latest_version("telemetry")
    path, objects = stage(lake, tmp_path, 9, "telemetry-48", skip={2})
    report = publish(lake, path)
    assert not report.ok and report.gate.missing == [sorted(objects)[2]]
    assert report.version is None
    assert lake.latest_version("telemetry") == version
    assert lake.published("telemetry") == pub
    assert hour_rows(lake, 8).equals(before) and before.height == 12
    assert hour_rows(lake, 9).height == 0
    upload(lake.table_storage("telemetry"), objects)
    report = publish(lake, path)
    assert report.ok and report.version == version + 1  # type: ignore[operator]
    assert lake.published("telemetry").label == "telemetry-48"  # type: ignore[union-attr]
    assert lake.gateway.cache["telemetry"].generation == lake.published("telemetry").generation  # type: ignore[union-attr]
    assert hour_rows(lake, 9).height == 12


def test_republishing_the_same_manifest_commits_nothing(lake: dr.Lake, tmp_path: Path) -> None:
    path, _ = stage(lake, tmp_path, 9, "telemetry-48")
    first = publish(lake, path)
    again = publish(lake, path)
    assert again.ok and again.already_published and again.version == first.version
    assert lake.latest_version("telemetry") == first.version


def test_corrected_generation_replaces_the_hour_in_one_commit(lake: dr.Lake, tmp_path: Path) -> None:
    publish(lake, stage(lake, tmp_path, 8, "telemetry-47")[0])
    old_path, old_objects = stage(lake, tmp_path, 9, "telemetry-48")
    old_version = publish(lake, old_path).version
    old_rows = hour_rows(lake, 9)
    uri = lake.table_uri("telemetry")
    hour8 = [e for e in _delta.file_entries(uri, lake.options, old_version) if e.path.startswith("hour=08/")]
    new_path, new_objects = stage(lake, tmp_path, 9, "telemetry-49", corrected=True)
    report = publish(lake, new_path)
    assert report.ok and report.version == old_version + 1
    assert sorted(report.removed) == sorted(old_objects) and sorted(report.added) == sorted(new_objects)
    assert report.gate.retained == sorted(old_objects)  # earlier generation: retained, not unexpected
    new_rows = hour_rows(lake, 9)
    assert new_rows.height == old_rows.height
    assert new_rows.join(old_rows, on=list(new_rows.columns), how="anti").height == 1  # one changed record
    entries = _delta.file_entries(uri, lake.options, report.version)
    assert sorted(e.path for e in entries if e.path.startswith("hour=09/")) == sorted(new_objects)
    assert [e for e in entries if e.path.startswith("hour=08/")] == hour8  # other hours untouched
    storage = lake.table_storage("telemetry")
    assert all(storage.exists(p) for p in old_objects)  # kept until the replay horizon closes
    assert lake.scan("telemetry", old_version).filter(pl.col("hour") == 9).collect().sort(pl.all()).equals(old_rows)
    history = lake.history("telemetry")[-1]
    assert (history["files_added"], history["files_removed"]) == (3, 3)


def test_an_immutable_name_reused_with_other_bytes_fails_the_gate(lake: dr.Lake, tmp_path: Path) -> None:
    path, objects = stage(lake, tmp_path, 9, "telemetry-48")
    publish(lake, path)
    name = sorted(objects)[0]
    doc = json.loads(path.read_text())
    other = encode(pa.table({"sensor_id": ["z"], "ts_ms": pa.array([5], pa.int64()), "reading": [9.5]}))
    lake.table_storage("telemetry").write_bytes(name, other)  # a producer overwrote a published file
    doc["files"][0].update(size_bytes=len(other), records=1,
                           sha256=__import__("hashlib").sha256(other).hexdigest())
    report = gate_manifest(lake, load_manifest(write_manifest(tmp_path / "re.json", doc), lake.tables))
    assert report.checksum_mismatch == [name]


def test_zero_padded_hour_directory_reads_as_the_integer_hour(lake: dr.Lake, tmp_path: Path) -> None:
    publish(lake, stage(lake, tmp_path, 3, "telemetry-3")[0])
    publish(lake, stage(lake, tmp_path, 30, "telemetry-30")[0])
    frame = lake.read("telemetry")
    assert frame.schema["hour"] == pl.Int32
    assert sorted(set(frame["hour"].to_list())) == [3, 30]
    assert hour_rows(lake, 3).height == 12
    entries = lake.gateway.files("telemetry")
    assert {e.path.split("/")[0] for e in entries} == {"hour=03", "hour=30"}
    assert {str(e.partition_values["hour"]) for e in entries} == {"3", "30"}


def test_committed_fixtures_match_their_manifests(lake: dr.Lake, tmp_path: Path) -> None:
    root = lake.table_storage("telemetry").local_path() / "hour=09"
    root.mkdir(parents=True)
    for f in sorted((TELEMETRY / "hour=09").iterdir()):
        shutil.copy(f, root / f.name)
    early = publish(lake, TELEMETRY / "telemetry-48.manifest.json")  # generation 49's files are already there
    assert not early.ok and len(early.gate.unexpected) == 3
    assert all(p.startswith("hour=09/telemetry-49-") for p in early.gate.unexpected)
    for f in root.glob("telemetry-49-*"):
        f.unlink()
    assert publish(lake, TELEMETRY / "telemetry-48.manifest.json").ok
    for f in sorted((TELEMETRY / "hour=09").glob("telemetry-49-*")):
        shutil.copy(f, root / f.name)
    report = publish(lake, TELEMETRY / "telemetry-49.manifest.json")
    assert report.ok and len(report.removed) == 3
    assert hour_rows(lake, 9).height == 30
