"""The pinned-query check (issue 14 item 1): its frame oracle is O(events), and it still fails when the
candidate differs from the accepted events: a corrupted row, a dropped batch, a resurrected erased subject.

The oracle's pieces are checked against the simple versions they replace: the vectorised fold against the
dict fold (`apply.reference_fold`), the one-stream decode of many batches against decoding each alone."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any, cast

import polars as pl
import pytest
from hypothesis import given
from hypothesis import strategies as st

import delta_release as dr
from delta_release import _delta
from delta_release.apply import reference_fold
from delta_release.commit.view import StagedSnapshot
from delta_release.contract import decode_batch
from delta_release.release import reference
from delta_release.release.checks import RunContext, check_pinned_query
from delta_release.tables import DEFAULT_TABLE
from tests.conftest import jsonl, rm, up

VALUES = ["amount_cents", "currency", "event_day", "position"]


def _events(rng: random.Random, n: int) -> list[dict[str, Any]]:
    out = []
    for _ in range(n):
        kind = rng.choice(["upsert", "upsert", "delete"])
        ev: dict[str, Any] = {"order_id": f"o{rng.randrange(6)}", "position": rng.randrange(12), "kind": kind,
                              "amount_cents": None, "currency": None, "event_day": None}
        if kind == "upsert":
            ev.update(amount_cents=rng.randrange(1000), currency=rng.choice(["USD", "INR"]),
                      event_day=rng.randrange(3))
        out.append(ev)
    return out


@given(st.integers(0, 2**32 - 1), st.integers(0, 40))
def test_the_frame_fold_equals_the_dict_fold(seed: int, n: int) -> None:
    """Highest position wins, ties go to the first event, a delete leaves nothing: as `reference_fold`."""
    events = _events(random.Random(seed), n)
    frame = pl.DataFrame(events, schema={"order_id": pl.String, "position": pl.Int64, "kind": pl.String,
                                         "amount_cents": pl.Int64, "currency": pl.String, "event_day": pl.Int32})
    cols = _keyed()
    got = reference.reference_current(frame, cols, ["order_id", *VALUES])
    want = {k: tuple(v[c] for c in VALUES) for k, v in reference_fold(events).items()}
    assert {r[0]: tuple(r[1:]) for r in got.rows()} == want
    assert got.height == len(want)


def _keyed() -> Any:
    from delta_release.tables import load_table_defs

    return load_table_defs()[DEFAULT_TABLE].keyed()


BATCHES = [
    jsonl([up("a", 1), up("b", 2, version=3), rm("a", 3)]),
    b"\xef\xbb\xbf" + jsonl([up("c", 4)]) + b"not json\n" + jsonl([up("d", 4, amount=5)]),  # BOM, conflict
    jsonl([up("e", 5)]).replace(b"\n", b"\r\n") + b"\n" + jsonl([up("e", 5)]),  # CRLF, blank, exact repeat
    jsonl([up("f", 1, amount=7), up("g", 6)])[:-1],  # no final newline; position 1 again, other batch
    b"",
    jsonl([up("h", 7)]),
]


def test_one_stream_decode_equals_decoding_each_batch() -> None:
    """Lines, batch ids and the per-batch position-conflict rule match each batch's own decode, across
    BOMs, CRLF, blank and bad lines, a missing final newline, an empty batch and a position repeated in
    another batch (not a conflict: the rule is per batch)."""
    group = [(f"b{i}", data) for i, data in enumerate(BATCHES)]
    got = reference._position_conflicts_dropped(reference._decode_group(group))
    want = pl.concat([decode_batch(data).events.with_columns(pl.lit(bid).alias(reference._BATCH))
                      for bid, data in group])
    assert got.sort(reference._BATCH, "line").equals(want.sort(reference._BATCH, "line"))
    assert got.filter(pl.col("order_id") == "d").height == 0  # the conflicting line of batch b1 is out
    assert got.filter(pl.col("order_id") == "f").height == 1  # position 1 of b0 does not conflict with b3


@pytest.fixture
def history(lake: dr.Lake) -> dict[str, Any]:
    """Three ingests (a delete, a quarantined line, a later correction) and an erasure; the versions."""
    lake.ingest(jsonl([up("ord-1", 10, amount=100), up("ord-2", 11, amount=200), up("ord-3", 12, amount=300),
                       rm("ord-3", 13)]))
    second = lake.ingest(jsonl([up("ord-4", 20, amount=400, day=48), up("ord-5", 21, version=3, currency="EUR")])
                + b'{"schema_version": 2, "order_id": "ord-6", "position": 22, "kind": "upsert", '
                  b'"amount_cents": 7.5, "event_day": 47}\n')
    lake.ingest(jsonl([up("ord-1", 30, amount=111), up("ord-1", 5, amount=999)]))
    conflict = lake.ingest(jsonl([up("ord-1", 30, amount=222), up("ord-5", 31, version=3, currency="EUR")]))
    assert conflict.reasons == {"position_conflict": 1}  # decodes fine; the writer quarantines it
    before_erasure = lake.latest_version(DEFAULT_TABLE)
    lake.erase("ord-2")
    return {"before_erasure": before_erasure, "latest": lake.latest_version(DEFAULT_TABLE),
            "second": second.batch_id}


def _ctx(lake: dr.Lake, version: int, batch_ids: set[str] | None = None) -> RunContext:
    ctx = lake.table(DEFAULT_TABLE)
    snapshot = StagedSnapshot(table=DEFAULT_TABLE, uri=ctx.uri, storage_options=ctx.storage_options, parent=version,
                              columns=dict(ctx.table.columns), partition=ctx.table.partition,
                              entries=_delta.file_entries(ctx.uri, ctx.storage_options, version), added=[],
                              removed=[])
    from delta_release.ingest import applied_batches

    return RunContext(config=cast(Any, None), lake=lake, scratch=Path("/nonexistent"), candidate=snapshot,
                      recorded={}, batch_ids=applied_batches(lake) if batch_ids is None else batch_ids,
                      reports=[])


def test_pinned_query_passes_on_the_committed_history(lake: dr.Lake, history: dict[str, Any]) -> None:
    from delta_release.ingest import applied_batches

    result = check_pinned_query(_ctx(lake, history["latest"]))
    assert result.passed, result.detail
    assert result.evidence["rows"] == 3  # ord-1 (corrected), ord-4, ord-5: ord-3 deleted, ord-2 erased
    assert result.evidence["differences"] == 0
    events = reference.accepted_events(lake, applied_batches(lake), "order_id")
    assert events.filter(pl.col("position") == 30)["amount_cents"].to_list() == [111]  # the ledger's line is out


def test_pinned_query_fails_on_a_corrupted_row(lake: dr.Lake, history: dict[str, Any]) -> None:
    ctx = _ctx(lake, history["latest"])
    store = lake.table_storage(DEFAULT_TABLE)
    path = next(e.path for e in ctx.candidate.entries
                if pl.read_parquet(store.uri(e.path))["order_id"].to_list().count("ord-4"))
    frame = pl.read_parquet(store.uri(path))
    frame.with_columns(pl.when(pl.col("order_id") == "ord-4").then(pl.lit(401)).otherwise(pl.col("amount_cents"))
                       .alias("amount_cents")).write_parquet(store.uri(path))
    result = check_pinned_query(ctx)
    assert not result.passed
    assert result.evidence["differences"] == 2  # the candidate's row and the reference's row


def test_pinned_query_fails_when_a_batch_is_left_out(lake: dr.Lake, history: dict[str, Any]) -> None:
    from delta_release.ingest import applied_batches

    batches = applied_batches(lake)
    assert history["second"] in batches
    result = check_pinned_query(_ctx(lake, history["latest"], batches - {history["second"]}))
    assert not result.passed and result.evidence["differences"] == 1  # ord-4 has no event left (ord-5 has a later one)


def test_pinned_query_fails_when_an_erased_subject_is_back(lake: dr.Lake, history: dict[str, Any]) -> None:
    result = check_pinned_query(_ctx(lake, history["before_erasure"]))  # still holds ord-2
    assert not result.passed and result.evidence["differences"] == 1
    assert "ord-2" not in result.detail
