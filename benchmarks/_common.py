"""Shared pieces: scales, paths, a timed child-process runner, machine and version facts."""

from __future__ import annotations

import json
import os
import platform
import resource
import shutil
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

# The "fixed budget" of issue 17.4 (peak <= 3x the largest accepted line + this), as README.md documents it
# for the default 256 MiB part limit: one part's decoded events plus the touched files being rewritten
# (measured 977 MiB for a 512 MiB file in 3 parts, 1,114 MiB for a 2 GiB file in 9; 628 MiB at 64 MiB parts).
FIXED_BUDGET_MB = 1280

ROOT = Path(__file__).resolve().parents[1]
BENCH = ROOT / "benchmarks"
DATA = BENCH / "data"
RESULT_TAG = "BENCH-RESULT "


@dataclass(frozen=True, slots=True, kw_only=True)
class Scale:
    name: str
    rows: int  # the orders table the apply timing runs on
    memory_rows: tuple[int, ...]  # table sizes for the peak-memory comparison (the largest is `rows`)
    days: int
    touched_days: int
    batch: int  # events in the apply batch
    decode_lines: int
    gate_files: tuple[int, ...]
    gate_main: int
    hours: int  # telemetry hours for the planning benchmark
    files_per_hour: int
    repeats: int
    iceberg_timeout: float
    seed: int = 20261129
    # issue 14.6 (a): ingest time at these versions of one lake (history written through our writer)
    version_checkpoints: tuple[int, ...] = (10, 1_000, 5_000)
    version_days: int = 365
    version_rows_per_day: int = 20
    version_events: int = 1_000  # the timed ingest: events over `version_touched` days
    version_touched: int = 10
    version_ingests: int = 5  # timed ingests per checkpoint, in one fresh process
    # (f) concurrent writer processes, each ingesting its own batch of `writer_events` events
    writers: int = 16
    writer_events: int = 2_000
    # (g) peak memory: a backfill of `backfill_events` events over 365 days, and batch files of
    # `file_bytes` bytes (one line; normal lines)
    backfill_events: int = 2_000_000
    file_bytes: int = 128 << 20
    large: bool = False

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


SCALES = {
    "micro": Scale(name="micro", rows=2_000, memory_rows=(2_000,), days=10, touched_days=5, batch=100,
                   decode_lines=500, gate_files=(20,), gate_main=20, hours=3, files_per_hour=1, repeats=1,
                   iceberg_timeout=60, version_checkpoints=(2, 4, 8), version_days=10, version_rows_per_day=5,
                   version_events=50, version_touched=2, version_ingests=2, writers=2, writer_events=50,
                   backfill_events=2_000, file_bytes=256 << 10),
    "tiny": Scale(name="tiny", rows=20_000, memory_rows=(10_000, 20_000), days=30, touched_days=5, batch=1_000,
                  decode_lines=5_000, gate_files=(100, 300), gate_main=300, hours=48, files_per_hour=2,
                  repeats=1, iceberg_timeout=120, version_checkpoints=(10, 100, 300), version_events=200,
                  version_ingests=3, writers=8, writer_events=200, backfill_events=50_000, file_bytes=4 << 20),
    "small": Scale(name="small", rows=200_000, memory_rows=(100_000, 200_000), days=365, touched_days=5,
                   batch=10_000, decode_lines=100_000, gate_files=(1_000, 10_000), gate_main=10_000, hours=48,
                   files_per_hour=4, repeats=3, iceberg_timeout=300, version_checkpoints=(10, 500, 1_000),
                   writer_events=1_000, backfill_events=500_000, file_bytes=32 << 20),
    "full": Scale(name="full", rows=5_000_000, memory_rows=(1_000_000, 5_000_000), days=365, touched_days=5,
                  batch=100_000, decode_lines=1_000_000, gate_files=(1_000, 10_000), gate_main=10_000,
                  hours=48, files_per_hour=4, repeats=3, iceberg_timeout=60,
                  # 2M events / 128 MiB took 856 s for Lake.ingest alone on main (2026-11-30, loaded machine):
                  # too long for the 15-minute default; --large runs 20M events and 2 GiB
                  backfill_events=500_000, file_bytes=32 << 20),
}


def large(scale: Scale) -> Scale:
    """`--large` (`make bench LARGE=1`): the issue's large cases on top of `scale`: apply also at 50M rows,
    the 20M-event backfill, the 2 GiB files, the 100k-file gate and pyiceberg's 300 s limit."""
    from dataclasses import replace

    big = 50_000_000 if scale.name == "full" else scale.rows * 10
    return replace(scale, memory_rows=(*scale.memory_rows, big), backfill_events=max(20_000_000, scale.backfill_events),
                   file_bytes=2 << 30, gate_files=(*scale.gate_files, 100_000) if 100_000 not in scale.gate_files
                   else scale.gate_files, iceberg_timeout=300, large=True)


