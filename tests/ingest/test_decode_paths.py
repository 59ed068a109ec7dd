"""The vectorised decode path agrees with the strict per-line path on every line (issue 2: "every line is
accounted for", whichever path decides it)."""

from __future__ import annotations

import json

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import delta_release.contract.decode as decode_mod
from delta_release.contract import decode_batch
from delta_release.contract.lines import line_starts
from tests.conftest import examples
from tests.ingest.conftest import lines


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
    starts = line_starts(data)
    events, slow = decode_mod._fast_chunk(data, starts, 1, None)
    assert events.height == 50 and len(slow) == 0
    assert summary(decode_batch(data)) == summary(strict(data))


CLEAN = [json.dumps({"schema_version": 3, "order_id": f"o{i}", "position": i, "kind": "upsert", "amount_cents": i,
                     "event_day": 47, "currency": "USD"}, separators=(",", ":")).encode() for i in range(40)]
# Lines Polars reads without an error but that are not exactly their row (a coerced or dropped value, a
# duplicate key, an escape...): the byte counts must refuse each, so that the strict path decides it.
NOT_EXACT = [
    b'{"schema_version":2,"order_id":906,"position":100,"kind":"delete"}',  # a number read as a string
    b'{"schema_version":2,"order_id":true,"position":101,"kind":"delete"}',
    b'{"schema_version":2,"order_id":["a"],"position":102,"kind":"delete"}',  # an array read as its text
    b'{"schema_version":2,"order_id":["a",1],"position":103,"kind":"delete"}',
    b'{"schema_version":2,"order_id":{},"position":104,"kind":"delete"}',
    b'{"schema_version":2,"order_id":{"k":"v"},"position":105,"kind":"delete"}',
    b'{"schema_version":2,"order_id":"a","position":106,"kind":"delete","kind":"upsert"}',  # first wins
    b'{"schema_version":2,"order_id":"a","position":107,"position":7,"kind":"delete"}',
    b'{"schema_version":2,"order_id":"a","position":108,"kind":"delete","coupon":"X"}',
    b'{"schema_version":2,"order_id":"a","position":109,"kind":"delete","currency":null}',
    b'{"schema_version":2,"order_id":"a","position":110,"kind":"delete","amount_cents":null}',
    b'{"schema_version":3,"order_id":"a","position":111,"kind":"upsert","amount_cents":7.0,"event_day":1,'
    b'"currency":"USD"}',
    b'{"schema_version":3,"order_id":"a","position":112,"kind":"upsert","amount_cents":1e2,"event_day":1,'
    b'"currency":"USD"}',
    b'{"schema_version":2,"order_id":"a","position":99999999999999999999,"kind":"delete"}',
    b'{"schema_version":2,"order_id":"a\\"b","position":114,"kind":"delete"}',
    b'{"schema_version":2,"order_id":"a\\\\b","position":115,"kind":"delete"}',
    b'{"schema_version":2,"order_id":"\\u0041\\u0000","position":116,"kind":"delete"}',
    b'{"schema_version":2,"order_id":"ord\\u002d9","position":117,"kind":"delete"}',
    b'{"schema_version":2,"order_id":"a:b","position":118,"kind":"delete"}',
    b'{"schema_version":2,"order_id":"a\x7fb","position":119,"kind":"delete"}',
    b'{"schema_version":2,"order_id":"caf\xc3\xa9","position":120,"kind":"delete"}',
    b'{"schema_version":3,"order_id":"a","position":121,"kind":"upsert","amount_cents":1,"event_day":1,'
    b'"currency":"us\\u0044"}',
    b'{"schema_version":2,"order_id":"a","position":122,"kind":"delete"}\r',
    b'{"order_id":"a","schema_version":2,"kind":"delete","position":123}',
    b'{ "schema_version" : 2 , "order_id" : "a" , "position" : 124 , "kind" : "delete" }',
    b'{"schema_version":2,"order_id":"a","position":-0,"kind":"delete"}',
    b'{"schema_version":2,"order_id":"a","position":"126","kind":"delete"}',
    b'{"schema_version":false,"order_id":"a","position":127,"kind":"delete"}',
    b'{"schema_version":2,"order_id":"","position":128,"kind":"delete"}',
    b'{}',
    b'{"\\u006frder_id":"a","schema_version":2,"position":130,"kind":"delete"}',
]
# Lines Polars cannot read: the chunk is then read line by line through the patterns (a fallback)
NOT_JSON = [b'{"schema_version":2,"order_id":"a","position":200,"kind":"delete",}',
            b"{'schema_version':2}", b'{"schema_version":NaN}', b'{"schema_version":02}',
            b'{"schema_version":2,"order_id":"a\tb","position":201,"kind":"delete"}', b'{"a":1}{"b":2}']


