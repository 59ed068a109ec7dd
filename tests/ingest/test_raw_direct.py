"""The raw store's read-time copy is written past the page cache (O_DIRECT, `store.DirectWriter`) where the
filesystem allows it: whole aligned blocks from one buffer, the tail padded and cut back. Whatever the
sizes of the blocks it is given, the durable file holds exactly the bytes written; a device that refuses
the alignment gets plain writes for the rest of the file, with the same bytes."""

from __future__ import annotations

import errno
import fcntl
import os
import tempfile
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from delta_release.raw import store

BLOCK = 2 * store.DIRECT_ALIGN  # small blocks: every test crosses several


def _direct_allowed(folder: str) -> bool:
    try:
        fd = os.open(os.path.join(folder, "probe"), os.O_WRONLY | os.O_CREAT | os.O_DIRECT, 0o600)
    except OSError:
        return False
    os.close(fd)
    os.unlink(os.path.join(folder, "probe"))
    return True


def _copy(folder: str, blocks: list[bytes]) -> tuple[store.RawTee, bytes]:
    tee = store.RawTee(os.path.join(folder, "copy"))
    for block in blocks:
        tee.write(block)
    size = sum(map(len, blocks))
    assert tee.durable(size)
    data = Path(tee.path).read_bytes()
    tee.discard()
    return tee, data


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(0, 3 * BLOCK + 5), max_size=8), st.integers(0, 255))
def test_the_copy_holds_exactly_the_bytes_written(sizes: list[int], seed: int) -> None:
    blocks = [bytes((seed + i * 7 + j) % 251 for j in range(n)) for i, n in enumerate(sizes)]
    with tempfile.TemporaryDirectory() as folder, pytest.MonkeyPatch.context() as mp:
        mp.setattr(store, "DIRECT_BLOCK", BLOCK)
        tee, data = _copy(folder, blocks)
        assert data == b"".join(blocks)
        assert isinstance(tee._handle, store.DirectWriter) == _direct_allowed(folder)
        assert not Path(tee.path).exists()


def test_a_device_that_refuses_the_alignment_gets_plain_writes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    if not _direct_allowed(str(tmp_path)):
        pytest.skip("this filesystem takes no O_DIRECT")
    monkeypatch.setattr(store, "DIRECT_BLOCK", BLOCK)
    real_write = os.write
    refused: list[int] = []

    def device(fd: int, data: object) -> int:  # refuses every O_DIRECT write, as a device of larger sectors would
        if fcntl.fcntl(fd, fcntl.F_GETFL) & os.O_DIRECT:
            refused.append(fd)
            raise OSError(errno.EINVAL, "Invalid argument")
        return real_write(fd, data)  # type: ignore[arg-type]

    monkeypatch.setattr(os, "write", device)
    blocks = [b"x" * 5000, b"y" * (3 * BLOCK), b"z" * 17]
    tee, data = _copy(str(tmp_path), blocks)
    assert data == b"".join(blocks)
    assert len(refused) == 1 and not tee._handle._direct


def test_a_filesystem_without_o_direct_gets_a_buffered_copy(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    real_open = os.open

    def no_direct(path: str, flags: int, mode: int = 0o777) -> int:
        if flags & os.O_DIRECT:
            raise OSError(errno.EINVAL, "Invalid argument")
        return real_open(path, flags, mode)

    monkeypatch.setattr(os, "open", no_direct)
    blocks = [b"a" * 10, b"b" * 70_000]
    tee, data = _copy(str(tmp_path), blocks)
    assert data == b"".join(blocks) and not isinstance(tee._handle, store.DirectWriter)
