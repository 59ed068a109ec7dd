"""`delta-release catalog migrate`: an existing lake's SQLite catalog moves to the lake-resident catalog,
losing no publication, idempotent, saying what it moved."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

import delta_release as dr
from delta_release.gateway.catalog import SqliteCatalog
from delta_release.gateway.lake_catalog import CATALOG_ENV, LakeCatalog
from tests.conftest import jsonl, up
from tests.s3server import S3Server, s3server  # noqa: F401 - the fixture


def cli(lake: str, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    base = {k: v for k, v in os.environ.items() if k != CATALOG_ENV}
    return subprocess.run([sys.executable, "-m", "delta_release", "--lake", lake, "--json", *args],
                          capture_output=True, text=True, env={**base, **(env or {})}, timeout=300)


def pubs(cat: Any, table: str = "orders") -> list[tuple[int, int, str, str, str | None]]:
    return [(p.generation, p.version, p.completed, p.digest, p.label) for p in cat.publications(table)]


def test_migrate_a_local_lake_then_it_uses_the_lake_catalog(tmp_path: Path,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(CATALOG_ENV, raising=False)
    root = tmp_path / "lake"
    lake = dr.Lake.create(root)
    assert isinstance(lake.catalog, SqliteCatalog)  # local lakes keep SQLite until migrated
    lake.ingest(jsonl([up("a", 1), up("b", 2, day=48)]))
    lake.ingest(jsonl([up("c", 3)]))
    lake.publish_version("orders", 2, digest="relabel", label="release-1")
    before = pubs(lake.catalog)
    assert len(before) == 4
    rows = lake.read().to_dicts()

    out = cli(str(root), "catalog", "migrate")
    assert out.returncode == 0, out.stderr
    report = json.loads(out.stdout)
    assert report["moved"] == 4 and report["present"] == 0
    assert report["publications"]["orders"]["moved"] == [1, 2, 3, 4]
    assert report["current"]["orders"] == {"generation": 4, "version": 2}
    assert {t["name"]: t["action"] for t in report["tables"]}["orders"] == "moved"

    reopened = dr.Lake.open(root)
    assert isinstance(reopened.catalog, LakeCatalog)
    assert pubs(reopened.catalog) == before
    assert reopened.read().to_dicts() == rows
    assert (root / "_catalog" / "catalog.sqlite").exists()  # left in place

    again = json.loads(cli(str(root), "catalog", "migrate").stdout)
    assert (again["moved"], again["present"]) == (0, 4)
    plain = subprocess.run([sys.executable, "-m", "delta_release", "--lake", str(root), "catalog", "migrate"],
                           capture_output=True, text=True, env={k: v for k, v in os.environ.items()
                                                                 if k != CATALOG_ENV})
    assert plain.returncode == 0 and "0 publications moved, 4 already there" in plain.stdout


def test_migrate_refuses_a_generation_that_differs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(CATALOG_ENV, raising=False)
    root = tmp_path / "lake"
    lake = dr.Lake.create(root)
    lake.ingest(jsonl([up("a", 1)]))
    target = LakeCatalog(lake.storage)
    target.register("orders", location="orders", kind="delta")
    target.publish("orders", expected_generation=None, version=7, digest="other", completed="2026-01-01T00:00:00Z")
    out = cli(str(root), "catalog", "migrate")
    assert out.returncode == 3, out.stdout + out.stderr
    err = json.loads(out.stdout)["error"]
    assert err["type"] == "GenerationConflictError" and err["table"] == "orders"
    assert target.publications("orders")[0].version == 7  # nothing overwritten


def test_migrate_names_a_missing_source(tmp_path: Path) -> None:
    out = cli(str(tmp_path / "lake"), "catalog", "migrate", "--from", "sqlite", str(tmp_path / "nope.sqlite"))
    assert out.returncode == 2
    assert "nope.sqlite" in json.loads(out.stdout)["error"]["message"]


@pytest.mark.integration
def test_migrate_an_s3_lake_from_its_local_sqlite(s3server: S3Server, tmp_path: Path,  # noqa: F811
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(CATALOG_ENV, raising=False)
    uri = f"s3://{s3server.new_bucket()}/lake"
    sqlite = tmp_path / "catalog.sqlite"
    lake = dr.Lake.create(uri, storage_options=s3server.options, catalog=SqliteCatalog(sqlite))
    lake.ingest(jsonl([up("a", 1)]))
    lake.ingest(jsonl([up("b", 2)]))
    out = cli(uri, "catalog", "migrate", "--from", "sqlite", str(sqlite), env=s3server.options)
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["moved"] == 3
    reader = dr.Lake.open(uri, storage_options=s3server.options)  # no catalog given: the lake's own
    assert pubs(reader.catalog) == pubs(lake.catalog)
    assert reader.read()["order_id"].to_list() == ["a", "b"]


def test_a_catalog_that_is_not_the_lakes_own_is_refused_and_nothing_is_written(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """DELTA_RELEASE_CATALOG pointing an existing lake at another catalog (`lake` before a migration, a
    SQLite path that does not exist, `memory`) used to register the tables there and publish version 0:
    every reader then saw an empty table, and the lake's default switched to that catalog. Now: exit 2
    naming the catalog, no file written, and the lake still reads what it published."""
    monkeypatch.delenv(CATALOG_ENV, raising=False)
    monkeypatch.chdir(tmp_path)
    root = tmp_path / "lake"
    lake = dr.Lake.create(root)
    lake.ingest(jsonl([up("a", 1), up("b", 2, day=48)]))
    before = sorted(str(p.relative_to(root)) for p in root.rglob("*"))
    (tmp_path / "notes.sqlite").write_bytes(b"")  # a user's file that is not a catalog: neither changed nor taken
    for choice, says in (("lake", "catalog migrate"), ("memory", "unreadable afterwards"),
                         ("typo.sqlite", "names no SQLite file"), ("notes.sqlite", "not a delta-release SQLite"),
                         ("/etc/passwd", "not a SQLite catalog")):
        for args in (("status",), ("read",)):
            out = cli(str(root), *args, env={CATALOG_ENV: choice})
            assert out.returncode == 2, (choice, args, out.stdout, out.stderr)
            assert says in json.loads(out.stdout)["error"]["message"]
        monkeypatch.setenv(CATALOG_ENV, choice)
        with pytest.raises(dr.InputError, match="(?i)catalog"):
            dr.Lake.open(root)
        monkeypatch.delenv(CATALOG_ENV)
    assert sorted(str(p.relative_to(root)) for p in root.rglob("*")) == before
    assert not (tmp_path / "typo.sqlite").exists() and (tmp_path / "notes.sqlite").read_bytes() == b""
    # a lake that lost its SQLite file: refused, and the refusal leaves no new empty catalog behind
    (root / "_catalog" / "catalog.sqlite").rename(tmp_path / "kept.sqlite")
    out = cli(str(root), "status")
    assert out.returncode == 2 and not (root / "_catalog").exists(), out.stdout
    (root / "_catalog").mkdir()
    (tmp_path / "kept.sqlite").rename(root / "_catalog" / "catalog.sqlite")
    out = cli(str(root), "read")
    assert out.returncode == 0 and [r["order_id"] for r in json.loads(out.stdout)["rows"]] == ["a", "b"]
    # a new lake may still be created with a catalog file of its own choosing
    monkeypatch.setenv(CATALOG_ENV, str(tmp_path / "new.sqlite"))
    assert dr.Lake.create(tmp_path / "other").ingest(jsonl([up("c", 1)])).version == 1
    assert (tmp_path / "new.sqlite").is_file()


def test_migrate_refuses_a_source_that_is_not_the_lakes_catalog(tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """`catalog migrate --from sqlite` with an empty catalog or a foreign file moved nothing and made the lake's
    catalog lake-resident: readers then saw version 0 and the real catalog could no longer be moved (exit
    3). A file that is not SQLite was exit 1. A mistyped --lake got a `_catalog/`. All exit 2 now, nothing
    written."""
    import sqlite3

    monkeypatch.delenv(CATALOG_ENV, raising=False)
    root = tmp_path / "lake"
    lake = dr.Lake.create(root)
    lake.ingest(jsonl([up("a", 1)]))
    empty = SqliteCatalog(tmp_path / "empty.sqlite")  # a catalog with nothing published (what a typo made)
    not_sqlite = tmp_path / "passwd"
    not_sqlite.write_text("root:x:0:0:root:/root:/bin/bash\n")
    foreign = tmp_path / "foreign.sqlite"
    sqlite3.connect(foreign).executescript("CREATE TABLE t (x); INSERT INTO t VALUES (1);")
    foreign_bytes = foreign.read_bytes()
    for source, says in ((empty.path, "not this lake's catalog"), (not_sqlite, "not a SQLite catalog"),
                         (foreign, "not a delta-release SQLite catalog")):
        out = cli(str(root), "catalog", "migrate", "--from", "sqlite", str(source))
        assert out.returncode == 2, (source, out.stdout, out.stderr)
        assert says in json.loads(out.stdout)["error"]["message"]
        assert not (root / "_catalog" / "format.json").exists()
    assert foreign.read_bytes() == foreign_bytes
    own = str(root / "_catalog" / "catalog.sqlite")
    out = cli(str(tmp_path / "typo"), "catalog", "migrate", "--from", "sqlite", own)
    assert out.returncode == 2 and not (tmp_path / "typo").exists()
    out = cli(str(root), "read")
    assert out.returncode == 0 and [r["order_id"] for r in json.loads(out.stdout)["rows"]] == ["a"]


def test_migrate_moves_nothing_when_a_name_cannot_be_stored_and_register_refuses_such_names(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`register "tele metry"` was accepted by a SQLite lake; `catalog migrate` then wrote format.json and
    the orders records and stopped at that name (exit 2), leaving the lake on a half-built lake catalog.
    Now register refuses such a name, and migrate checks every name before it writes anything. With an
    erasure key that is not the lake's, migrate is refused (exit 3) like every other command."""
    monkeypatch.delenv(CATALOG_ENV, raising=False)
    root = tmp_path / "lake"
    lake = dr.Lake.create(root)
    lake.ingest(jsonl([up("a", 1)]))
    for bad in ("tele metry", "a\nb", "\x1b[31mred", "_hidden"):
        out = cli(str(root), "register", bad, str(root / "orders"))
        assert out.returncode == 2 and "bad table name" in json.loads(out.stdout)["error"]["message"], bad
    SqliteCatalog(root / "_catalog" / "catalog.sqlite").register("tele metry", location=str(root / "orders"),
                                                                 kind="registered")  # as an older version let in
    out = cli(str(root), "catalog", "migrate")
    assert out.returncode == 2 and "nothing was moved" in json.loads(out.stdout)["error"]["message"]
    assert not (root / "_catalog" / "format.json").exists()
    out = cli(str(root), "catalog", "migrate", env={"DELTA_RELEASE_ERASURE_KEY": "not-the-lakes-key"})
    assert out.returncode == 3 and json.loads(out.stdout)["error"]["type"] == "ErasureKeyError"
    assert not (root / "_catalog" / "format.json").exists()


