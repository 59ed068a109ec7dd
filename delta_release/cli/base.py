"""Shared CLI plumbing: global options (accepted before or after the command), output, one error funnel."""

from __future__ import annotations

import functools
import json
import sys
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import click

from ..errors import DeltaReleaseError, InputError, rust_panic


@dataclass(slots=True)
class Options:
    lake: str = "lake"
    json: bool = False
    debug: bool = False
    lake_given: bool = False  # --lake was on the command line (not the default)


def _merge(ctx: click.Context, lake: str | None, as_json: bool, debug: bool) -> Options:
    opts: Options = ctx.ensure_object(Options)
    if lake is not None:
        opts.lake = lake
        opts.lake_given = True
    opts.json = opts.json or as_json
    opts.debug = opts.debug or debug
    from .. import progress

    progress.configure(progress.wanted(opts.json))
    return opts


def command_options(fn: Callable[..., Any]) -> Callable[..., Any]:
    """Give a command the global options too, so `delta-release ingest f --json` works like `--json ingest`."""

    @click.option("--lake", "lake_", default=None, metavar="URI", help="Lake root (default ./lake).")
    @click.option("--json", "json_", is_flag=True, help="Machine output on stdout.")
    @click.option("--debug", "debug_", is_flag=True, help="Show tracebacks.")
    @click.pass_context  # type: ignore[arg-type]  # functools.wraps hides the signature click sees
    @functools.wraps(fn)
    def wrapper(ctx: click.Context, lake_: str | None, json_: bool, debug_: bool, **kw: Any) -> Any:
        opts = _merge(ctx, lake_, json_, debug_)
        try:
            return fn(opts, **kw)
        except DeltaReleaseError as exc:
            fail(opts, exc)
        except click.exceptions.Exit:
            raise
        except click.ClickException:
            raise
        except Exception as exc:  # noqa: BLE001 - the one funnel for unexpected errors
            storage_failure(opts, exc)
            internal_error(opts, exc)
        except BaseException as exc:
            if not rust_panic(exc):  # KeyboardInterrupt, SystemExit, ...
                raise
            internal_error(opts, exc)

    return wrapper


def storage_failure(opts: Options, exc: Exception) -> None:
    """An object store that refused or did not answer in the middle of a command: one line naming the
    setting to check (exit 2), as at open (s3config.py), not an "internal error"."""
    from .. import s3config

    if s3config.is_storage_failure(exc):
        try:
            options = s3config.resolve(opts.lake)
        except InputError:
            options = {}
        fail(opts, s3config.storage_error("the object store failed", exc, options))


def internal_error(opts: Options, exc: BaseException) -> None:
    """An unexpected error as one line (exit 1): its type and the first line of its message."""
    if opts.debug:
        traceback.print_exception(exc)
    fail(opts, DeltaReleaseError(f"internal error: {type(exc).__name__}: {_one_line(str(exc))}"))


def _one_line(text: str) -> str:
    return text.strip().splitlines()[0] if text.strip() else ""


def fail(opts: Options, exc: DeltaReleaseError) -> None:
    if opts.json:
        click.echo(json.dumps({"error": exc.to_json()}, default=str))
    else:
        click.echo(f"error: {_one_line(exc.message)}", err=True)
    if opts.debug and exc.__cause__ is not None:
        traceback.print_exception(exc.__cause__)
    sys.exit(exc.exit_code)


def emit(opts: Options, payload: dict[str, Any], text: str, *, exit_code: int = 0) -> None:
    if opts.json:
        click.echo(json.dumps(payload, default=str, sort_keys=False))
    else:
        click.echo(text)
    if exit_code:
        sys.exit(exit_code)


def lake_options(opts: Options) -> dict[str, str]:
    """The storage options of the --lake URI: for s3://, the AWS_* environment variables and the AWS
    profile, resolved as every entry point resolves them (delta_release/s3config.py)."""
    from .. import s3config

    return s3config.resolve(opts.lake)


CREATE_HELP = "Create the lake when --lake holds none (else exit 2; `delta-release init URI` creates one too)."


def open_lake(opts: Options, *, create: bool = False, **kw: Any) -> Any:
    """Open the lake named by --lake. For an s3:// lake the storage options come from the standard AWS_*
    environment variables or the AWS profile (never from the command line, so secrets stay out of shell
    history).

    A missing lake is created only when asked by name: `init`, or `--create` on ingest, publish and
    register (which then say so on stderr). Anything else refuses a URI that holds no lake (exit 2, naming
    both ways to create it), so a typo in --lake never forks the lake."""
    lake = lake_at(opts, create=create, **kw)
    if lake.created:
        click.echo(f"note: created a new lake at {lake.storage.root}", err=True)
    return lake


def lake_at(opts: Options, *, create: bool, **kw: Any) -> Any:
    """`open_lake` without the note: the Lake at --lake (LakeNotFoundError naming --lake when missing)."""
    from ..errors import LakeNotFoundError
    from ..lake import Lake

    if not opts.lake.strip():  # Path("") is the current directory: never a lake by accident
        raise InputError("--lake must not be empty", argument="--lake")
    if opts.lake.startswith("s3://") and "storage_options" not in kw:
        kw["storage_options"] = lake_options(opts)
    try:
        return Lake.open(opts.lake, create=create, **kw)
    except LakeNotFoundError as exc:  # name the argument the user typed
        raise LakeNotFoundError(exc.uri, argument="--lake") from None
