"""The gate before the commit: staged files must match their evidence exactly (issue 3)."""

from __future__ import annotations

import os
from collections.abc import Callable

import pytest
from click.testing import CliRunner

import delta_release as dr
import delta_release.commit.writer as writer_mod
from delta_release.cli.main import cli
from delta_release.storage import Storage
from tests.conftest import jsonl, up


def corrupt(storage: Storage, path: str) -> None:
    data = bytearray(storage.read_bytes(path))
    data[len(data) // 2] ^= 0xFF
    storage.local_path(path).write_bytes(bytes(data))


def truncate(storage: Storage, path: str) -> None:
    full = storage.local_path(path)
    full.write_bytes(full.read_bytes()[:-9])


def remove(storage: Storage, path: str) -> None:
    os.unlink(storage.local_path(path))



SABOTAGE: dict[str, tuple[Callable[[Storage, str], None], str]] = {
    "corrupt": (corrupt, "checksum_mismatch"),
    "truncate": (truncate, "size_mismatch"),
    "remove": (remove, "missing"),
}


@pytest.mark.parametrize("how", [*SABOTAGE, "misplace"])
def test_sabotaged_staged_file_commits_nothing(lake: dr.Lake, monkeypatch: pytest.MonkeyPatch, how: str) -> None:
    lake.ingest(jsonl([up("a", 1, day=47)]))
    before = lake.latest_version("orders")
    real = writer_mod.stage_partitions

    def sabotaged(storage: Storage, **kw):  # type: ignore[no-untyped-def]
        cand = real(storage, **kw)
        target = cand.files[0]
        if how == "misplace":
            from dataclasses import replace

            wrong = target.path.replace("event_day=47/", "event_day=48/")
            storage.local_path(wrong).parent.mkdir(parents=True, exist_ok=True)
            os.replace(storage.local_path(target.path), storage.local_path(wrong))
            cand.files[0] = replace(target, path=wrong)
        else:
            SABOTAGE[how][0](storage, target.path)
        return cand

    monkeypatch.setattr(writer_mod, "stage_partitions", sabotaged)
    with pytest.raises(dr.GateError) as err:
        lake.ingest(jsonl([up("a", 2, amount=5, day=47)]))
    expected = "partition_path" if how == "misplace" else SABOTAGE[how][1]
    assert err.value.mismatch == expected
    assert "event_day=4" in err.value.path
    assert lake.latest_version("orders") == before
    assert lake.read()["amount_cents"].to_list() == [100]


def test_stats_that_lie_are_caught(lake: dr.Lake, monkeypatch: pytest.MonkeyPatch) -> None:
    real = writer_mod.stage_partitions

    def lying(storage: Storage, **kw):  # type: ignore[no-untyped-def]
        from dataclasses import replace

        cand = real(storage, **kw)
        lie = cand.files[0].stats.replace('"amount_cents": 100', '"amount_cents": 1')
        cand.files[0] = replace(cand.files[0], stats=lie)
        return cand

    monkeypatch.setattr(writer_mod, "stage_partitions", lying)
    with pytest.raises(dr.GateError, match="stats_mismatch: column statistics differ from the recorded stats") as err:
        lake.ingest(jsonl([up("a", 1, day=47)]))
    assert err.value.mismatch == "stats_mismatch"
    assert lake.latest_version("orders") == 0


def test_gate_failure_through_cli_is_exit_3_with_json_error(tmp_path, monkeypatch: pytest.MonkeyPatch) -> None:
    real = writer_mod.stage_partitions

    def broken(storage: Storage, **kw):  # type: ignore[no-untyped-def]
        cand = real(storage, **kw)
        truncate(storage, cand.files[0].path)
        return cand

    monkeypatch.setattr(writer_mod, "stage_partitions", broken)
    batch = tmp_path / "b.jsonl"
    batch.write_bytes(jsonl([up("a", 1)]))
    result = CliRunner().invoke(cli, ["--lake", str(tmp_path / "lake"), "--json", "ingest", "--create", str(batch)])
    assert result.exit_code == 3
    import json

    err = json.loads(result.stdout)["error"]
    assert err["type"] == "GateError" and err["mismatch"] == "size_mismatch"
