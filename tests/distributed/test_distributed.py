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
from delta_release import _delta, faults
from delta_release.contract.parts import ENV_MAX_PART
from delta_release.distributed import ray_executor
from delta_release.gateway.catalog import SqliteCatalog
from tests.conftest import ROOT, jsonl, up
from tests.ingest.conftest import order_history
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
    assert _on_disk(ray_lake) == _referenced(ray_lake)  # no stray file
    again = ray_lake.ingest(path, executor="ray")  # every part applied: nothing to do
    assert again.version is None and again.duplicate


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