def test_another_lakes_catalog_is_refused_by_its_commit_digest(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """DELTA_RELEASE_CATALOG naming another lake's SQLite catalog (or `migrate --from` it) was taken: the
    lake then published into, or read from, that lake's publications. Its current orders publication
    records a commit digest this lake's commit at that version does not have: exit 2, nothing written."""
    monkeypatch.delenv(CATALOG_ENV, raising=False)
    other, root = dr.Lake.create(tmp_path / "other"), dr.Lake.create(tmp_path / "lake")
    other.ingest(jsonl([up("x", 1)]))
    root.ingest(jsonl([up("a", 1)]))
    foreign = str(other.catalog.path)
    before = sorted(str(p.relative_to(tmp_path)) for p in tmp_path.rglob("*"))
    named = {CATALOG_ENV: foreign}
    for args, env in ((("ingest", str(tmp_path / "b.jsonl")), named), (("read",), named),
                      (("catalog", "migrate", "--from", "sqlite", foreign), None)):
        (tmp_path / "b.jsonl").write_bytes(jsonl([up("c", 5)]))
        out = cli(str(tmp_path / "lake"), *args, env=env)
        assert out.returncode == 2 and "another lake's catalog" in json.loads(out.stdout)["error"]["message"], args
        (tmp_path / "b.jsonl").unlink()
    assert sorted(str(p.relative_to(tmp_path)) for p in tmp_path.rglob("*")) == before
    own = cli(str(tmp_path / "lake"), "read", env={CATALOG_ENV: str(root.catalog.path)})  # its own, named: fine
    assert own.returncode == 0 and [r["order_id"] for r in json.loads(own.stdout)["rows"]] == ["a"]


KILL_POINTS = ("migrate.after_table", "migrate.after_publication", "storage.after_temp:_catalog",
               "migrate.before_marker")


def _killed_migrate(lake: str, point: str, env: dict[str, str] | None = None, *args: str) -> None:
    from delta_release.faults import CRASH_ENV

    proc = cli(lake, "catalog", "migrate", *args, env={**(env or {}), CRASH_ENV: point})
    assert proc.returncode == -signal.SIGKILL, (point, proc.stdout, proc.stderr)


def _read_ids(lake: str, env: dict[str, str] | None = None) -> list[str]:
    out = cli(lake, "read", env=env)
    assert out.returncode == 0, out.stdout + out.stderr
    return sorted(r["order_id"] for r in json.loads(out.stdout)["rows"])


@pytest.mark.parametrize("point", KILL_POINTS)
def test_a_killed_migration_leaves_readers_on_sqlite_and_reruns_to_completion(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, point: str) -> None:
    """`catalog migrate` wrote `_catalog/format.json` first: killed mid-way, every reader answered from the
    half-copied lake catalog (1 row of 8), and once an ingest landed there the rerun failed forever
    (GenerationConflictError). Now the marker is written last: killed at any step (a real SIGKILL), readers
    still answer from SQLite, an ingest lands there, and the rerun copies everything and switches."""
    monkeypatch.delenv(CATALOG_ENV, raising=False)
    root = tmp_path / "lake"
    lake = dr.Lake.create(root)
    for i in range(4):
        lake.ingest(jsonl([up(f"o{i}a", 2 * i + 1, day=40 + i), up(f"o{i}b", 2 * i + 2, day=41 + i)]))
    everything = _read_ids(str(root))
    assert len(everything) == 8
    _killed_migrate(str(root), point)
    assert not (root / "_catalog" / "format.json").exists()
    assert _read_ids(str(root)) == everything  # from SQLite: never the half-copied catalog
    (tmp_path / "late.jsonl").write_bytes(jsonl([up("late", 20, day=50)]))
    landed = cli(str(root), "ingest", str(tmp_path / "late.jsonl"))
    assert landed.returncode == 0, landed.stdout + landed.stderr
    rerun = cli(str(root), "catalog", "migrate")
    assert rerun.returncode == 0, rerun.stdout + rerun.stderr
    sqlite = SqliteCatalog(root / "_catalog" / "catalog.sqlite")
    reopened = dr.Lake.open(root)
    assert isinstance(reopened.catalog, LakeCatalog)
    assert pubs(reopened.catalog) == pubs(sqlite) and len(pubs(sqlite)) == 6
    assert _read_ids(str(root)) == sorted([*everything, "late"])


@pytest.mark.integration
def test_a_killed_migration_of_an_s3_lake_is_refused_until_rerun(s3server: S3Server, tmp_path: Path,  # noqa: F811
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    """An s3:// lake reads its lake catalog by default; a half-copied one (records, no format.json) is
    refused (exit 3 naming format.json and the rerun), never answered from; the rerun completes it."""
    monkeypatch.delenv(CATALOG_ENV, raising=False)
    uri = f"s3://{s3server.new_bucket()}/lake"
    sqlite = tmp_path / "catalog.sqlite"
    lake = dr.Lake.create(uri, storage_options=s3server.options, catalog=SqliteCatalog(sqlite))
    lake.ingest(jsonl([up("a", 1), up("b", 2, day=48)]))
    lake.ingest(jsonl([up("c", 3)]))
    _killed_migrate(uri, "migrate.after_publication", s3server.options, "--from", "sqlite", str(sqlite))
    out = cli(uri, "read", env=s3server.options)
    assert out.returncode == 3, out.stdout + out.stderr
    err = json.loads(out.stdout)["error"]
    assert err["path"].endswith("_catalog/format.json") and "catalog migrate" in err["repair"]
    assert _read_ids(uri, {**s3server.options, CATALOG_ENV: str(sqlite)}) == ["a", "b", "c"]
    rerun = cli(uri, "catalog", "migrate", "--from", "sqlite", str(sqlite), env=s3server.options)
    assert rerun.returncode == 0, rerun.stdout + rerun.stderr
    assert _read_ids(uri, s3server.options) == ["a", "b", "c"]
