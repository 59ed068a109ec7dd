"""Where a batch file larger than the part limit is cut into parts (issue 17 item 4, issue 14 item 2).

A file of more than `max_part_bytes()` bytes is received as consecutive parts, in file order, each a
batch of its own (its own sha256 id, raw copy, quarantine entry, reconciliation and commit; ingest in
`delta_release/parts.py`). The cuts depend only on the file's bytes and the limit, so the same file
with the same limit always gives the same parts (and a rerun finds the parts it already applied):

- a part ends just after a '\\n' (a CRLF stays whole), at the last line end within `limit` bytes of the
  part's start; a part holds at least one line, so a line longer than the limit makes its part longer
  (an over-long line is still quarantined by length, never held whole: contract/lines.py);
- a part never starts with the three bytes of a UTF-8 BOM (a BOM is skipped only at the very start of a
  batch, so a later line starting with one must stay inside the part where it is not first: the cut
  moves to an earlier line end, or later when there is none);
- the last part ends at the end of the file (its last line may lack the '\\n').

The limit is `MAX_PART_BYTES` (256 MiB) unless the environment sets `DELTA_RELEASE_MAX_PART_BYTES`;
callers may pass `max_part_bytes`. A file of at most the limit is one part: ingested exactly as before.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO

from .lines import BOM, byte_limit
from .source import FileBatch, read_batch_file

MAX_PART_BYTES = 256 << 20
ENV_MAX_PART = "DELTA_RELEASE_MAX_PART_BYTES"
MAX_GROUP_BYTES = 64 << 20
ENV_MAX_GROUP = "DELTA_RELEASE_MAX_GROUP_BYTES"
SCAN_BLOCK = 1 << 20


def max_part_bytes(value: int | None = None) -> int:
    """The part limit in force: `value`, else $DELTA_RELEASE_MAX_PART_BYTES, else 256 MiB."""
    return byte_limit(value, ENV_MAX_PART, MAX_PART_BYTES, "the maximum part size")


def max_group_bytes(value: int | None = None) -> int:
    """The input bytes one group of buckets of a fold may hold: `value`, else $DELTA_RELEASE_MAX_GROUP_BYTES,
    else 64 MiB. A fold of a file in parts is planned in enough groups that each holds at most this many
    (parts.py `group_count`; past the buckets, sub-groups of each bucket): a group's events are folded at
    once. A 20M-event backfill peaked at 1.47 GiB with 256 MiB groups and at 988 MiB with 64 MiB groups,
    then in folds of 512 MiB; in one fold of 40 sub-groups, 1,010 MiB (VmHWM, benchmarks.memtrace)."""
    return byte_limit(value, ENV_MAX_GROUP, MAX_GROUP_BYTES, "the maximum group size")


def _starts_with_bom(handle: BinaryIO, offset: int) -> bool:
    handle.seek(offset)
    return handle.read(len(BOM)) == BOM


def _cut_back(handle: BinaryIO, start: int, target: int) -> int | None:
    """The end (just after a '\\n') of the last line ending in (start, target] whose next line does not
    start with a BOM; None when there is none. Reads backwards in blocks."""
    hi = target
    while hi > start:
        lo = max(start, hi - SCAN_BLOCK)
        handle.seek(lo)
        block = handle.read(hi - lo)
        i = len(block)
        while (i := block.rfind(b"\n", 0, i)) >= 0:
            end = lo + i + 1
            if not _starts_with_bom(handle, end):
                return end
        hi = lo
    return None


def _cut_forward(handle: BinaryIO, target: int, size: int) -> int:
    """The end of the first line ending after `target` whose next line does not start with a BOM, else
    the end of the file."""
    pos = target
    while pos < size:
        handle.seek(pos)
        block = handle.read(SCAN_BLOCK)
        if not block:
            break
        i = 0
        while (i := block.find(b"\n", i)) >= 0:
            end = pos + i + 1
            i += 1
            if end >= size or not _starts_with_bom(handle, end):
                return end
        pos += len(block)
    return size


def part_ranges(path: str | os.PathLike[str], limit: int | None = None) -> list[tuple[int, int]]:
    """(offset, length) of each part of the file, in file order; one range for a file within the limit
    (an empty file included). Memory: one scan block."""
    limit = max_part_bytes(limit)
    size = Path(path).stat().st_size
    if size <= limit:
        return [(0, size)]
    out: list[tuple[int, int]] = []
    start = 0
    with open(path, "rb") as handle:
        while start < size:
            left = size - start
            if left <= limit:
                end = size
            else:
                aim = start + -(-left // -(-left // limit))  # left / ceil(left / limit), rounded up
                end = _cut_back(handle, start, aim) or _cut_forward(handle, aim, size)
            out.append((start, end - start))
            start = end
    return out


def file_parts(path: str | os.PathLike[str], limit: int | None = None) -> Iterator[FileBatch]:
    """The file's batches, one per part, each hashed and decoded when it is reached (a release run
    receives a large batch file this way: the same raw batches an ingest of the file makes)."""
    if not Path(path).is_file():
        yield read_batch_file(path)  # the InputError naming the path
        return
    for offset, size in part_ranges(path, limit):
        yield read_batch_file(path, offset=offset, length=size)
