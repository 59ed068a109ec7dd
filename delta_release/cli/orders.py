"""ingest, replay, read, history."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from ..errors import InputError
from .base import CREATE_HELP, Options, command_options, emit, open_lake


def _batch_text(r: dict[str, Any]) -> str:
    reasons = ", ".join(f"{k}={v}" for k, v in r["reasons"].items()) or "none"
    version = "unchanged (nothing to apply)" if r["version"] is None else f"version {r['version']}"
    dup = " (already ingested)" if r.get("duplicate") else ""
    if r.get("parts"):  # a file over the part limit: one batch per part (delta_release/parts.py)
        dup += f" and {len(r['parts']) - 1} more parts"
    return (f"batch {r['batch_id']}{dup}: extracted {r['extracted']}, accepted {r['accepted']}, "
            f"quarantined {r['quarantined']} ({reasons}); {version}")


@click.command()
@click.argument("path", metavar="BATCH", type=str)
@click.option("--create", is_flag=True, help=CREATE_HELP)
@click.option("--executor", type=click.Choice(["local", "ray"]), default="local", show_default=True,
              help="Where a file in parts runs: this process, or a Ray cluster ($RAY_ADDRESS, else a local one; "
                   "needs delta-release[distributed]).")
@command_options
def ingest(opts: Options, path: str, create: bool, executor: str) -> None:
    """Decode, keep raw, quarantine, apply, gate, commit and publish one JSONL batch."""
    if not path.strip():  # (Path("") is ".": "batch file is a directory: ." said nothing useful)
        raise InputError("batch path is empty", path=path)
    batch = Path(path)
    if not batch.is_file():  # before the lake is opened: a bad argument creates nothing
        what = "is a directory" if batch.is_dir() else "is not a regular file" if batch.exists() else "not found"
        raise InputError(f"batch file {what}: {batch}", path=str(batch))
    from .. import progress
    from ..lake import Lake

    Lake.part_limit()  # a bad DELTA_RELEASE_MAX_PART_BYTES is refused before the lake is opened
    Lake.check_executor(executor)  # and --executor ray without Ray installed

    size = batch.stat().st_size
    with progress.work(f"ingest {batch.name}", size, phases=progress.INGEST_PHASES, parts=True):  # bytes, ETA
        report = open_lake(opts, create=create).ingest(batch, executor=executor).to_json()
    emit(opts, report, _batch_text(report))


@click.command()
@click.argument("batch_id", required=False)
@click.option("--all", "all_batches", is_flag=True, help="Replay every retained raw batch.")
@command_options
def replay(opts: Options, batch_id: str | None, all_batches: bool) -> None:
    """Re-apply retained raw batches (idempotent)."""
    if not batch_id and not all_batches:
        raise InputError("replay needs a BATCH_ID or --all")
    if batch_id and all_batches:
        raise InputError(f"replay takes a BATCH_ID or --all, not both (got {batch_id!r} and --all)")
    reports = [r.to_json() for r in open_lake(opts).replay(batch_id, all_batches=all_batches)]
    payload = reports[0] if batch_id and len(reports) == 1 else {"batches": reports}
    emit(opts, payload, "\n".join(_batch_text(r) for r in reports) or "no raw batches")


@click.command()
@click.option("--table", default="orders", show_default=True)
@click.option("--version", type=int, default=None, help="Pinned Delta version (default: published).")
@click.option("--engine", type=click.Choice(["polars", "duckdb"]), default="polars", show_default=True)
@command_options
def read(opts: Options, table: str, version: int | None, engine: str) -> None:
    """Current rows (tombstones and erased subjects never shown)."""
    lake = open_lake(opts)
    _, resolved = lake.gateway.resolve(table, version)
    frame, engine = lake.read_with(engine, table, version=resolved)
    rows = frame.to_dicts()
    emit(opts, {"table": table, "version": resolved, "engine": engine, "rows": rows},
         f"{table} at version {resolved}: {len(rows)} rows\n{frame}")


@click.command()
@click.option("--table", default="orders", show_default=True)
@command_options
def history(opts: Options, table: str) -> None:
    """Versions, generations, what each commit did, allowed or not."""
    entries = open_lake(opts).history(table)
    lines = [f"v{e['version']:>4}  {e['operation']:<14} +{e['files_added']} -{e['files_removed']} files"
             f"  gen={e['generations'] or '-'}  {'allowed' if e['allowed'] else 'NOT ALLOWED'}"
             for e in entries]
    emit(opts, {"table": table, "versions": entries}, "\n".join(lines))
