"""The object store: ingest, read, replay, strict commits and a writer race on moto's S3 server.

The lake lives at s3://<bucket>/lake; its catalog is a SQLite file on local disk (the design for an s3://
lake for now: Lake.open needs catalog= or DELTA_RELEASE_CATALOG).
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

import delta_release as dr
from delta_release.errors import StaleParentError
from delta_release.gateway.catalog import SqliteCatalog
from delta_release.ingest import commit_candidate, prepare_candidate
from delta_release.raw import batch_id_of
from tests.commit.conftest import commits_per_batch, expected, make_batches
from tests.conftest import ORDERS, jsonl, up
from tests.s3server import S3Server, s3server  # noqa: F401 - the fixture

pytestmark = pytest.mark.integration


def open_s3_lake(server: S3Server, bucket: str, catalog: Path) -> dr.Lake:
    return dr.Lake.create(f"s3://{bucket}/lake", storage_options=server.options, catalog=SqliteCatalog(catalog))


def rows(lake: dr.Lake) -> list[dict[str, Any]]:
    return lake.read().to_dicts()


def test_ingest_read_replay_on_s3(s3server: S3Server, tmp_path: Path) -> None:  # noqa: F811
    bucket = s3server.new_bucket()
    lake = open_s3_lake(s3server, bucket, tmp_path / "catalog.sqlite")
    local = dr.Lake.create(tmp_path / "local")
    for name in ("v2", "v3", "bad"):
        got, want = lake.ingest(ORDERS / f"{name}.jsonl"), local.ingest(ORDERS / f"{name}.jsonl")
        assert got.accepted + got.quarantined == got.extracted
        assert (got.accepted, got.quarantined, got.reasons, got.version) == (
            want.accepted, want.quarantined, want.reasons, want.version)
    assert rows(lake) == rows(local) and len(rows(lake)) > 0
    assert lake.quarantine.rows().height == local.quarantine.rows().height > 0
    published = lake.published("orders")
    replays = lake.replay(all_batches=True)
    assert len(replays) == 3 and all(r.version is None for r in replays)
    assert lake.published("orders") == published and rows(lake) == rows(local)
    # a fresh handle (another process's view) reads the same published snapshot
    assert rows(open_s3_lake(s3server, bucket, tmp_path / "catalog.sqlite")) == rows(local)
    keys = [o["Key"] for o in s3server.client().list_objects_v2(Bucket=bucket)["Contents"]]
    assert not [k for k in keys if k.endswith("/")]  # no directory-marker objects
    assert any(k.startswith("lake/_raw/") for k in keys) and any("/_delta_log/" in k for k in keys)


def test_commits_are_conditional_puts(s3server: S3Server, tmp_path: Path) -> None:  # noqa: F811
    bucket = s3server.new_bucket()
    lake = open_s3_lake(s3server, bucket, tmp_path / "catalog.sqlite")
    s3server.record("reset-recording")
    s3server.record("start-recording")
    try:
        report = lake.ingest(jsonl([up("a", 1), up("b", 2, day=48)]))
    finally:
        s3server.record("stop-recording")
    log_puts = [e for e in s3server.recorded() if e["method"] == "PUT" and "_delta_log" in e["url"]]
    assert report.version == 1 and len(log_puts) == 1
    headers = {k.lower(): v for k, v in log_puts[0]["headers"].items()}
    assert headers.get("if-none-match") == "*"
    # the server refuses a second create of the same log entry (what makes a lost race fail, not overwrite)
    import botocore.exceptions

    key = "lake/orders/_delta_log/00000000000000000001.json"
    with pytest.raises(botocore.exceptions.ClientError) as err:
        s3server.client().put_object(Bucket=bucket, Key=key, Body=b"{}", IfNoneMatch="*")
    assert err.value.response["ResponseMetadata"]["HTTPStatusCode"] == 412


def test_stale_parent_on_s3_is_refused(s3server: S3Server, tmp_path: Path) -> None:  # noqa: F811
    bucket = s3server.new_bucket()
    lake = open_s3_lake(s3server, bucket, tmp_path / "catalog.sqlite")
    lake.ingest(jsonl([up("a", 1)]))
    ev_a = dr.contract.decode_batch(jsonl([up("a", 5, amount=7)])).events  # type: ignore[attr-defined]
    ev_b = dr.contract.decode_batch(jsonl([up("b", 6, day=48)])).events  # type: ignore[attr-defined]
    first = prepare_candidate(lake, ev_a, parent=1, batch_ids=["x"], operation="ingest")
    second = prepare_candidate(lake, ev_b, parent=1, batch_ids=["y"], operation="ingest")
    assert commit_candidate(lake, first) == 2
    with pytest.raises(StaleParentError) as err:
        commit_candidate(lake, second)
    assert (err.value.expected, err.value.found) == (1, 2)
    assert lake.latest_version("orders") == 2
    store = lake.table_storage("orders")
    assert not second.empty
    assert not [f.path for f in second.staged_files if store.exists(f.path)]  # loser's files discarded


CHILD = """
import json, os, sys, time
from pathlib import Path
args = json.loads(sys.argv[1])
import delta_release as dr
from delta_release.gateway.catalog import SqliteCatalog
while not os.path.exists(args["go"]):
    time.sleep(0.005)
