"""Decoding both schemas, every reason code, reconciliation, the quarantine ledger (issue 2)."""

from __future__ import annotations

import json

import polars as pl
import pytest
from click.testing import CliRunner

import delta_release as dr
from delta_release.cli.main import cli
from delta_release.contract import REASON_CODES, decode_batch
from tests.conftest import ORDERS, jsonl, up

GOOD = {"schema_version": 2, "order_id": "ord-1", "position": 1, "kind": "upsert", "amount_cents": 100,
        "event_day": 47}

# one line per reason code (erased_subject and the cross-batch position_conflict need lake state)
CASES: dict[str, str] = {
    "malformed_json": '{"schema_version": 2, "order_id": ',
    "not_an_object": '"just a string"',
    "unknown_schema_version": json.dumps({**GOOD, "schema_version": 7}),
    "missing_field": json.dumps({k: v for k, v in GOOD.items() if k != "position"}),
    "unexpected_field": json.dumps({**GOOD, "currency": "USD"}),  # v2 has no currency
    "bad_type": json.dumps({**GOOD, "position": "12"}),
    "amount_unit": json.dumps({**GOOD, "amount_cents": 73.5}),
    "bad_currency": json.dumps({**GOOD, "schema_version": 3, "currency": "US"}),
    "bad_value": json.dumps({**GOOD, "kind": "merge"}),
}


def ingest_json(lake_path: str, batch: str) -> tuple[int, dict]:  # type: ignore[type-arg]
    result = CliRunner().invoke(cli, ["--lake", lake_path, "--json", "ingest", "--create", batch])
    return result.exit_code, json.loads(result.stdout)


@pytest.mark.parametrize("reason", sorted(CASES))
def test_each_reason_code_through_cli_and_ledger(tmp_path, reason: str) -> None:
    batch = tmp_path / "b.jsonl"
    good2 = {**GOOD, "order_id": "ord-2", "position": 2}
    batch.write_text(json.dumps(GOOD) + "\n" + CASES[reason] + "\n" + json.dumps(good2) + "\n")
    code, out = ingest_json(str(tmp_path / "lake"), str(batch))
    assert code == 0
    assert out["reasons"] == {reason: 1}
    assert (out["extracted"], out["accepted"], out["quarantined"]) == (3, 2, 1)
    ledger = dr.Lake.open(tmp_path / "lake").quarantine.rows(out["batch_id"])
    assert ledger.select("line", "reason").rows() == [(2, reason)]
    assert "raw" not in ledger.columns  # the ledger points into the raw batch instead of copying the line
    offset, length = ledger.row(0, named=True)["offset"], ledger.row(0, named=True)["length"]
    assert batch.read_bytes()[offset:offset + length] == CASES[reason].encode()


def test_position_conflict_within_and_across_batches(lake: dr.Lake) -> None:
    r1 = lake.ingest(jsonl([up("a", 5, amount=1), up("b", 5, amount=2)]))
    assert r1.reasons == {"position_conflict": 1}
    r2 = lake.ingest(jsonl([up("a", 5, amount=3), up("c", 6)]))  # same order, same position, new content
    assert r2.reasons == {"position_conflict": 1} and r2.accepted == 1
    assert lake.read().filter(pl.col("order_id") == "a")["amount_cents"].to_list() == [1]


def test_erased_subject_reason(lake: dr.Lake) -> None:
    lake.erasures.record("ord-erased-1", version=None, erased_at="2026-11-29T00:00:00Z")
    report = lake.ingest(ORDERS / "bad.jsonl")
    assert report.reasons["erased_subject"] == 1
    row = lake.quarantine.rows(report.batch_id).filter(pl.col("reason") == "erased_subject")
    assert row["line"].to_list() == [14] and row["subject"].to_list() == [lake.erasures.subject_key("ord-erased-1")]


def test_bad_fixture_covers_every_reason_and_reconciles(lake: dr.Lake) -> None:
    lake.erasures.record("ord-erased-1", version=None, erased_at="2026-11-29T00:00:00Z")
    mixed = (ORDERS / "v2.jsonl").read_bytes() + (ORDERS / "bad.jsonl").read_bytes()
    report = lake.ingest(mixed)
    assert set(report.reasons) == set(REASON_CODES)
    assert report.accepted + report.quarantined == report.extracted == 26 + 14
    ledger = lake.quarantine.rows(report.batch_id)
    assert ledger.height == report.quarantined
    bad_lines = set(range(27, 41)) - {38}  # line 38 of the mixed batch (ord-bad-12) is accepted
    assert set(ledger["line"].to_list()) == bad_lines


def test_v2_means_inr_and_v3_requires_currency() -> None:
    v2 = decode_batch((ORDERS / "v2.jsonl").read_bytes())
    assert v2.schema_versions == [2] and not v2.rejects
    assert set(v2.events.filter(v2.events["kind"] == "upsert")["currency"].to_list()) == {"INR"}
    v3 = decode_batch((ORDERS / "v3.jsonl").read_bytes())
    assert v3.schema_versions == [3] and not v3.rejects
    missing = decode_batch(json.dumps({**GOOD, "schema_version": 3}).encode())
    assert missing.rejects[0].reason == "missing_field"


@pytest.mark.parametrize("amount", ["73.5", "7350.0", '"7350"', "7.35e3", "-1"])
def test_amount_unit_check(amount: str) -> None:
    line = json.dumps(GOOD).replace('"amount_cents": 100', f'"amount_cents": {amount}')
    decoded = decode_batch(line.encode())
    assert decoded.accepted == 0
    assert decoded.rejects[0].reason == ("bad_value" if amount == "-1" else "amount_unit")


def test_same_file_twice_applies_nothing_and_keeps_one_raw_copy(lake: dr.Lake) -> None:
    first = lake.ingest(ORDERS / "v3.jsonl")
    raw_files = lake.storage.list("_raw")
    second = lake.ingest(ORDERS / "v3.jsonl")
    assert first.version is not None and second.version is None and second.duplicate
    assert lake.storage.list("_raw") == raw_files
    assert lake.latest_version("orders") == first.version


def test_raw_batch_is_never_replaced(lake: dr.Lake) -> None:
    data = (ORDERS / "v2.jsonl").read_bytes()
    report = lake.ingest(data)
    sha_name = [o.path for o in lake.storage.list("_raw") if o.path.endswith(".jsonl")][0]
    assert lake.storage.write_once(sha_name, b"different bytes") is False
    assert lake.raw.read(report.batch_id) == data


def test_reconciliation_mismatch_stops_the_batch(lake: dr.Lake, monkeypatch: pytest.MonkeyPatch) -> None:
    import delta_release.contract.source as source_mod

    real = source_mod.decode_stream  # a batch file is decoded while it streams (contract/source.py)

    def lossy(*args, **kwargs):  # type: ignore[no-untyped-def]
        decoded = real(*args, **kwargs)
        decoded.rejects = decoded.rejects[1:]  # a record goes missing
        return decoded

    monkeypatch.setattr(source_mod, "decode_stream", lossy)
    before = lake.latest_version("orders")
    with pytest.raises(dr.ReconciliationError,
                       match=r"does not reconcile: accepted 2 \+ quarantined 11 != extracted 14") as err:
        lake.ingest(ORDERS / "bad.jsonl")
    assert err.value.facts["extracted"] == 14
    assert lake.latest_version("orders") == before
    assert lake.storage.list("orders/event_day=47") == []
