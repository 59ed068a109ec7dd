"""Executors: where the work of an ingest runs. `local` (this process, the default) or `ray` (a Ray cluster:
workers map and reduce a file in parts, the driver alone gates and commits: `ray_executor.py`).

Ray is an optional extra (`pip install 'delta-release[distributed]'`) and is imported only when the ray
executor runs. A file the part limit does not cut (one part), or a table without buckets, gains nothing from
workers: it is ingested in this process as with `local`, without starting or joining a cluster.
"""

from __future__ import annotations

import functools
import importlib.util
import os

from ..context import LakeContext
from ..errors import InputError
from ..ingest import IngestReport
from ..parts import ingest_file
from ..tables import DEFAULT_TABLE
from .ray_executor import Opener, ingest_parts_on_ray

EXECUTORS = ("local", "ray")
INSTALL_HINT = "pip install 'delta-release[distributed]'"


def check_executor(executor: object) -> str:
    """`executor` if it is one we run and its engine is installed; else InputError (exit 2) in one line."""
    if not isinstance(executor, str) or executor not in EXECUTORS:
        raise InputError(f"unknown executor {executor!r} (local or ray)", argument="executor")
    if executor == "ray" and importlib.util.find_spec("ray") is None:
        raise InputError(f"--executor ray needs Ray, which is not installed: {INSTALL_HINT}", argument="executor")
    return executor


def ingest_file_on(executor: str, lake: LakeContext, path: str | os.PathLike[str], *, opener: Opener,
                   table: str = DEFAULT_TABLE, publish: bool = True) -> IngestReport:
    """`parts.ingest_file` with a file in parts on a bucketed table run by `executor`; `opener` opens the
    same lake in a worker process (the facade's, picklable)."""
    if check_executor(executor) == "local":
        return ingest_file(lake, path, table=table, publish=publish)
    return ingest_file(lake, path, table=table, publish=publish,
                       in_parts=functools.partial(ingest_parts_on_ray, opener=opener))
