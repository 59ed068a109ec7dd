"""Issue 15 (thresholds, run --lake, retention defaults) and issue 17 item 3 (the config validated whole)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from delta_release.cli.main import cli
from delta_release.errors import ConfigError
from delta_release.release.config import load_release_config
from tests.conftest import ORDERS, ROOT
from tests.release.conftest import garbage_batch, write_config


def refused(config: Path, key: str | None) -> str:
    """The CLI refuses `config` with exit 2 and one line naming the file (and the key); nothing is created."""
    res = CliRunner().invoke(cli, ["run", str(config)])
    assert res.exit_code == 2, res.output
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in res.output, res.output
    assert str(config) in lines[0]
    if key:
        assert key in lines[0]
    assert not (config.parent / "lake").exists() and not (config.parent / "packets").exists()
    with pytest.raises(ConfigError) as info:
        load_release_config(config)
    assert info.value.key == key
    return lines[0]


@pytest.mark.parametrize(("dotted", "value", "key"), [
    ("release.window_days", -7, "release.window_days"),
    ("thresholds.rejected.overall", 1.5, "thresholds.rejected.overall"),
    ("thresholds.late_events.max_share", -0.1, "thresholds.late_events.max_share"),
    ("checks.audit.max_fraction", 2, "checks.audit.max_fraction"),
    ("thresholds.rejected.by_reason.not_a_reason", 0.1, "thresholds.rejected.by_reason.not_a_reason"),
    ("retention.raw_days", -1, "retention.raw_days"),
    # past what dates can hold: these overflowed after the run had shipped and published (exit 1, no packet)
    ("release.window_days", 99_999_999_999, "release.window_days"),
    ("retention.backup_days", 5_000_000, "retention.backup_days"),
    ("retention.raw_days", 1e300, "retention.raw_days"),
    ("lake.uri", "s3://", "lake.uri"),
    ("lake.uri", "s3:///prefix", "lake.uri"),
])
def test_values_out_of_range_are_one_line_config_errors(tmp_path: Path, dotted: str, value: object, key: str) -> None:
    refused(write_config(tmp_path, **{dotted: value}), key)


@pytest.mark.parametrize(("old", "new", "key"), [
    ("max_fraction: 0.1", "max_fraction: .nan", "checks.audit.max_fraction"),
    ("max_fraction: 0.1", "max_fraction: .inf", "checks.audit.max_fraction"),
    ("window_days: 7", "window_days: " + "9" * 5000, "release.window_days"),
    ("window_days: 7", "window_days: 7\n  window_days: 8", "release.window_days"),  # duplicate: dotted key
])
def test_yaml_level_errors_name_the_dotted_key(tmp_path: Path, old: str, new: str, key: str) -> None:
    refused(write_config(tmp_path, text_edit=(old, new)), key)


def test_unquoted_day_range_gets_a_hint(tmp_path: Path) -> None:
    line = refused(write_config(tmp_path, text_edit=("days: '47:48'", "days: 10:11")), "checks.audit.days")
    assert "quote it" in line


def test_invalid_utf8_names_the_byte(tmp_path: Path) -> None:
    config = write_config(tmp_path)
    config.write_bytes(config.read_bytes().replace(b"window_days", b"window_\xffdays"))
    assert "0xff" in refused(config, None)


def test_sources_must_exist_and_be_files(tmp_path: Path) -> None:
    line = refused(write_config(tmp_path, batches=[str(tmp_path / "missing.jsonl")]), "sources.batches[0]")
    assert "not found" in line
    (tmp_path / "adir").mkdir()
    assert "not a file" in refused(write_config(tmp_path, batches=[str(tmp_path / "adir")]), "sources.batches[0]")


def test_packet_directory_must_be_a_directory(tmp_path: Path) -> None:
    config = write_config(tmp_path)
    (tmp_path / "packets").write_text("a file")
    res = CliRunner().invoke(cli, ["run", str(config)])
    assert res.exit_code == 2 and "packet.directory" in res.stderr and len(res.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "lake").exists()


@pytest.mark.parametrize(("dotted", "value", "instead"), [
    ("tables", ["orders", "telemetry"], "sources.batches"),
    ("retention.replay_horizon_days", 7, "--replay-horizon-hours"),
])
def test_removed_keys_are_refused_by_name(tmp_path: Path, dotted: str, value: object, instead: str) -> None:
    """Issue 12: `tables` and `retention.replay_horizon_days` were parsed and never read; an old config that
    still names them is refused with the key and what replaces it, not silently accepted."""
    line = refused(write_config(tmp_path, **{dotted: value}), dotted)
    assert "was removed" in line and instead in line


def test_retention_defaults_are_one_set(tmp_path: Path) -> None:
    from delta_release import retention

    doc = yaml.safe_load(write_config(tmp_path).read_text())
    del doc["retention"]
    path = tmp_path / "no-retention.yaml"
    path.write_text(yaml.safe_dump(doc))
    cfg = load_release_config(path)
    assert cfg.raw_retention_days == retention.RAW_RETENTION_DAYS
    assert cfg.retained_snapshots == retention.RETAIN_VERSIONS
    shipped = load_release_config(ROOT / "config" / "release.yaml")  # the demo config states the same values
    assert (shipped.raw_retention_days, shipped.retained_snapshots) == (cfg.raw_retention_days, cfg.retained_snapshots)
    vac = CliRunner().invoke(cli, ["vacuum", "--help"]).output
    era = CliRunner().invoke(cli, ["erase", "--help"]).output
    assert f"default: {retention.RETAIN_VERSIONS}" in vac and f"{retention.REPLAY_HORIZON_HOURS}" in vac
    assert f"{retention.RAW_RETENTION_DAYS}" in era


@pytest.fixture(scope="module")
def held(tmp_path_factory: pytest.TempPathFactory) -> tuple[object, Path]:
    """A run whose only batch is 95 garbage lines and 5 good ones, into a lake named by `run --lake`."""
    tmp = tmp_path_factory.mktemp("held")
    config = write_config(tmp, batches=[str(garbage_batch(tmp / "garbage.jsonl"))])
    res = CliRunner().invoke(cli, ["--json", "--lake", str(tmp / "other-lake"), "run", str(config)])
    return res, tmp


def test_mostly_garbage_batch_holds_with_observed_vs_threshold(held) -> None:  # type: ignore[no-untyped-def]
    res, tmp = held
    assert res.exit_code == 3, res.output
    out = json.loads(res.stdout)
    assert out["decision"] == "hold" and out["snapshot"]["generation"] is None
    assert {"rejected_per_batch", "rejected_overall", "rejected_by_reason"} <= set(out["failed_checks"])
    packet = json.loads(Path(out["packet"]).read_bytes())
    overall = packet["checks"]["rejected_overall"]
    assert overall["observed"] == 0.95 and overall["threshold"] == 0.2 and not overall["passed"]
    assert packet["checks"]["rejected_by_reason"]["reasons"]["malformed_json"]["observed"] == 0.95
    for name in ("late_events", "stale_events", "moved_orders"):
        assert {"observed", "threshold", "passed"} <= set(packet["checks"][name])
    assert packet["reasons"] and packet["reasons"][0].startswith(packet["failed_checks"][0])
    assert packet["thresholds"]["rejected"]["overall"] == 0.2


def test_run_lake_overrides_the_config(held) -> None:  # type: ignore[no-untyped-def]
    res, tmp = held
    out = json.loads(res.stdout)
    packet = json.loads(Path(out["packet"]).read_bytes())
    assert packet["lake"] == str(tmp / "other-lake") and packet["config"]["lake_from"] == "--lake"
    assert (tmp / "other-lake").is_dir() and not (tmp / "lake").exists()
    assert "overrides the config" in CliRunner().invoke(cli, ["run", "--help"]).output.replace("\n", " ")
    steps = [s["command"] for s in packet["next_steps"] if s["command"]]
    assert steps and all(f"--lake {tmp / 'other-lake'}" in c for c in steps)


def test_status_shows_the_held_run(held) -> None:  # type: ignore[no-untyped-def]
    res, tmp = held
    lake = str(tmp / "other-lake")
    out = CliRunner().invoke(cli, ["--lake", lake, "--json", "status"])
    assert out.exit_code == 0, out.output
    s = json.loads(out.stdout)
    orders = next(t for t in s["tables"] if t["table"] == "orders")
    # a HOLD commits nothing (issue 13, item 1): the log is as before the run, nothing awaits publication
    assert orders["published"]["version"] == 0 and orders["latest"]["version"] == 0
    assert orders["unpublished_count"] == 0 and orders["unpublished"] == []
    assert s["last_run"]["decision"] == "hold" and s["last_run"]["packet"] == json.loads(res.stdout)["packet"]
    # the run's own answer and status agree: a hold committed no version (status said the parent's)
    assert s["last_run"]["snapshot"]["version"] is None and json.loads(res.stdout)["snapshot"]["version"] is None
    assert s["last_run"]["snapshot"]["parent"] == 0
    assert s["erasures"] == [] and orders["vacuum_debt"]["files"] == 0
    text = CliRunner().invoke(cli, ["--lake", lake, "status"]).output
    assert "committed but not published" not in text and "HOLD" in text and "rejected_overall" in text
    assert "nothing committed" in text


def test_thresholds_can_be_relaxed(tmp_path: Path) -> None:
    """The same garbage batch ships when the config says that much rejection is fine (the thresholds decide)."""
    config = write_config(tmp_path, batches=[str(garbage_batch(tmp_path / "g.jsonl"))],
                          **{"thresholds.rejected.per_batch": 1.0, "thresholds.rejected.overall": 1.0,
                             "thresholds.rejected.by_reason.default": 1.0,
                             "checks.schema_fixtures": {"v2": str(ORDERS / "v2.jsonl"),
                                                        "v3": str(ORDERS / "v3.jsonl")}})
    res = CliRunner().invoke(cli, ["--json", "run", str(config)])
    out = json.loads(res.stdout)
    assert not {"rejected_per_batch", "rejected_overall", "rejected_by_reason"} & set(out["failed_checks"])


def test_checks_that_used_to_fail_after_the_run_had_published_fail_first(tmp_path: Path) -> None:
    """A manifest that is not JSON, a packet folder that cannot be written and a config nested thousands
    deep: each failed only after the ship commit and the publication (exit 1 or 2, no packet). Now each is a
    one-line ConfigError before anything exists."""
    bad = tmp_path / "bad.manifest.json"
    bad.write_text("{not json")
    refused(write_config(tmp_path, **{"sources.manifests": [str(bad)]}), "sources.manifests[0]")
    refused(write_config(tmp_path, **{"packet.directory": "/proc/delta-release-packets"}), "packet.directory")
    deep = tmp_path / "deep.yaml"
    deep.write_text("lake: " + "[" * 20_000 + "]" * 20_000 + "\n")
    line = refused(deep, None)
    assert "nested too deeply" in line
