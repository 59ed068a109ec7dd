"""Peak memory on hostile sizes (issue 17.4): one batch file of SIZE bytes, either a single line (over the
line limit: quarantined as bad_value without being held) or normal event lines, streamed through
`file_parts` (hash + decode, one part of at most the part limit at a time: contract/parts.py) or the whole
`Lake.ingest` (per part: decode, raw store copy, quarantine, apply, commit; one publication at the end).
Each run is a fresh child process; its peak RSS is ru_maxrss.

    python -m benchmarks.bench_memory build KIND SIZE FILE      # KIND: long | lines
    python -m benchmarks.bench_memory run STEP FILE LAKE_DIR     # STEP: decode | ingest
    python -m benchmarks.bench_memory [--size 64M] [--keep]      # all four, printed as a table

The small default keeps `make bench` quick; `--size 2G` is the issue's case (about 10 minutes here).
"""

from __future__ import annotations

import argparse
import shutil
import sys
import time
from pathlib import Path
from typing import Any

from ._common import FIXED_BUDGET_MB, data_dir, emit, run_child, write_long_line

KINDS = ("long", "lines")
STEPS = ("decode", "ingest")
BLOCK = 8 << 20


def parse_size(text: str) -> int:
    units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    text = text.strip().upper().removesuffix("B").removesuffix("I")
    return int(float(text[:-1]) * units[text[-1]]) if text and text[-1] in units else int(text)


def build(kind: str, size: int, path: Path) -> int:
    """Write the file in blocks (the builder holds one block); returns its line count."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "wb") as out:
        if kind == "long":
            return write_long_line(out, size, block_size=BLOCK)
        written, i, step = 0, 0, 50_000
        while written < size:
            chunk = "".join(
                f'{{"schema_version": 2, "order_id": "ord-{j % 1_000_003:07d}", "position": {j}, '
                f'"kind": "upsert", "amount_cents": {j * 7919 % 1_000_000}, "event_day": {j % 365}}}\n'
                for j in range(i, i + step)).encode()
            out.write(chunk)
            written += len(chunk)
            i += step
        return i


def run(step: str, path: Path, lake_dir: Path) -> dict[str, Any]:
    import delta_release as dr
    from delta_release.contract.parts import max_part_bytes

    t0 = time.perf_counter()
    if step == "decode":
        out = read_parts(path)
    else:
        shutil.rmtree(lake_dir, ignore_errors=True)
        report = dr.Lake.create(lake_dir).ingest(path)
        out = {"extracted": report.extracted, "accepted": report.accepted, "rejected": report.quarantined,
               "version": report.version, "parts": len(report.parts) or 1, "reasons": None}
    out["seconds"] = time.perf_counter() - t0
    out["max_part_bytes"] = max_part_bytes()
    return out


def read_parts(path: Path) -> dict[str, Any]:
    """`file_parts` of the file (each part hashed and strictly decoded, one part's events in memory at a
    time, as `Lake.ingest` reads it; nothing stored): its lines, accepted events, rejects and their reasons."""
    from delta_release.contract.parts import file_parts

    out: dict[str, Any] = {"extracted": 0, "accepted": 0, "rejected": 0, "parts": 0}
    reasons: set[str] = set()
    for batch in file_parts(path):
        d = batch.decoded
        out["extracted"] += d.extracted
        out["accepted"] += d.accepted
        out["rejected"] += len(d.rejects)
        out["parts"] += 1
        reasons.update(r.reason.value for r in d.rejects)
        del batch, d
    out["reasons"] = sorted(reasons)
    return out


def measure(size: int, *, keep: bool = False, log: Any = None) -> dict[str, Any]:
    """Build both files of `size` bytes (cached) and run both steps on each in fresh processes."""
    root = data_dir_for_memory()
    out: dict[str, Any] = {"size": size, "runs": {}}
    for kind in KINDS:
        path = root / f"{kind}_{size}.jsonl"
        if not path.exists():
            tmp = path.with_suffix(".partial")
            t0 = time.perf_counter()
            build(kind, size, tmp)
            tmp.rename(path)
            if log:
                log(f"  built {path.name} in {time.perf_counter() - t0:.0f}s")
        for step in STEPS:
            res = run_child("benchmarks.bench_memory", "run", step, str(path), str(root / "lake"), timeout=7200)
            out["runs"][f"{kind}|{step}"] = {"ok": res.ok, "error": res.error, **res.data}
            if log:
                done = f"{res.data['seconds']:.1f}s peak {res.data['maxrss_mb']:.0f} MiB" if res.ok else ""
                log(f"  memory {kind:<5} {step:<6} " + (done or f"FAILED {res.error}"))
        if not keep and size >= 1 << 30:
            path.unlink()
    shutil.rmtree(root / "lake", ignore_errors=True)
    return out


def data_dir_for_memory() -> Path:
    from ._common import SCALES

    return data_dir(SCALES["tiny"]).parent / "memory"


def rows(res: dict[str, Any]) -> list[tuple[str, str, str, str, str]]:
    from delta_release.contract.lines import MAX_LINE_BYTES

    size = res["size"]
    out = []
    budget_mb = 3 * MAX_LINE_BYTES / 2**20
    for key, r in res["runs"].items():
        kind, step = key.split("|")
        what = "one line (over the limit)" if kind == "long" else "normal event lines"
        part = f"{r.get('parts', 1)} part(s) of <= {r.get('max_part_bytes', 0) / 2**20:g} MiB" if r["ok"] else ""
        label = (f"{'file_parts (hash+decode)' if step == 'decode' else 'Lake.ingest'}, {size / 2**30:.2f} GiB "
                 f"file of {what}" + (f", {part}" if part else ""))
        if not r["ok"]:
            out.append(("memory", label, "failed: " + str(r["error"])[:80], "", ""))
            continue
        fig = (f"peak {r['maxrss_mb']:,.0f} MiB, {r['seconds']:.1f} s ({r['extracted']:,} lines, "
               f"{r['accepted']:,} accepted, {r['rejected']:,} quarantined)")
        ratio = f"peak/file = {r['maxrss_mb'] * 2**20 / size:.2f}x"
        # Bounded by 3x the line limit (no accepted line is longer) plus the fixed budget, for either kind.
        bound = budget_mb + FIXED_BUDGET_MB
        target = (f"<= 3x the line limit + {FIXED_BUDGET_MB} MiB = {bound:,.0f} MiB"
                  + (" (met)" if r["maxrss_mb"] <= bound else " (NOT met)"))
        out.append(("memory", label, fig, ratio, target))
    return out


def main(argv: list[str]) -> None:
    if argv and argv[0] == "build":
        kind, size, path = argv[1], parse_size(argv[2]), Path(argv[3])
        print(build(kind, size, path))
        return
    if argv and argv[0] == "run":
        step, path, lake = argv[1], Path(argv[2]), Path(argv[3])
        emit(run(step, path, lake))
        return
    ap = argparse.ArgumentParser(prog="python -m benchmarks.bench_memory")
    ap.add_argument("--size", default="64M", help="file size (64M default; 2G is the issue's case)")
    ap.add_argument("--keep", action="store_true", help="keep the generated files")
    args = ap.parse_args(argv)
    res = measure(parse_size(args.size), keep=args.keep, log=lambda m: print(m, file=sys.stderr, flush=True))
    for row in rows(res):
        print(" | ".join(row))


if __name__ == "__main__":
    main(sys.argv[1:])
