"""erase, rollback, vacuum."""

from __future__ import annotations

from typing import Any

import click

from ..arguments import FiniteFloat
from ..retention import (
    BACKUP_EXPIRY_DAYS,
    ORPHAN_GRACE_HOURS,
    RAW_RETENTION_DAYS,
    REPLAY_HORIZON_HOURS,
    RETAIN_VERSIONS,
)
from .base import Options, command_options, emit, open_lake


def _pending_text(pending: list[dict[str, Any]], vacuum: str) -> str:
    """Old data files wait for no date but for `vacuum --apply` (`vacuum`: that command, copy-pasteable)."""
    if not pending:
        return "nothing else holds the subject"
    return "still pending:\n" + "\n".join(
        f"  {p['what']} until `vacuum --apply` removes them: {vacuum}" if p["kind"] == "data_files"
        else f"  {p['what']} until {p['until']}" for p in pending)


def _ranges(ranges: list[list[int]]) -> str:
    """[[1, 3], [5, 5]] -> '1-3, 5' (not a Python list)."""
    return ", ".join(f"{a}-{b}" if a != b else f"{a}" for a, b in ranges) or "none"


def _why(removed: dict[str, Any]) -> str:
    if removed["reason"] == "refused_version":  # recent, but only versions no one may read still need it
        runs: list[list[int]] = []
        for v in removed["versions"]:
            if runs and runs[-1][1] == v - 1:
                runs[-1][1] = v
            else:
                runs.append([v, v])
        many = len(removed["versions"]) > 1
        return (f"refused_version: only version{'s' if many else ''} {_ranges(runs)} need{'' if many else 's'} it,"
                f" which hold{'' if many else 's'} an erased subject")
    return str(removed["reason"])


def vacuum_command(lake: str, table: str) -> str:
    import shlex

    table_arg = f" --table {shlex.quote(table)}" if table != "orders" else ""
    return f"delta-release --lake {shlex.quote(lake)} vacuum --apply{table_arg}"


@click.command()
@click.argument("order_id", required=False)
@click.option("--resume", is_flag=True,
              help="Complete erasures a killed writer left pending (every writer also does this first).")
@click.option("--table", default="orders", show_default=True)
@click.option("--raw-retention-days", type=FiniteFloat(), default=RAW_RETENTION_DAYS, show_default=True,
              help="How long raw batches are kept (they hold the subject until then).")
@click.option("--backup-expiry-days", type=FiniteFloat(), default=BACKUP_EXPIRY_DAYS, show_default=True,
              help="How long backups taken before the erasure live (0: no backups).")
@click.option("--force", is_flag=True, help="Erase (block) an id this lake never saw; refused (exit 3) without it.")
@command_options
def erase(opts: Options, order_id: str | None, resume: bool, table: str, raw_retention_days: float,
          backup_expiry_days: float, force: bool) -> None:
    """Erase ORDER_ID: one commit removes every row of it; its events are blocked from now on.
    `erase --resume` completes erasures left pending by a killed writer."""
    if resume == (order_id is not None):
        raise click.UsageError("give either ORDER_ID or --resume")
    lake = open_lake(opts)
    if order_id is None:
        done = lake.resume_erasures(table).to_json()
        emit(opts, done, f"completed {done['erasures_completed']} pending erasure(s)")
        return
    report = lake.erase(order_id, table=table, force=force, raw_retention_days=raw_retention_days,
                        backup_expiry_days=backup_expiry_days or None).to_json()
    where = "nothing to remove" if report["version"] is None else f"version {report['version']}"
    text = (f"erased subject {report['subject'][:16]} from {table}: {report['rows_removed']} row(s) removed"
            f" ({where}); versions that still hold it are refused: {_ranges(report['exposed_versions'])}\n"
            + _pending_text(report["pending"], vacuum_command(lake.storage.root, table)))
    emit(opts, report, text)


@click.command()
@click.option("--to", "to", type=int, required=True, metavar="N", help="The version to restore.")
@click.option("--repair-forward", is_flag=True,
              help="When N holds an erased subject, commit N's content without every erased subject.")
@click.option("--table", default="orders", show_default=True)
@click.option("--dry-run", is_flag=True, help="Show the plan (target, files added and removed, erased rows left"
                                              " out) and commit nothing.")
