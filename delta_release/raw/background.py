"""The raw copy of a batch on a thread, while the plan reads the parent and folds.

Keeping the raw batch (fsync the copy written while the batch was read, `store.RawTee`, and link it; or,
without that copy, read the file again, hash it again, write it, fsync) is I/O and hashing that
release the GIL, and the plan's first steps (the keyed hashes, the fold) hold it: on two cores they
overlap. The plan waits for the copy (`kept`) once it has decided what to write and before anything is
staged, so every guarantee of the sequential order holds: the raw batch is kept before any file of the
candidate exists, a copy that fails (the file changed under us, a full disk) ends the ingest before
staging, and the crash point `ingest.after_raw` still sees the raw batch kept and nothing staged.

A batch under THREAD_MIN_BYTES is copied at once, before the plan, as it always was: its copy is a few
milliseconds, and a writer killed during it then leaves only the raw temp file (the plan writes index
and catalog temp files of its own, all swept by the next writer, but the crash drills show one).
"""

from __future__ import annotations

import threading
from concurrent.futures import Future
from datetime import datetime
from types import TracebackType
from typing import Any, Protocol

from ..faults import crash_point


class _Storable(Protocol):
    def store(self, raw: Any, *, received: datetime) -> Any: ...


THREAD_MIN_BYTES = 4 << 20


class RawCopy:
    """`batch.store(raw, received=...)` started on a thread (a batch of THREAD_MIN_BYTES or more; a smaller
    one is stored here and now); `kept()` waits for it (raising its error)."""

    def __init__(self, batch: _Storable, raw: Any, *, received: datetime, size: int) -> None:
        self._done: Future[Any] = Future()
        self._waited = False
        self._thread: threading.Thread | None = None
        if size < THREAD_MIN_BYTES:
            self._done.set_result(batch.store(raw, received=received))
            self.kept()
            return

        def run() -> None:
            try:
                self._done.set_result(batch.store(raw, received=received))
            except BaseException as exc:  # noqa: BLE001 - handed to the waiting thread
                self._done.set_exception(exc)

        self._thread = threading.Thread(target=run, name="raw-copy", daemon=True)
        self._thread.start()

    def kept(self) -> None:
        """Wait until the raw batch is stored (its error, if any, is raised here); the first call then
        passes the crash point `ingest.after_raw`."""
        self._done.result()
        if not self._waited:
            self._waited = True
            crash_point("ingest.after_raw")

    def __enter__(self) -> RawCopy:
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        if self._thread is not None:
            self._thread.join()  # never leave the copy running past the ingest, whatever happened
        if kind is None:
            self.kept()  # a write that never built a plan still keeps its raw batch (and reports its error)
