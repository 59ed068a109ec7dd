"""Fault injection for the crash drill: SIGKILL this process at a named step.

`DELTA_RELEASE_CRASH_AT=<name>` in the environment of a process arms one crash point; every other call is
a no-op (one comparison against a value read once, at import). SIGKILL is used rather than an exception
or `sys.exit`, so no `finally`, `atexit` or buffered write gets a chance to tidy up: what storage holds
at that moment is exactly what a power cut or an OOM kill would leave.

Two kinds of point:

- `crash_point(name)`: die right here.
- `crash_window(name)`: a `with` block around a call that Python cannot interrupt at a chosen instruction
  (a delta-rs commit, a SQLite transaction). A watchdog thread kills the process after
  `DELTA_RELEASE_CRASH_DELAY` seconds (default 0); if the block finishes first, the process dies on
  leaving it. Either way it dies inside the window or at its very end, and the drill reports which of the
  possible outcomes it observed on storage, rather than claiming a precise instant.
"""

from __future__ import annotations

import os
import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager

CRASH_ENV = "DELTA_RELEASE_CRASH_AT"
DELAY_ENV = "DELTA_RELEASE_CRASH_DELAY"

_TARGET = os.environ.get(CRASH_ENV) or None


def _die() -> None:
    os.kill(os.getpid(), signal.SIGKILL)


def crash_point(name: str) -> None:
    """SIGKILL the current process when `DELTA_RELEASE_CRASH_AT` equals `name`; otherwise do nothing."""
    if _TARGET is not None and name == _TARGET:
        _die()


@contextmanager
def crash_window(name: str) -> Iterator[None]:
    """Die somewhere inside the block (or at its end) when `DELTA_RELEASE_CRASH_AT` equals `name`."""
    if _TARGET is None or name != _TARGET:
        yield
        return
    delay = float(os.environ.get(DELAY_ENV) or 0)
    done = threading.Event()

    def watchdog() -> None:
        done.wait(delay)
        _die()

    threading.Thread(target=watchdog, name=f"crash-{name}", daemon=True).start()
    try:
        yield
    finally:
        done.set()
        _die()


def armed() -> str | None:
    """The crash point armed in this process, if any (for the drill's own evidence)."""
    return _TARGET


EXIT_ONCE_ENV = "DELTA_RELEASE_EXIT_ONCE"


def exit_once_spec() -> str | None:
    """`DELTA_RELEASE_EXIT_ONCE=<name>:<marker file>` as this process sees it now: a fault for a WORKER (a
    distributed task), read by the driver when it submits the task and handed to it (`exit_once`)."""
    return os.environ.get(EXIT_ONCE_ENV) or None


def exit_once(spec: str | None, name: str) -> None:
    """End this process with `os._exit(1)` at point `name` (a worker dying mid-task: no cleanup runs) the
    first time only: the marker file is created before dying, and a later attempt that finds it goes on."""
    if spec is None:
        return
    point, _, marker = spec.partition(":")
    if point != name or not marker or os.path.exists(marker):
        return
    try:
        with open(marker, "x", encoding="utf-8") as handle:  # one process wins: the others go on
            handle.write(str(os.getpid()))
    except FileExistsError:
        return
    os._exit(1)
