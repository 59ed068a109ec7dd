"""Every refusal and next step names the fix, with a copy-paste command where one exists (issue 35, item 3).
Each case was reproduced with the CLI on a fresh lake first; each test fails on the wording it replaced."""

from __future__ import annotations

import hashlib
import json
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

import delta_release as dr
from delta_release.cli.main import cli
from delta_release.release.fixes import freshness_failure
from tests.conftest import FIXTURES, ORDERS, jsonl, rm, up

ROOT = Path(__file__).resolve().parents[2]


def invoke(lake: Path, *args: str) -> tuple[int, str, str]:
    res = CliRunner().invoke(cli, ["--lake", str(lake), *args])
    return res.exit_code, res.stdout, res.stderr


def one_line(res_code: int, err: str, code: int = 2) -> str:
    assert res_code == code, err
    assert err.count("\n") == 1 and err.startswith("error: ") and "Traceback" not in err, err
    return err.rstrip("\n")


# -- release checks: schema_fixture and freshness_gate said "see the check evidence" ---------------------
def _held_run(tmp_path: Path, *, fixture_v2: Path, manifests: list[str]) -> dict:  # type: ignore[type-arg]
    doc = yaml.safe_load((ROOT / "config" / "release.yaml").read_text())
    doc["lake"] = {"uri": str(tmp_path / "lake"), "create": True}
    doc["sources"] = {"batches": [str(ORDERS / "v2.jsonl")], "manifests": manifests}
    doc["checks"] = {"schema_fixtures": {"v2": str(fixture_v2), "v3": str(ORDERS / "v3.jsonl")},
                     "audit": {"days": "47:48", "max_fraction": 1.0}, "freshness_gate": True}
    doc["packet"]["directory"] = str(tmp_path / "packets")
    config = tmp_path / "release.yaml"
    config.write_text(yaml.safe_dump(doc))
    res = CliRunner().invoke(cli, ["--json", "run", str(config)])
    assert res.exit_code == 3, res.output
    packet = json.loads(Path(json.loads(res.stdout)["packet"]).read_text())
    assert not any("see the check evidence" in s["what"] or "{'" in s["what"] for s in packet["next_steps"])
    return packet  # type: ignore[no-any-return]


def test_failed_schema_fixture_and_freshness_gate_say_what_failed_and_the_fix(tmp_path: Path) -> None:
    drop = tmp_path / "drop"
    shutil.copytree(FIXTURES / "telemetry", drop)
    manifest = json.loads((drop / "telemetry-48.manifest.json").read_text())
    manifest["files"][0]["size_bytes"] += 1  # the producer's manifest no longer matches its object
    (drop / "bad.manifest.json").write_text(json.dumps(manifest))
    packet = _held_run(tmp_path, fixture_v2=ORDERS / "bad.jsonl", manifests=[str(drop / "bad.manifest.json")])
    assert packet["failed_checks"] == ["schema_fixture_v2", "freshness_gate"]
    steps = {s["what"].split(" failed: ")[0]: s["what"] for s in packet["next_steps"]}
    config = tmp_path / "release.yaml"
    assert steps["schema_fixture_v2"] == (
        "schema_fixture_v2 failed: bad.jsonl: 12 of 14 lines rejected (3 amount_unit, 1 bad_currency, 1 bad_type,"
        " 1 bad_value, 1 malformed_json, 1 missing_field, 1 not_an_object, 1 position_conflict, 1 unexpected_field,"
        " 1 unknown_schema_version); schema versions accepted: 2; fix: bad.jsonl must hold only lines that decode"
        " as schema version 2, and the first rejected line is line 1 (malformed_json: not valid JSON (Expecting ','"
        f" delimiter)): fix the file or point checks.schema_fixtures.v2 in {config} at one that does (if this"
        " fixture passed before, the decoder changed: do not ship)")
    size = manifest["files"][0]["size_bytes"]
    assert steps["freshness_gate"] == (
        "freshness_gate failed: manifest bad.manifest.json (generation telemetry-48) failed the gate: size_mismatch"
        f" hour=09/telemetry-48-0.parquet (expected {size} bytes, found {size - 1}); fix: the objects beside"
        f" {drop / 'bad.manifest.json'} do not match it: have the producer upload telemetry's partition again or"
        " send a corrected manifest, then run again")


