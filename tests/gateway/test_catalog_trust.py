"""Trust the bucket no more than the user (issue 32): a catalog object is data anyone who can write the lake
can edit, so the writer and the readers verify it.

- Locations are confined: an own table's location outside the lake (another folder on the writer's disk,
  another bucket or prefix, `..`, a data folder of the lake) is exit 3 naming the object, before anything
  is read or written there, on every catalog (S3 lake catalog, local lake catalog, SQLite).
- Catalog objects are verified: a damaged, stray, missing or rewritten object is exit 3 naming it and how
  to repair it, never exit 1 and never a silently older generation.

The tamper cases the adversarial pass found are `TAMPERINGS`; each runs against a local lake catalog and
one in the moto S3 server, through the commands a user runs.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

import delta_release as dr
from delta_release.gateway.catalog import TableEntry
from delta_release.gateway.lake_catalog import CATALOG_ENV
from delta_release.gateway.locations import inside, table_location
from delta_release.storage import Storage
from tests.conftest import jsonl, up
from tests.s3server import S3Server, s3server  # noqa: F401 - the fixture

TABLE_KEY = f"_catalog/tables/orders/{1:020d}.json"
POINTER = "_catalog/current/orders.json"


def pub_key(generation: int) -> str:
    return f"_catalog/publications/orders/{generation:020d}.json"


def cli(lake: str, *args: str, env: dict[str, str] | None = None) -> tuple[int, dict[str, Any]]:
    base = {k: v for k, v in os.environ.items() if k != CATALOG_ENV}
    proc = subprocess.run([sys.executable, "-m", "delta_release", "--lake", lake, "--json", *args],
                          capture_output=True, text=True, env={**base, **(env or {})}, timeout=300)
    try:
        out = json.loads(proc.stdout) if proc.stdout.strip() else {}
    except json.JSONDecodeError:
        out = {"stdout": proc.stdout}
    out.setdefault("stderr", proc.stderr[-2000:])
    return proc.returncode, out


@dataclass
class Store:
    """A lake's objects, tampered with as someone who can write the bucket (or the folder) would."""

    uri: str
    env: dict[str, str]
    get: Callable[[str], bytes]
    put: Callable[[str, bytes], None]
    delete: Callable[[str], None]
    keys: Callable[[], list[str]]


def _local_store(root: Path) -> Store:
    def put(rel: str, data: bytes) -> None:
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_bytes(data)

    return Store(uri=str(root), env={}, get=lambda rel: (root / rel).read_bytes(), put=put,
                 delete=lambda rel: (root / rel).unlink(),
                 keys=lambda: sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file()))


def _s3_store(server: S3Server, bucket: str) -> Store:
    client = server.client()

    def keys() -> list[str]:
        pages = client.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix="lake/")
        return sorted(o["Key"].removeprefix("lake/") for p in pages for o in p.get("Contents", []))

    return Store(uri=f"s3://{bucket}/lake", env=dict(server.options),
                 get=lambda rel: client.get_object(Bucket=bucket, Key=f"lake/{rel}")["Body"].read(),
                 put=lambda rel, data: client.put_object(Bucket=bucket, Key=f"lake/{rel}", Body=data),
                 delete=lambda rel: client.delete_object(Bucket=bucket, Key=f"lake/{rel}"), keys=keys)


