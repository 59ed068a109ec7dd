"""Lake-resident writes that must not race are conditional, on local disk and on the S3-compatible server:
the erasure key (racing creators end with ONE key), ledger entries (create-only, then compare-and-swap),
create-only objects (what raw batches, staged files and catalog records use)."""

from __future__ import annotations

import multiprocessing
import os
import stat
import threading
from pathlib import Path
from typing import Any

import pytest

from delta_release.erasure.ledger import ENV_KEY, KEY_PATH, ErasureEntry, ErasureLedger, load_key
from delta_release.errors import SafetyError
from delta_release.storage import Storage
from tests.s3server import S3Server, s3server  # noqa: F401 - the fixture


@pytest.fixture(params=["local", "s3"])
def root(request: pytest.FixtureRequest, tmp_path: Path) -> tuple[str, dict[str, str]]:
    if request.param == "local":
        return str(tmp_path / "lake"), {}
    request.applymarker(pytest.mark.integration)
    server: S3Server = request.getfixturevalue("s3server")
    return f"s3://{server.new_bucket()}/lake", server.options


@pytest.fixture(autouse=True)
def _no_env_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(ENV_KEY, raising=False)


def test_write_once_creates_once_and_never_replaces(root: tuple[str, dict[str, str]]) -> None:
    st = Storage(*root)
    assert st.write_once("a/b.json", b"first") is True
    assert st.write_once("a/b.json", b"second") is False
    assert st.read_bytes("a/b.json") == b"first"
    assert [o.path for o in st.list_after("a")] == ["a/b.json"]


def test_replace_if_is_a_compare_and_swap(root: tuple[str, dict[str, str]]) -> None:
    st = Storage(*root)
    st.write_once("x.json", b"v1")
    got = st.read_tagged("x.json")
    assert got is not None and got[0] == b"v1"
    assert st.replace_if("x.json", b"v2", got[1]) is True
    assert st.replace_if("x.json", b"v3", got[1]) is False  # the tag read before v2 no longer matches
    assert st.read_bytes("x.json") == b"v2"
    assert st.replace_if("missing.json", b"v", got[1]) is False and not st.exists("missing.json")
    assert st.read_tagged("missing.json") is None


def test_list_after_starts_after_the_given_key(root: tuple[str, dict[str, str]]) -> None:
    st = Storage(*root)
    for i in range(6):
        st.write_once(f"p/{i:03d}.json", b"x")
    assert [o.path for o in st.list_after("p", "p/003.json")] == ["p/004.json", "p/005.json"]
    assert len(st.list_after("p")) == 6 and st.list_after("nothing") == []


def _race_key(uri: str, options: dict[str, str], barrier: Any, rounds: int, out: Any) -> None:
    os.environ.pop(ENV_KEY, None)
    for r in range(rounds):
        st = Storage(f"{uri}/r{r}", options)
        barrier.wait(timeout=600)
        out.put((r, load_key(st, create=True)))


@pytest.mark.slow
def test_two_processes_racing_to_create_the_erasure_key_end_with_one_key(
        root: tuple[str, dict[str, str]]) -> None:
    uri, options = root
    ctx = multiprocessing.get_context("spawn")
    rounds = 5
    barrier, out = ctx.Barrier(2), ctx.Queue()
    procs = [ctx.Process(target=_race_key, args=(uri, options, barrier, rounds, out)) for _ in range(2)]
    for p in procs:
        p.start()
    got = [out.get(timeout=900) for _ in range(2 * rounds)]
    for p in procs:
        p.join(60)
    for r in range(rounds):
        keys = {k for rr, k in got if rr == r}
        stored = Storage(f"{uri}/r{r}", options).read_bytes(KEY_PATH).strip()
        assert keys == {stored} and len(stored) == 64, (r, keys)


