"""Hostile input: generated and hand-made lines never crash the decoder or ingest, and every line is
accounted for (accepted + quarantined == extracted) with one stable reason and a short, clear detail."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

import delta_release as dr
from delta_release.apply import reference_fold
from delta_release.contract import decode_batch
from delta_release.contract.decode import split_lines
from delta_release.contract.lines import MAX_LINE_BYTES
from delta_release.contract.reasons import REASON_CODES
from tests.conftest import examples

MAX_DETAIL = 200

# -- generated lines ---------------------------------------------------------------------------------
json_scalars = st.one_of(st.none(), st.booleans(), st.integers(min_value=-(2**70), max_value=2**70),
                         st.floats(allow_nan=False, allow_infinity=False), st.text(max_size=12))
json_values = st.recursive(json_scalars, lambda kids: st.one_of(
    st.lists(kids, max_size=4), st.dictionaries(st.text(max_size=8), kids, max_size=4)), max_leaves=10)

FIELDS = ["schema_version", "order_id", "position", "kind", "amount_cents", "event_day", "currency"]


@st.composite
def events(draw: st.DrawFn) -> dict[str, Any]:
    version = draw(st.sampled_from([2, 3]))
    kind = draw(st.sampled_from(["upsert", "upsert", "delete"]))
    ev: dict[str, Any] = {"schema_version": version, "order_id": f"ord-{draw(st.integers(0, 30)):04d}",
                          "position": draw(st.integers(0, 10**6)), "kind": kind}
    if kind == "upsert":
        ev["amount_cents"] = draw(st.integers(0, 10**9))
        ev["event_day"] = draw(st.integers(0, 40))
        if version == 3:
            ev["currency"] = draw(st.sampled_from(["USD", "EUR", "INR"]))
    return ev


@st.composite
def mutated(draw: st.DrawFn) -> dict[str, Any]:
    ev = draw(events())
    action = draw(st.sampled_from(["drop", "set", "add"]))
    name = draw(st.sampled_from(FIELDS + ["extra", "ORDER_ID"]))
    if action == "drop":
        ev.pop(name, None)
    else:
        ev[name] = draw(json_values)
    return ev


def _encode(value: Any) -> bytes:
    return json.dumps(value).encode()


line_bytes = st.one_of(
    events().map(_encode),
    mutated().map(_encode),
    json_values.map(_encode),
    st.binary(max_size=40).map(lambda b: b.replace(b"\n", b"")),
    st.text(max_size=40).map(lambda t: t.replace("\n", "").encode("utf-8", "surrogatepass")),
    st.sampled_from([b"", b"   ", b"NaN", b"[", b"{}", b'{"schema_version": 2, "schema_version": 3}',
                     b'{"amount_cents": Infinity}', b"\xef\xbb\xbf{}", b"\x00", b"\r"]),
)
endings = st.sampled_from([b"\n", b"\r\n"])

SEEN = {"lines": 0}


def check_decoded(lines: list[bytes], data: bytes) -> dr.contract.DecodedBatch:  # type: ignore[name-defined]
    decoded = decode_batch(data)
    assert decoded.extracted == len(lines)
    assert decoded.accepted + len(decoded.rejects) == decoded.extracted
    accepted_lines = set(decoded.events["line"].to_list())
    rejected_lines = [r.line for r in decoded.rejects]
    assert len(set(rejected_lines)) == len(rejected_lines)
    assert accepted_lines.isdisjoint(rejected_lines)
    assert accepted_lines | set(rejected_lines) == set(range(1, len(lines) + 1))
    split = split_lines(data)
    for r in decoded.rejects:
        assert r.reason.value in REASON_CODES
        assert r.detail and len(r.detail) <= MAX_DETAIL
        assert "ord-" not in r.detail  # a detail never echoes the payload (subject ids included)
        assert r.offset is not None and r.length is not None
        assert data[r.offset:r.offset + r.length] == split[r.line - 1]  # (offset, length) point at the line
        if r.length > MAX_LINE_BYTES:  # never held whole: no text, the detail names length and limit
            assert r.raw is None and r.reason.value == "bad_value"
            assert f"{r.length} bytes" in r.detail and str(MAX_LINE_BYTES) in r.detail
        else:
            assert r.raw == split[r.line - 1].decode("utf-8", errors="backslashreplace")
    return decoded


@settings(max_examples=examples(100), deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(st.lists(st.tuples(line_bytes, endings), min_size=100, max_size=130))
def _generated_batches(lines: list[tuple[bytes, bytes]]) -> None:
    data = b"".join(line + end for line, end in lines)
    check_decoded([line for line, _ in lines], data)
    SEEN["lines"] += len(lines)


def test_at_least_ten_thousand_generated_lines_are_accounted_for() -> None:
    SEEN["lines"] = 0
    _generated_batches()
    assert SEEN["lines"] >= 10_000


@settings(max_examples=examples(8, fuzz=300), deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(st.lists(st.lists(st.one_of(events().map(_encode), line_bytes), min_size=1, max_size=25),
                min_size=1, max_size=3))
@example(batches=[[b"{}"]])  # issue 17: the vectorised path crashed on a batch whose only line is {} (exit 1)
def test_generated_batches_through_ingest(batches: list[list[bytes]]) -> None:
    """Decode -> quarantine -> apply -> commit: the ledger reconciles and the view is the reference fold."""
    with tempfile.TemporaryDirectory() as tmp:
        lake = dr.Lake.create(Path(tmp) / "lake")
        accepted: list[dict[str, Any]] = []
        for lines in batches:
            data = b"".join(line + b"\n" for line in lines)
            report = lake.ingest(data)
            assert report.accepted + report.quarantined == report.extracted == len(lines)
            if not report.duplicate:
                assert lake.quarantine.rows(report.batch_id).height == report.quarantined
            accepted += decode_batch(data).events.to_dicts()
        # position conflicts across batches are quarantined by ingest; the fold keeps the first arrival
        seen: dict[int, dict[str, Any]] = {}
        for ev in accepted:
            seen.setdefault(ev["position"], ev)
        want = reference_fold(seen.values())
        got = {r["order_id"]: r for r in lake.read().to_dicts()}
        assert set(got) == set(want)
        for k, row in got.items():
            assert (row["amount_cents"], row["event_day"], row["position"]) == (
                want[k]["amount_cents"], want[k]["event_day"], want[k]["position"])


# -- hand-made lines ---------------------------------------------------------------------------------
def _ev(**over: Any) -> bytes:
    ev: dict[str, Any] = {"schema_version": 2, "order_id": "ord-h1", "position": 1, "kind": "upsert",
                          "amount_cents": 100, "event_day": 3}
    ev.update(over)
    return json.dumps(ev).encode()


GOOD = _ev()
HAND_MADE: dict[str, tuple[bytes, str | None]] = {
    "huge_line": (_ev(order_id="x" * 5_000_000), "bad_value"),
    "huge_key": (b'{"' + b"k" * 1_000_000 + b'": 1, "schema_version": 2}', "unexpected_field"),
    "deep_nesting_array": (b"[" * 100_000 + b"]" * 100_000, "malformed_json"),
    "deep_nesting_object": (b'{"a":' * 100_000 + b"1" + b"}" * 100_000, "malformed_json"),
    "deep_unclosed": (b"[" * 1_000_000, "malformed_json"),
    "nan": (GOOD.replace(b'"amount_cents": 100', b'"amount_cents": NaN'), "malformed_json"),
    "infinity": (GOOD.replace(b'"position": 1', b'"position": Infinity'), "malformed_json"),
    "minus_infinity": (GOOD.replace(b'"amount_cents": 100', b'"amount_cents": -Infinity'), "malformed_json"),
    "duplicate_key": (GOOD.replace(b'"position": 1', b'"position": 1, "position": 2'), "malformed_json"),
    "invalid_utf8": (GOOD.replace(b"ord-h1", b"ord-\xff\xfe"), "malformed_json"),
    "lone_surrogate_id": (GOOD.replace(b"ord-h1", b"\\ud800"), "bad_value"),
    "nul_in_id": (GOOD.replace(b"ord-h1", b"ord\\u0000"), "bad_value"),
    "bom_mid_file": (b"\xef\xbb\xbf" + GOOD, "malformed_json"),
    "number_100000_digits": (GOOD.replace(b'"position": 1', b'"position": ' + b"9" * 100_000), "bad_value"),
    "fraction_100000_digits": (GOOD.replace(b'"amount_cents": 100', b'"amount_cents": 1.' + b"5" * 100_000),
                               "amount_unit"),
    "huge_exponent": (GOOD.replace(b'"amount_cents": 100', b'"amount_cents": 1e999999999'), "amount_unit"),
    "bare_huge_number": (b"-" + b"9" * 100_000, "bad_value"),
    "two_objects": (GOOD + GOOD, "malformed_json"),
    "empty_line": (b"", "malformed_json"),
    "whitespace_line": (b" \t ", "malformed_json"),
    "position_past_int64": (GOOD.replace(b'"position": 1', b'"position": 9223372036854775808'), "bad_value"),
    "good": (GOOD, None),
}


@pytest.mark.parametrize("name", sorted(HAND_MADE))
def test_hand_made_line(name: str) -> None:
    line, reason = HAND_MADE[name]
    # the hostile line in the middle of good ones, as line 2 of 3, CRLF-terminated
    data = _ev(order_id="ord-a", position=10) + b"\r\n" + line + b"\r\n" + _ev(order_id="ord-b", position=11)
    decoded = check_decoded([b"a", line, b"b"], data)
    if reason is None:
        assert decoded.accepted == 3
    else:
        assert [(r.line, r.reason.value) for r in decoded.rejects] == [(2, reason)]


def test_empty_file_and_bom_and_crlf(lake: dr.Lake) -> None:
    empty = lake.ingest(b"")
    assert (empty.extracted, empty.accepted, empty.quarantined, empty.version) == (0, 0, 0, None)
    bom = lake.ingest(b"\xef\xbb\xbf" + _ev(order_id="ord-bom") + b"\r\n" + _ev(order_id="ord-crlf", position=2)
                      + b"\r\n")
    assert (bom.extracted, bom.accepted, bom.quarantined) == (2, 2, 0)
    assert sorted(lake.read()["order_id"].to_list()) == ["ord-bom", "ord-crlf"]


def test_every_hand_made_line_in_one_ingest(lake: dr.Lake) -> None:
    names = sorted(HAND_MADE)
    data = b"\n".join(HAND_MADE[n][0] for n in names) + b"\n"
    report = lake.ingest(data)
    assert report.extracted == len(names)
    assert report.accepted + report.quarantined == report.extracted
    assert report.accepted == 1 and report.quarantined == len(names) - 1
    rows = lake.quarantine.rows(report.batch_id).to_dicts()
    assert [(r["line"], r["reason"]) for r in rows] == [
        (i, HAND_MADE[n][1]) for i, n in enumerate(names, start=1) if HAND_MADE[n][1] is not None]
    assert all(len(r["detail"]) <= MAX_DETAIL for r in rows)
    huge = next(r for r in rows if r["line"] == names.index("huge_line") + 1)
    # over the line limit: never held whole, so the ledger holds no text at all (the detail says why);
    # the raw batch keeps the bytes for the operator
    assert "raw" not in huge and "over the 1048576-byte line limit" in huge["detail"]
    assert lake.read()["order_id"].to_list() == ["ord-h1"]
