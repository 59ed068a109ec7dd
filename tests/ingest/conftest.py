"""Generated event lines, valid and hostile, for the decode, stream and parts properties."""

from __future__ import annotations

import json
import random
from typing import Any

from hypothesis import strategies as st

from tests.conftest import rm, up

FIELD_VALUES = {
    "schema_version": st.sampled_from([2, 3, 3, 4, "3", None]),
    "order_id": st.one_of(st.sampled_from(["ord-1", "ord-2", "o\u00e9", "", "a\":b", "x" * 130]),
                          st.text(max_size=6), st.sampled_from([906, True, ["a"], ["a", 1], {}, {"k": "v"}])),
    "position": st.one_of(st.integers(-2, 30), st.just(2**63), st.just(1.5), st.just(None)),
    "kind": st.sampled_from(["upsert", "upsert", "delete", "merge", None]),
    "amount_cents": st.one_of(st.integers(-5, 10**6), st.just(73.5), st.just("7350"), st.just(None)),
    "event_day": st.one_of(st.integers(-1, 60), st.just(2**31), st.just(None)),
    "currency": st.sampled_from(["USD", "usd", "EURO", None, 7]),
    "coupon": st.just("X"),
}


@st.composite
def lines(draw: st.DrawFn) -> bytes:
    shape = draw(st.integers(0, 9))
    if shape == 0:
        return draw(st.sampled_from([b"", b"[1]", b'"s"', b"{", b'{"a": NaN}', b"\xff\xfe", b" ", b"null"]))
    obj = {k: draw(v) for k, v in FIELD_VALUES.items() if draw(st.integers(0, 4)) > 0 or k in (
        "schema_version", "order_id", "position", "kind")}
    obj = {k: v for k, v in obj.items() if v is not None or draw(st.booleans())}
    text = json.dumps(obj, ensure_ascii=draw(st.booleans()))
    if shape == 1 and obj:  # a duplicate key, the later value differing
        key = next(iter(obj))
        text = text[:-1] + f', "{key}": 0}}'
    if shape == 2:
        text = text.replace('": ', '" : ', 1)
    return text.encode()


def order_history(seed: int, n: int = 400) -> list[dict[str, Any]]:
    """Upserts, moves between days, deletes (tombstones), re-creations, late events, exact repeats and
    position conflicts (same order and position, different content), shuffled."""
    rnd = random.Random(seed)
    events: list[dict[str, Any]] = []
    for pos in range(1, n + 1):
        oid = f"ord-{rnd.randint(1, 40):03d}"
        if rnd.random() < 0.2:
            events.append(rm(oid, pos, rnd.choice([None, rnd.randint(1, 6)])))
        else:
            events.append(up(oid, pos, rnd.randint(0, 10_000), rnd.randint(1, 6), rnd.choice([2, 3])))
    rnd.shuffle(events)
    for ev in rnd.sample(events, 20):
        events.append(dict(ev))  # an exact repeat: accepted, applied once
    for ev in rnd.sample([e for e in events if e["kind"] == "upsert"], 10):
        events.append({**ev, "amount_cents": ev["amount_cents"] + 1})  # same position, other content
    return events
