"""drill conflict|erasure|crash|freshness: scripted drills in a scratch lake; pass/fail evidence."""

from __future__ import annotations

import click

from .base import Options, command_options, emit


@click.group()
def drill() -> None:
    """Scripted drills in a scratch lake (the lake named by --lake); exit 3 when a drill fails."""


def emit_drill(opts: Options, result: dict[str, object], name: str) -> None:
    checks = result.get("checks", {})
    assert isinstance(checks, dict)
    lines = [f"drill {name}: {'PASSED' if result['passed'] else 'FAILED'}"]
    lines += [f"  {'ok  ' if ok else 'FAIL'} {check}" for check, ok in checks.items()]
    emit(opts, result, "\n".join(lines), exit_code=0 if result["passed"] else 3)


@drill.command("conflict")
@command_options
def conflict(opts: Options) -> None:
    """Two writers on snapshot 41: the stale one is refused, reloads, applies the tombstone, rebuilds."""
    from ..drills.conflict import run_conflict_drill

    emit_drill(opts, run_conflict_drill(opts.lake), "conflict")


@drill.command("erasure")
@command_options
def erasure(opts: Options) -> None:
    """Ingest, erase, replay, ingest a newer event, pinned read and rollback: the subject never returns."""
    from ..drills.erasure import run_erasure_drill

    emit_drill(opts, run_erasure_drill(opts.lake), "erasure")


@drill.command("crash")
@command_options
def crash(opts: Options) -> None:
    """SIGKILL every writer (ingest, replay, erase, rollback, vacuum, publish, run) at each step; check, rerun."""
    from ..drills.crash import run_crash_drill

    emit_drill(opts, run_crash_drill(opts.lake), "crash")


@drill.command("freshness")
@click.option("--runs", type=click.IntRange(min=20), default=20, show_default=True,
              help="Planning-time runs for the p95 (at least 20).")
@command_options
def freshness(opts: Options, runs: int) -> None:
    """47 hourly telemetry partitions: partial hour rejected, stale readers refresh or fail, engines agree."""
    from ..drills.freshness import run_freshness_drill

    emit_drill(opts, run_freshness_drill(opts.lake, runs=runs), "freshness")
