"""The YAML-configured release run and its packet (issue 6)."""

from __future__ import annotations

import hashlib
import json
from html.parser import HTMLParser
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

import delta_release as dr
from delta_release import _delta
from delta_release.cli.main import cli
from delta_release.release.config import load_release_config
from tests.conftest import ORDERS, ROOT

PACKET_FIELDS = {"snapshot", "schema_versions", "files", "counts", "drills", "audit", "rollback_plan", "cost",
                 "pending", "decision", "failed_checks", "checks", "planning_ms"}


def make_config(tmp_path: Path, **override: object) -> Path:
    doc = yaml.safe_load((ROOT / "config" / "release.yaml").read_text())
    doc["lake"]["uri"] = str(tmp_path / "lake")
    doc["packet"]["directory"] = str(tmp_path / "packets")
    doc["sources"]["batches"] = [str(ORDERS / n) for n in ("history.jsonl", "v2.jsonl", "v3.jsonl", "bad.jsonl")]
    doc["sources"]["manifests"] = [str(ROOT / "fixtures" / "telemetry" / "telemetry-48.manifest.json")]
    doc["checks"]["schema_fixtures"] = {"v2": str(ORDERS / "v2.jsonl"), "v3": str(ORDERS / "v3.jsonl")}
    for dotted, value in override.items():
        node = doc
        *parents, last = dotted.split(".")
        for p in parents:
            node = node[p]
        node[last] = value
    path = tmp_path / "release.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


def run(config: Path) -> tuple[int, dict]:  # type: ignore[type-arg]
    res = CliRunner().invoke(cli, ["--json", "run", str(config)])
    return res.exit_code, json.loads(res.stdout)


@pytest.fixture(scope="module")
def shipped(tmp_path_factory: pytest.TempPathFactory) -> tuple[int, dict, Path]:  # type: ignore[type-arg]
    tmp = tmp_path_factory.mktemp("ship")
    code, out = run(make_config(tmp))
    return code, out, tmp


def test_release_ships_with_every_packet_field(shipped) -> None:  # type: ignore[no-untyped-def]
    code, out, tmp = shipped
    assert code == 0 and out["decision"] == "ship" and out["failed_checks"] == []
    data = Path(out["packet"]).read_bytes()
    assert hashlib.sha256(data).hexdigest() == out["packet_sha256"]
    assert (Path(out["packet"]).parent / "packet.json.sha256").read_text().split()[0] == out["packet_sha256"]
    packet = json.loads(data)
    assert PACKET_FIELDS <= set(packet)
    assert packet["snapshot"]["version"] == out["snapshot"]["version"] and packet["snapshot"]["generation"]
    assert packet["schema_versions"] == [2, 3]
    assert packet["counts"]["accepted"] + packet["counts"]["quarantined"] == packet["counts"]["extracted"]
    assert all(len(f["sha256"]) == 64 for f in packet["files"])
    assert packet["drills"]["conflict"]["passed"] and packet["drills"]["erasure"]["passed"]
    assert packet["checks"]["freshness_gate"]["passed"] and packet["telemetry"][0]["published"]
    assert any(k.startswith("telemetry hour 9") for k in packet["planning_ms"])
    assert packet["audit"]["bytes"]["scanned"] < packet["audit"]["bytes"]["full_scan"]
    assert packet["rollback_plan"]["mode"] in {"restore", "restore-older", "repair-forward"}
    assert {"retained_snapshot_bytes", "deletion_ledger_bytes", "growth_per_day_bytes"} <= set(packet["cost"])
    assert any(i["beyond_release_window"] for i in packet["pending"]["items"])  # backups outlive the window
    lake = dr.Lake.create(tmp / "lake")
    assert lake.published("orders").version == out["snapshot"]["version"]
    evidence = _delta.version_evidence(lake.table_uri("orders"), lake.options, out["snapshot"]["version"])
    assert evidence is not None and evidence["operation"] == "release"  # the run's one fold records its keys:
    assert evidence["key_filter"]["keys"] == evidence["changed_keys"] > 0  # a rebase over it reads no file