lake = dr.Lake.open(args["uri"], storage_options=args["options"], catalog=SqliteCatalog(Path(args["catalog"])))
print(json.dumps(lake.ingest(Path(args["batch"])).to_json()))
"""


@pytest.mark.slow
def test_concurrent_writers_on_s3(s3server: S3Server, tmp_path: Path) -> None:  # noqa: F811
    bucket = s3server.new_bucket()
    catalog = tmp_path / "catalog.sqlite"
    uri = f"s3://{bucket}/lake"
    open_s3_lake(s3server, bucket, catalog)
    batches = make_batches(4, seed=21)
    go = tmp_path / "go"
    procs = []
    for i, b in enumerate(batches):
        f = tmp_path / f"b{i}.jsonl"
        f.write_bytes(b)
        args = {"go": str(go), "uri": uri, "options": s3server.options, "catalog": str(catalog), "batch": str(f)}
        procs.append(subprocess.Popen([sys.executable, "-c", CHILD, json.dumps(args)], stdout=subprocess.PIPE,
                                      stderr=subprocess.PIPE, text=True))
    time.sleep(2)  # let the interpreters import; correctness does not depend on it
    go.write_text("go")
    reports = []
    for p in procs:
        out, err = p.communicate(timeout=300)
        assert p.returncode == 0, err[-2000:]
        reports.append(json.loads(out.strip().splitlines()[-1]))
    lake = open_s3_lake(s3server, bucket, catalog)
    got = {r["order_id"]: {k: r[k] for k in ("position", "amount_cents", "currency", "event_day")}
           for r in rows(lake)}
    assert got == expected(batches)
    per_batch = commits_per_batch(lake)
    assert all(per_batch.get(batch_id_of(b)) == 1 for b in batches)
    assert lake.latest_version("orders") == 4 == lake.published("orders").version  # type: ignore[union-attr]
    print("stale parents retried on S3:", sum(len(r["stale_parents"]) for r in reports))


def test_erase_on_s3(s3server: S3Server, tmp_path: Path) -> None:  # noqa: F811
    if not hasattr(dr.Lake, "erase"):
        pytest.skip("Lake.erase is not in this tree yet (issue 4)")
    bucket = s3server.new_bucket()
    lake = open_s3_lake(s3server, bucket, tmp_path / "catalog.sqlite")
    lake.ingest(jsonl([up("ord-keep", 1), up("ord-gone", 2, day=48)]))
    lake.erase("ord-gone")
    assert [r["order_id"] for r in rows(lake)] == ["ord-keep"]
    lake.replay(all_batches=True)
    assert [r["order_id"] for r in rows(lake)] == ["ord-keep"]
    assert "raw" not in lake.quarantine.rows().columns


def test_cli_reaches_an_s3_lake_through_aws_environment(s3server: S3Server, tmp_path: Path) -> None:  # noqa: F811
    import os

    bucket = s3server.new_bucket()
    env = {**os.environ, **s3server.options, "DELTA_RELEASE_CATALOG": str(tmp_path / "catalog.sqlite")}
    lake_uri = f"s3://{bucket}/lake"
    base = [sys.executable, "-m", "delta_release", "--lake", lake_uri, "--json"]
    out = subprocess.run([*base, "ingest", "--create", str(ORDERS / "v3.jsonl")], env=env, capture_output=True,
                         text=True)
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["version"] == 1
    read = subprocess.run([*base, "read"], env=env, capture_output=True, text=True, check=True)
    assert len(json.loads(read.stdout)["rows"]) > 0
    assert s3server.options["AWS_SECRET_ACCESS_KEY"] not in out.stdout + out.stderr + read.stdout


def test_file_index_on_s3(s3server: S3Server, tmp_path: Path) -> None:  # noqa: F811
    """The file index on an object store: built once, caught up by reading only the new commits' log
    entries, equal to the whole-history answer; a corrupt file is deleted and its versions read again."""
    from delta_release import _delta
    from delta_release.index import files as fidx

    bucket = s3server.new_bucket()
    lake = open_s3_lake(s3server, bucket, tmp_path / "catalog.sqlite")
    for i in range(3):
        lake.ingest(jsonl([up(f"o{i}", 10 + i, day=i), up("x", 20 + i, day=5)]))
    uri = lake.table_uri("orders")
    reference = fidx.history_files(uri, lake.options)
    index = fidx.file_index(lake, "orders")
    assert index is not None and not index.index.is_local
    assert {p: r.sha256 for p, r in index.lookup([*reference, "nope"]).items()} == reference
    lake.ingest(jsonl([up("o9", 30, day=6)]))
    again = fidx.file_index(lake, "orders")
    assert again is not None
    totals = again.catch_up()
    assert (again.rebuilds, again.versions_read) == (0, 1)
    want = fidx.history_totals(uri, lake.options)
    assert (totals.bytes_added, totals.first_ts, totals.last_ts) == (want.bytes_added, want.first_ts, want.last_ts)
    level0 = [o.path for o in again.index.list(fidx.FOLDER) if o.path.rsplit("/", 1)[-1].startswith("d-")]
    assert level0
    again.index.put(level0[0], b"garbage")
    reference = fidx.history_files(uri, lake.options)
    assert {p: r.sha256 for p, r in again.lookup(list(reference)).items()} == reference
    assert _delta.latest_version(uri, lake.options) == totals.version


def test_key_index_lookups_on_s3_read_ranges_not_files(s3server: S3Server, tmp_path: Path,  # noqa: F811
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """On S3 a lookup reads an index file's filter and its keys' blocks by ranged GETs, never the whole
    object: a stream of creates, moves and deletes gives the table and index answers of a local lake."""
    from delta_release import index
    from delta_release.index import keys as kx
    from delta_release.storage import Storage
    from tests.index.conftest import stream

    read_whole: list[str] = []

    def recording(read: Any) -> Any:
        def no_whole_index_file(self: Storage, rel: str) -> Any:
            if rel.endswith(".kx2") and not self.is_local:  # (the local lake's maps are its files)
                read_whole.append(rel)
            return read(self, rel)
        return no_whole_index_file

    for name in ("read_bytes", "read_mapped"):  # (a merge's inputs are spooled to local maps: read whole)
        monkeypatch.setattr(Storage, name, recording(getattr(Storage, name)))
    lake = open_s3_lake(s3server, s3server.new_bucket(), tmp_path / "catalog.sqlite")
    local = dr.Lake.create(tmp_path / "local")
    for batch in stream(7, n_batches=5, per_batch=20):
        assert lake.ingest(jsonl(batch)).version == local.ingest(jsonl(batch)).version
    assert rows(lake) == rows(local)
    version = lake.latest_version("orders") or 0
    ids = [f"o{i}" for i in range(1, 16)] + ["never-seen"]
    on_s3, here = index.key_index(lake.table("orders")), index.key_index(local.table("orders"))
    assert on_s3 is not None and here is not None
    assert on_s3.locate(ids, upto=version) == here.locate(ids, upto=version)
    located = on_s3.locate(ids, upto=version)
    assert {r["order_id"]: r["event_day"] for r in rows(local)}.items() <= located.items()
    assert "never-seen" not in located
    assert not read_whole
    # an erasure finds the files holding the subject by ranges too, and reads whole only those it rewrites
    subject = next(r["order_id"] for r in rows(local))
    files = [o.path for o in on_s3.index.list("keys", recursive=False) if o.path.endswith(".kx2")]
    holding = [p for p in files if on_s3._has(kx.tiers.parse(p, ".kx2"), on_s3._hash([subject]))]
    lake.erase(subject)
    written = {o.path for o in on_s3.index.list("keys", recursive=False)} - set(files)  # (the erasure's own)
    assert holding and set(read_whole) <= set(holding) | written and len(files) > len(holding)
    assert not on_s3.holds(lake.erasures.subject_key(subject))


@pytest.mark.parametrize("large", [False, True])
def test_apply_on_s3_reads_the_days_in_scans(s3server: S3Server, tmp_path: Path,  # noqa: F811
                                             monkeypatch: pytest.MonkeyPatch, large: bool) -> None:
    """On an object store the days' files are read through one dataset scan (the fragments fetched
    concurrently), not a GET or two per file in sequence: whether they fit the kept-rows budget (one scan
    of every file) or not (a scan per chunk, then one per day for the rewrite). The table equals a local
    lake's fed the same batches."""
    import delta_release.apply.bucketed as bucketed
    from tests.conftest import jsonl, rm, up

    monkeypatch.setattr(bucketed, "PREFETCH_KEYS_PER_BUCKET", 0)
    if not large:
        monkeypatch.setattr(bucketed, "KEPT_MIN_ROWS", 0)
        monkeypatch.setattr(bucketed, "READ_CHUNK_FILES", 3)
    alone: list[str] = []
    real = bucketed.read_entry
    monkeypatch.setattr(bucketed, "read_entry", lambda ctx, cols, e: alone.append(e.path) or real(ctx, cols, e))
    lake = open_s3_lake(s3server, s3server.new_bucket(), tmp_path / "catalog.sqlite")
    local = dr.Lake.create(tmp_path / "local")
    first = [up(f"o{i}", 1 + i, amount=i, day=40 + i % 3) for i in range(600)]
    second = [up(f"o{i}", 5000 + i, amount=7_000 + i, day=40 + i % 3) for i in range(0, 600, 5)]
    second += [rm(f"o{i}", 9000 + i, None) for i in range(2, 600, 31)]
    for batch in (first, second):
        got, want = lake.ingest(jsonl(batch)), local.ingest(jsonl(batch))
        assert (got.accepted, got.version) == (want.accepted, want.version)
    assert got.removed and alone == []  # (which buckets a batch touches depends on each lake's own hash key)
    assert rows(lake) == rows(local)