def test_threads_racing_to_create_the_erasure_key_end_with_one_key(root: tuple[str, dict[str, str]]) -> None:
    uri, options = root
    barrier = threading.Barrier(8)
    keys: list[bytes] = []

    def go() -> None:
        st = Storage(uri, options)
        barrier.wait()
        keys.append(load_key(st, create=True))

    threads = [threading.Thread(target=go) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(set(keys)) == 1 and len(keys) == 8 and len(keys[0]) == 64
    assert load_key(Storage(uri, options), create=False) == keys[0]
    if not uri.startswith("s3://"):
        assert stat.S_IMODE(os.stat(Path(uri) / KEY_PATH).st_mode) == 0o600


@pytest.mark.integration
def test_the_key_put_on_s3_carries_if_none_match(s3server: S3Server) -> None:  # noqa: F811
    st = Storage(f"s3://{s3server.new_bucket()}/lake", s3server.options)
    s3server.record("reset-recording")
    s3server.record("start-recording")
    try:
        load_key(st, create=True)
    finally:
        s3server.record("stop-recording")
    puts = [e for e in s3server.recorded() if e["method"] == "PUT" and e["url"].endswith(KEY_PATH)]
    assert len(puts) == 1
    assert {k.lower(): v for k, v in puts[0]["headers"].items()}.get("if-none-match") == "*"


def _entry(**kw: Any) -> ErasureEntry:
    base: dict[str, Any] = {"subject": "ab" * 32, "version": None, "erased_at": "2026-11-29T12:00:00.000Z",
                            "state": "pending"}
    return ErasureEntry(**{**base, **kw})


def test_ledger_entries_are_created_once_then_compare_and_swapped(root: tuple[str, dict[str, str]]) -> None:
    a = ErasureLedger(Storage(*root), b"k")
    b = ErasureLedger(Storage(*root), b"k")
    mine = a.write(_entry())
    theirs = b.write(_entry(erased_at="2026-11-30T00:00:00.000Z"))  # created second: the first stands
    assert theirs == mine
    done = a.update(mine, state="done", version=3, exposed=[[0, 2]])
    assert b.get(mine.subject) == done
    with pytest.raises(SafetyError, match="changed concurrently"):
        b.update(mine, state="done", version=9, exposed=[])  # b's view (pending) is stale
    assert a.get(mine.subject) == done


def test_a_write_whose_writer_fails_leaves_nothing(root: tuple[str, dict[str, str]]) -> None:
    """A body written by a function (a key index merge) that fails half-way: no final name and, on local
    disk, no temp file left behind; create-only and replacing writes alike."""
    storage = Storage(root[0], root[1])

    def half(out: Any) -> None:
        out.write(b"half of it")
        raise OSError("no space left (simulated)")

    for write in (storage.write_once, storage.write_bytes):
        with pytest.raises(OSError, match="simulated"):
            write("keys/x.kx2", half)
        assert not storage.exists("keys/x.kx2")
    if storage.is_local:
        assert not [p for p in Path(root[0]).rglob("*") if p.is_file()]


BIG = 40 << 20  # an index merge's output or input at scale is GBs; this is enough to see a copy
BLOCK = bytes(range(256)) * 4096  # 1 MiB


def _traced_peak(step: Any) -> tuple[Any, int]:
    import tracemalloc

    tracemalloc.start()
    try:
        result = step()
        return result, tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def test_a_body_written_by_a_function_is_never_collected_on_the_heap(root: tuple[str, dict[str, str]]) -> None:
    """A key index merge writes its output through a function: on S3 it goes to an unnamed local temp file
    whose memory map is sent (create-only: one conditional PUT), so the process never holds the body in
    Python memory (before: a BytesIO and its copy, twice the body)."""
    storage = Storage(*root)

    def body(out: Any) -> None:
        for _ in range(BIG // len(BLOCK)):
            out.write(BLOCK)

    for write in (storage.write_once, storage.write_bytes):
        rel = f"keys/{write.__name__}.kx2"
        _, peak = _traced_peak(lambda: write(rel, body))  # noqa: B023 - called at once
        assert peak < BIG // 4, f"{write.__name__}: {peak} bytes traced for a {BIG}-byte body"
        assert storage.size(rel) == BIG
        mapped, _ = storage.read_mapped(rel)
        assert mapped[:len(BLOCK)] == BLOCK and mapped[-len(BLOCK):] == BLOCK
    assert storage.write_once("keys/write_once.kx2", body) is False  # still create-only


def test_read_mapped_holds_an_object_outside_the_heap(root: tuple[str, dict[str, str]]) -> None:
    """A merge's inputs on S3 are streamed into unnamed local temp files and memory-mapped: the map equals
    the object, the heap never holds it; an empty object reads as b"", a missing one is FileNotFoundError."""
    storage = Storage(*root)
    storage.write_once("keys/in.kx2", BLOCK * (BIG // len(BLOCK)))
    (mapped, held), peak = _traced_peak(lambda: storage.read_mapped("keys/in.kx2"))
    assert peak < BIG // 2, f"{peak} bytes traced for a {BIG}-byte object"
    assert held is mapped and len(mapped) == BIG and mapped[BIG - len(BLOCK):] == BLOCK
    storage.write_once("keys/empty.kx2", b"")
    assert storage.read_mapped("keys/empty.kx2") == (b"", None)
    with pytest.raises(FileNotFoundError):
        storage.read_mapped("keys/missing.kx2")