def test_freshness_gate_without_a_manifest_says_so(tmp_path: Path) -> None:
    packet = _held_run(tmp_path, fixture_v2=ORDERS / "v2.jsonl", manifests=[])
    assert packet["failed_checks"] == ["freshness_gate"]
    assert packet["next_steps"][0]["what"] == (
        "freshness_gate failed: no telemetry manifest is configured; fix: add a producer manifest under"
        f" sources.manifests in {tmp_path / 'release.yaml'}, or set checks.freshness_gate: false there")


def test_a_gate_that_missed_an_omitted_object_is_named() -> None:
    """The third cause (the gate itself blind) cannot be made through the CLI without breaking the gate."""
    reports = [{"manifest": "/d/m.json", "generation": "g", "gate": {"ok": True}, "omitted_object_rejected": False}]
    detail, fix = freshness_failure(Path("run.yaml"), reports)
    assert detail == "the gate accepted manifest m.json with an object that was never written"
    assert fix.startswith("the manifest-vs-inventory gate no longer sees a missing object: do not ship")


# -- gate/publish printed {'hour': 9} -----------------------------------------------------------------------
@pytest.mark.parametrize("command", ["gate", "publish"])
def test_gate_and_publish_print_the_partition_as_its_path(tmp_path: Path, command: str) -> None:
    dr.Lake.create(tmp_path / "lake")
    code, out, _ = invoke(tmp_path / "lake", command, str(FIXTURES / "telemetry" / "telemetry-48.manifest.json"))
    assert code == 3
    assert out.splitlines()[0] == "telemetry hour=09 generation telemetry-48: GATE FAILED (3 files)"
    assert "{'" not in out


# -- erase: old files remained "until <now>"; vacuum called them "expired" ---------------------------------
@pytest.fixture
def erased(tmp_path: Path) -> tuple[Path, str]:
    lake = dr.Lake.create(tmp_path / "lake")
    lake.ingest(jsonl([up("a", 1), up("b", 2)]))
    lake.ingest(jsonl([up("c", 3), up("a", 4, amount=7)]))
    code, out, err = invoke(tmp_path / "lake", "erase", "a")
    assert code == 0, err
    return tmp_path / "lake", out


def test_erase_names_vacuum_apply_for_the_old_data_files(erased: tuple[Path, str]) -> None:
    root, out = erased
    assert "versions that still hold it are refused: 1-2\n" in out  # not [[1, 2]]
    lines = [line for line in out.splitlines() if "old data file" in line]
    assert lines == [f"  2 old data file(s) of table orders until `vacuum --apply` removes them: "
                     f"delta-release --lake {root} vacuum --apply"]
    command = lines[0].split(": ", 1)[1].split()
    assert command[:3] == ["delta-release", "--lake", str(root)]
    code, _, err = invoke(root, *command[3:])  # the command as printed removes them
    assert code == 0, err
    pending = json.loads(invoke(root, "--json", "erase", "--resume")[1])
    assert pending["erasures_completed"] == 0
    assert not [p for p in dr.Lake.open(root).erasure_pending() if p["kind"] == "data_files"]


def test_vacuum_labels_files_of_recent_refused_versions(erased: tuple[Path, str]) -> None:
    root, _ = erased
    code, out, _ = invoke(root, "--json", "vacuum")
    report = json.loads(out)
    assert code == 0 and report["refused_versions"] == [1, 2]  # minutes old, kept but for the erasure
    assert "expired" not in report["removed_by_reason"]
    assert set(report["removed_by_reason"]) == {"erased_subject", "refused_version"}
    refused = {r["path"]: r["versions"] for r in report["removed"] if r["reason"] == "refused_version"}
    assert refused and all(v and set(v) <= {1, 2} for v in refused.values())
    text = invoke(root, "vacuum")[1].splitlines()
    for path, versions in refused.items():
        why = (f"only version {versions[0]} needs it, which holds" if len(versions) == 1
               else "only versions 1-2 need it, which hold")
        assert f"  would remove: {path} (refused_version: {why} an erased subject)" in text


def test_vacuum_still_calls_files_past_retention_expired(tmp_path: Path) -> None:
    lake = dr.Lake.create(tmp_path / "lake")
    for i in range(1, 4):
        lake.ingest(jsonl([up("a", i, amount=i)]))
    report = lake.vacuum(retain_versions=1, replay_horizon_hours=0)
    assert {r["reason"] for r in report.removed} == {"expired"} and report.refused_versions == []


