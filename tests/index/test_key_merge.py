"""The key index's merge of files (index/keyfile.py `write_merged`): a range of the hash space at a time,
through a file, never a whole input in memory. Its output is the file the in-memory merge wrote, byte for
byte (two writers that merge the same inputs must write the same name and bytes, whichever code they
run): for runs with GONE entries, equal hashes in several inputs, hashes that share an 8-byte prefix,
ranges of one entry or none, an erased subject, on local disk and on S3."""

from __future__ import annotations

import struct
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from delta_release.index import keyfile
from delta_release.index.keyfile import (
    DAY,
    GONE,
    HASH,
    Run,
    Source,
    _argsort,
    _decode,
    _encode,
    _fold,
    _merge,
    merge_in_memory,
    write_merged,
)
from delta_release.storage import Storage
from tests.s3server import S3Server, s3server  # noqa: F401 - the fixture


def _run(hashes: list[bytes], days: list[int]) -> Run:
    """A sorted run of unique hashes (the first day of a repeated hash)."""
    h = np.array(hashes, dtype=HASH)
    h, first = np.unique(h, return_index=True)
    return h, np.array(days, dtype=DAY)[first]


def _merged(tmp_path: Path, runs: list[Run], gone: keyfile.Gone, exclude: np.ndarray | None = None) -> bytes:
    storage = Storage(str(tmp_path))
    name = f"m-{len(list(tmp_path.glob('m-*')))}.kx2"
    sources = [Source(_decode(_encode(r), "run"), None) for r in runs]
    assert write_merged(storage, name, sources, gone=gone, exclude=exclude)
    return (tmp_path / name).read_bytes()


# hashes drawn from few prefixes (so equal prefixes, with equal or different rests, are common) and days
# with GONE among them
_hash = st.tuples(st.sampled_from([b"\x00" * 8, b"\x01" * 8, b"\x80" + b"\x00" * 7, b"\xff" * 8]),
                  st.sampled_from([b"\x00" * 24, b"\x00" * 23 + b"\x01", b"a" * 24])
                  | st.binary(min_size=24, max_size=24)).map(lambda t: t[0] + t[1])
_any_hash = st.one_of(_hash, st.binary(min_size=32, max_size=32))
_entries = st.lists(st.tuples(_any_hash, st.sampled_from([GONE, -1, 0, 3, 47, 48])), max_size=40)


@settings(max_examples=150, deadline=None)
@given(st.lists(_entries, min_size=1, max_size=5), st.sampled_from([1, 2, 3, 7, 1 << 18]))
def test_merges_equal_the_in_memory_merge_byte_for_byte(tmp_path_factory: pytest.TempPathFactory,
                                                        inputs: list[list[tuple[bytes, int]]],
                                                        range_keys: int) -> None:
    """Runs (newest first) merged keeping GONE (level 1 and 2 runs), and folded into the last as a base,
    equal `_encode` of the in-memory merge and fold, with ranges of 1 entry up to one range for all."""
    tmp_path = tmp_path_factory.mktemp("merge")
    runs = [_run([h for h, _ in e], [d for _, d in e]) for e in inputs]
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(keyfile, "RANGE_KEYS", range_keys)
        assert _merged(tmp_path, runs, "keep") == bytes(_encode(_merge(runs, drop_gone=False)))
        assert _merged(tmp_path, runs, "drop") == bytes(_encode(_merge(runs, drop_gone=True)))
        base = runs[-1]
        base = base[0][base[1] != GONE], base[1][base[1] != GONE]  # (a base holds no GONE entry)
        expected = _fold(base, _merge(runs[:-1], drop_gone=False))
        assert merge_in_memory([*runs[:-1], base], "fold")[0].tolist() == expected[0].tolist()
        assert _merged(tmp_path, [*runs[:-1], base], "fold") == bytes(_encode(expected))


