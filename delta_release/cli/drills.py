"""drill conflict|erasure|crash|freshness: scripted drills in a scratch lake; pass/fail evidence."""

from __future__ import annotations

from collections.abc import Callable

import click

from .base import Options, command_options, emit


@click.group()
def drill() -> None:
    """Scripted drills in a scratch lake (the lake named by --lake); exit 3 when a drill fails."""


DRILL_KEYS = ("drill", "lake", "passed", "checks")  # every drill's JSON starts with these


def _figures(value: object, prefix: str = "", depth: int = 0) -> list[str]:
    """The drill's evidence as `key: value` lines: scalars up to three levels deep; lists as their length."""
    out: list[str] = []
    if isinstance(value, dict):
        for k, v in value.items():
            if prefix == "" and k in DRILL_KEYS:
                continue
            key = f"{prefix}.{k}" if prefix else str(k)
            if isinstance(v, dict) and depth < 2 and len(v) <= 12:
                out += _figures(v, key, depth + 1)
            elif isinstance(v, dict):
                out.append(f"{key}: {len(v)} entries")
            elif isinstance(v, list):
                simple = all(not isinstance(i, dict | list) for i in v)
                out.append(f"{key}: {', '.join(map(_scalar, v)) or 'none'}" if simple and len(v) <= 4
                           else f"{key}: {len(v)} item(s)")
            else:
                out.append(f"{key}: {_scalar(v)}")
    return out


def _scalar(value: object) -> str:
    """A figure as a person reads it: no Python `None`, `True` or list brackets."""
    if value is None:
        return "none"
    if isinstance(value, bool):
        return "yes" if value else "no"
    return str(value)


def _timed(name: str, run: Callable[[], dict[str, object]]) -> dict[str, object]:
    from .. import progress

    with progress.step(f"drill {name}"):
        return run()


def emit_drill(opts: Options, result: dict[str, object], name: str) -> None:
    import os

    lake = opts.lake if "://" in opts.lake else os.path.abspath(opts.lake)
    result = {"drill": name, "lake": lake, "passed": result["passed"], "checks": result.get("checks", {}),
              **{k: v for k, v in result.items() if k not in DRILL_KEYS}}
    checks = result["checks"]
    assert isinstance(checks, dict)
    lines = [f"drill {name}: {'PASSED' if result['passed'] else 'FAILED'} (lake {lake})"]
    lines += [f"  {'ok  ' if ok else 'FAIL'} {check}" for check, ok in checks.items()]
    figures = _figures(result)
    if figures:
        lines.append("figures:")
        lines += [f"  {f}" for f in figures]
    emit(opts, result, "\n".join(lines), exit_code=0 if result["passed"] else 3)


@drill.command("conflict")
@command_options
def conflict(opts: Options) -> None:
    """Two writers on snapshot 41: the stale one is refused, reloads, applies the tombstone, rebuilds."""
    from ..drills.conflict import run_conflict_drill

    emit_drill(opts, _timed("conflict", lambda: run_conflict_drill(opts.lake)), "conflict")


@drill.command("erasure")
@command_options
def erasure(opts: Options) -> None:
    """Ingest, erase, replay, ingest a newer event, pinned read and rollback: the subject never returns."""
    from ..drills.erasure import run_erasure_drill

    emit_drill(opts, _timed("erasure", lambda: run_erasure_drill(opts.lake)), "erasure")


@drill.command("crash", epilog="The full drill kills about 60 times and takes about 7 minutes on 2 cores; one"
                                " writer takes about 10 s (vacuum) to 2 minutes (ingest). Progress (kills done, ETA)"
                                " shows on stderr when it is a terminal.")
@click.option("--writers", metavar="NAMES", default=None,
              help="Only these writers, comma-separated: ingest, ingest-parts, replay, erase, rollback, vacuum,"
                   " publish, run, migrate, replay-all (default: all).")
@command_options
def crash(opts: Options, writers: str | None) -> None:
    """SIGKILL every writer (ingest, ingest-parts, replay, erase, rollback, vacuum, publish, run, migrate,
    replay-all) at each step; check, rerun."""
    from ..drills.crash import run_crash_drill, writer_names

    chosen = writer_names(writers) if writers is not None else None  # exit 2 before any work
    emit_drill(opts, run_crash_drill(opts.lake, writers=chosen), "crash")  # its own bar: kills done, ETA


@drill.command("freshness")
@click.option("--runs", type=click.IntRange(min=20), default=20, show_default=True,
              help="Planning-time runs for the p95 (at least 20).")
@command_options
def freshness(opts: Options, runs: int) -> None:
    """47 hourly telemetry partitions: partial hour rejected, stale readers refresh or fail, engines agree."""
    from ..drills.freshness import run_freshness_drill

    emit_drill(opts, _timed("freshness", lambda: run_freshness_drill(opts.lake, runs=runs)), "freshness")