def data_dir(scale: Scale) -> Path:
    """benchmarks/data/<scale>/, or $DELTA_RELEASE_BENCH_DATA/<scale>/ (the smoke test uses a tmp dir)."""
    root = os.environ.get("DELTA_RELEASE_BENCH_DATA")
    return (Path(root) if root else DATA) / scale.name


def maxrss_mb() -> float:
    """Peak resident set size of this process so far, in MiB.

    VmHWM from /proc (reset by exec), not getrusage's ru_maxrss: Linux carries the forking parent's peak
    into the child's ru_maxrss, so a child of a large runner would report the runner's memory."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def emit(result: dict[str, Any]) -> None:
    """A child's last word: its result and its own peak memory, on one tagged stdout line."""
    result.setdefault("maxrss_mb", round(maxrss_mb(), 1))
    sys.stdout.write(RESULT_TAG + json.dumps(result, default=str) + "\n")
    sys.stdout.flush()


@dataclass(slots=True, kw_only=True)
class ChildResult:
    ok: bool
    data: dict[str, Any] = field(default_factory=dict)
    error: str | None = None
    wall_s: float = 0.0


def run_child(module: str, *args: str, timeout: float | None = None, env: dict[str, str] | None = None) -> ChildResult:
    """Run `python -m <module> args...` in a fresh process and parse its tagged result line."""
    cmd = [sys.executable, "-m", module, *args]
    t0 = time.perf_counter()
    try:
        proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=timeout,
                              env={**os.environ, **(env or {})})
    except subprocess.TimeoutExpired:
        return ChildResult(ok=False, error=f"timed out after {timeout:.0f}s", wall_s=time.perf_counter() - t0)
    wall = time.perf_counter() - t0
    for line in reversed(proc.stdout.splitlines()):
        if line.startswith(RESULT_TAG):
            return ChildResult(ok=True, data=json.loads(line[len(RESULT_TAG):]), wall_s=wall)
    tail = (proc.stderr or proc.stdout).strip().splitlines()[-3:]
    return ChildResult(ok=False, error=f"exit {proc.returncode}: " + " | ".join(tail)[-400:], wall_s=wall)


def link_copy(src: Path, dst: Path) -> None:
    """Copy a table directory: parquet data files are hard-linked (never modified in place by anyone),
    everything else (logs, catalogs, ledgers) is copied."""
    if dst.exists():
        shutil.rmtree(dst)

    def copy(s: str, d: str) -> None:
        if s.endswith(".parquet"):
            os.link(s, d)
        else:
            shutil.copy2(s, d)

    shutil.copytree(src, dst, copy_function=copy)


def machine() -> dict[str, Any]:
    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    mem_gib = None
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal"):
                mem_gib = round(int(line.split()[1]) / 1024 / 1024, 1)
    except OSError:
        pass
    return {"cpu": cpu, "cores": os.cpu_count(), "memory_gib": mem_gib, "os": platform.platform(),
            "python": platform.python_version(), "load_average": [round(x, 2) for x in os.getloadavg()]}


def versions() -> dict[str, str]:
    from importlib import metadata

    out = {}
    for name in ("delta-release", "deltalake", "polars", "pyarrow", "pyiceberg", "duckdb", "matplotlib"):
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            out[name] = "not installed"
    return out


def median(xs: list[float]) -> float:
    s = sorted(xs)
    n = len(s)
    return s[n // 2] if n % 2 else (s[n // 2 - 1] + s[n // 2]) / 2


def create_lake(path: Path | str, **kw: Any) -> Any:
    """A new lake at `path`: `Lake.create` where the package has it (readers never create a lake, issue
    17), else `Lake.open`, which created one before that."""
    from delta_release.lake import Lake

    make = getattr(Lake, "create", None) or Lake.open
    return make(path, **kw)


def layout_fingerprint() -> str:
    """A digest of the package modules that decide what a lake looks like on disk (the writer, staging,
    indexes). Cached lakes built by other code are rebuilt, so every run measures the
    package as it is."""
    import hashlib

    pkg = ROOT / "delta_release"
    h = hashlib.sha256()
    for sub in ("commit", "stage", "index"):
        p = pkg / sub
        files = sorted(p.rglob("*.py")) if p.is_dir() else [p] if p.exists() else []
        for f in files:
            h.update(str(f.relative_to(pkg)).encode())
            h.update(f.read_bytes())
    return h.hexdigest()[:16]


def write_long_line(out: Any, size: int, *, block_size: int = 8 << 20) -> int:
    """One event line of `size` bytes (an order id of x's) written block by block; returns 1 (lines)."""
    head, tail = b'{"schema_version": 2, "order_id": "', b'", "position": 1, "kind": "delete"}\n'
    out.write(head)
    left = size - len(head) - len(tail)
    block = b"x" * block_size
    while left > 0:
        out.write(block[:min(left, block_size)])
        left -= min(left, block_size)
    out.write(tail)
    return 1
