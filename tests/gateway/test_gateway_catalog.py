"""Catalog behaviour suite, run over every implementation of the `Catalog` protocol.

SQLite, memory, the lake-resident catalog on local disk and the lake-resident catalog on the
S3-compatible server (moto, started once for this module), races included.
"""

from __future__ import annotations

import multiprocessing
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from delta_release.errors import GenerationConflictError, NotFoundError
from delta_release.gateway.catalog import Catalog, MemoryCatalog, SqliteCatalog
from delta_release.gateway.lake_catalog import LakeCatalog
from delta_release.storage import Storage
from tests.s3server import S3Server, s3server  # noqa: F401 - the fixture

Factory = Callable[[], Catalog]
KINDS = ["sqlite", "memory", "lake-local", "lake-s3"]


def _spec(kind: str, tmp_path: Path, request: pytest.FixtureRequest) -> dict[str, Any]:
    """What another thread or process needs to open the same catalog."""
    if kind == "sqlite":
        return {"kind": kind, "path": str(tmp_path / "_catalog" / "catalog.sqlite")}
    if kind == "lake-local":
        return {"kind": kind, "uri": str(tmp_path / "lake"), "options": {}}
    if kind == "lake-s3":
        server: S3Server = request.getfixturevalue("s3server")
        return {"kind": kind, "uri": f"s3://{server.new_bucket()}/lake", "options": server.options}
    return {"kind": kind}


def open_spec(spec: dict[str, Any]) -> Catalog:
    if spec["kind"] == "sqlite":
        return SqliteCatalog(Path(spec["path"]))
    return LakeCatalog(Storage(spec["uri"], spec["options"]))


@pytest.fixture(params=KINDS)
def catalog_spec(request: pytest.FixtureRequest, tmp_path: Path) -> dict[str, Any]:
    if request.param == "lake-s3":
        request.applymarker(pytest.mark.integration)
    return _spec(request.param, tmp_path, request)


@pytest.fixture
def make_catalog(catalog_spec: dict[str, Any]) -> Factory:
    if catalog_spec["kind"] == "memory":
        shared = MemoryCatalog()
        return lambda: shared
    return lambda: open_spec(catalog_spec)


def _publish(cat: Catalog, expected: int | None, version: int, label: str | None = None):  # type: ignore[no-untyped-def]
    return cat.publish("t", expected_generation=expected, version=version, digest=f"d{version}",
                       completed="2026-11-29T12:00:00.000Z", label=label)


def test_register_keeps_the_first_location(make_catalog: Factory) -> None:
    cat = make_catalog()
    assert cat.register("t", location="/a", kind="external").location == "/a"
    assert cat.register("t", location="/b", kind="delta").location == "/a"
    assert cat.table("t") is not None and cat.table("t").kind == "external"  # type: ignore[union-attr]
    assert cat.table("nope") is None
    cat.register("s", location="/s", kind="delta")
    assert [t.name for t in cat.tables()] == ["s", "t"]


def test_set_location(make_catalog: Factory) -> None:
    cat = make_catalog()
    cat.register("t", location="/a", kind="delta")
    cat.set_location("t", "/moved")
    assert make_catalog().table("t").location == "/moved"  # type: ignore[union-attr]
    with pytest.raises(NotFoundError):
        cat.set_location("missing", "/x")


def test_publish_is_a_compare_and_swap_on_the_generation(make_catalog: Factory) -> None:
    cat = make_catalog()
    cat.register("t", location="/a", kind="delta")
    assert cat.current("t") is None
    first = _publish(cat, None, 0)
    assert (first.generation, first.version) == (1, 0)
    second = _publish(cat, 1, 3, label="telemetry-48")
    assert (second.generation, second.version, second.label) == (2, 3, "telemetry-48")
    with pytest.raises(GenerationConflictError) as err:
        _publish(cat, 1, 4)  # a publisher that still expects generation 1
    assert (err.value.expected, err.value.found, err.value.table) == (1, 2, "t")
    with pytest.raises(GenerationConflictError) as err:
        _publish(cat, None, 4)
    assert err.value.found == 2
    current = make_catalog().current("t")
    assert current == second
    assert [p.generation for p in cat.publications("t")] == [1, 2]
    assert cat.current("other") is None and cat.publications("other") == []


def test_two_handles_expecting_the_same_generation_only_one_wins(make_catalog: Factory) -> None:
    a, b = make_catalog(), make_catalog()  # for SQLite: two connections to one file
    a.register("t", location="/a", kind="delta")
    _publish(a, None, 0)
    won = _publish(a, 1, 1)
    with pytest.raises(GenerationConflictError):
        _publish(b, 1, 2)
    assert b.current("t") == won


