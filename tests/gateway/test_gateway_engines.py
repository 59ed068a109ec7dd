"""The second engine: DuckDB reads exactly the gateway's file list and agrees with Polars."""

from __future__ import annotations

import json
from pathlib import Path

import polars as pl
import pytest
from click.testing import CliRunner

import delta_release as dr
from delta_release.cli.main import cli
from delta_release.gateway import EngineMismatchError
from delta_release.gateway import reader as reader_module
from tests.conftest import ORDERS, jsonl, rm
from tests.external.conftest import publish, stage


def _orders(lake: dr.Lake) -> None:
    for name in ("v2", "v3"):
        lake.ingest(ORDERS / f"{name}.jsonl")
    lake.ingest(jsonl([rm("ghost", 500)]))  # tombstone in the null partition


def test_duckdb_equals_polars_for_orders_including_the_null_partition(lake: dr.Lake) -> None:
    _orders(lake)
    polars_rows = lake.read()
    duck_rows = lake.gateway.read_duckdb("orders")
    assert duck_rows.height > 0 and duck_rows.equals(polars_rows)
    assert duck_rows.columns == ["order_id", "amount_cents", "currency", "event_day", "position"]
    everything = lake.scan("orders", include_tombstones=True).collect().sort("order_id", "position")
    duck_all = lake.gateway.read_duckdb("orders", include_tombstones=True).sort("order_id", "position")
    assert duck_all.equals(everything)
    ghost = duck_all.filter(pl.col("order_id") == "ghost")
    assert ghost["event_day"].to_list() == [None]  # not '__HIVE_DEFAULT_PARTITION__'


def test_duckdb_reads_pinned_versions(lake: dr.Lake) -> None:
    _orders(lake)
    for version in range(lake.published("orders").version + 1):  # type: ignore[union-attr]
        assert lake.gateway.read_duckdb("orders", version).equals(lake.read("orders", version=version))


def test_engines_report_the_same_file_set(lake: dr.Lake, tmp_path: Path) -> None:
    publish(lake, stage(lake, tmp_path, 9, "telemetry-48")[0])
    report = lake.gateway.engine_files("telemetry")
    assert not report.mismatch and len(report.expected) == 3
    assert report.seen["polars"] == report.seen["duckdb"] == report.expected


def test_a_file_set_difference_fails_the_read(lake: dr.Lake, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    publish(lake, stage(lake, tmp_path, 9, "telemetry-48")[0])
    real = reader_module._delta.file_uris
    monkeypatch.setattr(reader_module._delta, "file_uris", lambda *a: real(*a)[:-1])  # polars would miss one
    with pytest.raises(EngineMismatchError) as err:
        lake.gateway.read_duckdb("telemetry")
    assert len(err.value.differences["polars"]["missing"]) == 1 and err.value.exit_code == 3


def test_a_glob_over_an_hour_reports_unregistered_files(lake: dr.Lake, tmp_path: Path) -> None:
    path, objects = stage(lake, tmp_path, 9, "telemetry-48")
    publish(lake, path)
    assert not lake.gateway.glob_partition("telemetry", 9).mismatch
    stage(lake, tmp_path, 9, "telemetry-99", files=1)  # a producer's file nobody registered
    report = lake.gateway.glob_partition("telemetry", 9)
    stray = lake.table_storage("telemetry").uri("hour=09/telemetry-99-0.parquet")
    assert report.mismatch and report.unexpected["duckdb_glob"] == [stray]
    assert lake.gateway.read_duckdb("telemetry").height == 12  # the gateway's list is unaffected


def _key(row: dict) -> str:  # type: ignore[type-arg]
    return json.dumps(row, sort_keys=True)


def _cli(lake_dir: Path, *args: str) -> tuple[int, dict]:  # type: ignore[type-arg]
    result = CliRunner().invoke(cli, ["--lake", str(lake_dir), "--json", *args])
    return result.exit_code, json.loads(result.stdout)


def test_cli_read_engines_agree_for_orders_and_telemetry(lake: dr.Lake, tmp_path: Path) -> None:
    _orders(lake)
    publish(lake, stage(lake, tmp_path, 9, "telemetry-48")[0])
    publish(lake, stage(lake, tmp_path, 10, "telemetry-49")[0])
    lake_dir = tmp_path / "lake"
    for table in ("orders", "telemetry"):
        code_p, by_polars = _cli(lake_dir, "read", "--table", table)
        code_d, by_duck = _cli(lake_dir, "read", "--table", table, "--engine", "duckdb")
        assert code_p == code_d == 0 and by_polars["version"] == by_duck["version"]
        assert by_polars["rows"] and sorted(by_polars["rows"], key=_key) == sorted(by_duck["rows"], key=_key)
    _, orders = _cli(lake_dir, "read", "--engine", "duckdb")
    assert [r["order_id"] for r in orders["rows"]] == sorted(r["order_id"] for r in orders["rows"])


def test_cli_gate_and_publish_contract(lake: dr.Lake, tmp_path: Path) -> None:
    path, objects = stage(lake, tmp_path, 9, "telemetry-48", skip={1})
    lake_dir = tmp_path / "lake"
    code, gate = _cli(lake_dir, "gate", str(path))
    assert code == 3 and gate["ok"] is False and gate["missing"] == [sorted(objects)[1]]
    for field in ("generation", "unexpected", "size_mismatch", "count_mismatch", "checksum_mismatch"):
        assert field in gate
    code, pub = _cli(lake_dir, "publish", str(path))
    assert code == 3 and pub["ok"] is False and lake.latest_version("telemetry") is not None
    code, read = _cli(lake_dir, "read", "--table", "telemetry")
    assert code == 2 and read["error"]["type"] == "NotFoundError"  # nothing was ever published
    lake.table_storage("telemetry").write_bytes(sorted(objects)[1], objects[sorted(objects)[1]])
    code, pub = _cli(lake_dir, "publish", str(path))
    assert code == 0 and pub["ok"] and pub["generation"] == "telemetry-48" and pub["version"] == 1
    assert pub["catalog"]["label"] == "telemetry-48" and pub["cache"]["generation"] == pub["catalog"]["generation"]
    code, read = _cli(lake_dir, "read", "--table", "telemetry")
    assert code == 0 and len(read["rows"]) == 12
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({**json.loads(path.read_text()), "files": [{"path": "/etc/passwd", "size_bytes": 1,
                                                                          "records": 1, "sha256": "0" * 64}]}))
    code, err = _cli(lake_dir, "publish", str(bad))
    assert code == 2 and err["error"]["type"] == "InputError" and "absolute" in err["error"]["message"]
