"""gate MANIFEST, publish MANIFEST: external partitions through the manifest-vs-inventory gate."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from ..errors import InputError
from .base import CREATE_HELP, Options, command_options, emit, lake_options, open_lake

_LISTS = ("missing", "unexpected", "size_mismatch", "count_mismatch", "checksum_mismatch", "schema_mismatch")


def _gate_text(r: dict[str, Any]) -> str:
    from ..external.manifest import partition_directory

    where = " ".join(partition_directory(k, v) for k, v in r["partition"].items())  # hour=09, not {'hour': 9}
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
    from ..external import gate_manifest, load_manifest

    lake = open_lake(opts)
    report = gate_manifest(lake, load_manifest(manifest, lake.tables)).to_json()
    emit(opts, report, _gate_text(report), exit_code=0 if report["ok"] else 3)


@click.command()
@click.argument("manifest", type=click.Path(path_type=Path))
@click.option("--create", is_flag=True, help=CREATE_HELP)
@command_options
def publish(opts: Options, manifest: Path, create: bool) -> None:
    """Gate, then one strict Delta commit of the files, then the catalog generation, then cache refresh."""
    from ..external import load_manifest, publish_manifest
    from ..tables import DEFAULT_TABLES_DIR, load_table_defs

    parsed = load_manifest(manifest, load_table_defs(DEFAULT_TABLES_DIR))  # a bad manifest creates no lake
    if create:
        _nothing_to_publish_without_a_lake(opts, parsed)
    lake = open_lake(opts, create=create)
    report = publish_manifest(lake, load_manifest(manifest, lake.tables)).to_json()
    text = _gate_text(report)
    if report["ok"]:
        cat = report["catalog"] or {}
        state = "already published" if report["already_published"] else "published"
        text += (f"\n{state}: version {report['version']}, catalog generation {cat.get('generation')}"
                 f" ({cat.get('label')}); +{len(report['added'])} -{len(report['removed'])} files;"
                 f" cache refreshed at {(report['cache'] or {}).get('refresh_completed')}")
    else:
        text += "\nnothing registered; the last published version stays readable"
    emit(opts, report, text, exit_code=0 if report["ok"] else 3)


def _nothing_to_publish_without_a_lake(opts: Options, manifest: Any) -> None:
    """When --lake holds no lake, `publish --create` may create one only where the producer put the manifest's
    objects (its partition folder under the table's root): a mistyped --lake has none, and its gate would
    fail after the lake had been created. InputError (exit 2), nothing created."""
    from ..lakeroot import holds_lake
    from ..storage import Storage
    from ..tables import DEFAULT_TABLES_DIR, load_table_defs

    root = Storage(opts.lake, lake_options(opts))
    if holds_lake(root):
        return
    tdef = load_table_defs(DEFAULT_TABLES_DIR)[manifest.table]
    folder = f"{tdef.location or tdef.name}/{manifest.directory}"
    if not root.list(folder, recursive=False):
        raise InputError(f"--lake {opts.lake}: holds no lake, and the manifest's objects are not there "
                         f"({folder}/ is empty or missing): nothing to publish", argument="--lake")