# -- drill on a lake that is not a scratch lake -------------------------------------------------------------
def test_drill_refusal_says_what_to_pass(tmp_path: Path) -> None:
    dr.Lake.create(tmp_path / "lake")
    suggested = str(Path(tempfile.gettempdir()) / "delta-release-drill")
    line = one_line(*invoke(tmp_path / "lake", "drill", "conflict")[::2])
    assert line == (f"error: drill needs a scratch lake: {tmp_path / 'lake'} already holds data that is not a"
                    " drill's (a drill wipes its lake); pass --lake with a new or empty local folder, which the"
                    f" drill wipes and reuses, e.g. add `--lake {suggested}` to the command")


# -- read --version -1 said "not published" -----------------------------------------------------------------
def test_read_a_negative_version_is_invalid(tmp_path: Path) -> None:
    dr.Lake.create(tmp_path / "lake").ingest(jsonl([up("a", 1)]))
    line = one_line(*invoke(tmp_path / "lake", "read", "--version", "-1")[::2])
    assert line == "error: version -1 of orders is invalid: versions count up from 0 (published: 1)"
    code, out, _ = invoke(tmp_path / "lake", "--json", "read", "--version", "99")
    assert code == 2 and "is not published" in json.loads(out)["error"]["message"]  # a future one: not published


# -- quarantine --batch needed all 16 hex characters --------------------------------------------------------
def _two_batches_sharing_a_first_digit() -> list[bytes]:
    """Two small batches (each with a rejected line) whose batch ids start with the same hex digit."""
    seen: dict[str, bytes] = {}
    for i in range(100):
        data = jsonl([up(f"o{i}", 1)]) + b"not json\n"
        first = hashlib.sha256(data).hexdigest()[0]
        if first in seen:
            return [seen[first], data]
        seen[first] = data
    raise AssertionError("unreachable: 17 batches share a first digit")


def test_quarantine_batch_takes_a_unique_prefix(tmp_path: Path) -> None:
    lake = dr.Lake.create(tmp_path / "lake")
    ids = [lake.ingest(b).batch_id for b in _two_batches_sharing_a_first_digit()]
    for prefix in (ids[0][:7], ids[0]):
        code, out, _ = invoke(tmp_path / "lake", "--json", "quarantine", "--batch", prefix)
        assert code == 0 and {r["batch_id"] for r in json.loads(out)["records"]} == {ids[0]}
    common = next(n for n in range(16, 0, -1) if ids[0][:n] == ids[1][:n])
    line = one_line(*invoke(tmp_path / "lake", "quarantine", "--batch", ids[0][:common])[::2])
    assert re.fullmatch(rf"error: --batch {ids[0][:common]} is ambiguous: 2 batch ids start with it \(.*\);"
                        " give more characters", line), line
    unknown = next(c for c in "0123456789abcdef" if not any(i.startswith(c) for i in ids))
    assert "no batch id starts with" in one_line(*invoke(tmp_path / "lake", "quarantine", "--batch", unknown)[::2])
    assert "is not a batch id" in one_line(*invoke(tmp_path / "lake", "quarantine", "--batch", "XYZ")[::2])


# -- examples/analyst.py printed a traceback (exit 1) -------------------------------------------------------
def test_analyst_example_refuses_a_bad_argument_in_one_line(tmp_path: Path) -> None:
    lake = dr.Lake.create(tmp_path / "lake")
    lake.ingest(jsonl([up("a", 1)]))
    lake.ingest(jsonl([rm("a", 2)]))
    script = [sys.executable, str(ROOT / "examples" / "analyst.py")]
    for args, says in ((["--lake", str(tmp_path / "nolake")], "holds no lake"),
                       (["--lake", str(tmp_path / "lake"), "--pinned", "99"], "version 99 of orders is not published"),
                       (["--lake", str(tmp_path / "lake"), "--out", str(tmp_path / "no" / "x.svg")], "No such file")):
        res = subprocess.run([*script, *args], capture_output=True, text=True, cwd=tmp_path, timeout=120)
        assert res.returncode == 2, res.stderr
        assert res.stderr.count("\n") == 1 and res.stderr.startswith("analyst.py: error: ") and says in res.stderr
