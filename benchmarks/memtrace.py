"""Where an ingest's memory goes: ingest FILE into a new lake at LAKE, printing for each main phase (decode,
raw copy, plan, stage, gate, commit, index record) its start and end time, the anonymous RSS on entry and
exit, and the highest anonymous RSS sampled inside it (every 20 ms). Anonymous memory includes what the
allocators have freed but keep (try `_RJEM_MALLOC_CONF=dirty_decay_ms:0,muzzy_decay_ms:0` for Polars').

    python -m benchmarks.memtrace FILE LAKE
"""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any


def _status_mib(field: str) -> int:
    status = Path("/proc/self/status").read_text()
    return int(status.split(field + ":")[1].split()[0]) // 1024


class Trace:
    """The phases' lines, and a sampler of the highest anonymous RSS since the current phase began."""

    def __init__(self) -> None:
        self.t0 = time.time()
        self.peak, self.peak_at = 0, 0.0
        threading.Thread(target=self._sample, daemon=True).start()

    def _sample(self) -> None:
        while True:
            anon = _status_mib("RssAnon")
            if anon > self.peak:
                self.peak, self.peak_at = anon, time.time() - self.t0
            time.sleep(0.02)

    def wrap(self, name: str, fn: Callable[..., Any]) -> Callable[..., Any]:
        def traced(*args: Any, **kwargs: Any) -> Any:
            self.peak = 0
            before, start = _status_mib("RssAnon"), time.time() - self.t0
            try:
                return fn(*args, **kwargs)
            finally:
                print(f"{start:7.1f}-{time.time() - self.t0:7.1f} {name:16} anon in {before:5} "
                      f"out {_status_mib('RssAnon'):5} peak inside {self.peak:5} at {self.peak_at:.1f}", flush=True)
        return traced


def main(argv: list[str]) -> None:
    import delta_release.apply.bucketed  # noqa: F401 - loaded before the ingest module binds its names
    import delta_release.commit.writer as wr
    import delta_release.ingest as ing
    import delta_release.parts as parts_mod
    from delta_release import _delta

    from ._common import create_lake

    trace = Trace()
    for owner, name, label in ((parts_mod, "read_batch_file", "decode"), (ing, "plan_bucketed", "plan"),
                               (parts_mod, "_spill", "decode+spill"), (parts_mod, "_reused_positions", "positions"),
                               (parts_mod, "fold_group", "fold group"), (wr, "record_indexes", "index record")):
        if hasattr(owner, name):  # a step this package version has
            setattr(owner, name, trace.wrap(label, getattr(owner, name)))
    wr.stage_partitions = trace.wrap("stage", wr.stage_partitions)
    wr.gate_candidate = trace.wrap("gate", wr.gate_candidate)
    _delta.commit = trace.wrap("commit", _delta.commit)
    lake = create_lake(Path(argv[1]))
    lake.raw.put_file = trace.wrap("raw copy", lake.raw.put_file)
    lake.ingest(Path(argv[0]))
    print(f"peak RSS (VmHWM) {_status_mib('VmHWM')} MiB")


if __name__ == "__main__":
    main(sys.argv[1:])
