"""A batch file larger than the part limit is received in parts (issue 17.4, issue 14.2): cut at line
boundaries, each part its own raw batch, quarantine entry and reconciliation, all folded into one strict
commit published once (issue 34.1); the table equals that of ingesting the whole file at once. Many
batches (replay --all, a release run) go through the same fold."""

from __future__ import annotations

import hashlib
import itertools
import json
import os
import random
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import polars as pl
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import delta_release as dr
from delta_release import _delta
from delta_release import parts as parts_mod
from delta_release.apply.fold import reference_fold
from delta_release.contract import decode_batch
from delta_release.contract.decode import split_lines
from delta_release.contract.lines import BOM, ENV_MAX_LINE
from delta_release.contract.parts import ENV_MAX_GROUP, ENV_MAX_PART, max_part_bytes, part_ranges
from delta_release.stage.buckets import bucket_of_path
from tests.apply.conftest import assert_tags_hold
from tests.conftest import ROOT, examples, jsonl, rm, up
from tests.ingest.conftest import lines as event_lines
from tests.ingest.conftest import order_history


def rows(lake: dr.Lake) -> list[dict[str, Any]]:
    return lake.read().sort("order_id").to_dicts()


def _lines_of(data: bytes) -> list[bytes]:
    return split_lines(data)


@pytest.mark.parametrize("limit", [1, 7, 40, 64, 100, 1000])
@pytest.mark.parametrize("shape", ["lf", "crlf", "no_final_newline", "bom", "bom_lines", "long_line",
                                   "blank_lines"])
def test_parts_cut_at_line_ends_and_cover_the_file(tmp_path: Path, limit: int, shape: str) -> None:
    rnd = random.Random(f"{shape}-{limit}")
    lines = [b"x" * rnd.randint(0, 30) for _ in range(60)]
    end = b"\r\n" if shape == "crlf" else b"\n"
    if shape == "long_line":
        lines[20] = b"y" * 5000  # longer than any part: its part holds it whole
    if shape == "bom_lines":
        lines[5] = lines[30] = lines[31] = BOM + b"{}"
    if shape == "blank_lines":
        lines[10] = lines[11] = b""
    data = (BOM if shape == "bom" else b"") + end.join(lines) + (b"" if shape == "no_final_newline" else end)
    path = tmp_path / "f.jsonl"
    path.write_bytes(data)
    ranges = part_ranges(path, limit)
    assert ranges[0][0] == 0 and sum(n for _, n in ranges) == len(data)
    assert all(a + n == b for (a, n), (b, _) in zip(ranges, ranges[1:], strict=False))  # consecutive
    pieces = [data[a:a + n] for a, n in ranges]
    assert all(p.endswith(b"\n") for p in pieces[:-1])  # every part but the last ends a line (CRLF whole)
    assert all(not p.startswith(BOM) for p in pieces[1:])  # a BOM is skipped only at the start of a batch
    assert all(len(p) <= limit or p.count(b"\n") <= 1 or p[:3] == BOM or BOM in p for p in pieces)
    # the parts' lines, in order, are the file's lines: line numbers map by each part's first line
    assert [ln for p in pieces for ln in _lines_of(p)] == _lines_of(data)
    assert len(pieces) == 1 or len(data) > limit


def test_a_file_within_the_limit_is_one_part(tmp_path: Path) -> None:
    path = tmp_path / "f.jsonl"
    path.write_bytes(b"a\nb\n")
    assert part_ranges(path, 4) == [(0, 4)] and part_ranges(path, 3) == [(0, 2), (2, 2)]
    path.write_bytes(b"")
    assert part_ranges(path, 1) == [(0, 0)]


