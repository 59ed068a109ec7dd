"""The key index's search (index/keys.py `_find`, `_first_at_least`): by 8-byte prefixes placed through a
fence, then the rest of the hash. It finds exactly the hashes a run holds, with their partition values,
for any queries, also when hashes share a prefix (the case that searches the rests of that prefix),
whatever the fence's spacing, in memory and in a file's columns."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from delta_release.index.keyfile import (
    DAY,
    FENCE_EVERY,
    HASH,
    _argsort,
    _decode,
    _encode,
    _filter,
    _filter_bits,
    _keys,
    _prefix,
    _rest,
)
from delta_release.index.keys import _find, _find_ranged, _first_at_least
from delta_release.storage import Storage

_hash = st.tuples(st.sampled_from([b"\x00" * 8, b"\x01" * 8, b"\x7f" + b"\x00" * 7, b"\xff" * 8]),
                  st.binary(min_size=24, max_size=24)).map(lambda t: t[0] + t[1])
_any_hash = st.one_of(_hash, st.binary(min_size=32, max_size=32))
EVERY = (1, 2, 4, 8, 64, FENCE_EVERY)


def _check(h: np.ndarray, queries: np.ndarray, every: int) -> None:
    """`_find` against a model, and `_first_at_least` against numpy's searchsorted of the prefixes."""
    days = np.arange(len(h), dtype=DAY) * 3 - 2
    keys = _keys((h, days), every)
    qp = _prefix(queries)
    assert _first_at_least(keys, qp).tolist() == np.searchsorted(keys.prefix, qp).tolist()
    found, got = _find(keys, queries)
    items = h.tolist()  # (numpy's S32 items drop trailing zero bytes: compare numpy's own values)
    assert found.tolist() == [q in items for q in queries.tolist()]
    assert got.tolist() == [items.index(q) * 3 - 2 for q in queries.tolist() if q in items]
    # the same search over the file read by byte ranges (an object store): the same answers
    data = bytes(_encode((h, days), every))
    ranged = _find_ranged(lambda ranges: [data[a:b] for a, b in ranges], "f", queries)
    assert ranged[0].tolist() == found.tolist() and ranged[1].tolist() == got.tolist()


@settings(max_examples=200, deadline=None)
@given(base=st.lists(_any_hash, unique=True, max_size=60), extra=st.lists(_any_hash, max_size=30),
       take=st.integers(min_value=0, max_value=60))
def test_find_equals_a_model(base: list[bytes], extra: list[bytes], take: int) -> None:
    h = np.array(sorted(base), dtype=HASH)
    queries = np.array(sorted(set(base[:take]) | set(extra)), dtype=HASH)
    if not len(h) or not len(queries):
        return
    for every in EVERY:
        _check(h, queries, every)
    _check(h, queries[::-1].copy(), 4)  # (queries in any order)


def test_shared_prefixes_search_the_rests() -> None:
    prefix = b"\x05" * 8
    h = np.array(sorted(prefix + bytes([i]) * 24 for i in range(0, 200, 10)), dtype=HASH)
    absent = np.array(sorted(prefix + bytes([i]) * 24 for i in range(5, 200, 10)), dtype=HASH)
    top = np.array(sorted(b"\xff" * 8 + bytes([i]) * 24 for i in range(0, 200, 10)), dtype=HASH)
    for every in (1, 2, 4, 8, FENCE_EVERY):  # blocks that end inside the run of shared prefixes, and at its edges
        _check(h, np.sort(np.concatenate([h, absent])), every)
        _check(h, h[7:8], every)
        # the largest prefix (its search for "the next prefix" is the end)
        _check(top, np.sort(np.concatenate([top, absent, np.array([b"\xff" * 32], dtype=HASH)])), every)


def test_uniform_hashes_at_block_edges_and_range_ends() -> None:
    """The large-file case: uniform hashes, queries present and absent, the ends of the range, each
    block's first and last hash (the fence's own entries and their neighbours), and a last block
    shorter than the others."""
    rng = np.random.default_rng(7)
    h = np.unique(np.frombuffer(rng.bytes(32 * 200_000), dtype=HASH))
    assert len(h) % FENCE_EVERY
    edges = np.unique(np.concatenate([np.arange(0, len(h), FENCE_EVERY) + d for d in (-1, 0, 1)]).clip(0, len(h) - 1))
    queries = np.sort(np.concatenate([np.frombuffer(rng.bytes(32 * 5_000), dtype=HASH),
                                      h[rng.choice(len(h), 5_000, replace=False)], h[edges],
                                      np.array([b"\x00" * 31 + b"\x01", b"\xff" * 32, h[0], h[-1]], dtype=HASH)]))
    keys = _keys((h, np.arange(len(h), dtype=DAY)))
    places = _first_at_least(keys, _prefix(queries))
    assert places.tolist() == np.searchsorted(h, queries).tolist()  # (no prefix is shared at these odds)
    assert (places == len(h)).any() and (places == 0).any()
    found, got = _find(keys, queries)
    assert found.tolist() == np.isin(queries, h).tolist() and found.sum() >= 5_000 + len(edges)
    assert got.tolist() == places[found].tolist()