@command_options
def rollback(opts: Options, to: int, repair_forward: bool, table: str, dry_run: bool) -> None:
    """Restore version N as a new version if allowed; else refuse (exit 3), or repair forward."""
    report = open_lake(opts).rollback(to, repair_forward=repair_forward, table=table, dry_run=dry_run).to_json()
    if dry_run:
        emit(opts, report, _rollback_plan_text(report))
        return
    if report["version"] is None:
        emit(opts, report, _same_files(report) + ": nothing committed")
        return
    text = (f"{table}: {report['mode']} of version {report['restored_to']} committed as version"
            f" {report['version']} (+{len(report['files_added'])} -{len(report['files_removed'])} files"
            + (f", {report['rows_dropped']} erased row(s) left out" if report["mode"] == "repair-forward" else "")
            + ")")
    emit(opts, report, text)


def _same_files(r: dict[str, Any]) -> str:
    return f"{r['table']}: version {r['restored_to']} holds the same files as the latest version {r['parent']}"


_LISTED = 20  # files listed by name in a dry run's text; the rest are counted


def _rollback_plan_text(r: dict[str, Any]) -> str:
    left_out = (f"{r['rows_dropped']} row(s) of {r['erased_subjects']} erased subject(s) left out"
                if r["mode"] == "repair-forward" else "no erased subject in it: nothing left out")
    if not (r["files_added"] or r["files_removed"] or r["partitions_rewritten"]):
        return f"dry run: {_same_files(r)}: the rollback would commit nothing"
    lines = [f"dry run: {r['table']}: {r['mode']} of version {r['restored_to']} would be committed on version"
             f" {r['parent']} as version {r['parent'] + 1}; nothing was committed",
             f"  files added: {len(r['files_added'])}, files removed: {len(r['files_removed'])}"
             + (f", partitions rewritten: {', '.join(r['partitions_rewritten'])}" if r["partitions_rewritten"] else ""),
             f"  erased rows: {left_out}"]
    for sign, key in (("+", "files_added"), ("-", "files_removed")):
        lines += [f"  {sign} {path}" for path in r[key][:_LISTED]]
        if len(r[key]) > _LISTED:
            lines.append(f"  {sign} ... and {len(r[key]) - _LISTED} more")
    lines.append("to commit it: the same command without --dry-run")
    return "\n".join(lines)


@click.command()
@click.option("--apply", is_flag=True, help="Delete the files (default: a dry run that only reports).")
@click.option("--dry-run", is_flag=True, help="Only report (the default).")
@click.option("--table", default="orders", show_default=True)
@click.option("--retain-versions", type=click.IntRange(min=0), default=RETAIN_VERSIONS, show_default=True,
              help="The newest N versions stay readable and restorable.")
@click.option("--replay-horizon-hours", type=FiniteFloat(), default=REPLAY_HORIZON_HOURS, show_default=True,
              help="Versions committed within this many hours stay readable (0: off).")
@click.option("--orphan-grace-hours", type=FiniteFloat(), default=ORPHAN_GRACE_HOURS, show_default=True,
              help="Files in no version (staged by a writer) are kept until this old.")
@command_options
def vacuum(opts: Options, apply: bool, dry_run: bool, table: str, retain_versions: int,
           replay_horizon_hours: float, orphan_grace_hours: float) -> None:
    """Retention- and erasure-aware cleanup of data files that no needed snapshot references."""
    if apply and dry_run:
        raise click.UsageError("--apply and --dry-run exclude each other")
    from .. import progress

    with progress.step(f"vacuum {table} ({'apply' if apply else 'dry run'})"):
        report = open_lake(opts).vacuum(table, apply=apply, retain_versions=retain_versions,
                                        replay_horizon_hours=replay_horizon_hours,
                                        orphan_grace_hours=orphan_grace_hours).to_json()
    verb = "removed" if apply else "would remove"
    by_reason = ", ".join(f"{k}={v}" for k, v in report["removed_by_reason"].items())
    lines = [f"{table}: {verb} {len(report['removed'])} file(s), {report['bytes_removed']} bytes"
             + (f" ({by_reason})" if by_reason else "")
             + f"; kept {len(report['kept'])} old file(s) and {report['kept_current']} current"]
    lines += [f"  {verb}: {r['path']} ({_why(r)})" for r in report["removed"]]
    lines += [f"  kept: {k['path']} ({k['reason']})" for k in report["kept"]]
    lines += [f"  {verb if t['action'] != 'kept' else 'kept'} temp file: {t['path']} ({t['state']}, {t['size']} bytes)"
              for t in report["temp_files"]]
    if not apply:
        lines.append("dry run: nothing was deleted; use --apply")
    emit(opts, report, "\n".join(lines))