@settings(max_examples=100, deadline=None)
@given(_entries, st.integers(1, 4), st.sampled_from([1, 3, 1 << 18]))
def test_runs_with_no_hash_in_two_merge_in_one_pass_to_the_same_bytes(
        tmp_path_factory: pytest.TempPathFactory, entries: list[tuple[bytes, int]], count: int,
        range_keys: int) -> None:
    """`disjoint` (a file in parts' runs, one per group of its fold) skips the pass that sizes the output:
    the file is the two-pass merge's, byte for byte; runs that do share a hash are refused, not written
    short."""
    tmp_path = tmp_path_factory.mktemp("disjoint")
    storage = Storage(str(tmp_path))
    runs = [_run([h for h, _ in entries if h[-1] % count == i], [d for h, d in entries if h[-1] % count == i])
            for i in range(count)]  # each hash in one run, as a group holds its buckets' keys
    sources = [Source(_decode(_encode(r), "run"), None) for r in runs]
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(keyfile, "RANGE_KEYS", range_keys)
        assert write_merged(storage, "two.kx2", sources)
        assert write_merged(storage, "one.kx2", sources, disjoint=True)
        assert (tmp_path / "one.kx2").read_bytes() == (tmp_path / "two.kx2").read_bytes()
        if entries:
            again = next(s for s, r in zip(sources, runs, strict=True) if len(r[0]))
            with pytest.raises(AssertionError, match="entries"):
                write_merged(storage, "twice.kx2", [*sources, again], disjoint=True)
            assert not (tmp_path / "twice.kx2").exists()


@settings(max_examples=150, deadline=None)
@given(st.lists(_any_hash, max_size=60), st.booleans())
def test_the_hash_order_is_the_stable_sort_of_the_hashes(hashes: list[bytes], reverse: bool) -> None:
    """`_argsort` (prefix bits and index packed in one word, ties put in order one by one) gives numpy's
    stable argsort of the S32 hashes: for hashes sharing a prefix or repeated, and on a reversed view."""
    h = np.array(hashes, dtype=HASH)
    if reverse:
        h = h[::-1]
    assert _argsort(h).tolist() == np.argsort(h, kind="stable").tolist()


def test_the_hash_order_of_millions_with_ties_in_the_packed_bits() -> None:
    """At 300k hashes the word keeps the prefix's top 45 bits: hashes that agree there but differ after,
    repeats (a merge's), and more ties than are ordered one by one (the full sort then) keep numpy's order."""
    rng = np.random.default_rng(3)
    h = np.frombuffer(rng.bytes(32 * 300_000), dtype=HASH).copy()
    raw = h[:, None].view(np.uint8)
    raw[1::1000, :6] = raw[0::1000, :6]  # 300 pairs sharing their top 48 bits, then differing
    for hashes in (h, np.concatenate([h, h[::7]])[::-1]):
        assert (_argsort(hashes) == np.argsort(hashes, kind="stable")).all()


def test_a_fold_drops_gone_entries_only_when_the_newer_runs_hold_one(tmp_path: Path) -> None:
    """A hash GONE in an older run and back in a newer one leaves the merged runs without a GONE entry: the
    fold then keeps the base's entries as they are (the in-memory fold did too)."""
    a, b = b"\x10" * 32, b"\x20" * 32
    base = _run([a, b], [GONE, 5])  # (a base of an older layout: a GONE entry)
    newer, older = _run([b], [6]), _run([b], [GONE])
    expected = _fold(base, _merge([newer, older], drop_gone=False))
    assert _decode(expected_bytes := bytes(_encode(expected)), "x").day.tolist() == [GONE, 6]
    assert _merged(tmp_path, [newer, older, base], "fold") == expected_bytes
    gone = _run([b], [GONE])
    assert _merged(tmp_path, [gone, base], "fold") == bytes(_encode(_fold(base, gone)))
    assert _decode(_merged(tmp_path, [gone, base], "fold"), "x").day.tolist() == []