def test_report_renders_with_chart_and_snapshot(shipped) -> None:  # type: ignore[no-untyped-def]
    _, out, _ = shipped
    html = Path(out["report"]).read_text()

    class Finder(HTMLParser):
        svgs: list[str] = []
        snapshot = ""
        _in = False

        def handle_starttag(self, tag, attrs):  # type: ignore[no-untyped-def]
            attrs = dict(attrs)
            if tag == "svg":
                self.svgs.append(attrs.get("id", ""))
            self._in = attrs.get("id") == "snapshot" or self._in

        def handle_data(self, data):  # type: ignore[no-untyped-def]
            if self._in:
                self.snapshot += data

        def handle_endtag(self, tag):  # type: ignore[no-untyped-def]
            if tag == "p":
                self._in = False

    f = Finder()
    f.feed(html)
    assert "chart-bytes" in f.svgs and "chart-planning" in f.svgs
    assert f"version\n{out['snapshot']['version']}" in f.snapshot.replace(" ", "\n") or str(
        out["snapshot"]["version"]) in f.snapshot


def test_broken_v3_fixture_holds_and_publishes_nothing(tmp_path: Path) -> None:
    broken = tmp_path / "v3-broken.jsonl"
    broken.write_text((ORDERS / "v3.jsonl").read_text().replace('"currency": "USD"', '"currency": "usd"', 1))
    lake = dr.Lake.create(tmp_path / "lake")
    before = lake.published("orders")
    code, out = run(make_config(tmp_path, **{"checks.schema_fixtures": {"v2": str(ORDERS / "v2.jsonl"),
                                                                       "v3": str(broken)}}))
    assert code == 3 and out["decision"] == "hold"
    assert out["failed_checks"] == ["schema_fixture_v3"]
    after = dr.Lake.open(tmp_path / "lake").published("orders")
    assert after == before  # no generation beyond the last shipped one
    assert dr.Lake.open(tmp_path / "lake").published("telemetry") is None
    # a later plain ingest does not "recover" the held commit into a publication on its own
    assert dr.Lake.open(tmp_path / "lake").recover_publication("orders") == before


@pytest.mark.parametrize(("text", "key"), [
    ("lake: {uri: x, colour: red}\n", "lake.colour"),
    ("lake: {uri: x}\nlake: {uri: y}\n", "lake"),
    ("retention: {raw_days: thirty}\n", "retention.raw_days"),
])
def test_bad_config_exits_2_naming_file_and_key(tmp_path: Path, text: str, key: str) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text(text)
    res = CliRunner().invoke(cli, ["--json", "run", str(path)])
    assert res.exit_code == 2
    err = json.loads(res.stdout)["error"]
    assert err["type"] == "ConfigError" and err["file"] == str(path) and err["key"] == key


@pytest.mark.parametrize("text", [
    "lake: !!python/object/apply:os.system ['echo owned']\n",
    "a: &a [1, 2]\nb: [*a, *a]\n",
])
def test_unsafe_yaml_is_refused(tmp_path: Path, text: str) -> None:
    path = tmp_path / "evil.yaml"
    path.write_text(text)
    with pytest.raises(dr.ConfigError,
                       match=r"evil\.yaml: (not valid safe YAML \(line 1\)|YAML aliases are not allowed \(line 2\))"):
        load_release_config(path)


def test_secrets_come_from_the_environment_and_are_written_nowhere(tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    path = make_config(tmp_path, **{"lake.storage_options": {"AWS_SECRET_ACCESS_KEY": "plain-text"}})
    with pytest.raises(dr.ConfigError,
                       match=r"lake\.storage_options\.AWS_SECRET_ACCESS_KEY must come from the environment: write"
                             r" \$\{ENV_VAR\}") as err:
        load_release_config(path)
    assert err.value.key == "lake.storage_options.AWS_SECRET_ACCESS_KEY" and "plain-text" not in err.value.message
    monkeypatch.setenv("DR_TEST_SECRET", "s3cr3t-value-123")
    path = make_config(tmp_path, **{"lake.storage_options": {"AWS_SECRET_ACCESS_KEY": "${DR_TEST_SECRET}"}})
    cfg = load_release_config(path)
    assert cfg.storage_options["AWS_SECRET_ACCESS_KEY"] == "s3cr3t-value-123"
    assert "s3cr3t" not in repr(cfg.secret_names)
