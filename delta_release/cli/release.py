"""run CONFIG.yaml"""

from __future__ import annotations

import click

from .base import Options, command_options, emit


def _fmt(value: object) -> str:
    return "-" if value is None else f"{100 * float(value):.1f}%"  # type: ignore[arg-type]


@click.command("run", epilog="--lake URI, when given, overrides the config's lake.uri (the packet records which"
                             " was used); without it the run uses lake.uri from the config.")
@click.argument("config")
@click.option("--executor", type=click.Choice(["local", "ray"]), default="local", show_default=True,
              help="Where the sources are decoded, folded and staged: this process, or a Ray cluster "
                   "($RAY_ADDRESS, else a local one; needs delta-release[distributed]).")
@command_options
def run(opts: Options, config: str, executor: str) -> None:
    """The YAML-configured release run: ingest, checks, drills, packet; ship or hold (exit 3).

    The whole config is checked before any work (exit 2 naming the file and the key). Progress shows on
    stderr when it is a terminal; the summary table and the decision go to stdout.
    """
    from .. import progress
    from ..release.run import run_release

    result = run_release(config, lake=opts.lake if opts.lake_given else None, executor=executor)
    if result.get("lake_created"):  # always said, even when progress is off
        click.echo(f"note: created a new lake at {result['lake']} (lake.create: true in {config})", err=True)
    snap = result["snapshot"]
    rows = [[s["check"], "pass" if s["passed"] else "FAIL", _fmt(s["observed"]) if s["observed"] is not None else "",
             f"{s.get('direction') or '<='} {_fmt(s['threshold'])}" if s["threshold"] is not None else "",
             f"{s['seconds']:.2f} s"]
            for s in result["summary"]]
    styles = ["green" if s["passed"] else "bold red" for s in result["summary"]]
    table = progress.table(["check", "result", "observed", "threshold", "time"], rows, styles=styles,
                           title=f"release run {result['run_id']} on {result['lake']}")
    where = (f"orders version {snap['version']}, generation {snap['generation']}" if snap["version"] is not None
             else f"nothing committed: the candidate staged on orders version {snap.get('parent')} was discarded")
    text = (f"{table}\n\ndecision: {result['decision'].upper()}  ({where})\n"
            + (f"held because: {', '.join(result['failed_checks'])}\n" if result["failed_checks"] else "")
            + f"packet: {result['packet']} (sha256 {result['packet_sha256'][:16]}...)\nreport: {result['report']}\n"
              f"all runs: {result['index']}")
    emit(opts, result, text, exit_code=0 if result["decision"] == "ship" else 3)
