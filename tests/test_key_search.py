"""The key index's search by 8-byte prefixes (index/keys.py `_search`) gives numpy's positions for any
sorted queries, also when hashes share a prefix (the case that takes the full compare)."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from delta_release.index.keys import DAY, HASH, _argsort, _find, _search

_hash = st.tuples(st.sampled_from([b"\x00" * 8, b"\x01" * 8, b"\x7f" + b"\x00" * 7, b"\xff" * 8]),
                  st.binary(min_size=24, max_size=24)).map(lambda t: t[0] + t[1])


@settings(max_examples=200, deadline=None)
@given(base=st.lists(st.one_of(_hash, st.binary(min_size=32, max_size=32)), unique=True, max_size=60),
       extra=st.lists(st.one_of(_hash, st.binary(min_size=32, max_size=32)), max_size=30),
       take=st.integers(min_value=0, max_value=60))
def test_search_equals_numpy_searchsorted(base: list[bytes], extra: list[bytes], take: int) -> None:
    h = np.array(sorted(base), dtype=HASH)
    queries = np.array(sorted(set(base[:take]) | set(extra)), dtype=HASH)
    if not len(h) or not len(queries):
        return
    assert _search(h, queries).tolist() == np.searchsorted(h, queries).tolist()
    assert _search(h, queries, interpolate_min=0).tolist() == np.searchsorted(h, queries).tolist()
    days = np.arange(len(h), dtype=DAY)
    found, got = _find((h, days), queries)
    items = h.tolist()  # (numpy's S32 items drop trailing zero bytes: compare numpy's own values)
    assert found.tolist() == [q in items for q in queries.tolist()]
    assert got.tolist() == [items.index(q) for q in queries.tolist() if q in items]


def test_shared_prefixes_take_the_full_compare() -> None:
    prefix = b"\x05" * 8
    h = np.array(sorted(prefix + bytes([i]) * 24 for i in range(0, 200, 10)), dtype=HASH)
    queries = np.array(sorted(prefix + bytes([i]) * 24 for i in range(5, 200, 10)), dtype=HASH)  # none present
    assert _search(h, queries).tolist() == np.searchsorted(h, queries).tolist() == list(range(1, 21))
    hit = np.array([h[7]], dtype=HASH)
    assert _search(h, hit).tolist() == [7]
    assert _search(h, queries, interpolate_min=0).tolist() == list(range(1, 21))
    assert _search(h, hit, interpolate_min=0).tolist() == [7]


def test_interpolation_on_uniform_hashes_equals_numpy() -> None:
    """The large-file path: uniform hashes, queries present and absent, and the ends of the range."""
    rng = np.random.default_rng(7)
    h = np.unique(np.frombuffer(rng.bytes(32 * 200_000), dtype=HASH))
    queries = np.sort(np.concatenate([np.frombuffer(rng.bytes(32 * 5_000), dtype=HASH),
                                      h[rng.choice(len(h), 5_000, replace=False)],
                                      np.array([b"\x00" * 31 + b"\x01", b"\xff" * 32, h[0], h[-1]], dtype=HASH)]))
    got = _search(h, queries)
    assert got.tolist() == np.searchsorted(h, queries).tolist()
    assert (got == len(h)).any() and (got == 0).any()
    found, _ = _find((h, np.zeros(len(h), dtype=DAY)), queries)
    assert found.tolist() == np.isin(queries, h).tolist() and found.sum() >= 5_002


@settings(max_examples=200, deadline=None)
@given(items=st.lists(st.one_of(_hash, st.binary(min_size=32, max_size=32)), max_size=60),
       repeat=st.integers(min_value=0, max_value=5))
def test_argsort_equals_numpy_stable_argsort(items: list[bytes], repeat: int) -> None:
    h = np.array(items + items[:repeat], dtype=HASH)  # repeats: equal hashes keep their order
    assert _argsort(h).tolist() == np.argsort(h, kind="stable").tolist()


def test_argsort_of_many_hashes_equals_numpy_stable_argsort() -> None:
    """At a batch's size (numpy's default sort of the prefixes is not stable: equal prefixes, from equal
    hashes or a shared 8-byte prefix, must take the stable sort)."""
    rng = np.random.default_rng(7)
    h = np.frombuffer(rng.bytes(32 * 20_000), dtype=HASH)
    shared = bytearray(h.tobytes())
    shared[32:40] = shared[:8]
    for arr in (h, np.concatenate([h, h[:500], h[:500]]), np.frombuffer(bytes(shared), dtype=HASH)):
        assert _argsort(arr).tolist() == np.argsort(arr, kind="stable").tolist()