@pytest.mark.parametrize("line", NOT_EXACT + NOT_JSON)
def test_a_line_that_is_not_exactly_its_row_gets_the_strict_verdict(line: bytes) -> None:
    data = b"\n".join([*CLEAN[:20], line, *CLEAN[20:]]) + b"\n"
    assert summary(decode_batch(data)) == summary(strict(data))
    with pytest.MonkeyPatch.context() as m:  # without the patterns: what the byte-count proof takes alone
        m.setattr(decode_mod.fast, "_by_pattern", lambda *a: decode_mod.fast.EMPTY_READ)
        events, _ = decode_mod._fast_chunk(data, line_starts(data), 1, None)
    taken = set(events["line"].to_list())
    if line in NOT_JSON:  # Polars cannot read the chunk: nothing is proven, the patterns take the clean lines
        assert not taken
    else:  # the clean lines around it are proven all the same
        assert set(range(1, 42)) - {21} <= taken


def test_the_byte_counts_do_not_cancel_out_across_lines() -> None:
    """A line short of quotes (a number read as an order id) beside lines with extra quotes or colons."""
    odd = [NOT_EXACT[0], NOT_EXACT[14], NOT_EXACT[14], NOT_EXACT[18], NOT_EXACT[2], NOT_EXACT[15]]
    data = b"\n".join([*CLEAN, *odd, *CLEAN]) + b"\n"
    assert summary(decode_batch(data)) == summary(strict(data))
    rejected = {r.line for r in decode_batch(data).rejects}
    assert {41, 45} <= rejected  # 906 and ["a"] are not strings: bad_type, not accepted


def test_many_lines_left_out_of_the_count_are_counted_together() -> None:
    """More rows breaking a rule than are counted one by one (`fast._FEW`): their bytes are set aside in
    one block, and a row short of quotes among the clean ones is still found."""
    v4 = [b'{"schema_version":4,"order_id":"o","position":%d,"kind":"delete"}' % (1000 + i)
          for i in range(decode_mod.fast._FEW + 50)]
    data = b"\n".join([*CLEAN, *v4, NOT_EXACT[0], *CLEAN[:5]]) + b"\n"
    decoded = decode_batch(data)
    assert summary(decoded) == summary(strict(data))
    assert decoded.accepted == 45 and len(decoded.rejects) == len(v4) + 1  # exact repeats stay accepted
    assert decoded.rejects[-1].line == 41 + len(v4) and decoded.rejects[-1].reason.value == "bad_type"


@pytest.mark.parametrize(("line", "detail"), [
    (b'\xef\xbb\xbf{"schema_version": 2}', "not valid JSON (Unexpected UTF-8 BOM (decode using utf-8-sig))"),
    (b'{"schema_version": NaN}', "NaN is not valid JSON"),
    (b'{"schema_version": 2, "schema_version": 3}', "duplicate key 'schema_version' in one object"),
    (b"[" * 100_000, "nesting too deep"),
    (b'{"schema_version": 2} x', "not valid JSON (Extra data)"),
])
def test_the_strict_parser_names_why_a_line_is_not_json(line: bytes, detail: str) -> None:
    """One strict decoder serves every line (built once, not per call): same reasons and details."""
    data = CLEAN[0] + b"\n" + line + b"\n"
    rejects = decode_batch(data).rejects
    assert [(r.line, r.reason.value, r.detail) for r in rejects] == [(2, "malformed_json", detail)]