def test_key_index_rebuild_on_s3_goes_through_local_maps(s3server: S3Server, tmp_path: Path,  # noqa: F811
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """A missing index on S3 is rebuilt in pieces held in unnamed local temp files (memory-mapped, as on
    local disk, where they sit in the lake's `_tmp`): the base is the same bytes whatever the piece size,
    no object but the index's own is written, and the lookups answer like the table."""
    from delta_release import index
    from delta_release.index import keys as kx
    from tests.index.conftest import stream

    lake = open_s3_lake(s3server, s3server.new_bucket(), tmp_path / "catalog.sqlite")
    for batch in stream(5, n_batches=4, per_batch=25):
        lake.ingest(jsonl(batch))
    version = lake.latest_version("orders") or 0
    ki = index.key_index(lake.table("orders"))
    assert ki is not None
    mapped: list[bool] = []
    piece_of = kx.KeyIndex._piece

    def piece(self: kx.KeyIndex, run: Any, temps: list[str]) -> Any:
        made = piece_of(self, run, temps)
        mapped.append(made.mapped is not None)
        return made

    monkeypatch.setattr(kx.KeyIndex, "_piece", piece)
    bases = {}
    for size in (1 << 21, 3):
        for o in ki.index.list("keys", recursive=False):
            ki.index.delete(o.path)
        monkeypatch.setattr(kx, "REBUILD_KEYS", size)
        mapped.clear()
        ki.rebuild(version)
        assert mapped and all(mapped) and (len(mapped) == 1) == (size > 100)
        bases[size] = ki.index.read_bytes(f"keys/b-{version:012d}.kx2")
        assert not [o.path for o in ki.index.list("", recursive=True) if "_tmp" in o.path]
    assert bases[3] == bases[1 << 21]
    current = {r["order_id"]: r["event_day"] for r in rows(lake)}
    assert ki.locate(list(current), upto=version) == current
