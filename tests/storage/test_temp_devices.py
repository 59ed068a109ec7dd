"""Temp files of a write below a folder on another filesystem (issue 14 follow-up): the rename or link
from the root's `_tmp` fails with EXDEV, so the write goes again through a `_tmp` on the final name's
own filesystem (storage.py, `cross_device`); the sweeps find the temp files left there.

Which ran: the EXDEV tests with a patched `os.link`/`os.replace` always run; the /dev/shm tests run when
/dev/shm is a directory on another device than the test's temp folder (a real second filesystem, linked
into the lake); the tmpfs mount test runs only where `mount -t tmpfs` works (root with CAP_SYS_ADMIN)."""

from __future__ import annotations

import errno
import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

import delta_release as dr
from delta_release import storage as storage_mod
from delta_release.quarantine import temp_sweep
from delta_release.storage import TEMP_DIR, Storage
from tests.conftest import jsonl, up
from tests.storage.conftest import ingest_killed_at, plant_temp, temp_files


@pytest.fixture(autouse=True)
def _fresh_learning(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(storage_mod, "_OTHER_FS", {}, raising=False)  # what a process learned from EXDEV: per test


@pytest.fixture
def shm(tmp_path: Path) -> Iterator[Path]:
    """A folder on a real second filesystem (/dev/shm), or skip."""
    if not os.path.isdir("/dev/shm") or os.stat("/dev/shm").st_dev == os.stat(tmp_path).st_dev:
        pytest.skip("/dev/shm is absent or on the same device as the test folder")
    folder = Path(tempfile.mkdtemp(dir="/dev/shm", prefix="dr-test-"))
    try:
        yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def _exdev_into(monkeypatch: pytest.MonkeyPatch, folder: Path, moves: list[tuple[str, str]]) -> None:
    """os.link/os.replace fail with EXDEV from outside `folder` into it, as across two filesystems."""
    inside = str(folder) + "/"
    for name in ("link", "replace"):
        real = getattr(os, name)

        def move(src: str, dst: str, _real: object = real) -> None:
            moves.append((str(src), str(dst)))
            if str(dst).startswith(inside) and not str(src).startswith(inside):
                raise OSError(errno.EXDEV, os.strerror(errno.EXDEV), src, None, dst)
            _real(src, dst)  # type: ignore[operator]

        monkeypatch.setattr(storage_mod.os, name, move)


def test_exdev_falls_back_to_a_temp_folder_on_the_final_names_filesystem(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root = tmp_path / "lake"
    lake = Storage(str(root))
    index = lake.child("_index/orders")  # shares the lake's `_tmp`: `_index` is a plain folder (a mount point)
    moves: list[tuple[str, str]] = []
    _exdev_into(monkeypatch, root / "_index", moves)
    index.write_bytes("keys/a", b"1")  # EXDEV once, then again through `_index/_tmp`
    assert index.write_once("keys/b", b"2")
    assert not index.write_once("keys/b", b"other")  # create-only: a link never replaces
    tag = index.read_tagged("keys/b")
    assert tag is not None and index.replace_if("keys/b", b"3", tag[1])
    lake.write_bytes("_upkeep/c", b"4")  # the rest of the lake still goes through the lake's `_tmp`
    folders = [src.rsplit("/", 1)[0].removeprefix(str(root)) for src, _ in moves]
    assert folders == ["/_tmp", "/_index/_tmp", "/_index/_tmp", "/_index/_tmp", "/_index/_tmp", "/_tmp"]
    assert (root / "_index/orders/keys/a").read_bytes() == b"1" and (root / "_index/orders/keys/b").read_bytes() == b"3"
    assert temp_files(root) == [] and (root / "_index" / TEMP_DIR).is_dir()


def test_an_exdev_that_persists_fails_once_retried_and_leaves_no_temp_file(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root = tmp_path / "lake"
    lake = Storage(str(root))
    tries: list[str] = []

    def refuse(src: str, dst: str) -> None:
        tries.append(str(src).removeprefix(str(root)).rsplit("/", 1)[0])
        raise OSError(errno.EXDEV, os.strerror(errno.EXDEV))

    monkeypatch.setattr(storage_mod.os, "replace", refuse)
    for rel in ("top.json", "_upkeep/c"):  # a final name in the root itself: nowhere else to go
        with pytest.raises(OSError) as caught:
            lake.write_bytes(rel, b"1")
        assert caught.value.errno == errno.EXDEV
    assert tries == ["/_tmp", "/_tmp", "/_upkeep/_tmp"] and temp_files(root) == []


def test_a_raw_batch_and_ledgers_on_a_real_second_filesystem(tmp_path: Path, shm: Path) -> None:
    root = tmp_path / "lake"
    lake = dr.Lake.create(root)
    for name in ("_raw", "_quarantine"):  # moved to another disk and linked in
        (shm / name).mkdir()
        if (root / name).exists():
            shutil.copytree(root / name, shm / name, dirs_exist_ok=True)
            shutil.rmtree(root / name)
        (root / name).symlink_to(shm / name)
    batch = tmp_path / "b.jsonl"
    batch.write_bytes(jsonl([up("a", 1, day=3), {"order_id": "bad"}]))
    report = lake.ingest(batch)  # a file: copied in blocks, then linked (raw/store.py)
    assert report.version is not None
    lake.ingest(jsonl([up("b", 2, day=3)]))  # bytes: Storage.write_once
    assert len(list((shm / "_raw").rglob("*.jsonl"))) == 2 and any((shm / "_quarantine").rglob("*"))
    assert temp_files(root, shm) == [] and (shm / "_raw" / TEMP_DIR).is_dir()

    # a write killed in its temp file in a fresh process dies in the lake's `_tmp` (before its EXDEV)
    batch.write_bytes(jsonl([up("c", 3, day=4)]))
    ingest_killed_at(root, batch, "storage.after_temp:_raw")
    assert [Path(p).parent for p in temp_files(root, shm)] == [root / TEMP_DIR]
    # one left in the fallback folder on the other disk (a writer killed after it learned) is swept by
    # the next writer start, which lists the `_tmp` of the lake root's folders
    planted = plant_temp(shm / "_raw" / TEMP_DIR)
    started = temp_sweep.sweep_at_writer_start(lake.storage, tables=[lake.table_uri("orders")])
    assert len(started) == 2 and f"_raw/{TEMP_DIR}/{planted.name}" in {t.path for t in started}
    assert temp_files(root, shm) == []
    planted = plant_temp(shm / "_raw" / TEMP_DIR)  # and by vacuum, whose walk follows the linked folder
    assert [t["path"] for t in lake.vacuum("orders", apply=True).temp_files] == [f"_raw/{TEMP_DIR}/{planted.name}"]
    assert temp_files(root, shm) == []
    assert dr.Lake.open(root).ingest(batch).version is not None and temp_files(root, shm) == []


def test_an_index_on_a_mounted_tmpfs(tmp_path: Path) -> None:
    root = tmp_path / "lake"
    lake = dr.Lake.create(root)
    lake.ingest(jsonl([up("a", 1, day=3)]))
    mount = root / "_index"
    shutil.rmtree(mount)
    mount.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64m", "tmpfs", str(mount)], capture_output=True,
                          check=False)
    if done.returncode != 0:
        pytest.skip("cannot mount a tmpfs here (not root, or no CAP_SYS_ADMIN)")
    try:
        assert os.stat(mount).st_dev != os.stat(root).st_dev
        lake = dr.Lake.open(root)  # the index is rebuilt onto the mount (a cache), then written there
        lake.ingest(jsonl([up("b", 2, day=3), up("a", 3, day=4)]))
        assert any(p.is_file() and not p.name.startswith(".tmp-") for p in mount.rglob("*"))
        assert temp_files(root) == [] and (mount / TEMP_DIR).is_dir()
    finally:
        subprocess.run(["umount", str(mount)], check=False)


def test_the_full_walk_follows_a_folder_linked_in_from_elsewhere_once(tmp_path: Path) -> None:
    root, elsewhere = tmp_path / "lake", tmp_path / "disk2" / "raw"
    lake = Storage(str(root))
    inside = plant_temp(root / "orders" / TEMP_DIR)
    linked = plant_temp(elsewhere / TEMP_DIR, fill="e")
    (root / "_raw").symlink_to(elsewhere)
    (root / "_raw2").symlink_to(elsewhere)  # the same folder twice: walked once
    (root / "orders" / "loop").symlink_to(root)  # back into the lake: walked where it really is
    found = sorted(t.path for t in lake.temp_files())
    assert found in ([f"_raw/{TEMP_DIR}/{linked.name}", f"orders/{TEMP_DIR}/{inside.name}"],
                     [f"_raw2/{TEMP_DIR}/{linked.name}", f"orders/{TEMP_DIR}/{inside.name}"])
    assert [t.path for t in lake.temp_files(under=(TEMP_DIR,))] == []  # the writer start's listing: no walk
    assert len(lake.sweep_temp()) == 2 and not linked.exists() and not inside.exists()
