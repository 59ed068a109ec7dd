"""The vectorised decode path agrees with the strict per-line path on every line (issue 2: "every line is
accounted for", whichever path decides it)."""

from __future__ import annotations

import json

import numpy as np
import pytest
from conftest import examples
from hypothesis import given, settings
from hypothesis import strategies as st

import delta_release.contract.decode as decode_mod
from delta_release.contract import decode_batch

FIELD_VALUES = {
    "schema_version": st.sampled_from([2, 3, 3, 4, "3", None]),
    "order_id": st.one_of(st.sampled_from(["ord-1", "ord-2", "o\u00e9", "", "a\":b", "x" * 130]),
                          st.text(max_size=6)),
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


def strict(data: bytes):  # type: ignore[no-untyped-def]
    with pytest.MonkeyPatch.context() as m:
        m.setattr(decode_mod, "_fast_chunk", lambda data, starts, first, eligible: (
            decode_mod.pl.DataFrame(schema=decode_mod.EVENT_SCHEMA), np.arange(len(starts) - 1)))
        return decode_batch(data)


def summary(batch):  # type: ignore[no-untyped-def]
    return (batch.extracted, batch.events.to_dicts(), [(r.line, r.reason.value) for r in batch.rejects],
            batch.schema_versions)


@settings(max_examples=examples(300), deadline=None)
@given(st.lists(lines(), min_size=1, max_size=40), st.booleans())
def test_fast_and_strict_paths_agree(batch: list[bytes], valid_only: bool) -> None:
    if valid_only:  # also exercise batches the vectorised path accepts as a whole
        batch = [ln for ln in batch if ln.startswith(b"{") and b"NaN" not in ln and b"73.5" not in ln
                 and b'"7350"' not in ln and b'"3"' not in ln and b"1.5" not in ln] or [b'{"a": 1}']
    data = b"\n".join(batch) + b"\n"
    assert summary(decode_batch(data)) == summary(strict(data))


def test_the_fast_path_is_taken_for_a_clean_batch() -> None:
    data = b"".join(json.dumps({"schema_version": 3, "order_id": f"o{i}", "position": i, "kind": "upsert",
                                "amount_cents": i, "event_day": 47, "currency": "USD"}).encode() + b"\n"
                    for i in range(50))
    starts = decode_mod.fast.line_starts(data)
    events, slow = decode_mod._fast_chunk(data, starts, 1, None)
    assert events.height == 50 and len(slow) == 0
    assert summary(decode_batch(data)) == summary(strict(data))
