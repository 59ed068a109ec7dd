"""gate MANIFEST, publish MANIFEST: external partitions through the manifest-vs-inventory gate."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from .base import CREATE_HELP, Options, command_options, emit, lake_options, open_lake

_LISTS = ("missing", "unexpected", "size_mismatch", "count_mismatch", "checksum_mismatch", "schema_mismatch")


def _gate_text(r: dict[str, Any], where: str) -> str:
    head = (f"{r['table']} {where} generation {r['generation']}: "
            f"{'gate passed' if r['ok'] else 'GATE FAILED'} ({r['files']} files)")
    lines = [head]
    for kind in _LISTS:
        for path in r[kind]:
            lines.append(f"  {kind}: {path}: {'; '.join(r['details'].get(path, []))}")
    if r["retained"]:
        lines.append(f"  retained from earlier generations: {len(r['retained'])} files")
    return "\n".join(lines)


@click.command()
@click.argument("manifest", type=click.Path(path_type=Path))
@command_options
def gate(opts: Options, manifest: Path) -> None:
    """Check a producer manifest against the partition's object inventory; registers nothing."""
    gated = open_lake(opts).gate(manifest)
    report = gated.to_json()
    emit(opts, report, _gate_text(report, gated.directory), exit_code=0 if report["ok"] else 3)


@click.command()
@click.argument("manifest", type=click.Path(path_type=Path))
@click.option("--create", is_flag=True, help=CREATE_HELP)
@command_options
def publish(opts: Options, manifest: Path, create: bool) -> None:
    """Gate, then one strict Delta commit of the files, then the catalog generation, then cache refresh."""
    from ..lake import Lake

    # a bad manifest creates no lake, nor does --create where the manifest's objects are not
    Lake.check_manifest(opts.lake, manifest, storage_options=lake_options(opts), create=create)
    published = open_lake(opts, create=create).publish(manifest)
    report = published.to_json()
    text = _gate_text(report, published.gate.directory)
    if report["ok"]:
        cat = report["catalog"] or {}
        state = "already published" if report["already_published"] else "published"
        text += (f"\n{state}: version {report['version']}, catalog generation {cat.get('generation')}"
                 f" ({cat.get('label')}); +{len(report['added'])} -{len(report['removed'])} files;"
                 f" cache refreshed at {(report['cache'] or {}).get('refresh_completed')}")
    else:
        text += "\nnothing registered; the last published version stays readable"
    emit(opts, report, text, exit_code=0 if report["ok"] else 3)

