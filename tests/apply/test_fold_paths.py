"""The fold's one-event-per-key join path (apply/fold.py `fold`) against the general sequence fold
(`fold_sequence`), on frames alone: same new rows, same prior days, same conflicts, whatever the mix of
single- and multi-event keys, prior rows (tombstones, null partitions) and same-position conflicts."""

from __future__ import annotations

import polars as pl
from hypothesis import given, settings
from hypothesis import strategies as st

from delta_release.apply.fold import ORDERS, dedupe_events, fold, fold_sequence
from tests.conftest import examples

KEYS = ["o1", "o2", "o3", "o4", "o5", "o6"]
DAYS = [None, 47, 48, 49]
EVENT_SCHEMA = {"order_id": pl.String, "position": pl.Int64, "kind": pl.String, "amount_cents": pl.Int64,
                "currency": pl.String, "event_day": pl.Int32, "line": pl.Int64}


@st.composite
def cases(draw: st.DrawFn) -> tuple[pl.DataFrame, pl.DataFrame]:
    prior_rows = []
    for k in draw(st.lists(st.sampled_from(KEYS), unique=True, max_size=len(KEYS))):
        deleted = draw(st.booleans())
        prior_rows.append({"order_id": k, "position": draw(st.integers(0, 20)),
                           "amount_cents": None if deleted else draw(st.integers(0, 3)),
                           "currency": None if deleted else "INR", "deleted": deleted,
                           "event_day": draw(st.sampled_from(DAYS if deleted else DAYS[1:]))})
    prior = pl.DataFrame(prior_rows, schema=ORDERS.row_schema)
    n = draw(st.integers(0, 12))
    positions = draw(st.lists(st.integers(0, 20), min_size=n, max_size=n, unique=True))
    events = []
    for line, p in enumerate(positions, start=1):
        k = draw(st.sampled_from(KEYS))
        if draw(st.integers(0, 3)) == 0:
            events.append({"order_id": k, "position": p, "kind": "delete", "amount_cents": None, "currency": None,
                           "event_day": draw(st.sampled_from(DAYS)), "line": line})
        else:
            events.append({"order_id": k, "position": p, "kind": "upsert", "amount_cents": draw(st.integers(0, 3)),
                           "currency": "INR", "event_day": draw(st.sampled_from(DAYS[1:])), "line": line})
    return pl.DataFrame(events, schema=EVENT_SCHEMA), prior


def _canon(frame: pl.DataFrame) -> list[tuple]:  # type: ignore[type-arg]
    return sorted(frame.select(*ORDERS.row_columns, "prior_day", "had_prior").rows())


@settings(max_examples=examples(300, fuzz=5000), deadline=None)
@given(case=cases())
def test_join_path_equals_the_sequence_fold(case: tuple[pl.DataFrame, pl.DataFrame]) -> None:
    events, prior = case
    fast, general = fold(events, prior), fold_sequence(events, prior)
    assert _canon(fast.rows) == _canon(general.rows)
    assert [(c.line, c.order_id, c.detail) for c in fast.conflicts] == \
        [(c.line, c.order_id, c.detail) for c in general.conflicts]


@settings(max_examples=examples(200, fuzz=3000), deadline=None)
@given(case=cases(), repeats=st.lists(st.integers(0, 11), max_size=4), extra=st.lists(st.booleans(), max_size=16))
def test_the_repeat_screen_on_shared_keys_only_equals_the_whole_batchs(case: tuple[pl.DataFrame, pl.DataFrame],
                                                                       repeats: list[int], extra: list[bool]) -> None:
    """An exact repeat of an event shares its key, so `dedupe_events` given a mask holding the events that
    share a key (`candidates`: `_fold_rows` flags them by a 64-bit hash of the key, so a collision may flag
    more) drops the same events as the screen of the whole batch, and `fold` given such a mask (`several`)
    folds as when it finds the exact mask itself."""
    events, prior = case
    copies = events[[i for i in repeats if i < events.height]].with_columns(pl.col("line") + 100)
    events = pl.concat([events, copies])
    def flagged(frame: pl.DataFrame) -> pl.Series:  # the events sharing their key, and some more
        more = pl.Series([i < len(extra) and extra[i] for i in range(frame.height)], dtype=pl.Boolean)
        return frame["order_id"].is_duplicated() | more

    deduped = dedupe_events(events, candidates=flagged(events))
    assert deduped.rows() == dedupe_events(events).rows()
    assert deduped.height == events.height - copies.height  # (the drawn positions are distinct: each copy repeats)
    mine, theirs = fold(deduped, prior, several=flagged(deduped)), fold(deduped, prior)
    assert _canon(mine.rows) == _canon(theirs.rows)
    assert [c.line for c in mine.conflicts] == [c.line for c in theirs.conflicts]


def test_a_batch_of_single_events_is_decided_by_the_join() -> None:
    prior = pl.DataFrame([{"order_id": "a", "position": 5, "amount_cents": 1, "currency": "INR", "deleted": False,
                           "event_day": 47},
                          {"order_id": "b", "position": 9, "amount_cents": 1, "currency": "INR", "deleted": False,
                           "event_day": 48}], schema=ORDERS.row_schema)
    events = pl.DataFrame([
        {"order_id": "a", "position": 6, "kind": "delete", "amount_cents": None, "currency": None,
         "event_day": None, "line": 1},  # tombstone into the row's partition (47)
        {"order_id": "b", "position": 9, "kind": "upsert", "amount_cents": 2, "currency": "INR",
         "event_day": 48, "line": 2},  # same position, other amount: a conflict
        {"order_id": "c", "position": 1, "kind": "delete", "amount_cents": None, "currency": None,
         "event_day": None, "line": 3},  # never seen, no day: the null partition
    ], schema=EVENT_SCHEMA)
    out = fold(events, prior)
    rows = {r["order_id"]: r for r in out.rows.to_dicts()}
    assert set(rows) == {"a", "c"}
    assert rows["a"]["deleted"] and rows["a"]["event_day"] == 47 and rows["a"]["prior_day"] == 47
    assert rows["c"]["deleted"] and rows["c"]["event_day"] is None and not rows["c"]["had_prior"]
    assert [(c.line, c.order_id) for c in out.conflicts] == [(2, "b")]


@settings(max_examples=examples(200, fuzz=3000), deadline=None)
@given(case=cases())
def test_both_paths_carry_the_winning_events_line(case: tuple[pl.DataFrame, pl.DataFrame]) -> None:
    """`keep` carries event columns into the rows: on both paths, each row's line is that of the event
    that won its key (a first load in parts looks the winners' keyed hashes up by it)."""
    events, prior = case
    fast, general = fold(events, prior, keep=("line",)), fold_sequence(events, prior, keep=("line",))
    assert fast.rows.sort("order_id").equals(general.rows.sort("order_id"))
    event_at = {line: (k, p) for line, k, p in events.select("line", "order_id", "position").iter_rows()}
    won = fast.rows.select("order_id", "position", "line").rows()
    assert all(line is not None and event_at[line] == (k, p) for k, p, line in won)