@settings(max_examples=100, deadline=None)
@given(base=st.lists(_any_hash, unique=True, max_size=600), extra=st.lists(_any_hash, max_size=30))
def test_a_file_round_trips_and_its_columns_find_every_hash(base: list[bytes], extra: list[bytes]) -> None:
    """A file's bytes give back its run and a fence of FENCE_EVERY; every hash is found with its own
    partition value, and a hash not in it is not (empty and tiny files, files of a block and more)."""
    h = np.array(sorted(base), dtype=HASH)
    days = np.arange(len(h), dtype=DAY) * 3 - 2
    keys = _decode(_encode((h, days)), "f")
    back = keys.run()
    assert back[0].tolist() == h.tolist() and back[1].tolist() == days.tolist()
    assert keys.every == FENCE_EVERY and keys.fence.tolist() == _prefix(h)[::FENCE_EVERY].tolist()
    queries = np.array(sorted(set(base) | set(extra)), dtype=HASH)
    found, got = _find(keys, queries)
    items = h.tolist()
    assert found.tolist() == [q in items for q in queries.tolist()]
    assert got.tolist() == [items.index(q) * 3 - 2 for q in queries.tolist() if q in items]


def test_files_of_one_block_and_around_it() -> None:
    """Files of 1, FENCE_EVERY - 1, FENCE_EVERY, FENCE_EVERY + 1 and 3 x FENCE_EVERY hashes: every hash,
    keys below the first and above the last, and a neighbour of each hash."""
    rng = np.random.default_rng(11)
    for n in (1, FENCE_EVERY - 1, FENCE_EVERY, FENCE_EVERY + 1, 3 * FENCE_EVERY):
        h = np.unique(np.frombuffer(rng.bytes(32 * n), dtype=HASH))
        keys = _decode(_encode((h, np.arange(len(h), dtype=DAY))), "f")
        near = np.array([a[:31] + bytes([a[31] ^ 1]) for a in h.tolist() if len(a) == 32], dtype=HASH)
        queries = np.sort(np.concatenate([h, near, np.array([b"\x00" * 31 + b"\x01", b"\xff" * 32], dtype=HASH)]))
        qp = _prefix(queries)
        assert _first_at_least(keys, qp).tolist() == np.searchsorted(_prefix(h), qp).tolist()
        found, got = _find(keys, queries)
        assert found.tolist() == np.isin(queries, h).tolist() and got.tolist() == list(range(len(h)))


@settings(max_examples=200, deadline=None)
@given(items=st.lists(_any_hash, max_size=60), repeat=st.integers(min_value=0, max_value=5))
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


def test_the_filter_keeps_every_hash_and_turns_most_absent_keys_away() -> None:
    """No hash of a file fails its filter (it would read as absent: the order's old row would survive),
    also across the slices the filter is built in; about 3% of absent keys pass it (FILTER_KEYS hashes
    a word, FILTER_BITS bits each)."""
    rng = np.random.default_rng(5)
    h = np.unique(np.frombuffer(rng.bytes(32 * 100_000), dtype=HASH))
    absent = np.frombuffer(rng.bytes(32 * 20_000), dtype=HASH)
    keys = _keys((h, np.zeros(len(h), dtype=DAY)))
    assert _filter(keys.prefix, keys.rest, step=999).tolist() == keys.filter.tolist()
    for queries in (h, absent):
        at, bits = _filter_bits(_prefix(queries), _rest(queries), len(keys.filter))
        passed = (keys.filter[at] & bits) == bits
        assert passed.all() if queries is h else 0.01 < passed.mean() < 0.06


def test_a_ranged_lookup_reads_the_filter_and_its_keys_blocks_not_the_file(tmp_path: Path) -> None:
    """Over byte ranges (S3), 200 keys (100 present) in a file of 100k hashes read its header, fence and
    filter (~1 byte a hash) and one block of FENCE_EVERY prefixes and records per key that passes the
    filter (the 100 present and the few absent ones the filter lets by), with the whole file's answers."""
    rng = np.random.default_rng(17)
    h = np.unique(np.frombuffer(rng.bytes(32 * 100_000), dtype=HASH))
    data = bytes(_encode((h, np.arange(len(h), dtype=DAY))))
    (tmp_path / "f.kx2").write_bytes(data)
    queries = np.sort(np.concatenate([h[rng.choice(len(h), 100, replace=False)],
                                      np.frombuffer(rng.bytes(32 * 100), dtype=HASH)]))
    asked: list[tuple[int, int]] = []

    def read(ranges: list[tuple[int, int]]) -> list[bytes]:
        asked.extend(ranges)
        return Storage(str(tmp_path)).read_ranges("f.kx2", ranges)

    found, got = _find_ranged(read, "f.kx2", queries)
    whole = _find(_decode(data, "f"), queries)
    assert found.tolist() == whole[0].tolist() and got.tolist() == whole[1].tolist() and found.sum() == 100
    read_bytes = sum(b - a for a, b in asked)
    meta = -(-len(h) // FENCE_EVERY) * 8 + -(-len(h) // 8) * 8
    assert read_bytes <= 40 + meta + (100 + 10) * FENCE_EVERY * 36, (read_bytes, meta)
    assert read_bytes < len(data) / 3
    with pytest.raises(FileNotFoundError):
        Storage(str(tmp_path)).read_ranges("gone.kx2", [(0, 8)])