def test_a_large_merge_in_many_ranges_equals_the_in_memory_merge(tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """200k uniform hashes in a base, three runs that update, add and remove some of them: the fold and the
    merge, in ranges of 4,096 entries, equal the in-memory ones (filter words shared by two ranges, fence
    entries at range ends)."""
    monkeypatch.setattr(keyfile, "RANGE_KEYS", 4096)
    rng = np.random.default_rng(11)
    base_h = np.unique(np.frombuffer(rng.bytes(32 * 200_000), dtype=HASH))
    base = base_h, rng.integers(0, 365, len(base_h)).astype(DAY)
    runs = []
    for size in (3000, 20_000, 7):
        pick = rng.choice(len(base_h), size, replace=False)
        h = np.concatenate([base_h[pick], np.frombuffer(rng.bytes(32 * size), dtype=HASH)])
        d = rng.integers(-2, 365, len(h)).astype(DAY)
        runs.append(_run(h.tolist(), d.tolist()))
    expected = _fold(base, _merge(runs, drop_gone=False))
    assert _merged(tmp_path, [*runs, base], "fold") == bytes(_encode(expected))
    assert _merged(tmp_path, [*runs, base], "keep") == bytes(_encode(_merge([*runs, base], drop_gone=False)))


def test_an_erased_hash_leaves_the_merged_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`exclude` (forget): the file is the in-memory copy without the subject's hash, its filter and
    fence recomputed, in one range or many; a hash that shares the subject's prefix stays."""
    rng = np.random.default_rng(3)
    h = np.unique(np.frombuffer(rng.bytes(32 * 5000), dtype=HASH))
    twin = np.array([h[100][:8] + b"\x00" * 24], dtype=HASH)  # (numpy strips trailing zeros: pad back)
    h = np.unique(np.concatenate([h, twin]))
    run = h, np.arange(len(h), dtype=DAY)
    subject = np.ascontiguousarray(h[100:101])
    keep = h != subject[0]
    expected = bytes(_encode((h[keep], run[1][keep])))
    assert bytes(_encode(merge_in_memory([run], exclude=subject))) == expected
    for range_keys in (1 << 18, 64):
        monkeypatch.setattr(keyfile, "RANGE_KEYS", range_keys)
        assert _merged(tmp_path, [run], "keep", exclude=subject) == expected
    assert len(_decode(expected, "x").prefix) == len(h) - 1


@pytest.fixture(params=["local", "s3"])
def storage(request: pytest.FixtureRequest, tmp_path: Path) -> Storage:
    if request.param == "local":
        return Storage(str(tmp_path / "index"))
    request.applymarker(pytest.mark.integration)
    server: S3Server = request.getfixturevalue("s3server")
    return Storage(f"s3://{server.new_bucket()}/index", server.options)


def test_replace_rewrites_and_create_only_refuses(storage: Storage) -> None:
    """On local disk (a temp file written a range at a time, then linked or renamed) and on S3 (one
    conditional PUT of the collected bytes)."""
    run = _run([b"\x01" * 32, b"\x02" * 32, b"\x03" * 32], [1, 2, GONE])
    source = [Source(_decode(_encode(run), "run"), None)]
    assert write_merged(storage, "keys/k.kx2", source)
    assert storage.read_bytes("keys/k.kx2") == bytes(_encode(run))
    storage.put("keys/k.kx2", b"other")
    assert not write_merged(storage, "keys/k.kx2", source, gone="drop")  # create-only: the file there stays
    assert storage.read_bytes("keys/k.kx2") == b"other"
    assert write_merged(storage, "keys/k.kx2", source, gone="drop", replace=True)
    assert storage.read_bytes("keys/k.kx2") == bytes(_encode(_merge([run], drop_gone=True)))
    if storage.is_local:
        assert not list(storage.local_path("_tmp").iterdir())  # no temp file left


def test_hostile_headers_are_refused_with_a_clear_error(tmp_path: Path) -> None:
    """A header with no fence spacing, a filter size that does not fit its count, a count beyond the
    file or a cut file: ValueError naming the file, read whole or by ranges, never a division by zero."""
    from delta_release.index.keyfile import HEADER, MAGIC
    from delta_release.index.keys import _find_ranged

    good = bytes(_encode(_run([b"\x01" * 32, b"\x02" * 32, b"\x03" * 32], [1, 2, 3])))
    queries = np.array([b"\x02" * 32], dtype=HASH)
    bad = [MAGIC + struct.pack("<QQQQ", 3, 0, 1, 4) + good[HEADER:],  # every = 0
           MAGIC + struct.pack("<QQQQ", 3, 256, 7, 4) + good[HEADER:],  # words for another count
           MAGIC + struct.pack("<QQQQ", 10**9, 256, 125_000_000, 4) + good[HEADER:],  # a count past the end
           good[:HEADER - 1], b"NOTKEYS!" + good[8:]]
    for data in bad:
        with pytest.raises(ValueError, match="k.kx2"):
            _decode(data, "k.kx2")
        with pytest.raises(ValueError):
            _find_ranged(lambda ranges, d=data: [d[a:b] for a, b in ranges], "k.kx2", queries)
