"""The tiered file layout the key index (`.kx2`) and the file index (`.fx`) share.

Level 0 holds one delta file per catch-up or commit (`d-<first>-<last>`), levels 1 and 2 merged runs
(`r1-`, `r2-`), and a base (`b-<last>`) covers versions 0..last. Names carry the versions a file covers, so a
reader picks a gap-free chain of files from a listing alone.
"""

from __future__ import annotations

import mmap
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ..storage import Storage

BASE = 3  # the level of a base file
_KINDS = {"d": 0, "r1": 1, "r2": 2}


@dataclass(frozen=True, slots=True)
class TierFile:
    path: str
    level: int  # 0 deltas, 1 and 2 runs, BASE
    first: int
    last: int


def parse(path: str, ext: str) -> TierFile | None:
    """The file `path` names, or None when it is not an index file of this extension."""
    name = path.rsplit("/", 1)[-1]
    if not name.endswith(ext):
        return None
    kind, _, rest = name[:-len(ext)].partition("-")
    try:
        if kind == "b":
            return TierFile(path, BASE, 0, int(rest))
        if kind in _KINDS:
            first, last = rest.split("-")
            return TierFile(path, _KINDS[kind], int(first), int(last))
    except ValueError:
        return None
    return None


def name(folder: str, ext: str, level: int, first: int, last: int) -> str:
    if level == BASE:
        return f"{folder}/b-{last:012d}{ext}"
    return f"{folder}/{('d', 'r1', 'r2')[level]}-{first:012d}-{last:012d}{ext}"


def chain(files: list[TierFile], start: int, upto: int, level: int | None = None) -> list[TierFile]:
    """Files (of `level`, or any non-base level) covering start+1, start+2, ... up to `upto` without a
    gap, each the one reaching furthest (a merged file before the files it replaced)."""
    out: list[TierFile] = []
    cur = start
    while cur < upto:
        best: TierFile | None = None
        for f in files:
            if f.level == BASE or (level is not None and f.level != level):
                continue
            if f.first <= cur + 1 and cur < f.last <= upto and (
                    best is None or (f.last, f.level) > (best.last, best.level)):
                best = f
        if best is None:
            break
        out.append(best)
        cur = best.last
    return out


def superseded(files: list[TierFile], grace: int) -> list[TierFile]:
    """Files another file covers (a higher level, or a newer base, over the same versions) that can go:
    only when the covering file is more than `grace` versions old, so a reader that listed the files a
    moment ago still finds what it chose."""
    latest = max((f.last for f in files), default=-1)
    out = []
    for f in files:
        for g in files:
            if g is f or g.last > latest - grace:
                continue
            if (g.level > f.level or (g.level == BASE == f.level and g.last > f.last)) and (
                    g.first <= f.first and f.last <= g.last):
                out.append(f)
                break
    return out


def read(storage: Storage, path: str) -> tuple[bytes | mmap.mmap, mmap.mmap | None]:
    """A tier file's bytes, and its memory map (`Storage.read_mapped`: the file on local disk, a local
    spool of the object on S3; the mapping outlives the name, so a later delete is harmless); an empty file
    reads as b"" (the caller's decode refuses it). FileNotFoundError when a merge deleted it since it was
    listed."""
    return storage.read_mapped(path)


def retry_listing(step: Callable[[], None], attempts: int = 3) -> None:
    """Run a merge step that works from a listing of tier files; a concurrent tidy may delete an input
    it listed (FileNotFoundError), in which case it lists again, at most `attempts` times."""
    for _ in range(attempts):
        try:
            step()
            return
        except FileNotFoundError:
            continue
