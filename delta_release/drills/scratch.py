"""Scratch lakes for drills: a drill runs in the lake named by --lake, which must be new or a drill's."""

from __future__ import annotations

import shlex
import shutil
import tempfile
from pathlib import Path

from ..errors import InputError

MARKER = ".drill-scratch"


def suggested_scratch() -> str:
    """A folder to offer for a drill's --lake: under the temp folder, and a drill's to wipe if it exists."""
    return str(Path(tempfile.gettempdir()) / "delta-release-drill")


def _pass_a_scratch_lake() -> str:
    return (f"pass --lake with a new or empty local folder, which the drill wipes and reuses, e.g. add"
            f" `--lake {shlex.quote(suggested_scratch())}` to the command")


def prepare_scratch(uri: str) -> Path:
    """Return an empty directory for a drill lake. Refuses to wipe a directory that is not a scratch lake;
    each refusal says what to pass instead."""
    if "://" in uri or not uri.strip():
        raise InputError(f"a drill needs a local scratch directory, not {uri!r}: {_pass_a_scratch_lake()}", lake=uri)
    path = Path(uri)
    if path.exists() and not path.is_dir():
        raise InputError(f"drill needs a scratch lake: {path} is not a directory; {_pass_a_scratch_lake()}",
                         lake=str(path))
    if path.exists() and any(path.iterdir()):
        if not (path / MARKER).exists():
            raise InputError(f"drill needs a scratch lake: {path} already holds data that is not a drill's"
                             f" (a drill wipes its lake); {_pass_a_scratch_lake()}", lake=str(path))
        shutil.rmtree(path)
    path.mkdir(parents=True, exist_ok=True)
    (path / MARKER).write_text("created by a delta-release drill; wiped by the next drill\n")
    return path.resolve()  # an absolute root: a relative --lake must not be joined onto itself later
