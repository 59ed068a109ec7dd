"""The raw copy of a batch runs on a thread while the plan is computed (raw/background.py): a slow copy is
still finished before the first file of the candidate is staged, and a copy that fails ends the ingest
with its own error, before anything is staged or committed. (A batch under THREAD_MIN_BYTES is copied
before the plan, as the crash tests see it; here every batch takes the thread.)"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

import delta_release as dr
import delta_release.commit.writer as writer
import delta_release.maintenance.upkeep as upkeep
from delta_release.errors import InputError
from delta_release.raw import background
from delta_release.raw.store import RawStore
from tests.conftest import jsonl, up


def _batch(path: Path, first: int) -> Path:
    path.write_bytes(jsonl([up(f"o{i}", first + i, amount=i, day=47 + i % 3) for i in range(600)]))
    return path


def test_a_slow_raw_copy_is_kept_before_anything_is_staged(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(background, "THREAD_MIN_BYTES", 0)  # copy every batch on the thread
    lake = dr.Lake.create(tmp_path / "lake")
    real_put, real_stage = RawStore.put_file, writer.stage_partitions
    seen: list[int] = []

    def slow_put(self: RawStore, *a, **kw):  # type: ignore[no-untyped-def]
        time.sleep(0.3)
        return real_put(self, *a, **kw)

    def stage(*a, **kw):  # type: ignore[no-untyped-def]
        seen.append(len(lake.raw.list()))
        return real_stage(*a, **kw)

    monkeypatch.setattr(RawStore, "put_file", slow_put)
    monkeypatch.setattr(writer, "stage_partitions", stage)
    report = lake.ingest(_batch(tmp_path / "b1.jsonl", 1))
    assert report.version is not None and seen == [1]
    assert lake.raw.read(report.batch_id) == (tmp_path / "b1.jsonl").read_bytes()


def test_a_failing_raw_copy_ends_the_ingest_before_staging(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(background, "THREAD_MIN_BYTES", 0)
    lake = dr.Lake.create(tmp_path / "lake")
    first = lake.ingest(_batch(tmp_path / "b1.jsonl", 1))
    files = sorted((tmp_path / "lake" / "orders").rglob("*.parquet"))
    staged: list[int] = []

    def broken(self: RawStore, path, **kw):  # type: ignore[no-untyped-def]
        time.sleep(0.2)  # fails after the plan has started
        raise InputError(f"batch file changed while it was being ingested: {path}", path=str(path))

    monkeypatch.setattr(RawStore, "put_file", broken)
    monkeypatch.setattr(writer, "stage_partitions", lambda *a, **kw: staged.append(1))
    with pytest.raises(InputError, match="changed while it was being ingested"):
        lake.ingest(_batch(tmp_path / "b2.jsonl", 1000))
    assert staged == []
    assert sorted((tmp_path / "lake" / "orders").rglob("*.parquet")) == files
    assert dr.Lake.open(tmp_path / "lake").read().height == 600 and first.version is not None
    assert [b.batch_id for b in lake.raw.list()] == [first.batch_id]


def test_a_small_batch_is_copied_before_the_plan(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    lake = dr.Lake.create(tmp_path / "lake")
    real_put = RawStore.put_file
    order: list[str] = []
    monkeypatch.setattr(RawStore, "put_file", lambda self, *a, **kw: order.append("raw") or real_put(self, *a, **kw))
    monkeypatch.setattr(upkeep, "before_work", lambda ctx, **kw: order.append("plan") or upkeep.Upkeep())
    lake.ingest(_batch(tmp_path / "b1.jsonl", 1))
    assert order == ["raw", "plan"]


@pytest.mark.parametrize("reuse", [False, True])
def test_the_raw_copy_copies_and_hashes_every_block_and_a_short_file_shows_in_the_digest(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, reuse: bool) -> None:
    """`_copy` block by block (one reused buffer for a local file, fresh blocks for an object store's
    stream): the copy and its sha256 are those of the bytes; a file shorter than the length it was given
    (changed since it was hashed) copies what is there, so its digest differs and the ingest refuses it."""
    import hashlib
    import io
    import os

    from delta_release.raw import store

    monkeypatch.setattr(store, "COPY_BLOCK", 7)
    data = os.urandom(100)
    src = tmp_path / "src"
    src.write_bytes(data)
    with open(src, "rb") as f:
        f.seek(3)
        out = io.BytesIO()
        assert store._copy(f, out, 90, reuse=reuse) == hashlib.sha256(data[3:93]).hexdigest()
    assert out.getvalue() == data[3:93]
    with open(src, "rb") as f:
        out = io.BytesIO()
        digest = store._copy(f, out, 150, reuse=reuse)
    assert out.getvalue() == data and digest == hashlib.sha256(data).hexdigest()


def _temp_files(root: Path) -> list[Path]:
    return [p for p in (root / "_tmp").rglob("*") if p.is_file()] if (root / "_tmp").exists() else []


def test_a_batch_is_stored_from_the_copy_made_while_it_was_read(tmp_path: Path,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    """The raw store keeps the copy written as the batch was read and hashed (`RawTee`) instead of reading,
    hashing and writing the file again: a whole file and a file in parts are stored byte-identical with
    no second copy and no temp file left; the same file again (duplicates) leaves no temp file either."""
    from delta_release.contract.parts import ENV_MAX_PART, part_ranges
    from delta_release.raw import store

    copies: list[int] = []
    real_copy = store._link_copy

    def counted(*a, **kw):  # type: ignore[no-untyped-def]
        copies.append(1)
        return real_copy(*a, **kw)

    monkeypatch.setattr(store, "_link_copy", counted)
    root = tmp_path / "lake"
    lake = dr.Lake.create(root)
    whole = _batch(tmp_path / "b1.jsonl", 1)
    report = lake.ingest(whole)
    assert lake.raw.read(report.batch_id) == whole.read_bytes() and copies == []
    monkeypatch.setenv(ENV_MAX_PART, "4096")
    big = _batch(tmp_path / "b2.jsonl", 5000)
    parted = lake.ingest(big)
    data = big.read_bytes()
    assert len(parted.parts) > 3 and copies == []
    for part, (offset, size) in zip(parted.parts, part_ranges(big, 4096), strict=True):
        assert lake.raw.read(part["batch_id"]) == data[offset:offset + size]
    assert lake.ingest(big).duplicate
    monkeypatch.delenv(ENV_MAX_PART)
    assert lake.ingest(whole).duplicate
    assert copies == [] and _temp_files(root) == []


def test_a_copy_that_fails_while_read_leaves_the_store_to_copy_the_file(tmp_path: Path,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """A write of the read-time copy that fails (a full disk) does not fail the read: the store copies the
    file as before (checking its hash), and the broken copy's temp file is removed; a read that fails
    removes its copy at once."""
    import errno

    from delta_release.contract.source import read_batch_file
    from delta_release.raw import store

    class Full:
        def __init__(self, handle):  # type: ignore[no-untyped-def]
            self.handle, self.writes = handle, 0

        def write(self, block):  # type: ignore[no-untyped-def]
            self.writes += 1
            raise OSError(errno.ENOSPC, "No space left on device")

        def __getattr__(self, name):  # type: ignore[no-untyped-def]
            return getattr(self.handle, name)

    tees: list[store.RawTee] = []
    real_tee = RawStore.tee

    def failing(self: RawStore) -> store.RawTee | None:
        tee = real_tee(self)
        assert tee is not None
        tee._handle = Full(tee._handle)
        tees.append(tee)
        return tee

    monkeypatch.setattr(RawStore, "tee", failing)
    root = tmp_path / "lake"
    lake = dr.Lake.create(root)
    path = _batch(tmp_path / "b1.jsonl", 1)
    report = lake.ingest(path)
    assert lake.raw.read(report.batch_id) == path.read_bytes()
    assert len(tees) == 1 and tees[0]._handle.writes == 1 and not Path(tees[0].path).exists()
    assert _temp_files(root) == []
    tee = real_tee(lake.raw)
    assert tee is not None and Path(tee.path).exists()
    with pytest.raises(InputError, match="not found"):
        read_batch_file(tmp_path / "missing.jsonl", tee=tee)
    assert not Path(tee.path).exists()