def test_the_part_limit_is_validated(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    assert max_part_bytes() == 256 << 20
    monkeypatch.setenv(ENV_MAX_PART, "4096")
    assert max_part_bytes() == 4096
    for bad in ("lots", "0", "-5", "1.5"):
        monkeypatch.setenv(ENV_MAX_PART, bad)
        with pytest.raises(dr.errors.InputError, match=ENV_MAX_PART):
            max_part_bytes()
    monkeypatch.setenv(ENV_MAX_PART, "x")
    path = tmp_path / "b.jsonl"
    path.write_bytes(jsonl([up("o1", 1)]))
    lake_dir = tmp_path / "lake"
    proc = subprocess.run([sys.executable, "-m", "delta_release", "--lake", str(lake_dir), "ingest", str(path)],
                          capture_output=True, text=True, cwd=ROOT,
                          env={**os.environ, "PYTHONPATH": str(ROOT), ENV_MAX_PART: "nope"})
    assert proc.returncode == 2 and ENV_MAX_PART in proc.stderr and "Traceback" not in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1


@pytest.mark.parametrize("seed", [1, 2])
def test_parts_give_the_table_of_one_part_ingest(tmp_path: Path, seed: int, monkeypatch: pytest.MonkeyPatch) -> None:
    events = order_history(seed)
    data = jsonl(events) + b"not json\n" + jsonl([up("ord-late", 10_000, 5, 2)])[:-1]  # a bad line, no final \n
    path = tmp_path / "big.jsonl"
    path.write_bytes(data)
    whole = dr.Lake.create(tmp_path / "whole")
    one = whole.ingest(path)
    assert one.parts == [] and one.batch_id == hashlib.sha256(data).hexdigest()[:16]

    monkeypatch.setenv(ENV_MAX_PART, "2048")
    lake = dr.Lake.create(tmp_path / "parts")
    before = lake.published("orders")
    report = lake.ingest(path)
    ranges = part_ranges(path, 2048)
    assert len(report.parts) == len(ranges) > 5
    assert rows(lake) == rows(whole)
    accepted = [e for e in decode_batch(data).events.drop("line").to_dicts()]
    fold = reference_fold(accepted)
    assert {r["order_id"]: r["position"] for r in rows(lake)} == {k: v["position"] for k, v in fold.items()}
    assert {r["order_id"]: r["amount_cents"] for r in rows(lake)} == {k: v["amount_cents"] for k, v in fold.items()}
    # each part: its own raw batch (the byte-identical slice), quarantine and reconciliation
    for part, (offset, size) in zip(report.parts, ranges, strict=True):
        assert (part["offset"], part["size"]) == (offset, size)
        piece = data[offset:offset + size]
        assert part["batch_id"] == hashlib.sha256(piece).hexdigest()[:16]
        assert lake.raw.read(part["batch_id"]) == piece
        assert part["accepted"] + part["quarantined"] == part["extracted"] == len(split_lines(piece))
        if part["quarantined"]:
            assert len(lake.quarantine.rows(part["batch_id"])) == part["quarantined"]
    assert report.extracted == len(split_lines(data)) == sum(p["extracted"] for p in report.parts)
    assert report.accepted + report.quarantined == report.extracted
    assert report.batch_id == report.parts[0]["batch_id"] and not report.duplicate
    assert [p["first_line"] for p in report.parts] == [
        1 + sum(p["extracted"] for p in report.parts[:i]) for i in range(len(report.parts))]
    # the bad line is quarantined in its part at its part-relative line; first_line maps it to the file
    bad_file_line = len(events) + 1
    last = report.parts[-1] if report.parts[-1]["first_line"] <= bad_file_line else report.parts[-2]
    q = lake.quarantine.rows(last["batch_id"]).to_dicts()
    assert any(r["reason"] == "malformed_json" and last["first_line"] + r["line"] - 1 == bad_file_line for r in q)
    # published once, after the last part: the version of the last part's commit
    versions = [p["version"] for p in report.parts if p["version"] is not None]
    assert report.version == versions[-1] == lake.published("orders").version
    assert versions == sorted(versions) and before is not None and before.version < versions[0]
    evidence = [_delta.version_evidence(lake.table_uri("orders"), lake.options, v) for v in versions]
    assert all(e is not None and e["publication"] == "deferred" for e in evidence)  # no recovery publishes them
    # the same file again: every part that committed is a duplicate (a part that changed nothing has no
    # commit to find, as for any batch), nothing is committed
    again = lake.ingest(path)
    assert again.version is None and [p["batch_id"] for p in again.parts] == [p["batch_id"] for p in report.parts]
    assert all(b["duplicate"] for a, b in zip(report.parts, again.parts, strict=True) if a["version"] is not None)
    assert rows(lake) == rows(whole)


def test_a_file_in_parts_on_a_table_without_buckets_is_one_commit(tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """On a table without buckets (one file per day) the parts are folded as ONE group: one commit that
    adds each day's file once, recording every part, with the table, counts and quarantine lines of the
    one-part ingest."""
    from tests.apply.conftest import legacy_defs

    path = tmp_path / "big.jsonl"
    path.write_bytes(jsonl(order_history(3)) + b"not json\n")
    lakes = [dr.Lake.create(tmp_path / name, tables_dir=legacy_defs(tmp_path / name)) for name in ("whole", "parts")]
    for lk in lakes:
        lk.ingest(jsonl(order_history(9, 120)))
    whole, lake = lakes
    one = whole.ingest(path)
    monkeypatch.setenv(ENV_MAX_PART, "2048")
    before = lake.latest_version("orders")
    report = lake.ingest(path)
    assert before is not None and len(report.parts) > 5 and lake.table_def("orders").buckets is None
    assert report.version == before + 1 == lake.latest_version("orders") == lake.published("orders").version
    assert rows(lake) == rows(whole)
    assert (report.accepted, report.quarantined, report.reasons) == (one.accepted, one.quarantined, one.reasons)
    assert _file_lines(lake, report) == _file_lines(whole, one)
    evidence = _delta.version_evidence(lake.table_uri("orders"), lake.options, report.version)
    assert evidence is not None and evidence["batch_ids"] == [p["batch_id"] for p in report.parts]
    days = [a["partitionValues"]["event_day"] for a in _commit_adds(lake, report.version)]
    assert len(days) == len(set(days)) > 1
    assert [f["path"] for f in report.files] == [a["path"] for a in _commit_adds(lake, report.version)]


def test_part_edges_over_long_lines_and_crlf(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A line longer than the part (and over the line limit) at a part edge, CRLF terminators and a last
    line without newline: the same table and the same rejects (by file line) as one-part ingest."""
    monkeypatch.setenv(ENV_MAX_LINE, "300")
    evs = [json.dumps(up(f"o{i % 7}", i, i, 1 + i % 3)).encode() for i in range(1, 80)]
    evs[30] = b'{"x": "' + b"z" * 5000 + b'"}'  # over the line limit: bad_value, never held whole
    evs[31] = b'{"y": "' + b"z" * 250 + b'"}'  # under it, longer than a part
    data = b"\r\n".join(evs)
    path = tmp_path / "edge.jsonl"
    path.write_bytes(data)
    whole = dr.Lake.create(tmp_path / "whole")
    one = whole.ingest(path)
    monkeypatch.setenv(ENV_MAX_PART, "200")
    lake = dr.Lake.create(tmp_path / "parts")
    report = lake.ingest(path)
    assert len(report.parts) > 10 and rows(lake) == rows(whole)
    assert (report.extracted, report.accepted, report.quarantined) == (one.extracted, one.accepted, one.quarantined)
    assert report.reasons == one.reasons == {"bad_value": 1, "missing_field": 1}

    def file_lines(lk: dr.Lake, rep: dr.IngestReport) -> list[tuple[int, str]]:
        starts = {p["batch_id"]: p["first_line"] for p in rep.parts} or {rep.batch_id: 1}
        return sorted((starts[r["batch_id"]] + r["line"] - 1, r["reason"])
                      for r in lk.quarantine.rows().to_dicts() if r["batch_id"] in starts)

    assert file_lines(lake, report) == file_lines(whole, one) == [(31, "bad_value"), (32, "missing_field")]


def _cli(lake_dir: Path, *args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "delta_release", "--lake", str(lake_dir), "--json", *args],
                          capture_output=True, text=True, cwd=ROOT,
                          env={**os.environ, "PYTHONPATH": str(ROOT), **env})


@pytest.mark.parametrize("kill_at", ["ingest.after_commit", "publish.before_swap"])
def test_a_crash_between_parts_publishes_nothing_and_the_rerun_finishes(tmp_path: Path, kill_at: str) -> None:
    """Killed after the file's one commit (ingest.after_commit) or after it, before the one publication
    (publish.before_swap): the published snapshot is the one before the ingest; the rerun finds every
    part applied (the commit recorded every part's batch id), commits nothing, and publishes."""
    events = order_history(3, 200)
    path = tmp_path / "big.jsonl"
    path.write_bytes(jsonl(events))
    whole = dr.Lake.create(tmp_path / "whole")
    whole.ingest(path)
    lake_dir = tmp_path / "lake"
    lake = dr.Lake.create(lake_dir)
    lake.ingest(jsonl([up("ord-001", 0, 1, 1)]))
    published = lake.published("orders")
    seen = rows(lake)
    env = {ENV_MAX_PART: "1500"}
    killed = _cli(lake_dir, "ingest", str(path), env={**env, "DELTA_RELEASE_CRASH_AT": kill_at})
    assert killed.returncode == -9, killed.stderr
    lake = dr.Lake.open(lake_dir)
    latest = lake.latest_version("orders")
    assert latest is not None and published is not None and latest > published.version  # parts committed
    assert lake.published("orders") == published and rows(lake) == seen  # readers see nothing of them
    rerun = _cli(lake_dir, "ingest", str(path), env=env)
    assert rerun.returncode == 0, rerun.stderr
    out = json.loads(rerun.stdout)
    dups = [p["duplicate"] for p in out["parts"]]
    assert all(dups) and out["version"] is None  # every part was applied: only the publication was missing
    lake = dr.Lake.open(lake_dir)
    assert lake.published("orders").version == lake.latest_version("orders") == latest
    assert rows(lake) == rows(whole)


def test_a_run_receives_a_large_batch_as_parts_in_its_one_commit(tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """A release run's batch over the part limit is received as its parts (the same raw batches an ingest
    of the file makes), all applied in the run's ONE candidate: a HOLD leaves every Delta log as it was,
    a SHIP is one commit whose table equals the ingest of the whole file."""
    from delta_release.release.run import run_release
    from tests.release.conftest import ingest_base, log_hashes, release_config

    events = order_history(4, 150)
    path = tmp_path / "big.jsonl"
    path.write_bytes(jsonl(events) + b"not json\n")
    monkeypatch.setenv(ENV_MAX_PART, "2000")
    ranges = part_ranges(path)
    assert len(ranges) > 3
    root = tmp_path / "lake"
    lake = dr.Lake.create(root)
    ingest_base(lake)
    before_logs, before_version, before_pub = log_hashes(root), lake.latest_version("orders"), lake.published("orders")

    held = run_release(str(release_config(tmp_path, [path], broken_v3=True)))
    assert held["decision"] == "hold"
    assert log_hashes(root) == before_logs
    lake = dr.Lake.open(root)
    assert lake.latest_version("orders") == before_version and lake.published("orders") == before_pub
    data = path.read_bytes()
    ids = [hashlib.sha256(data[a:a + n]).hexdigest()[:16] for a, n in ranges]
    packet = json.loads(Path(held["packet"]).read_text())
    assert [b["batch_id"] for b in packet["counts"]["batches"]] == ids
    assert all(lake.raw.read(b) == data[a:a + n] for b, (a, n) in zip(ids, ranges, strict=True))

    shipped = run_release(str(release_config(tmp_path, [path], broken_v3=False)))
    assert shipped["decision"] == "ship", shipped["failed_checks"]
    lake = dr.Lake.open(root)
    assert lake.latest_version("orders") == before_version + 1  # one commit for every part
    other = dr.Lake.create(tmp_path / "other")
    ingest_base(other)
    report = other.ingest(path)  # the same parts, folded the same way
    assert [p["batch_id"] for p in report.parts] == ids
    assert rows(lake) == rows(other)
    assert all(lake.ingest(path).parts[i]["duplicate"] for i in range(len(ids)) if report.parts[i]["version"])


@settings(max_examples=examples(60))
@given(st.lists(st.one_of(event_lines(), st.binary(max_size=30).map(lambda b: b.replace(b"\n", b"")),
                          st.just(BOM + b"{}")), min_size=0, max_size=30),
       st.sampled_from([b"\n", b"\r\n"]), st.booleans(), st.booleans(), st.integers(1, 400))
def test_decoding_part_by_part_equals_decoding_the_file(tmp_path_factory: pytest.TempPathFactory, lines: list[bytes],
                                                        end: bytes, bom: bool, last_end: bool, limit: int) -> None:
    """Every line of the file, decoded in its part, gives what the whole file's decode gives for it
    (line numbers mapped by first_line, offsets by the part's offset); only the batch-wide position check
    differs: it runs per part."""
    from delta_release.contract.parts import file_parts

    data = (BOM if bom else b"") + end.join(lines) + (end if last_end and lines else b"")
    path = tmp_path_factory.mktemp("p") / "f.jsonl"
    path.write_bytes(data)
    whole = decode_batch(data)
    events: list[dict[str, Any]] = []
    rejects: list[tuple[int, str, int | None, int | None]] = []
    first = 1
    for batch in file_parts(path, limit):
        d = batch.decoded
        assert batch.sha256 == hashlib.sha256(data[batch.offset:batch.offset + batch.size]).hexdigest()
        events += [{**e, "line": e["line"] + first - 1} for e in d.events.to_dicts()]
        rejects += [(r.line + first - 1, r.reason.value, batch.offset + (r.offset or 0), r.length) for r in d.rejects]
        first += d.extracted
    assert first - 1 == whole.extracted

    def drop_conflicts(evs: list[dict[str, Any]], rej: list[tuple[int, str, int | None, int | None]]) -> tuple:
        conflict = {r[0] for r in rej if r[1] == "position_conflict"}
        return ([e for e in evs if e["line"] not in conflict], [r for r in rej if r[1] != "position_conflict"])

    mine = drop_conflicts(events, rejects)
    ref = drop_conflicts(whole.events.to_dicts(),
                         [(r.line, r.reason.value, r.offset, r.length) for r in whole.rejects])
    conflicted = {r[0] for r in rejects + [(r.line, r.reason.value, 0, 0) for r in whole.rejects]
                  if r[1] == "position_conflict"}
    assert [e for e in mine[0] if e["line"] not in conflicted] == [e for e in ref[0] if e["line"] not in conflicted]
    assert mine[1] == ref[1]


# -- a file in parts on a bucketed table: each (day, bucket) file folded and written once (issue 34.1) --
def _commit_adds(lake: dr.Lake, version: int) -> list[dict[str, Any]]:
    """The `add` actions of one commit, from its Delta log entry."""
    log = Path(lake.table_uri("orders")) / "_delta_log" / f"{version:020d}.json"
    return [a["add"] for a in map(json.loads, log.read_text().splitlines()) if "add" in a]


def _file_lines(lake: dr.Lake, report: dr.IngestReport) -> list[tuple[int, int, int, str, str, bool]]:
    """Every quarantined line of the ingest by its FILE line and offset: (line, offset, length, reason,
    detail, whether it names a subject: its keyed hash is the lake's own)."""
    starts = {p["batch_id"]: (p["first_line"], p["offset"]) for p in report.parts} or {report.batch_id: (1, 0)}
    return sorted((starts[r["batch_id"]][0] + r["line"] - 1, starts[r["batch_id"]][1] + r["offset"], r["length"],
                   r["reason"], r["detail"], r["subject"] is not None)
                  for r in lake.quarantine.rows().to_dicts() if r["batch_id"] in starts)


def _parquet_files(lake: dr.Lake) -> set[str]:
    table_dir = Path(lake.table_uri("orders"))
    return {p.relative_to(table_dir).as_posix() for p in table_dir.rglob("*.parquet")}


def _based(root: Path) -> dr.Lake:
    """A lake whose days already hold rows of the file's orders: some at the same position with other
    content (fold conflicts with the parent), some higher (the file's events lose), tombstones."""
    lake = dr.Lake.create(root)
    lake.ingest(jsonl(order_history(9, 120)))
    lake.erase("ord-011")  # its events in the file are quarantined as erased_subject, in their parts
    return lake


@pytest.mark.parametrize("seed", [5, 6])
def test_a_file_in_parts_is_folded_and_written_once(tmp_path: Path, seed: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """N parts give the 1-part ingest's table, counts, quarantine (by file line, reason and detail) and
    file layout, in ONE commit that records every part and adds each (day, bucket) file once."""
    events = order_history(seed, 600)
    data = jsonl(events) + b"not json\n" + jsonl([up("ord-002", 50, 1, 2)])  # a reused position, other content
    path = tmp_path / "big.jsonl"
    path.write_bytes(data)
    whole = _based(tmp_path / "whole")
    one = whole.ingest(path)
    assert one.parts == []

    monkeypatch.setenv(ENV_MAX_PART, "4096")
    lake = _based(tmp_path / "parts")
    before, on_disk = lake.latest_version("orders"), _parquet_files(lake)
    report = lake.ingest(path)
    assert before is not None and len(report.parts) > 5
    assert rows(lake) == rows(whole)
    assert (report.extracted, report.accepted, report.quarantined, report.reasons) == (
        one.extracted, one.accepted, one.quarantined, one.reasons)
    assert report.reasons.get("position_conflict", 0) > 0 and report.reasons.get("erased_subject", 0) > 0
    for part in report.parts:
        assert part["accepted"] + part["quarantined"] == part["extracted"]
        assert part["version"] == report.version and not part["duplicate"]
        if part["quarantined"]:
            assert len(lake.quarantine.rows(part["batch_id"])) == part["quarantined"]
    assert _file_lines(lake, report) == _file_lines(whole, one)
    # ONE commit for the file, recording every part, published once
    assert report.version == lake.latest_version("orders") == before + 1 == lake.published("orders").version
    evidence = _delta.version_evidence(lake.table_uri("orders"), lake.options, report.version)
    assert evidence is not None and evidence["batch_ids"] == [p["batch_id"] for p in report.parts]
    # the commit's evidence says what the one-part ingest's says: per day the same rows and distinct keys
    # (each lake has its own key, so the buckets split a day differently), the same changed keys
    theirs = _delta.version_evidence(whole.table_uri("orders"), whole.options, one.version or -1)
    assert theirs is not None and evidence["changed_keys"] == theirs["changed_keys"]

    def per_day(ev: dict[str, Any]) -> dict[str, tuple[int, int]]:
        out: dict[str, tuple[int, int]] = {}
        for f in ev["files"]:
            day = str(f["partition"].get("event_day"))
            rows_, keys_ = out.get(day, (0, 0))
            out[day] = (rows_ + f["rows"], keys_ + f["distinct_keys"])
        return out

    assert per_day(evidence) == per_day(theirs)
    # each (day, bucket) file added once; the table holds one file per (day, bucket), each tag true of its
    # rows; no other file was written under the table (nothing staged twice, nothing discarded)
    adds = _commit_adds(lake, report.version)
    where = [(a["partitionValues"]["event_day"], bucket_of_path(a["path"], 8)) for a in adds]
    assert len(where) == len(set(where)) and None not in {b for _, b in where}
    live = _delta.file_entries(lake.table_uri("orders"), lake.options, report.version)
    at = [(str(e.partition_values.get("event_day")), bucket_of_path(e.path, 8)) for e in live]
    assert len(at) == len(set(at)) and set(where) <= set(at)
    assert assert_tags_hold(lake) == 0
    assert _parquet_files(lake) == on_disk | {a["path"] for a in adds}
    assert [f["path"] for f in report.files] == [a["path"] for a in adds]
    again = lake.ingest(path)  # every part applied: nothing committed
    assert again.version is None and all(p["duplicate"] for p in again.parts)
    assert all(p["accepted"] + p["quarantined"] == p["extracted"] for p in again.parts)
    # the key index learnt where the file put every order: a later batch moving orders to a day they were
    # not in finds their rows there (else the order would have two rows)
    later = jsonl([up(f"ord-{i:03d}", 10_000 + i, 5, 40 + i % 3) for i in range(1, 41)])
    whole.ingest(later)
    lake.ingest(later)
    assert rows(lake) == rows(whole)
    assert lake.scan("orders", include_tombstones=True).collect()["order_id"].is_unique().all()


@pytest.mark.parametrize("reused", [False, True])
def test_only_parts_whose_positions_overlap_are_checked_for_a_reused_position(
        tmp_path: Path, reused: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    """The same-position check of a file in parts splits by group of positions only the parts whose ranges
    of positions meet another part's: none when positions rise part after part; the first two when the
    second reuses a position of the first (the later parts left out). That position's first line is an
    erased subject's (held by the map, never spilled) and still stands: the later line with other content
    is quarantined as in the one-part ingest."""
    events = [up("ord-011", 1000, 7, 47)] + [up(f"p{i:03d}", 1001 + i, i, 40 + i % 5) for i in range(200)]
    if reused:
        events.insert(27, up("p-late", 1000, 8, 48))  # line 28: in the second part of ~18 lines each
    path = tmp_path / "f.jsonl"
    path.write_bytes(jsonl(events))
    whole = _based(tmp_path / "whole")
    one = whole.ingest(path)
    checked: list[int] = []
    spill_positions = parts_mod._spill_positions

    def counted(spill: str, part: Any, groups: int) -> None:
        checked.append(part.number)
        spill_positions(spill, part, groups)

    monkeypatch.setattr(parts_mod, "_spill_positions", counted)
    monkeypatch.setenv(ENV_MAX_PART, "2048")
    lake = _based(tmp_path / "parts")
    report = lake.ingest(path)
    assert len(report.parts) > 5
    second = [p["first_line"] for p in report.parts[1:3]]
    assert not reused or second[0] <= 28 < second[1]
    assert checked == ([1, 2] if reused else [])
    assert rows(lake) == rows(whole)
    assert (report.accepted, report.quarantined, report.reasons) == (one.accepted, one.quarantined, one.reasons)
    assert report.reasons.get("position_conflict", 0) == int(reused) and report.reasons["erased_subject"] == 1
    assert _file_lines(lake, report) == _file_lines(whole, one)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(0, 70), max_size=300), st.sampled_from([71, 40_000]))
def test_the_maps_hashes_by_group_keep_each_groups_events_in_order(groups: list[int], bound: int) -> None:
    """`_digests_by_group`: each group's hashes in the order of its events (as `_by_group` keeps them), for
    groups counted in 16 bits (a radix sort) or more."""
    import numpy as np

    group = np.array([g * (bound // 71) for g in groups], dtype=np.int32)
    hashes = np.array([hashlib.sha256(str(i).encode()).digest() for i in range(len(group))], dtype="S32")
    got = parts_mod._digests_by_group(hashes, group)
    assert sorted(got) == sorted(set(group.tolist()))
    for g, found in got.items():
        assert found.tolist() == hashes[group == g].tolist()


@pytest.fixture(scope="module")
def killed_file(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[dict[str, Any]], int, int]:
    """The file the kill tests ingest, and what ingesting it whole into a `_based` lake gives (rows,
    accepted, quarantined): the same reference for every crash point, so built once."""
    tmp = tmp_path_factory.mktemp("killed-file")
    path = tmp / "big.jsonl"
    path.write_bytes(jsonl(order_history(7, 300)) + b"not json\n")
    whole = _based(tmp / "whole")
    one = whole.ingest(path)
    return path, rows(whole), one.accepted, one.quarantined


@pytest.mark.parametrize("kill_at", ["ingest.after_raw", "parts.after_spill", "stage.after_first_file",
                                     "parts.after_group", "ingest.after_gate", "ingest.after_quarantine",
                                     "commit.during"])
def test_a_kill_while_a_file_in_parts_is_planned_leaves_nothing_and_the_rerun_converges(
        tmp_path: Path, kill_at: str, killed_file: tuple[Path, list[dict[str, Any]], int, int]) -> None:
    path, whole_rows, accepted, quarantined = killed_file
    lake_dir = tmp_path / "lake"
    lake = _based(lake_dir)
    published, seen = lake.published("orders"), rows(lake)
    env = {ENV_MAX_PART: "2048"}
    killed = _cli(lake_dir, "ingest", str(path), env={**env, "DELTA_RELEASE_CRASH_AT": kill_at})
    assert killed.returncode == -9, killed.stderr
    lake = dr.Lake.open(lake_dir)
    assert published is not None and lake.latest_version("orders") == published.version  # nothing committed
    assert lake.published("orders") == published and rows(lake) == seen
    rerun = _cli(lake_dir, "ingest", str(path), env=env)
    assert rerun.returncode == 0, rerun.stderr
    out = json.loads(rerun.stdout)
    assert len(out["parts"]) > 3 and not any(p["duplicate"] for p in out["parts"])
    lake = dr.Lake.open(lake_dir)
    assert lake.published("orders").version == lake.latest_version("orders") == published.version + 1
    assert rows(lake) == whole_rows
    assert (out["accepted"], out["quarantined"]) == (accepted, quarantined)


def test_a_stale_parent_rebuilds_the_file_in_parts_on_the_new_parent(tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """Another writer commits while the file is staged (after its first group of buckets): the file's
    commit is refused as stale, its plan is rebuilt on the new parent from the spilled parts, and the
    table equals the other batch's ingest followed by the file's 1-part ingest."""
    events = order_history(8, 300)
    path = tmp_path / "big.jsonl"
    path.write_bytes(jsonl(events))
    other = jsonl([up("ord-003", 5000, 42, 4), rm("ord-004", 5001), up("ord-new", 5002, 7, 1)])
    whole = _based(tmp_path / "whole")
    whole.ingest(other)
    whole.ingest(path)
    lake = _based(tmp_path / "lake")
    fired: list[str] = []
    real = parts_mod.crash_point

    def racing(name: str) -> None:
        if name == "parts.after_group" and not fired:
            fired.append(name)
            dr.Lake.open(tmp_path / "lake").ingest(other)  # another writer commits meanwhile
        real(name)

    monkeypatch.setattr(parts_mod, "crash_point", racing)
    monkeypatch.setenv(ENV_MAX_PART, "2048")
    report = lake.ingest(path)
    assert fired and len(report.stale_parents) == 1 and report.attempts == 2
    assert rows(lake) == rows(whole)
    adds = _commit_adds(lake, report.version or -1)
    where = [(a["partitionValues"]["event_day"], a["path"].split("/")[-1].split("-")[1]) for a in adds]
    assert len(where) == len(set(where))
    assert report.version == lake.latest_version("orders") == lake.published("orders").version


def test_a_file_in_parts_over_legacy_untagged_files_rewrites_each_once(tmp_path: Path,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """A parent with untagged (pre-bucket) files, which hold every bucket: the groups of buckets are planned
    as one, so each untagged file is replaced once and every key has one row."""
    from tests.apply.conftest import legacy_defs

    events = order_history(10, 400)
    path = tmp_path / "big.jsonl"
    path.write_bytes(jsonl(events))
    lakes = []
    for name in ("whole", "parts"):
        legacy = dr.Lake.create(tmp_path / name, tables_dir=legacy_defs(tmp_path / name))
        legacy.ingest(jsonl(order_history(11, 150)))
        lake = dr.Lake.open(tmp_path / name)  # the same lake, now with buckets
        assert lake.table_def("orders").buckets == 8
        lakes.append(lake)
    whole, lake = lakes
    whole.ingest(path)
    monkeypatch.setenv(ENV_MAX_PART, "2048")
    report = lake.ingest(path)
    assert len(report.parts) > 3 and report.version == lake.latest_version("orders")
    assert len(report.removed) == len(set(report.removed))
    raw = lake.scan("orders", include_tombstones=True).collect()
    assert raw["order_id"].is_unique().all()
    assert rows(lake) == rows(whole)
    assert assert_tags_hold(lake) == assert_tags_hold(whole)


# -- many batches through the same one fold: replay --all and a release run (issue 34.1) -----------------
def _batches(seed: int, count: int = 5) -> list[bytes]:
    """`count` batches of one history, each with positions an earlier batch holds for the same order with
    other content (between batches: a conflict only while that event is the order's current row), exact
    repeats of earlier batches' events, deletes and moves, and a bad line."""
    events = order_history(seed, 500)
    rnd = random.Random(seed)
    cuts = sorted(rnd.sample(range(1, len(events)), count - 1))
    pieces = [events[a:b] for a, b in zip([0, *cuts], [*cuts, len(events)], strict=True)]
    for i in range(1, count):
        earlier = [e for piece in pieces[:i] for e in piece if e["kind"] == "upsert"]
        pieces[i] += [{**e, "amount_cents": e["amount_cents"] + 7} for e in rnd.sample(earlier, 6)]
        pieces[i] += [dict(e) for e in rnd.sample(earlier, 4)]
    return [jsonl(p) + b"not json\n" for p in pieces]


def _ledger(lake: dr.Lake, batch_id: str) -> list[tuple[int, str, str]]:
    if not lake.quarantine.has(batch_id):
        return []
    return sorted((r["line"], r["reason"], r["detail"]) for r in lake.quarantine.rows(batch_id).to_dicts())


def _added_once(lake: dr.Lake, version: int) -> list[tuple[str, int | None]]:
    """The (day, bucket) of every file commit `version` adds; asserts none is added twice."""
    where = [(a["partitionValues"]["event_day"], bucket_of_path(a["path"], 8)) for a in _commit_adds(lake, version)]
    assert len(where) == len(set(where)) and None not in {b for _, b in where}
    return where


@pytest.mark.parametrize("seed", [21, 22])
def test_replay_all_folds_every_batch_once_and_equals_replaying_them_one_by_one(tmp_path: Path, seed: int) -> None:
    """`replay --all` after a rollback re-applies every batch: one commit recording every batch id, each
    (day, bucket) file added once, and the table, counts and quarantine of replaying the batches one by
    one (each as if committed after the ones before: conflicts between batches, an erased subject)."""
    lakes = [dr.Lake.create(tmp_path / name) for name in ("one_by_one", "folded")]
    for lk in lakes:
        for batch in _batches(seed):
            lk.ingest(batch)
        lk.erase("ord-007")
        lk.rollback(1, repair_forward=True)  # the first batch's version: the others' rows are gone
    ref, lake = lakes
    applied = set(dr.ingest.applied_batches(lake))
    order = [b.batch_id for b in lake.raw.list() if b.batch_id in applied]
    assert [b.batch_id for b in ref.raw.list() if b.batch_id in applied] == order and len(order) == 5
    expected = [ref.replay(b)[0] for b in order]
    before = lake.latest_version("orders")
    reports = lake.replay(all_batches=True)
    assert before is not None and [r.batch_id for r in reports] == order
    version = lake.latest_version("orders")
    assert version == before + 1 == lake.published("orders").version  # ONE commit, published
    assert all(r.version == version and not r.duplicate for r in reports)
    evidence = _delta.version_evidence(lake.table_uri("orders"), lake.options, version)
    assert evidence is not None and evidence["batch_ids"] == order and evidence["operation"] == "replay"
    assert evidence["key_filter"]["keys"] == evidence["changed_keys"] > 0  # every group's keys: a rebase reads no file
    _added_once(lake, version)
    assert rows(lake) == rows(ref)
    for mine, theirs in zip(reports, expected, strict=True):
        assert (mine.extracted, mine.accepted, mine.quarantined, mine.reasons) == (
            theirs.extracted, theirs.accepted, theirs.quarantined, theirs.reasons)
        assert mine.accepted + mine.quarantined == mine.extracted
        assert _ledger(lake, mine.batch_id) == _ledger(ref, mine.batch_id)
    assert sum(r.reasons.get("erased_subject", 0) for r in reports) > 0
    assert [f["path"] for f in reports[0].files] == [a["path"] for a in _commit_adds(lake, version)]
    # nothing tombstoned comes back: replaying again changes nothing
    again = lake.replay(all_batches=True)
    assert all(r.version is None for r in again) and rows(lake) == rows(ref)


@pytest.mark.parametrize("seed", [23, 24])
def test_a_run_of_several_batches_writes_each_file_once_and_equals_ingesting_them_in_order(
        tmp_path: Path, seed: int) -> None:
    """A release run's batches are staged as ONE fold (each (day, bucket) file written once, shipped in one
    commit) with the table, per-batch counts and quarantine of ingesting them one by one; a batch given
    twice is applied once, a batch applied before is not applied again."""
    from delta_release.release.candidate import ship, stage_run

    batches = _batches(seed)
    ref = _based(tmp_path / "ref")
    ref.ingest(batches[0])
    expected = [ref.ingest(b) for b in batches[1:]]
    lake = _based(tmp_path / "lake")
    lake.ingest(batches[0])
    before = lake.latest_version("orders")
    candidate = stage_run(lake, [*batches, batches[2]], run_id="r1")  # the first applied before, the third twice
    assert [b.report.duplicate for b in candidate.batches] == [True, False, False, False, False, True]
    assert candidate.batch_ids == [b.batch_id for b in expected]
    assert lake.latest_version("orders") == before  # staged, nothing committed
    version = ship(candidate).version
    assert before is not None and version == before + 1
    evidence = _delta.version_evidence(lake.table_uri("orders"), lake.options, version)
    assert evidence is not None and evidence["batch_ids"] == candidate.batch_ids
    assert evidence["run_id"] == "r1" and evidence["operation"] == "release"
    _added_once(lake, version)
    lake.publish_version("orders", version, digest="r1")
    assert rows(lake) == rows(ref)
    for mine, theirs in zip(candidate.applied, expected, strict=True):
        r = mine.report
        assert (r.extracted, r.accepted, r.quarantined, r.reasons) == (
            theirs.extracted, theirs.accepted, theirs.quarantined, theirs.reasons)
        assert _ledger(lake, r.batch_id) == _ledger(ref, r.batch_id)
    assert sum(b.report.reasons.get("position_conflict", 0) for b in candidate.applied) > 0


def test_a_killed_ingest_leaves_its_spill_in_the_lake_temp_folder_and_the_next_writer_removes_it(
        tmp_path: Path) -> None:
    """Killed at `parts.after_spill`, the ingest's spill stays in the lake's `_tmp` as a `.tmp-<host>-<pid>`
    folder (never in $TMPDIR, where nothing would remove it) holding no erased subject's id; the next
    writer's upkeep removes it, and the rerun leaves no spill behind."""
    path = tmp_path / "big.jsonl"
    path.write_bytes(jsonl(order_history(7, 300)))
    lake_dir = tmp_path / "lake"
    _based(lake_dir)
    env = {ENV_MAX_PART: "2048", "TMPDIR": str(tmp_path / "system-tmp")}
    (tmp_path / "system-tmp").mkdir()
    killed = _cli(lake_dir, "ingest", str(path), env={**env, "DELTA_RELEASE_CRASH_AT": "parts.after_spill"})
    assert killed.returncode == -9, killed.stderr
    spills = [p for p in (lake_dir / "_tmp").iterdir() if p.is_dir() and p.name.startswith(".tmp-")]
    assert len(spills) == 1 and any(spills[0].glob("*.parquet"))
    assert not any((tmp_path / "system-tmp").rglob("*.parquet"))
    from delta_release.drills.scan import where_in_file

    assert any(where_in_file(f, "ord-001") for f in spills[0].glob("*.parquet"))  # the scan sees the ids
    assert not any(where_in_file(f, "ord-011") for f in spills[0].iterdir())  # erased in _based: held, not spilled
    lake = dr.Lake.open(lake_dir)
    swept = lake.ingest(jsonl([up("ord-x", 90_000, 1, 3)]))  # any writer's upkeep
    assert swept.version is not None and not spills[0].exists()
    rerun = _cli(lake_dir, "ingest", str(path), env=env)
    assert rerun.returncode == 0, rerun.stderr
    assert not [p for p in (lake_dir / "_tmp").iterdir() if p.is_dir()]
    assert not any((tmp_path / "system-tmp").rglob("*.parquet"))


def test_an_object_store_lakes_spill_is_swept_once_its_process_is_gone(tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """The local spill root (an s3:// lake's spills): a folder whose process is gone is removed by the
    sweep every writer start runs; a running process's folder (this one) stays, whatever its age."""
    from delta_release.storage import HOST_TAG, local_spill_root, sweep_local_spills, temp_name

    monkeypatch.setenv("TMPDIR", str(tmp_path))
    import tempfile

    monkeypatch.setattr(tempfile, "tempdir", None)
    root = Path(local_spill_root())
    assert root.parent == tmp_path
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    gone = root / f".tmp-{HOST_TAG}-{int(dead.stdout)}-{'0' * 32}"
    mine = root / temp_name()
    for folder in (gone, mine):
        folder.mkdir(parents=True)
        (folder / "g0000-p000001.parquet").write_bytes(b"x")
        os.utime(folder, (0, 0))  # older than any grace
    swept = sweep_local_spills()
    assert [t.path for t in swept] == [str(gone)] and not gone.exists() and mine.exists()


@pytest.mark.parametrize("seed", range(12))
def test_fold_in_order_equals_folding_batch_after_batch(seed: int) -> None:
    """`fold_in_order` of several batches over the parent's rows gives the rows and conflicts of folding
    each batch on the rows the ones before left (the oracle: `fold` batch by batch, the winners applied
    between them), with `prior_day`/`had_prior` those of the parent."""
    import polars as pl

    from delta_release.apply.fold import ORDERS, dedupe_events, fold, fold_in_order

    cols = ORDERS
    rnd = random.Random(seed)
    batches = [decode_batch(b).events for b in _batches(seed, rnd.randint(2, 5))]
    prior = pl.concat([fold(dedupe_events(decode_batch(jsonl(order_history(seed + 100, 80))).events), cols.empty())
                       .rows.select(cols.row_columns)])
    lines = 0
    frames = []
    for i, b in enumerate(batches):
        frames.append(b.with_columns(pl.col("line") + lines, pl.lit(i, dtype=pl.Int32).alias("__b")))
        lines += b.height + 10
    events = pl.concat(frames)
    got = fold_in_order(events.drop("__b"), events["__b"], prior, cols)
    current, conflicts, won = prior, [], set()
    for frame in frames:
        mine = dedupe_events(frame.drop("__b"))
        step = fold(mine, current.join(mine.select("order_id").unique(), on="order_id", how="semi"))
        conflicts += step.conflicts
        new = step.rows.select(cols.row_columns)
        current = pl.concat([current.join(new.select("order_id"), on="order_id", how="anti"), new])
        won |= set(new["order_id"].to_list())
    assert events.group_by("order_id").agg(pl.col("__b").n_unique() > 1)["__b"].any()  # keys of several batches
    assert got.conflicts == sorted(conflicts, key=lambda c: c.line)
    want = current.filter(pl.col("order_id").is_in(sorted(won))).sort("order_id")
    assert got.rows.select(cols.row_columns).sort("order_id").to_dicts() == want.to_dicts()
    days = dict(zip(prior["order_id"].to_list(), prior["event_day"].to_list(), strict=True))
    assert {r["order_id"]: (r["had_prior"], r["prior_day"]) for r in got.rows.to_dicts()} == {
        k: (k in days, days.get(k)) for k in won}


def _unique_history(seed: int, n: int) -> list[dict[str, Any]]:
    """Upserts, moves and deletes, every position once (no same-position conflicts), shuffled."""
    rnd = random.Random(seed)
    events = [rm(f"ord-{rnd.randint(1, 60):03d}", pos, None) if rnd.random() < 0.15 else
              up(f"ord-{rnd.randint(1, 60):03d}", pos, rnd.randint(0, 10_000), rnd.randint(1, 6), 3)
              for pos in range(1, n + 1)]
    rnd.shuffle(events)
    return events


@pytest.mark.parametrize("seed", [3, 4])
def test_a_file_over_buckets_x_the_group_limit_folds_sub_groups_and_writes_each_file_once(
        tmp_path: Path, seed: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """A file larger than buckets x the group limit is planned in sub-groups of each bucket (memory stays a
    group's): each folded on its own over the parent's rows, their winners written together, so the file
    is still ONE commit adding each (day, bucket) file once, with the table, counts and quarantine of the
    one-part ingest (conflicts with the parent, an erased subject, a position reused in the file); a kill
    after the first bucket's files were staged publishes nothing and the rerun completes."""
    events = order_history(seed, 600)
    path = tmp_path / "big.jsonl"
    path.write_bytes(jsonl(events) + b"not json\n" + jsonl([up("ord-002", 50, 1, 2)]))
    whole = _based(tmp_path / "whole")
    one = whole.ingest(path)
    env = {ENV_MAX_PART: "2048", ENV_MAX_GROUP: "1024"}  # ~70 KiB over 8 buckets x 1 KiB: sub-groups
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    groups = parts_mod.group_count(parts_mod.file_sources(path, part_ranges(path, 2048)), 8)
    assert groups > 8 and groups % 8 == 0
    lake = _based(tmp_path / "lake")
    before, on_disk = lake.latest_version("orders"), _parquet_files(lake)
    report = lake.ingest(path)
    assert before is not None and rows(lake) == rows(whole)
    assert (report.extracted, report.accepted, report.quarantined, report.reasons) == (
        one.extracted, one.accepted, one.quarantined, one.reasons)
    assert report.reasons.get("position_conflict", 0) > 0 and report.reasons.get("erased_subject", 0) > 0
    assert _file_lines(lake, report) == _file_lines(whole, one)
    assert {p["version"] for p in report.parts} == {report.version} == {before + 1}
    assert lake.published("orders").version == report.version
    adds = _commit_adds(lake, report.version)
    where = [(a["partitionValues"]["event_day"], bucket_of_path(a["path"], 8)) for a in adds]
    assert len(where) == len(set(where)) and None not in {b for _, b in where}
    live = _delta.file_entries(lake.table_uri("orders"), lake.options, report.version)
    at = [(str(e.partition_values.get("event_day")), bucket_of_path(e.path, 8)) for e in live]
    assert len(at) == len(set(at)) and assert_tags_hold(lake) == 0
    assert _parquet_files(lake) == on_disk | {a["path"] for a in adds}  # nothing staged twice
    # the key index learnt from the groups' spilled runs where the file put every order: a later batch
    # moving orders to other days finds their rows there (else an order would have two rows)
    expected = rows(whole)  # (for the killed lake below)
    later = jsonl([up(f"ord-{i:03d}", 10_000 + i, 5, 40 + i % 3) for i in range(1, 61)])
    whole.ingest(later)
    lake.ingest(later)
    assert rows(lake) == rows(whole)
    assert lake.scan("orders", include_tombstones=True).collect()["order_id"].is_unique().all()

    killed_dir = tmp_path / "killed"
    killed_lake = _based(killed_dir)
    published = killed_lake.published("orders").version
    killed = _cli(killed_dir, "ingest", str(path), env={**env, "DELTA_RELEASE_CRASH_AT": "parts.after_group"})
    assert killed.returncode == -9, killed.stderr
    killed_lake = dr.Lake.open(killed_dir)
    assert killed_lake.latest_version("orders") == killed_lake.published("orders").version == published
    rerun = _cli(killed_dir, "ingest", str(path), env=env)
    assert rerun.returncode == 0, rerun.stderr
    killed_lake = dr.Lake.open(killed_dir)
    assert rows(killed_lake) == expected
    assert killed_lake.published("orders").version == killed_lake.latest_version("orders") == published + 1


def test_sources_are_read_one_ahead_in_order_and_a_failed_read_is_raised_at_its_turn(tmp_path: Path) -> None:
    """`read_ahead` reads the next source on a helper thread while the caller works on this one: sources
    come in order, each read once, at most one ahead of the caller; a read that fails is raised when its
    turn comes (after the sources before it), and closing early leaves no read running."""
    import threading

    started: list[int] = []
    threads: set[int] = set()

    def loader(i: int) -> Any:
        def load(_spill: str, _raw: Any) -> Any:
            started.append(i)
            threads.add(threading.get_ident())
            if i == 3:
                raise OSError("disk gone at source 3")
            return f"batch-{i}"
        return load

    sources = [parts_mod.Source(load=loader(i), size=1, keep_raw=False) for i in range(5)]  # (no raw store)
    got: list[Any] = []
    reader = parts_mod.read_ahead(None, sources, str(tmp_path))  # type: ignore[arg-type]  # a loader needs no lake
    with pytest.raises(OSError, match="source 3"):
        for _source, batch in reader:
            got.append(batch)
            assert max(started) <= len(got)  # the caller's source and at most one more have been read
    assert got == ["batch-0", "batch-1", "batch-2"]
    assert started == [0, 1, 2, 3] and threading.get_ident() not in threads
    early = parts_mod.read_ahead(None, sources[:2], str(tmp_path))  # type: ignore[arg-type]
    assert next(early)[1] == "batch-0"  # type: ignore[comparison-overlap]
    early.close()  # the read of source 1: cancelled if not begun, else waited for; its batch dropped
    seen = list(started)
    time.sleep(0.05)
    assert started == seen and started[-1] in (0, 1)
    assert not [t for t in threading.enumerate() if t.name.startswith("read-ahead")]


def test_a_helper_threads_progress_calls_leave_the_bar_alone() -> None:
    """Only the thread that runs a `progress.work` moves its bar: a part read ahead on a helper thread
    is counted when its turn comes, on the work's thread."""
    import threading

    from rich.console import Console

    from delta_release import progress

    progress.configure(True, console=Console(file=open(os.devnull, "w")))  # noqa: SIM115
    try:
        with progress.work("ingest", 100, phases=[("read and decode", 1.0)], parts=True) as w:
            progress.item("part 1/1", 100)
            t = threading.Thread(target=lambda: progress.advance(60))
            t.start()
            t.join()
            assert w.completed == 0
            progress.advance(40)
            assert w.completed == pytest.approx(40)
    finally:
        progress.configure(False)


def test_groups_fold_one_ahead_and_a_failed_fold_leaves_nothing(tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """The next bucket is folded on a helper thread while this one's files are staged, at most
    FOLDS_AHEAD ahead and not on the committing thread; a fold that fails is raised at its turn: nothing
    is committed, no staged file is left, and no helper thread outlives the ingest."""
    import threading

    events = order_history(5, 300)
    path = tmp_path / "big.jsonl"
    path.write_bytes(jsonl(events))
    monkeypatch.setenv(ENV_MAX_PART, "2048")
    monkeypatch.setenv(ENV_MAX_GROUP, "1024")
    lake = _based(tmp_path / "lake")
    before, on_disk = lake.latest_version("orders"), _parquet_files(lake)
    real = parts_mod.fold_subgroups
    folded: list[int] = []
    staged_at: list[int] = []
    main = threading.get_ident()

    def fold(*args: Any, **kw: Any) -> Any:
        assert threading.get_ident() != main
        folded.append(min(kw["only"]))
        if len(folded) == 4:
            raise RuntimeError("fold of the fourth bucket failed")
        return real(*args, **kw)

    real_stage = parts_mod._PartsPlan._stream

    def stream(self: Any, *a: Any) -> Any:
        for item in real_stage(self, *a):
            staged_at.append(len(folded))
            yield item

    monkeypatch.setattr(parts_mod, "fold_subgroups", fold)
    monkeypatch.setattr(parts_mod._PartsPlan, "_stream", stream)
    with pytest.raises(RuntimeError, match="fourth bucket"):
        lake.ingest(path)
    ahead = parts_mod.FOLDS_AHEAD
    assert folded[:4] == [0, 1, 2, 3] and len(folded) <= 3 + ahead  # none begun past the failed one's turn
    # bucket b's days are staged once its fold is done, while at most buckets up to b + ahead fold: the
    # first days with at most 1 + ahead folds begun (buckets 0-2 staged, 3 failed)
    assert staged_at and staged_at[0] <= 1 + ahead and max(staged_at) <= 3 + ahead
    assert staged_at == sorted(staged_at)
    assert lake.latest_version("orders") == before and _parquet_files(lake) == on_disk
    assert not [t for t in threading.enumerate() if t.name.startswith("fold-ahead")]


def test_a_buckets_sub_groups_fold_two_at_once_and_a_failed_one_leaves_nothing(tmp_path: Path,
                                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """A bucket's sub-groups are folded SUBGROUP_FOLDS at a time on helper threads (two meet at a barrier:
    they run at once, never more), with the table and quarantine of folding them one by one; a sub-group
    fold that fails is raised at its turn: nothing committed, no staged file left, no helper outlives."""
    import threading

    events = order_history(4, 600)
    path = tmp_path / "big.jsonl"
    path.write_bytes(jsonl(events) + b"not json\n" + jsonl([up("ord-002", 50, 1, 2)]))
    monkeypatch.setenv(ENV_MAX_PART, "2048")
    monkeypatch.setenv(ENV_MAX_GROUP, "1024")
    assert parts_mod.SUBGROUP_FOLDS == 2
    one_by_one = _based(tmp_path / "serial")
    monkeypatch.setattr(parts_mod, "SUBGROUP_FOLDS", 1)
    serial = one_by_one.ingest(path)
    monkeypatch.setattr(parts_mod, "SUBGROUP_FOLDS", 2)

    real = parts_mod.fold_group_rows
    both = threading.Event()  # set once two folds run at the same time
    lock = threading.Lock()
    running, most, calls = [0], [0], [0]

    def fold(*args: Any, **kw: Any) -> Any:
        assert threading.current_thread().name.startswith("subgroup-fold")
        with lock:
            calls[0] += 1
            running[0] += 1
            most[0] = max(most[0], running[0])
            if running[0] == 2:
                both.set()
        try:
            both.wait(timeout=1)  # until a second fold runs beside this one (a neighbour without events: 1 s)
            return real(*args, **kw)
        finally:
            with lock:
                running[0] -= 1

    monkeypatch.setattr(parts_mod, "fold_group_rows", fold)
    lake = _based(tmp_path / "lake")
    report = lake.ingest(path)
    assert most[0] == 2 and calls[0] > 2
    assert rows(lake) == rows(one_by_one)
    assert (report.accepted, report.quarantined, report.reasons) == (serial.accepted, serial.quarantined,
                                                                     serial.reasons)
    assert report.reasons.get("position_conflict", 0) > 0 and report.reasons.get("erased_subject", 0) > 0
    assert _file_lines(lake, report) == _file_lines(one_by_one, serial)

    failing = _based(tmp_path / "failing")
    before, on_disk = failing.latest_version("orders"), _parquet_files(failing)
    done = [0]

    def broken(*args: Any, **kw: Any) -> Any:
        with lock:
            done[0] += 1
            if done[0] == 5:
                raise RuntimeError("fold of the fifth sub-group failed")
        return real(*args, **kw)

    monkeypatch.setattr(parts_mod, "fold_group_rows", broken)
    with pytest.raises(RuntimeError, match="fifth sub-group"):
        failing.ingest(path)
    assert failing.latest_version("orders") == before and _parquet_files(failing) == on_disk
    assert not [t for t in threading.enumerate() if t.name.startswith(("subgroup-fold", "fold-ahead"))]


@settings(max_examples=80, deadline=None)
@given(events=st.lists(st.tuples(st.integers(0, 6), st.integers(0, 1), st.integers(0, 2)), max_size=40),
       cuts=st.lists(st.integers(0, 40), max_size=3))
def test_reused_in_names_the_lines_whose_position_an_earlier_line_of_its_batch_holds_otherwise(
        events: list[tuple[int, int, int]], cuts: list[int]) -> None:
    """`reused_in` over a group's frames (cut anywhere) equals the plain rule: a line is named when an
    earlier line of the same batch has its position with other content."""
    rows = {"position": [p for p, _, _ in events], "line": list(range(1, len(events) + 1)),
            parts_mod.SEQ_COLUMN: [b for _, b, _ in events], parts_mod.CONTENT_COLUMN: [c for _, _, c in events]}
    frame = pl.DataFrame(rows, schema={"position": pl.Int64, "line": pl.Int64, parts_mod.SEQ_COLUMN: pl.Int32,
                                       parts_mod.CONTENT_COLUMN: pl.UInt64})
    edges = sorted({0, len(events), *[min(c, len(events)) for c in cuts]})
    frames = [frame.slice(a, b - a) for a, b in itertools.pairwise(edges)] or [frame]
    expected = []
    for i, (p, b, c) in enumerate(events):
        first = next(cc for pp, bb, cc in events if (pp, bb) == (p, b))
        if c != first:
            expected.append(i + 1)
    assert sorted(parts_mod.reused_in(frames).to_list()) == expected


@pytest.mark.parametrize("group_limit", [None, "1024"])
def test_a_first_load_in_parts_takes_its_winners_hashes_from_the_map(tmp_path: Path, group_limit: str | None,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """The map of a file in parts hashes every event's key and spills the hashes beside the events; a first
    load's fold (groups of whole buckets, or a bucket's sub-groups) looks its winners' hashes up there by
    line (`KnownDigests`) instead of hashing them again, the winners the sequence fold decides (keys of several
    events) too: every winner keeps its line. The files, their bucket tags and the key index
    locations equal those of the same file ingested in one part (same secret), which hashes the winners:
    repeats, deletes, conflicts and keys the sequence fold decides included."""
    from delta_release import index
    from delta_release.stage.buckets import KnownDigests
    from tests.apply.conftest import keys_of, orders_files

    events = order_history(7, 200) + [up(f"o{i}", 1000 + i, day=40 + i % 7) for i in range(500)]
    random.Random(7).shuffle(events)
    path = tmp_path / "big.jsonl"
    path.write_bytes(jsonl(events))
    one = dr.Lake.create(tmp_path / "one")
    shutil.copytree(tmp_path / "one", tmp_path / "parts")
    one.ingest(path)
    looked: list[tuple[int, int]] = []  # (winners, of them with a line: looked up, not hashed)
    lookup = KnownDigests.lookup

    def counted(self: KnownDigests, lines: pl.Series, keys: pl.Series, hasher: Any) -> Any:
        looked.append((lines.len(), lines.len() - lines.null_count()))
        return lookup(self, lines, keys, hasher)

    monkeypatch.setattr(KnownDigests, "lookup", counted)
    monkeypatch.setenv(ENV_MAX_PART, "2048")
    if group_limit is not None:
        monkeypatch.setenv(ENV_MAX_GROUP, group_limit)
    lake = dr.Lake.open(tmp_path / "parts")
    report = lake.ingest(path)
    winners = lake.scan("orders", include_tombstones=True).collect().height  # a first load: every row won
    assert len(report.parts) > 5 and sum(w for w, _ in looked) == winners
    assert sum(k for _, k in looked) == winners  # keys of one event and of several alike: none hashed again
    n = lake.table_def("orders").buckets
    keys = sorted({e["order_id"] for e in events})

    def layout(at: dr.Lake) -> tuple[dict[tuple[str, int | None], list[str]], dict[str, int | None]]:
        files = {(e.path.split("/")[0], bucket_of_path(e.path, n)): sorted(keys_of(at, e.path))
                 for e in orders_files(at)}
        found = index.key_index(at.table("orders"))
        assert found is not None
        return files, found.locate(keys, upto=at.latest_version("orders") or 0)

    assert layout(lake) == layout(one) and rows(lake) == rows(one)
    assert assert_tags_hold(lake) == 0


def test_the_erasure_filter_with_the_maps_hashes_blocks_what_hashing_blocks(tmp_path: Path) -> None:
    """A file in parts screens erased subjects with the keyed hashes its map computed (`known`, by line)
    rather than hashing every key again: the same events kept, the same rejects, a line the hashes do not
    cover hashed then."""
    from delta_release.ingest import erasure_filter
    from delta_release.stage.buckets import KnownDigests, digest_array

    lake = dr.Lake.create(tmp_path / "lake")
    lake.erase("o3", force=True)
    lake.erase("o8", force=True)
    events = decode_batch(jsonl([up(f"o{i % 10}", i, day=1 + i % 5) for i in range(1, 60)])).events
    events = events.with_columns(pl.col("line") * 2)  # lines over the sources need not be 1..n
    hashes = digest_array(events["order_id"], lake.erasures.subject_key)
    partial = KnownDigests.of(events["line"].to_numpy()[5:], hashes[5:])  # the first five hashed then
    plain = erasure_filter(lake, events)
    assert len(plain[1]) == 12 and {r.order_id for r in plain[1]} == {"o3", "o8"}
    for known in (KnownDigests.of(events["line"].to_numpy(), hashes), partial):
        kept, rejects = erasure_filter(lake, events, known=known)
        assert kept.equals(plain[0]) and rejects == plain[1]
    assert erasure_filter(dr.Lake.create(tmp_path / "none"), events, known=partial)[0].equals(events)


@pytest.mark.parametrize("race", [False, True])
def test_the_key_index_file_of_a_file_in_parts_is_written_while_staged_and_linked_in(
        tmp_path: Path, race: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    """The key index file of a file in parts (its fold's sorted runs) is written on a thread from the last
    group's fold on (`keys.Premerge`), while the candidate is staged and gated, and the commit's record
    links it in: byte-identical to the file the record writes itself without it, nothing left in the temp
    folder. A stale parent (`race`) discards the first attempt's file and links the second's; a release
    run, which commits after its plan is gone and leaves the key index to catch up, writes none ahead."""
    from delta_release.index import keys as keys_mod
    from delta_release.release.run import run_release
    from tests.release.conftest import release_config

    events = order_history(8, 300)
    path = tmp_path / "big.jsonl"
    path.write_bytes(jsonl(events))
    other = jsonl([up("ord-003", 5000, 42, 4), rm("ord-004", 5001), up("ord-new", 5002, 7, 1)])
    made: list[keys_mod.Premerge] = []
    linked: list[bool | None] = []
    real_init, real_link = keys_mod.Premerge.__init__, keys_mod.Premerge.link

    def init(self: keys_mod.Premerge, *a: Any) -> None:
        made.append(self)
        real_init(self, *a)

    def link(self: keys_mod.Premerge, rel: str) -> bool | None:
        linked.append(out := real_link(self, rel))
        return out

    monkeypatch.setattr(keys_mod.Premerge, "__init__", init)
    monkeypatch.setattr(keys_mod.Premerge, "link", link)
    real_point = parts_mod.crash_point

    def racing(name: str) -> None:
        if race and name == "parts.after_group" and len(made) == 1 and not linked:
            dr.Lake.open(tmp_path / "lake").ingest(other)  # another writer commits meanwhile
        real_point(name)

    monkeypatch.setattr(parts_mod, "crash_point", racing)

    def key_files(root: Path) -> dict[str, bytes]:
        return {p.name: p.read_bytes() for p in sorted((root / "_index").rglob("keys/d-*.kx2"))}

    def temp_files(root: Path) -> list[Path]:
        return [p for p in (root / "_tmp").rglob("*") if p.is_file()]

    monkeypatch.setenv(ENV_MAX_PART, "2048")
    lakes = {}
    _based(tmp_path / "base")  # one secret for every lake: the same key hashes
    for name in ("lake", "plain", "run/lake"):
        shutil.copytree(tmp_path / "base", tmp_path / name)
    for name in ("lake", "plain"):
        lake = dr.Lake.open(tmp_path / name)
        if name == "plain":  # the record writes the file itself
            monkeypatch.setattr(keys_mod.KeyIndex, "premerge", lambda self, runs: None)
            if race:
                lake.ingest(other)
        report = lake.ingest(path)
        assert report.attempts == (2 if race and name == "lake" else 1)
        lakes[name] = lake
    assert len(made) == (2 if race else 1) and linked == [True]
    assert key_files(tmp_path / "lake") == key_files(tmp_path / "plain") != {}
    assert rows(lakes["lake"]) == rows(lakes["plain"]) and temp_files(tmp_path / "lake") == []

    if race:
        return
    monkeypatch.undo()
    monkeypatch.setenv(ENV_MAX_PART, "2048")
    monkeypatch.setattr(keys_mod.Premerge, "__init__", init)
    monkeypatch.setattr(keys_mod.Premerge, "link", link)
    made.clear()
    linked.clear()
    root = tmp_path / "run" / "lake"
    shipped = run_release(str(release_config(tmp_path / "run", [path], broken_v3=False)))
    assert shipped["decision"] == "ship", shipped["failed_checks"]
    assert made == [] and temp_files(root) == []
    keys = sorted({e["order_id"] for e in events})
    run_lake, plain = dr.Lake.open(root), lakes["plain"]
    assert (index_of(run_lake).locate(keys, upto=run_lake.latest_version("orders") or 0)
            == index_of(plain).locate(keys, upto=plain.latest_version("orders") or 0))


def index_of(lake: dr.Lake) -> Any:
    from delta_release import index

    found = index.key_index(lake.table("orders"))
    assert found is not None
    return found
