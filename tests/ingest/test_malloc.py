"""glibc's mmap threshold, fixed for a file's ingest (delta_release/_malloc.py): a freed large block no
longer moves the threshold up, so the next block of that size is mapped again instead of staying in a heap.
Process-wide allocator state: each case runs in a fresh interpreter."""

from __future__ import annotations

import ctypes
import os
import subprocess
import sys
import textwrap

import pytest

from tests.conftest import ROOT


def _glibc_with_mallinfo2() -> bool:
    try:
        return os.confstr("CS_GNU_LIBC_VERSION") is not None and hasattr(ctypes.CDLL(None), "mallinfo2")
    except (AttributeError, ValueError, OSError):
        return False


pytestmark = pytest.mark.skipif(not _glibc_with_mallinfo2(), reason="glibc 2.33 or later only (mallinfo2)")

# Maps 8 MiB, frees it (glibc's dynamic threshold rises to 8 MiB), then allocates 8 MiB again and prints
# whether glibc mapped that block on its own (mallinfo2().hblkhd: bytes in mapped blocks).
PROBE = textwrap.dedent("""
    import ctypes, os, sys
    class Info(ctypes.Structure):
        _fields_ = [(n, ctypes.c_size_t) for n in
                    "arena ordblks smblks hblks hblkhd usmblks fsmblks uordblks fordblks keepcost".split()]
    libc = ctypes.CDLL(None)
    libc.mallinfo2.restype = Info
    libc.malloc.restype, libc.malloc.argtypes = ctypes.c_void_p, [ctypes.c_size_t]
    libc.free.argtypes = [ctypes.c_void_p]
    if sys.argv[1] == "fix":
        from delta_release._malloc import fix_mmap_threshold
        print(fix_mmap_threshold(), end=" ")
    elif sys.argv[1] == "ingest":
        import delta_release as dr
        lake = dr.Lake.create(sys.argv[2])
        open(sys.argv[3], "w").close()
        lake.ingest(sys.argv[3])
    size = 8 << 20
    libc.free(libc.malloc(size))
    before = libc.mallinfo2().hblkhd
    block = libc.malloc(size)
    print(libc.mallinfo2().hblkhd - before >= size)
    libc.free(block)
""")


def _probe(*args: str) -> str:
    env = {k: v for k, v in os.environ.items() if k != "MALLOC_MMAP_THRESHOLD_"}
    env["PYTHONPATH"] = str(ROOT)
    return subprocess.run([sys.executable, "-c", PROBE, *args], env=env, capture_output=True, text=True,
                          check=True).stdout.strip()


def test_glibc_alone_keeps_a_freed_large_block_in_its_heap() -> None:
    assert _probe("none") == "False"  # the behaviour the fix is for (if glibc changes, revisit _malloc.py)


def test_the_fixed_threshold_maps_every_large_block() -> None:
    assert _probe("fix") == "True True"


def test_ingesting_a_file_fixes_the_threshold(tmp_path) -> None:  # type: ignore[no-untyped-def]
    assert _probe("ingest", str(tmp_path / "lake"), str(tmp_path / "empty.jsonl")) == "True"


def test_an_operator_threshold_is_left_alone() -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "MALLOC_MMAP_THRESHOLD_": str(16 << 20)}
    out = subprocess.run([sys.executable, "-c", PROBE, "fix"], env=env, capture_output=True, text=True, check=True)
    assert out.stdout.split()[0] == "False"


POOL = textwrap.dedent("""
    import sys
    import pyarrow as pa
    import delta_release as dr
    before = pa.default_memory_pool().backend_name
    dr.Lake.create(sys.argv[1])
    print(before, pa.default_memory_pool().backend_name)
""")


@pytest.mark.parametrize("chosen", [None, "jemalloc"])
def test_opening_a_lake_moves_arrow_to_the_system_allocator_unless_a_pool_is_chosen(tmp_path: object,
                                                                                      chosen: str | None) -> None:
    """Arrow's bundled mimalloc keeps freed pages resident (the writer's checkpoint read left ~60 MiB, the
    system allocator ~30): a lake's open moves pyarrow's default pool to the system allocator, and a process
    that names a pool keeps it."""
    import pyarrow as pa

    env = {k: v for k, v in os.environ.items() if k != "ARROW_DEFAULT_MEMORY_POOL"}
    env["PYTHONPATH"] = str(ROOT)
    if chosen is not None:
        if chosen not in pa.supported_memory_backends():
            pytest.skip(f"pyarrow built without {chosen}")
        env["ARROW_DEFAULT_MEMORY_POOL"] = chosen
    out = subprocess.run([sys.executable, "-c", POOL, str(tmp_path) + "/lake"], env=env, capture_output=True,
                         text=True, check=True).stdout.split()
    assert out[1] == (chosen or "system"), out
    assert chosen is not None or out[0] != "system"  # it was another pool before the open