def test_a_publisher_that_expects_a_generation_ahead_of_the_catalog_loses(make_catalog: Factory) -> None:
    cat = make_catalog()
    cat.register("t", location="/a", kind="delta")
    _publish(cat, None, 0)
    with pytest.raises(GenerationConflictError) as err:
        _publish(cat, 5, 1)  # never leaves a gap in the generations
    assert (err.value.expected, err.value.found) == (5, 1)
    assert [p.generation for p in cat.publications("t")] == [1]


def test_current_is_the_newest_of_many_generations(make_catalog: Factory) -> None:
    cat = make_catalog()
    cat.register("t", location="/a", kind="delta")
    for g in range(12):
        _publish(cat, g or None, g * 2)
    fresh = make_catalog()
    cur = fresh.current("t")
    assert cur is not None and (cur.generation, cur.version, cur.digest) == (12, 22, "d22")
    assert [p.version for p in fresh.publications("t")] == [g * 2 for g in range(12)]


def _race(make_catalog: Factory, expected: int | None, n: int) -> tuple[list[Any], list[Exception]]:
    barrier = threading.Barrier(n)
    won: list[Any] = []
    lost: list[Exception] = []

    def go(i: int) -> None:
        cat = make_catalog()  # each thread its own handle (own connection / own object store client)
        barrier.wait()
        try:
            won.append(_publish(cat, expected, 100 + i))
        except GenerationConflictError as exc:
            lost.append(exc)

    threads = [threading.Thread(target=go, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return won, lost


def test_threads_racing_with_the_same_expected_generation_exactly_one_wins(make_catalog: Factory) -> None:
    cat = make_catalog()
    cat.register("t", location="/a", kind="delta")
    for expected in (None, 1, 2):  # the first publication races too
        won, lost = _race(make_catalog, expected, 6)
        assert len(won) == 1 and len(lost) == 5, (expected, won, lost)
        assert all(e.expected == expected and e.found == (expected or 0) + 1 for e in lost)
        assert make_catalog().current("t") == won[0]
    assert [p.generation for p in make_catalog().publications("t")] == [1, 2, 3]


def test_threads_racing_to_register_all_see_one_entry(make_catalog: Factory) -> None:
    barrier = threading.Barrier(4)
    got: list[Any] = []

    def go(i: int) -> None:
        cat = make_catalog()
        barrier.wait()
        got.append(cat.register("t", location=f"/loc{i}", kind="delta"))

    threads = [threading.Thread(target=go, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len({e.location for e in got}) == 1
    assert make_catalog().table("t") == got[0]


def _process_publish(spec: dict[str, Any], barrier: Any, rounds: int, me: int, out: Any) -> None:
    cat = open_spec(spec)
    for r in range(rounds):  # round r: both processes expect generation r + 1
        barrier.wait(timeout=600)
        version = 10 * r + me
        try:
            pub = cat.publish("t", expected_generation=r + 1, version=version, digest=f"d{version}",
                              completed="2026-11-29T12:00:00.000Z")
            out.put((r, "won", pub.generation, version))
        except GenerationConflictError as exc:
            out.put((r, "lost", exc.found, version))
        barrier.wait(timeout=600)  # both have finished round r before either starts the next


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["sqlite", "lake-local", "lake-s3"])
def test_two_processes_racing_with_the_same_expected_generation_exactly_one_wins(
        kind: str, tmp_path: Path, request: pytest.FixtureRequest) -> None:
    spec = _spec(kind, tmp_path, request)
    cat = open_spec(spec)
    cat.register("t", location="/a", kind="delta")
    _publish(cat, None, 0)
    ctx = multiprocessing.get_context("spawn")
    rounds = 4
    barrier, out = ctx.Barrier(2), ctx.Queue()
    procs = [ctx.Process(target=_process_publish, args=(spec, barrier, rounds, i, out)) for i in range(2)]
    for p in procs:
        p.start()
    results = sorted(out.get(timeout=900) for _ in range(2 * rounds))
    for p in procs:
        p.join(60)
    for r in range(rounds):
        lost, won = results[2 * r], results[2 * r + 1]
        assert (lost[1], won[1]) == ("lost", "won"), results
        assert lost[2] == won[2] == r + 2  # the loser is told the generation the winner created
    history = open_spec(spec).publications("t")
    assert [p.generation for p in history] == list(range(1, rounds + 2))
    assert [p.version for p in history[1:]] == [results[2 * r + 1][3] for r in range(rounds)]