@pytest.fixture(params=["local", pytest.param("s3", marks=pytest.mark.integration)])
def store(request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Store:
    """A lake on the lake-resident catalog with two ingests published (generations 1..3, versions 0..2)."""
    monkeypatch.delenv(CATALOG_ENV, raising=False)
    if request.param == "local":
        monkeypatch.setenv(CATALOG_ENV, "lake")
        lake = dr.Lake.create(tmp_path / "lake")
        monkeypatch.delenv(CATALOG_ENV)
        out = _local_store(tmp_path / "lake")
    else:
        server: S3Server = request.getfixturevalue("s3server")
        bucket = server.new_bucket()
        lake = dr.Lake.create(f"s3://{bucket}/lake", storage_options=server.options)
        out = _s3_store(server, bucket)
    lake.ingest(jsonl([up("a", 1), up("b", 2, day=48)]))
    lake.ingest(jsonl([up("c", 3)]))
    assert lake.published("orders") is not None and lake.published("orders").generation == 3  # type: ignore[union-attr]
    return out


def _record(store: Store, rel: str, **changes: Any) -> bytes:
    rec = json.loads(store.get(rel))
    rec.update(changes)
    return (json.dumps(rec, sort_keys=True, separators=(",", ":")) + "\n").encode()


# -- 1. locations are confined ------------------------------------------------------------------------
def _aged_victim(tmp_path: Path) -> Path:
    victim = tmp_path / "victim"
    victim.mkdir()
    for name in ("keep.txt", "notes.parquet"):
        (victim / name).write_text("the writer's host must never touch this")
        os.utime(victim / name, (time.time() - 7200, time.time() - 7200))
    return victim


def _tree(path: Path) -> list[tuple[str, bytes]]:
    return sorted((str(p.relative_to(path)), p.read_bytes()) for p in path.rglob("*") if p.is_file())


def test_a_bucket_record_cannot_send_the_writer_to_the_local_disk(store: Store, tmp_path: Path) -> None:
    """The critical finding: on an S3 lake, `location` rewritten to a local folder made `ingest` write there
    and `vacuum --apply` delete its files. Now every command is exit 3 naming the record, and nothing is
    written anywhere: not in the folder, not in the lake."""
    victim = _aged_victim(tmp_path)
    before = _tree(victim)
    batch = tmp_path / "b.jsonl"
    batch.write_bytes(jsonl([up("d", 4)]))
    store.put(TABLE_KEY, _record(store, TABLE_KEY, location=str(victim)))
    lake_before = store.keys()
    for args in (("ingest", str(batch)), ("vacuum", "--apply"), ("read",), ("status",), ("history",),
                 ("erase", "a")):
        code, out = cli(store.uri, *args, env=store.env)
        assert code == 3, (args, out)
        err = out["error"]
        assert err["type"] == "CatalogIntegrityError" and TABLE_KEY in err["path"], (args, err)
        assert "repair" in err and str(victim) in err["message"]
    assert _tree(victim) == before
    assert store.keys() == lake_before


@pytest.mark.parametrize("damage", ["outside", "kind", "truncated"])
def test_catalog_repair_points_the_table_back_into_the_lake(store: Store, tmp_path: Path, damage: str) -> None:
    """The repair the refusal names: `catalog repair` writes the entry the table definition says (a new
    revision: the refused record stays as history), and the writer then writes inside the lake only."""
    victim = _aged_victim(tmp_path)
    before = _tree(victim)
    if damage == "truncated":
        _truncate(store, TABLE_KEY)
    else:
        store.put(TABLE_KEY, _record(store, TABLE_KEY, **({"location": str(victim)} if damage == "outside"
                                                          else {"kind": "registered"})))
    code, out = cli(store.uri, "read", env=store.env)
    assert code == 3 and "catalog repair" in out["error"]["repair"], out
    code, out = cli(store.uri, "catalog", "repair", env=store.env)
    assert code == 0 and [r["table"] for r in out["repaired"]] == ["orders"], out
    assert TABLE_KEY in str(out["repaired"][0]["refused"])
    assert cli(store.uri, "catalog", "repair", env=store.env)[1]["repaired"] == []  # nothing left to repair
    (tmp_path / "b.jsonl").write_bytes(jsonl([up("d", 4)]))
    code, out = cli(store.uri, "ingest", str(tmp_path / "b.jsonl"), env=store.env)
    assert code == 0, out
    code, out = cli(store.uri, "read", env=store.env)
    assert code == 0 and sorted(r["order_id"] for r in out["rows"]) == ["a", "b", "c", "d"]
    assert f"_catalog/tables/orders/{2:020d}.json" in store.keys()
    assert _tree(victim) == before


@pytest.mark.parametrize("location", ["../elsewhere/orders", "orders/../../x", "_erasure", "", ".", "_catalog/x",
                                      "telemetry", "telemetry/orders", "/etc", "s3://other-bucket/lake/orders",
                                      "file:///tmp/x", "o\nrders"])
def test_every_way_out_of_the_lake_is_refused(tmp_path: Path, location: str) -> None:
    root = tmp_path / "lake"
    root.mkdir()
    storage = Storage(str(root))
    own = {"orders": ("delta", "orders"), "telemetry": ("external", "telemetry")}
    entry = TableEntry(name="orders", location=location, kind="delta", origin="obj")
    with pytest.raises(dr.CatalogIntegrityError,
                       match=r"names location .* for table orders: .*; repair: `delta-release --lake .* catalog"
                             r" repair") as err:
        table_location(storage, entry, own=own)
    assert err.value.path == "obj"
    # inside: relative, or absolute under the root (same scheme); a registered table may live elsewhere
    for ok in ("orders", "moved/orders", f"{root}/moved/orders", f"file://{root}/orders"):
        assert table_location(storage, TableEntry(name="orders", location=ok, kind="delta"), own=own).startswith(
            str(root) + "/")
    s3 = Storage("s3://bucket/lake")
    assert inside(s3, "s3://bucket/lake/orders") == "orders"
    for out in ("s3://bucket/lake2/orders", "s3://bucket/orders", "s3://other/lake/orders", "/tmp/x",
                "s3://bucket/lake/../x", "file:///tmp/x"):
        assert inside(s3, out) is None, out
    registered = TableEntry(name="ext", location="s3://elsewhere/t", kind="registered")
    assert table_location(s3, registered, own=own) == "s3://elsewhere/t"
    for bad in ("/home/user/t", "file:///tmp/t", "s3://elsewhere/../t"):  # an s3:// lake never reads the local disk
        with pytest.raises(dr.CatalogIntegrityError,
                           match=r"a registered table must be an absolute s3:// location without '\.\.'.*; repair: "):
            table_location(s3, TableEntry(name="ext", location=bad, kind="registered"), own=own)
    with pytest.raises(dr.CatalogIntegrityError, match="'registered'"):  # an own table claiming to be external
        table_location(s3, TableEntry(name="orders", location="s3://elsewhere/t", kind="registered"), own=own)


def test_a_sqlite_catalog_is_confined_too(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import sqlite3

    monkeypatch.delenv(CATALOG_ENV, raising=False)
    root = tmp_path / "lake"
    dr.Lake.create(root).ingest(jsonl([up("a", 1)]))
    victim = _aged_victim(tmp_path)
    before = _tree(victim)
    con = sqlite3.connect(root / "_catalog" / "catalog.sqlite")
    con.execute("UPDATE tables SET location = ? WHERE name = 'orders'", (str(victim),))
    con.commit()
    con.close()
    (tmp_path / "b.jsonl").write_bytes(jsonl([up("d", 4)]))
    for args in (("ingest", str(tmp_path / "b.jsonl")), ("vacuum", "--apply"), ("read",)):
        code, out = cli(str(root), *args)
        assert code == 3 and "catalog.sqlite (table orders)" in out["error"]["path"], (args, out)
    assert _tree(victim) == before


def test_a_registered_table_may_live_elsewhere_read_only(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`register NAME URI` keeps the table where it is (an absolute location outside the lake): it reads;
    the writer's verbs refuse it (it has no table definition), so nothing is written or vacuumed there."""
    monkeypatch.delenv(CATALOG_ENV, raising=False)
    other = dr.Lake.create(tmp_path / "other")
    other.ingest(jsonl([up("x", 1)]))
    root = tmp_path / "lake"
    dr.Lake.create(root).ingest(jsonl([up("a", 1)]))
    ext = str(tmp_path / "other" / "orders")
    code, out = cli(str(root), "register", "ext", ext)
    assert code == 0, out
    before = _tree(tmp_path / "other" / "orders")
    code, out = cli(str(root), "read", "--table", "ext")
    assert code == 0, out
    for args in (("vacuum", "--table", "ext", "--apply"), ("ingest", "--table", "ext", str(tmp_path / "b.jsonl"))):
        (tmp_path / "b.jsonl").write_bytes(jsonl([up("d", 4)]))
        code, out = cli(str(root), *args)
        assert code == 2, (args, out)
    assert _tree(tmp_path / "other" / "orders") == before
    code, out = cli(str(root), "register", "far", "s3://bucket/t")  # not the lake's kind of store: refused
    assert code == 2 and "kind of store" in out["error"]["message"], out


# -- 2. catalog objects are verified -----------------------------------------------------------------
def _truncate(store: Store, rel: str) -> None:
    data = store.get(rel)
    store.put(rel, data[: len(data) // 2])


def _rewrite_record_only(store: Store) -> None:  # the pointer still holds the true bytes
    store.put(pub_key(3), _record(store, pub_key(3), version=1))


def _rewrite_record_and_pointer(store: Store) -> None:  # both agree: the lake's commit digest does not
    older = _record(store, pub_key(3), version=1)
    store.put(pub_key(3), older)
    store.put(POINTER, older)


TAMPERINGS: dict[str, tuple[Callable[[Store], None], str, tuple[str, ...]]] = {
    # name: (tamper, the object the error names, the commands that must refuse)
    "truncated newest publication": (lambda s: _truncate(s, pub_key(3)), pub_key(3),
                                     ("read", "history", "status", "ingest")),
    "garbled newest publication": (lambda s: s.put(pub_key(3), b"\xff\xfe\x00garbage{"), pub_key(3),
                                   ("read", "history", "status", "ingest")),
    "huge numbers": (lambda s: s.put(pub_key(3), _record(s, pub_key(3), version=1e308, generation=3)
                                     .replace(b"1e+308", b"1e999")), pub_key(3), ("read", "status", "ingest")),
    "stray zzz.json": (lambda s: s.put("_catalog/publications/orders/zzz.json", s.get(pub_key(3))),
                       "_catalog/publications/orders/zzz.json", ("read", "history", "status", "ingest")),
    "stray table record": (lambda s: s.put("_catalog/tables/orders/zzz.json", s.get(TABLE_KEY)),
                           "_catalog/tables/orders/zzz.json", ("read", "status", "ingest")),
    "truncated table record": (lambda s: _truncate(s, TABLE_KEY), TABLE_KEY, ("read", "history", "status", "ingest")),
    "deleted newest publication": (lambda s: s.delete(pub_key(3)), pub_key(3), ("read", "status", "ingest")),
    "deleted middle publication": (lambda s: s.delete(pub_key(2)), pub_key(2), ("history",)),
    "record rewritten to an older version": (_rewrite_record_only, pub_key(3), ("read", "status", "ingest")),
    "record and pointer rewritten": (_rewrite_record_and_pointer, pub_key(3), ("read", "status")),
    "damaged pointer": (lambda s: s.put(POINTER, b'{"generation": 99}'), POINTER, ("read", "status", "ingest")),
}


@pytest.mark.parametrize("case", sorted(TAMPERINGS))
def test_a_tampered_catalog_object_is_refused_naming_it(store: Store, tmp_path: Path, case: str) -> None:
    tamper, named, commands = TAMPERINGS[case]
    tamper(store)
    batch = tmp_path / "b.jsonl"
    for command in commands:
        batch.write_bytes(jsonl([up("d", 4)]))
        code, out = cli(store.uri, command, *([str(batch)] if command == "ingest" else []), env=store.env)
        assert code == 3, (case, command, out)
        err = out["error"]
        assert named in err["path"] and err["repair"] and "repair:" in err["message"], (case, command, err)
        assert "rows" not in out  # never an older generation's rows


def test_a_damaged_sqlite_catalog_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(CATALOG_ENV, raising=False)
    root = tmp_path / "lake"
    dr.Lake.create(root).ingest(jsonl([up("a", 1)]))
    path = root / "_catalog" / "catalog.sqlite"
    data = path.read_bytes()
    for damaged in (data[:100] + b"\x00" * 300 + data[400:], b"SQLite format 3\x00" + b"\xff" * 200):
        path.write_bytes(damaged)
        code, out = cli(str(root), "read")
        assert code == 3 and out["error"]["path"] == str(path) and "restore" in out["error"]["repair"], out
