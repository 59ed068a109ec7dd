"""A fixed mmap threshold for glibc's malloc, set by the first file ingest of a process and kept for the rest
of it (process-wide: issue 14 item 2, issue 17.4 budget).

glibc serves a request of M_MMAP_THRESHOLD bytes or more (128 KiB at start) with a mapping of its own,
unmapped on free. The threshold is dynamic: freeing such a block raises it to the block's size (up to
32 MiB), and from then on blocks of that size are carved from the heaps instead: the main heap and one
arena per thread (the raw copy, the sha256 and the staging threads read and write in MiB blocks). A
freed block there stays resident while smaller live allocations sit around it, so over a backfill's
parts the thread arenas grew part after part (19 -> 81 MiB resident over 5 parts of 32 MiB; glibc's free
bytes 7 -> 148 MiB while its bytes in use stayed 30 MiB) and the minimum between parts crept with them.
`malloc_trim` between parts gave back ~40 MiB a part but not the creep. Setting the threshold with
`mallopt` also turns the dynamic adjustment off: large blocks are mapped and unmapped again, so the
minimum between parts stays flat (README, memory paragraph; figures in the commit message).

Only the glibc allocator is touched (Polars' and deltalake's jemalloc keep their own pages). A process that
sets MALLOC_MMAP_THRESHOLD_ itself keeps its choice; elsewhere (musl, macOS) this does nothing.

`use_system_arrow_pool` moves pyarrow's default memory pool from its bundled mimalloc to the system
allocator (the one tuned above), once per process, when a lake is opened. mimalloc keeps freed segments
resident: reading the 50M-row bench table's 10 MB checkpoint left ~60 MiB resident with it and ~30 MiB
with the system allocator, and over a whole apply (open + 100k events) the peak was 299 -> 269 MiB at 1M
rows and 336 -> 279 MiB at 50M, with no slower decode or apply (figures in the commit message). A process
that names a pool itself (ARROW_DEFAULT_MEMORY_POOL) keeps it.
"""

from __future__ import annotations

import ctypes
import os

M_MMAP_THRESHOLD = -3  # <malloc.h>
MMAP_THRESHOLD = 1 << 20  # blocks of 1 MiB or more get their own mapping
_fixed = False
_arrow_pool_set = False


def fix_mmap_threshold(nbytes: int = MMAP_THRESHOLD) -> bool:
    """Fix glibc's mmap threshold at `nbytes` (once per process); True when it is (now or before)."""
    global _fixed
    if _fixed:
        return True
    if "MALLOC_MMAP_THRESHOLD_" in os.environ or not _glibc():
        return False
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    _fixed = bool(mallopt(M_MMAP_THRESHOLD, nbytes))
    return _fixed


def _glibc() -> bool:
    try:
        return os.confstr("CS_GNU_LIBC_VERSION") is not None
    except (ValueError, OSError, AttributeError):
        return False


def use_system_arrow_pool() -> bool:
    """Make the system allocator pyarrow's default memory pool (once per process); True when it is."""
    global _arrow_pool_set
    if _arrow_pool_set:
        return True
    if "ARROW_DEFAULT_MEMORY_POOL" in os.environ:
        return False
    import pyarrow as pa

    pa.set_memory_pool(pa.system_memory_pool())
    _arrow_pool_set = True
    return True
