"""`ingest --executor ray` on a local 2-CPU Ray cluster, started once for this file (~10 s, ~0.8 GiB).

Workers map (decode, raw copy, events by group of buckets) and reduce (fold with the parent's files, stage);
the driver alone gates and makes the one strict commit. Checked against `--executor local` on a copy of
the same lake (same keyed-hash secret, so the same buckets): rows, the report, the files' shape, the
quarantine and reconciliation per part; then the faults: a worker killed after staging, a stale parent,
a killed driver. Small data (2-3 parts), so the Ray time is mostly the cluster's start.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import delta_release as dr
from delta_release import _delta, faults, parts
from delta_release.contract.parts import ENV_MAX_GROUP, ENV_MAX_PART
from delta_release.distributed import ray_executor
from delta_release.gateway.catalog import SqliteCatalog
from tests.conftest import ROOT, jsonl, up
from tests.ingest.conftest import order_history
from tests.ingest.test_parts import _batches, _ledger
from tests.release.conftest import ingest_base, log_hashes, release_config
from tests.s3server import S3Server, s3server  # noqa: F401 - the fixture

pytestmark = pytest.mark.slow  # `make test` runs slow tests: CI runs these


@pytest.fixture(scope="module")
def cluster() -> Iterator[str]:
    """A local Ray cluster with 2 CPUs for this file; yields its address (for a second driver process)."""
    import ray

    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        yield ray.get_runtime_context().gcs_address
    finally:
        ray.shutdown()


def _rows(lake: dr.Lake) -> list[dict[str, Any]]:
    return sorted(lake.read().to_dicts(), key=lambda r: r["order_id"])


def _lakes(tmp_path: Path) -> tuple[dr.Lake, dr.Lake, Path]:
    """Two copies of one seeded lake (same secret, so the same buckets) and a file of ~3 parts."""
    base = dr.Lake.create(tmp_path / "base")
    base.ingest(jsonl([up(f"ord-{i:03d}", 0, 7, day=1 + i % 6) for i in range(1, 41, 2)]))  # parent files
    shutil.copytree(tmp_path / "base", tmp_path / "local")
    shutil.copytree(tmp_path / "base", tmp_path / "ray")
    path = tmp_path / "big.jsonl"
    path.write_bytes(jsonl(order_history(5, 300)) + b"not json\n")
    return dr.Lake.open(tmp_path / "local"), dr.Lake.open(tmp_path / "ray"), path


def _part_limit(monkeypatch: pytest.MonkeyPatch, path: Path, parts: int = 3) -> None:
    monkeypatch.setenv(ENV_MAX_PART, str(path.stat().st_size // parts + 1))


def _shape(report: dr.IngestReport) -> list[tuple[Any, ...]]:
    """The committed files as the evidence describes them, without their (candidate-named) paths."""
    return sorted((json.dumps(f["partition"]), f["bucket"], f["rows"], f["distinct_keys"], sorted(f))
                  for f in report.files)


def _quarantine(lake: dr.Lake, report: dr.IngestReport) -> list[list[tuple[Any, ...]]]:
    return [sorted((r["line"], r["reason"], r["offset"], r["length"]) for r in
                   lake.quarantine.rows(p["batch_id"]).to_dicts()) for p in report.parts]


def _referenced(lake: dr.Lake) -> set[str]:
    uri, options = lake.table_uri("orders"), lake.options
    latest = lake.latest_version("orders")
    assert latest is not None
    return {e.path for v in range(latest + 1) for e in _delta.file_entries(uri, options, v)}


def _on_disk(lake: dr.Lake) -> set[str]:
    root = Path(lake.table_uri("orders"))
    return {str(p.relative_to(root)) for p in root.rglob("*.parquet") if "_delta_log" not in p.parts}


def test_ray_equals_local(cluster: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    local, ray_lake, path = _lakes(tmp_path)
    _part_limit(monkeypatch, path)
    before = ray_lake.latest_version("orders")
    want = local.ingest(path)
    got = ray_lake.ingest(path, executor="ray")
    assert 2 <= len(got.parts) <= 4 and got.quarantined > 0  # the bad line, position conflicts
    assert _rows(ray_lake) == _rows(local)
    mine, theirs = got.to_json(), want.to_json()
    for key in ("files", "removed"):
        mine.pop(key), theirs.pop(key)
    assert mine == theirs  # counts, reasons, parts (ids, lines, offsets, per-part counts), version, attempts
    assert _shape(got) == _shape(want) and len(got.removed) == len(want.removed)
    for part in got.parts:  # reconciliation per part, and in total
        assert part["accepted"] + part["quarantined"] == part["extracted"]
    assert got.accepted + got.quarantined == got.extracted
    assert _quarantine(ray_lake, got) == _quarantine(local, want)  # the same ledger rows, spans included
    # ONE deferred commit recording every part, published once
    assert before is not None and got.version == before + 1 == ray_lake.published("orders").version
    evidence = _delta.version_evidence(ray_lake.table_uri("orders"), ray_lake.options, got.version)
    assert evidence is not None and evidence["publication"] == "deferred"
    assert evidence["batch_ids"] == [p["batch_id"] for p in got.parts]
    local_evidence = _delta.version_evidence(local.table_uri("orders"), local.options, want.version)
    assert local_evidence is not None and evidence["key_filter"] == local_evidence["key_filter"]  # a rebase
    assert evidence["key_filter"]["keys"] > 0  # over either reads no data file: the reducers' keys
    assert _on_disk(ray_lake) == _referenced(ray_lake)  # no stray file
    again = ray_lake.ingest(path, executor="ray")  # every part applied: nothing to do
    assert again.version is None and again.duplicate


def test_a_file_over_buckets_x_the_group_limit_is_several_folds_on_ray_published_once(
        cluster: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A Ray reduce task stages whole buckets, so past buckets x the group limit the file is folded in several
    folds (`parts.folds_of`), each its own deferred commit recording its parts, published once after the
    last; the table equals the local ingest's (ONE commit of sub-groups). A position a later fold reuses
    with other content is judged as between batches (against the order's current row), not by the
    file-wide check: the counts may differ from the local ingest's, each part still reconciled."""
    local, ray_lake, path = _lakes(tmp_path)
    _part_limit(monkeypatch, path, parts=6)
    monkeypatch.setenv(ENV_MAX_GROUP, str(2 * path.stat().st_size // (6 * 8) + 1))  # a fold: ~2 parts
    before = ray_lake.latest_version("orders")
    want = local.ingest(path)
    got = ray_lake.ingest(path, executor="ray")
    assert _rows(ray_lake) == _rows(local)
    assert got.extracted == want.extracted and got.accepted + got.quarantined == got.extracted
    assert all(p["accepted"] + p["quarantined"] == p["extracted"] for p in got.parts)
    assert {p["version"] for p in want.parts} == {want.version}  # local: one commit
    commits = sorted({p["version"] for p in got.parts})
    assert before is not None and len(commits) >= 2 and commits == list(range(before + 1, before + 1 + len(commits)))
    assert got.version == commits[-1] == ray_lake.published("orders").version
    for v in commits:  # each fold's commit records exactly its parts
        evidence = _delta.version_evidence(ray_lake.table_uri("orders"), ray_lake.options, v)
        assert evidence is not None and evidence["publication"] == "deferred"
        assert evidence["batch_ids"] == [p["batch_id"] for p in got.parts if p["version"] == v]
    for a, b in zip(got.parts, got.parts[1:], strict=False):  # first_line: the part's line in the whole file
        assert b["first_line"] == a["first_line"] + a["extracted"]


def test_an_erased_subjects_events_go_to_the_driver_only(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The map task (run here, no cluster) leaves an erased subject's events out of every group's frame
    bound for the object store and the reduce tasks; they come back in its summary (the driver's), with
    each event's batch number in the frames for the fold."""
    _, ray_lake, path = _lakes(tmp_path)
    ray_lake.erase("ord-011")
    source = parts.file_sources(path, [(0, path.stat().st_size)], batch=3)[0]
    summary, _spans, *frames = ray_executor._map_task(ray_lake._reopener(), "orders", source, 2)
    events = [f for f in frames[:2] if f is not None]
    assert events and all(set(f.column("order_id").to_pylist()) and "ord-011" not in f.column("order_id").to_pylist()
                          for f in events)
    assert all(set(f.column(parts.SEQ_COLUMN).to_pylist()) == {3} for f in [*events, *frames[2:]] if f is not None)
    held = [f for f in summary.held.values()]
    assert held and all(set(f["order_id"].to_list()) == {"ord-011"} for f in held)
    assert sum(f.num_rows for f in events) + sum(f.height for f in held) == summary.accepted


def test_ray_equals_local_with_an_erased_subject(cluster: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """An erased subject's events in the file: quarantined as erased in their parts on Ray as locally (the
    driver screens them), and nothing of the subject in the table or the staged files."""
    local, ray_lake, path = _lakes(tmp_path)
    _part_limit(monkeypatch, path)
    local.erase("ord-011")
    ray_lake.erase("ord-011")
    want = local.ingest(path)
    got = ray_lake.ingest(path, executor="ray")
    assert got.reasons.get("erased_subject", 0) > 0
    mine, theirs = got.to_json(), want.to_json()
    for key in ("files", "removed"):
        mine.pop(key), theirs.pop(key)
    assert mine == theirs
    assert _rows(ray_lake) == _rows(local) and "ord-011" not in {r["order_id"] for r in _rows(ray_lake)}
    assert _quarantine(ray_lake, got) == _quarantine(local, want)


def test_a_worker_killed_after_staging_is_retried_and_its_files_are_orphans(
        cluster: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    local, ray_lake, path = _lakes(tmp_path)
    _part_limit(monkeypatch, path)
    local.ingest(path)
    marker = tmp_path / "killed-once"
    monkeypatch.setenv(faults.EXIT_ONCE_ENV, f"distributed.after_stage:{marker}")
    report = ray_lake.ingest(path, executor="ray")
    assert marker.exists()  # one reduce task's first attempt died after staging its files
    assert _rows(ray_lake) == _rows(local) and report.attempts == 1
    orphans = _on_disk(ray_lake) - _referenced(ray_lake)
    assert orphans and not orphans & {f["path"] for f in report.files}  # the dead attempt's files: in no commit
    swept = ray_lake.vacuum(apply=True, orphan_grace_hours=0)
    assert {r["path"] for r in swept.removed if r["reason"] == "orphan"} == orphans
    assert _on_disk(ray_lake) == _referenced(ray_lake) - {r["path"] for r in swept.removed}
    assert _rows(ray_lake) == _rows(local)


def test_a_stale_parent_reruns_only_the_reduce(cluster: str, tmp_path: Path,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """Another writer commits (keys the file also holds) between the workers' staging and the driver's
    commit: the staged files are discarded, the reduce tasks run again on the new parent (the map outputs
    are reused), and the table is the fold of both."""
    local, ray_lake, path = _lakes(tmp_path)
    _part_limit(monkeypatch, path)
    other = jsonl([up("ord-001", 10_000, 1, day=2), up("ord-new", 1, 5, day=3)])
    local.ingest(other)
    local.ingest(path)
    original = ray_executor._RayPartsPlan.before_commit
    plans: list[ray_executor._RayPartsPlan] = []
    stale: list[list[str]] = []

    def interleaved(self: ray_executor._RayPartsPlan, ctx: Any, staged: Any) -> None:
        plans.append(self)
        if self.reduce_runs == 1:
            stale.append(sorted(f.path for f in staged.staged_files))
            dr.Lake.open(tmp_path / "ray").ingest(other)  # another writer's commit on our parent
        original(self, ctx, staged)

    monkeypatch.setattr(ray_executor._RayPartsPlan, "before_commit", interleaved)
    report = ray_lake.ingest(path, executor="ray")
    assert report.attempts == 2 and [s["rebased"] for s in report.stale_parents] == [False]
    # the reduce stage ran twice on the one map stage (maps are submitted once, before the writer's attempts)
    assert len(set(map(id, plans))) == 1 and plans[0].reduce_runs == 2
    assert stale and not set(stale[0]) & _on_disk(ray_lake)  # the first attempt's files were discarded
    assert _rows(ray_lake) == _rows(local)
    assert _on_disk(ray_lake) == _referenced(ray_lake)


def test_a_killed_driver_leaves_nothing_visible_and_a_rerun_completes(cluster: str, tmp_path: Path,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """The driver (the CLI, joined to the cluster by RAY_ADDRESS) is SIGKILLed after the gate, before the
    commit: no version, nothing published; the rerun commits the file."""
    local, ray_lake, path = _lakes(tmp_path)
    _part_limit(monkeypatch, path)
    local.ingest(path)
    latest, published, seen = ray_lake.latest_version("orders"), ray_lake.published("orders"), _rows(ray_lake)
    env = {**os.environ, "PYTHONPATH": str(ROOT), "RAY_ADDRESS": cluster, faults.CRASH_ENV: "ingest.after_gate"}
    killed = subprocess.run([sys.executable, "-m", "delta_release", "--lake", str(tmp_path / "ray"), "--json",
                             "ingest", "--executor", "ray", str(path)], capture_output=True, text=True, env=env,
                            cwd=ROOT, timeout=300)
    assert killed.returncode == -signal.SIGKILL, killed.stderr[-2000:]
    ray_lake = dr.Lake.open(tmp_path / "ray")
    assert ray_lake.latest_version("orders") == latest and ray_lake.published("orders") == published
    assert _rows(ray_lake) == seen
    assert _on_disk(ray_lake) - _referenced(ray_lake)  # the workers' staged files: orphans, never visible
    report = ray_lake.ingest(path, executor="ray")
    assert report.version == (latest or 0) + 1 and not report.duplicate
    assert _rows(ray_lake) == _rows(local)


def _rolled_back(tmp_path: Path) -> tuple[dr.Lake, dr.Lake]:
    """Two copies of one lake (same secret) whose five batches were applied, a subject erased, then rolled
    back to the first batch's version: `replay --all` has four batches' rows to bring back, one erased."""
    base = dr.Lake.create(tmp_path / "base")
    for batch in _batches(31):
        base.ingest(batch)
    base.erase("ord-007")
    base.rollback(1, repair_forward=True)
    shutil.copytree(tmp_path / "base", tmp_path / "local")
    shutil.copytree(tmp_path / "base", tmp_path / "ray")
    return dr.Lake.open(tmp_path / "local"), dr.Lake.open(tmp_path / "ray")


def _same_replay(local: dr.Lake, want: list[dr.IngestReport], lake: dr.Lake, got: list[dr.IngestReport]) -> None:
    """The replay on Ray made what the local one made: reports, rows, one commit with every batch id, the
    quarantine ledgers, and no erased subject back."""
    mine, theirs = [r.to_json() for r in got], [r.to_json() for r in want]
    assert [_shape(r) for r in got] == [_shape(r) for r in want]
    for m, t in zip(mine, theirs, strict=True):
        for key in ("files", "removed"):
            m.pop(key), t.pop(key)
    assert mine == theirs and len(got) == 5  # per batch: counts, reasons, version, duplicate, attempts
    assert _rows(lake) == _rows(local) and "ord-007" not in {r["order_id"] for r in _rows(lake)}
    assert sum(r.reasons.get("erased_subject", 0) for r in got) > 0
    version = lake.latest_version("orders")
    assert version is not None and all(r.version == version for r in got)
    assert lake.published("orders").version == version
    evidence = _delta.version_evidence(lake.table_uri("orders"), lake.options, version)
    assert evidence is not None and evidence["operation"] == "replay"
    assert evidence["batch_ids"] == [r.batch_id for r in got]  # ONE commit recording every batch
    for r in got:
        assert r.accepted + r.quarantined == r.extracted
        assert _ledger(lake, r.batch_id) == _ledger(local, r.batch_id)


def _counting_reduce_runs(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The reduce stages run on Ray (one per attempt): appended to, one 1 a stage."""
    runs: list[int] = []
    original = ray_executor._RayPartsPlan.build

    def counted(self: ray_executor._RayPartsPlan, ctx: Any, parent: int) -> Any:
        change = original(self, ctx, parent)
        runs.extend([1] * (self.reduce_runs - len(runs)))
        return change

    monkeypatch.setattr(ray_executor._RayPartsPlan, "build", counted)
    return runs


def test_replay_all_on_ray_equals_local(cluster: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`replay --all` with the ray executor: workers read the retained raw batches from the lake's raw store
    (a source names its sha256, not a loader holding the lake), fold and stage; the driver commits once."""
    local, ray_lake = _rolled_back(tmp_path)
    before = ray_lake.latest_version("orders")
    want = local.replay(all_batches=True)
    runs = _counting_reduce_runs(monkeypatch)
    got = ray_lake.replay(all_batches=True, executor="ray")
    assert runs == [1]  # folded by Ray's reduce tasks, not in this process
    assert before is not None and ray_lake.latest_version("orders") == before + 1
    _same_replay(local, want, ray_lake, got)
    assert _on_disk(ray_lake) == _referenced(ray_lake)  # no stray file
    again = ray_lake.replay(all_batches=True, executor="ray")  # nothing tombstoned comes back
    assert all(r.version is None for r in again) and _rows(ray_lake) == _rows(local)


def test_replay_all_on_ray_from_the_cli(cluster: str, tmp_path: Path) -> None:
    """`delta-release replay --all --executor ray`, a driver process joined to the cluster: one commit."""
    local, _ = _rolled_back(tmp_path)
    want = local.replay(all_batches=True)
    env = {**os.environ, "PYTHONPATH": str(ROOT), "RAY_ADDRESS": cluster}
    proc = subprocess.run([sys.executable, "-m", "delta_release", "--lake", str(tmp_path / "ray"), "--json",
                           "replay", "--all", "--executor", "ray"], capture_output=True, text=True, env=env,
                          cwd=ROOT, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    batches = json.loads(proc.stdout)["batches"]
    assert [(b["batch_id"], b["accepted"], b["quarantined"], b["version"]) for b in batches] == [
        (r.batch_id, r.accepted, r.quarantined, r.version) for r in want]
    assert _rows(dr.Lake.open(tmp_path / "ray")) == _rows(local)


def test_without_ray_the_executor_names_the_extra(tmp_path: Path) -> None:
    path = tmp_path / "b.jsonl"
    path.write_bytes(jsonl([up("a", 1)]))
    code = ("import sys; sys.modules['ray'] = None\n"  # as if Ray were not installed
            "from delta_release.cli.main import main\n"
            f"sys.argv = ['delta-release', '--lake', {str(tmp_path / 'lake')!r}, 'ingest', '--create',"
            f" '--executor', 'ray', {str(path)!r}]\nmain()\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT,
                          env={**os.environ, "PYTHONPATH": str(ROOT)}, timeout=120)
    assert proc.returncode == 2, proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1 and "pip install 'delta-release[distributed]'" in proc.stderr
    assert not (tmp_path / "lake").exists()  # refused before the lake is created
    with pytest.raises(dr.InputError, match=r"unknown executor 'spark' \(local or ray\)"):
        dr.Lake.check_executor("spark")


def test_a_local_lake_with_nodes_on_other_machines_is_refused(cluster: str, tmp_path: Path,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    import ray

    lake = dr.Lake.create(tmp_path / "lake")
    real = ray.nodes
    monkeypatch.setattr(ray, "nodes", lambda: [*real(), {"NodeManagerAddress": "192.0.2.7", "Alive": True}])
    with pytest.raises(dr.InputError, match=r"on local disk .* nodes on other machines \(192\.0\.2\.7\): put the "
                       r"lake on s3://"):
        ray_executor.connect(lake)


@pytest.mark.integration
def test_ray_on_an_s3_lake_equals_local(cluster: str, s3server: S3Server, tmp_path: Path,  # noqa: F811
                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """Workers stage into the object store (the lake's storage options travel with each task; the driver's
    catalog, a local SQLite file here, is never opened by a worker)."""
    path = tmp_path / "big.jsonl"
    path.write_bytes(jsonl(order_history(6, 200)))
    _part_limit(monkeypatch, path, 2)
    local = dr.Lake.create(tmp_path / "local")
    want = local.ingest(path)
    lake = dr.Lake.create(f"s3://{s3server.new_bucket()}/lake", storage_options=s3server.options,
                          catalog=SqliteCatalog(tmp_path / "catalog.sqlite"))
    got = lake.ingest(path, executor="ray")
    assert len(got.parts) >= 2 and got.version == lake.published("orders").version == 1
    assert (got.extracted, got.accepted, got.quarantined, got.reasons) == (
        want.extracted, want.accepted, want.quarantined, want.reasons)
    assert _rows(lake) == _rows(local)
    assert all(lake.raw.read(p["batch_id"]) for p in got.parts)  # each part's raw copy, kept by its map task


@pytest.mark.integration
def test_replay_all_on_ray_on_an_s3_lake_equals_local(cluster: str, s3server: S3Server, tmp_path: Path,  # noqa: F811
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """On an object-store lake the workers copy each raw batch from the raw store to their scratch; the
    driver reads a rejected line's text from the raw store (it has no local file): the same ledgers."""
    local = dr.Lake.create(tmp_path / "local")
    lake = dr.Lake.create(f"s3://{s3server.new_bucket()}/lake", storage_options=s3server.options,
                          catalog=SqliteCatalog(tmp_path / "catalog.sqlite"))
    for lk in (local, lake):
        for batch in _batches(32):
            lk.ingest(batch)
        lk.erase("ord-007")
        lk.rollback(1, repair_forward=True)
    want = local.replay(all_batches=True)
    runs = _counting_reduce_runs(monkeypatch)
    got = lake.replay(all_batches=True, executor="ray")
    assert runs == [1] and sum(r.reasons.get("position_conflict", 0) for r in got) > 0  # lines the reduce rejected
    for mine, theirs in zip(got, want, strict=True):
        assert (mine.batch_id, mine.accepted, mine.quarantined, mine.reasons) == (
            theirs.batch_id, theirs.accepted, theirs.quarantined, theirs.reasons)
        assert _ledger(lake, mine.batch_id) == _ledger(local, mine.batch_id)
    assert _rows(lake) == _rows(local)


def _run_lakes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, Path, list[Path]]:
    """Two copies of one lake (same secret) with the release fixtures' base rows, and a run's two batch
    files, the first cut into ~3 parts."""

    ingest_base(dr.Lake.create(tmp_path / "base"))
    for name in ("local", "ray"):
        shutil.copytree(tmp_path / "base", tmp_path / name)
    big, small = tmp_path / "big.jsonl", tmp_path / "small.jsonl"
    big.write_bytes(jsonl(order_history(7, 200)) + b"not json\n")
    small.write_bytes(jsonl([up("ord-base-1", 9003, amount=999, day=47), up("ord-new", 1, 5, day=3)]))
    _part_limit(monkeypatch, big)
    return tmp_path / "local", tmp_path / "ray", [big, small]


def test_a_release_run_on_ray_ships_what_the_local_run_ships(cluster: str, tmp_path: Path,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    """`run --executor ray`: the run's files folded and staged by Ray's tasks (no commit), checked, then
    shipped by the run's own commit: the same table, counts and commit as the local run."""

    from delta_release.release.run import run_release

    local_root, ray_root, batches = _run_lakes(tmp_path, monkeypatch)
    config = str(release_config(tmp_path, batches, broken_v3=False))
    want = run_release(config, lake=str(local_root))
    runs = _counting_reduce_runs(monkeypatch)
    got = run_release(config, lake=str(ray_root), executor="ray")
    assert runs == [1] and got["decision"] == want["decision"] == "ship", got["failed_checks"]
    local, lake = dr.Lake.open(local_root), dr.Lake.open(ray_root)
    assert _rows(lake) == _rows(local)
    counts = [json.loads(Path(out["packet"]).read_text())["counts"]["batches"] for out in (got, want)]
    assert counts[0] == counts[1] and len(counts[0]) >= 3  # per batch: ids, counts, reasons
    version = lake.latest_version("orders")
    assert version == local.latest_version("orders") and lake.published("orders").version == version
    evidence = [_delta.version_evidence(lk.table_uri("orders"), lk.options, version) for lk in (lake, local)]
    assert evidence[0] is not None and evidence[1] is not None
    for key in ("operation", "batch_ids", "changed_keys"):
        assert evidence[0][key] == evidence[1][key]
    assert evidence[0]["operation"] == "release"
    assert _on_disk(lake) == _referenced(lake)  # no stray file


def test_a_held_run_on_ray_leaves_no_trace(cluster: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A HOLD of a run staged on Ray: the files the reduce tasks staged are deleted, no Delta log changes."""

    from delta_release.release.run import run_release

    _, ray_root, batches = _run_lakes(tmp_path, monkeypatch)
    before_logs, files_before = log_hashes(ray_root), _on_disk(dr.Lake.open(ray_root))
    runs = _counting_reduce_runs(monkeypatch)
    held = run_release(str(release_config(tmp_path, batches, broken_v3=True)), lake=str(ray_root), executor="ray")
    assert runs == [1] and held["decision"] == "hold" and held["failed_checks"] == ["schema_fixture_v3"]
    assert log_hashes(ray_root) == before_logs
    assert _on_disk(dr.Lake.open(ray_root)) == files_before  # the reducers' staged files: deleted
