"""Running the command with stderr on a pseudo-terminal, as a person sees its progress."""

from __future__ import annotations

import os
import pty
import subprocess
import sys
import tempfile
from pathlib import Path

from tests.conftest import ROOT

ENV = {**os.environ, "PYTHONPATH": str(ROOT)}


def pty_run(args: list[str], cwd: Path, env: dict[str, str] | None = None) -> tuple[str, str]:
    """Run the CLI with stderr on a pseudo-terminal (stdout a pipe): (stdout, what the terminal saw)."""
    master, slave = pty.openpty()
    # stdout to a file, not a pipe: a report larger than the pipe buffer (bucketed files, issue 14.2) would
    # block the child while this loop waits for the terminal's EOF.
    sink = tempfile.TemporaryFile()
    proc = subprocess.Popen([sys.executable, "-m", "delta_release", *args], cwd=cwd,
                            env={**ENV, "COLUMNS": "120", **(env or {})},
                            stdout=sink, stderr=slave, stdin=subprocess.DEVNULL)
    os.close(slave)
    seen = b""
    while True:
        try:
            chunk = os.read(master, 4096)
        except OSError:
            break
        if not chunk:
            break
        seen += chunk
    proc.wait(timeout=120)
    sink.seek(0)
    out = sink.read().decode()
    sink.close()
    os.close(master)
    return out, seen.decode(errors="replace")
