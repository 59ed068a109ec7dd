"""Catalog behaviour suite, run over every implementation of the `Catalog` protocol."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from delta_release.errors import GenerationConflictError, NotFoundError
from delta_release.gateway.catalog import Catalog, MemoryCatalog, SqliteCatalog

Factory = Callable[[], Catalog]


@pytest.fixture(params=["sqlite", "memory"])
def make_catalog(request: pytest.FixtureRequest, tmp_path: Path) -> Factory:
    if request.param == "sqlite":
        return lambda: SqliteCatalog(tmp_path / "_catalog" / "catalog.sqlite")
    shared = MemoryCatalog()
    return lambda: shared


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
