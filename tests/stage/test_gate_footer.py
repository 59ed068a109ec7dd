"""The staging gate compares a staged file's footer (row count, schema, row-group statistics) with its
evidence after the checksum, without decoding the pages; a footer without full statistics falls back to
reading the data. Either way a lying row count or lying stats refuse the commit."""

from __future__ import annotations

from dataclasses import replace

import pytest

import delta_release as dr
import delta_release.commit.writer as writer_mod
import delta_release.stage.gate as gate_mod
from delta_release.storage import Storage
from tests.conftest import jsonl, up


def _lie(monkeypatch: pytest.MonkeyPatch, **fields: object) -> None:
    real = writer_mod.stage_partitions

    def lying(storage: Storage, **kw):  # type: ignore[no-untyped-def]
        cand = real(storage, **kw)
        cand.files[0] = replace(cand.files[0], **fields)
        return cand

    monkeypatch.setattr(writer_mod, "stage_partitions", lying)


def test_a_lying_row_count_is_caught_from_the_footer(lake: dr.Lake, monkeypatch: pytest.MonkeyPatch) -> None:
    read_table = gate_mod.pq.read_table
    decoded: list[object] = []
    monkeypatch.setattr(gate_mod.pq, "read_table", lambda *a, **k: decoded.append(a) or read_table(*a, **k))
    _lie(monkeypatch, rows=2)
    with pytest.raises(dr.GateError, match="count_mismatch: expected 2 rows, found 1") as err:
        lake.ingest(jsonl([up("a", 1, day=47)]))
    assert err.value.mismatch == "count_mismatch"
    assert decoded == []  # the footer sufficed
    assert lake.latest_version("orders") == 0


@pytest.mark.parametrize("footer", ["used", "without statistics"])
def test_lying_stats_are_caught_with_and_without_footer_statistics(
        lake: dr.Lake, monkeypatch: pytest.MonkeyPatch, footer: str) -> None:
    if footer != "used":
        monkeypatch.setattr(gate_mod, "footer_stats", lambda meta: None)
    real = writer_mod.stage_partitions

    def lying(storage: Storage, **kw):  # type: ignore[no-untyped-def]
        cand = real(storage, **kw)
        cand.files[0] = replace(cand.files[0], stats=cand.files[0].stats.replace('"position": 1', '"position": 0'))
        return cand

    monkeypatch.setattr(writer_mod, "stage_partitions", lying)
    with pytest.raises(dr.GateError, match="stats_mismatch: column statistics differ from the recorded stats") as err:
        lake.ingest(jsonl([up("a", 1, day=47)]))
    assert err.value.mismatch == "stats_mismatch"
    monkeypatch.setattr(writer_mod, "stage_partitions", real)
    assert lake.ingest(jsonl([up("a", 1, day=47)])).version == 1  # honest evidence passes either way
