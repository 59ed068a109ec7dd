"""Helpers shared by the tests of tests/storage/: temp files as a killed writer leaves them, a writer killed
at a crash point, and the temp files found under a folder."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path


def temp_files(*roots: Path) -> list[str]:
    """Every temp file (`.tmp-*`) below `roots`, sorted."""
    return sorted(str(p) for r in roots for p in r.rglob(".tmp-*"))


def plant_temp(folder: Path, text: bytes = b"payload", fill: str = "c") -> Path:
    """A stale temp file in `folder`, as a killed writer of this host leaves one (its pid is gone)."""
    from delta_release.storage import HOST_TAG

    done = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True,
                          text=True, check=True)
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f".tmp-{HOST_TAG}-{int(done.stdout)}-{fill * 32}"
    path.write_bytes(text)
    return path


def ingest_killed_at(root: Path, batch: Path, point: str) -> None:
    """Ingest `batch` into the lake at `root` in a child process SIGKILLed at the crash point `point`."""
    code = f"import delta_release as dr; dr.Lake.open({str(root)!r}).ingest({str(batch)!r})"
    env = {**os.environ, "DELTA_RELEASE_CRASH_AT": point}
    proc = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=False,
                          timeout=300)
    assert proc.returncode == -signal.SIGKILL, proc.stderr
