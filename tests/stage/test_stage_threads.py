"""Staging writes a group's files on threads: the files come back in name order with their evidence,
the candidate's first file is staged alone (the crash point after it sees one file), and a failure in
any file removes every file the candidate wrote before the error propagates."""

from __future__ import annotations

from pathlib import Path

import polars as pl
import pytest

import delta_release.stage.candidate as cand_mod
from delta_release.erasure.ledger import ErasureLedger
from delta_release.stage.gate import gate_candidate
from delta_release.storage import Storage
from delta_release.tables import DEFAULT_TABLE, load_table_defs

BUCKETS = 8


def _groups() -> list[tuple[int, pl.DataFrame]]:
    return [(day, pl.DataFrame({"order_id": [f"o{day}-{i}" for i in range(400)], "position": list(range(400)),
                                "amount_cents": [7] * 400, "currency": ["INR"] * 400, "deleted": [False] * 400,
                                "event_day": [day] * 400}, schema_overrides={"event_day": pl.Int32}))
            for day in (1, 2)]


def _stage(root: Path) -> tuple[Storage, cand_mod.Candidate]:
    tdef = load_table_defs()[DEFAULT_TABLE]
    storage = Storage(str(root))
    ledger = ErasureLedger(storage, b"k")
    candidate = cand_mod.stage_partitions(storage, table="orders", parent=0, batch_ids=["b"],
                                          partition_column="event_day", key="order_id",
                                          file_schema=tdef.file_schema(), partitions=_groups(), removes=[],
                                          now_ms=0, buckets=BUCKETS, hasher=ledger.subject_key)
    return storage, candidate


def _parquet(root: Path) -> list[Path]:
    return sorted(root.rglob("*.parquet"))


def test_threaded_staging_gives_ordered_gated_files(tmp_path: Path) -> None:
    storage, candidate = _stage(tmp_path)
    names = [f.path for f in candidate.files]
    assert [int(n.rsplit("-", 1)[1].split(".")[0]) for n in names] == list(range(len(names)))
    assert len(names) == 2 * BUCKETS and sum(f.rows for f in candidate.files) == 800
    assert len(_parquet(tmp_path)) == len(names)
    gate_candidate(storage, candidate)  # every file matches its evidence


def test_first_file_alone_then_a_failure_removes_every_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    real = cand_mod.stage_file
    calls: list[int] = []
    on_disk_at_first_crash_point: list[int] = []

    def flaky(storage: Storage, **kw):  # type: ignore[no-untyped-def]
        calls.append(1)
        if len(calls) == 6:
            raise OSError("disk full")
        return real(storage, **kw)

    monkeypatch.setattr(cand_mod, "stage_file", flaky)
    monkeypatch.setattr(cand_mod, "crash_point", lambda name: on_disk_at_first_crash_point.append(
        len(_parquet(tmp_path))) if name == "stage.after_first_file" else None)
    with pytest.raises(OSError, match="disk full"):
        _stage(tmp_path)
    assert on_disk_at_first_crash_point == [1]
    assert _parquet(tmp_path) == []


def test_the_gate_checks_on_threads_and_names_the_first_bad_file_in_order(tmp_path: Path,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    import threading
    import time

    import delta_release.stage.gate as gate_mod
    from delta_release.errors import GateError

    storage, candidate = _stage(tmp_path)
    for ev in (candidate.files[9], candidate.files[3]):  # two files changed after staging: the 4th names the error
        (tmp_path / ev.path).write_bytes(b"x" * ev.size)
    threads: set[str] = set()
    checked: list[str] = []
    real = gate_mod.check_file

    overlap = threading.Event()  # set in the threaded phase: a check waits (bounded) for a second thread

    def watched(storage: Storage, ev: cand_mod.FileEvidence) -> tuple[str, str] | None:
        threads.add(threading.current_thread().name)
        checked.append(ev.path)
        if overlap.is_set():  # else, on a loaded host, the first thread may drain the queue alone
            for _ in range(200):
                if len(threads) > 1:
                    break
                time.sleep(0.01)
        return real(storage, ev)

    monkeypatch.setattr(gate_mod, "check_file", watched)
    with pytest.raises(GateError):  # local disk: one at a time, on the caller's thread, up to the first bad file
        gate_candidate(storage, candidate)
    assert threads == {threading.current_thread().name}
    assert checked == [ev.path for ev in candidate.files[:4]]
    threads.clear()
    monkeypatch.setattr(gate_mod, "GATE_THREADS_LOCAL", 4)  # as on an object store: on threads
    overlap.set()
    with pytest.raises(GateError) as err:
        gate_candidate(storage, candidate)
    assert err.value.path == candidate.files[3].path and err.value.mismatch == "checksum_mismatch"
    assert len(threads) > 1 and all(t.startswith("gate") for t in threads)
    threads.clear()  # files as large as the byte budget: one at a time, on the caller's thread
    overlap.clear()
    monkeypatch.setattr(gate_mod, "GATE_BYTES", max(ev.size for ev in candidate.files))
    with pytest.raises(GateError):
        gate_candidate(storage, candidate)
    assert threads == {threading.current_thread().name}
