"""One line for every usage error: click's own errors (bad option value, unknown command, missing
argument) print `error: <command>: <what>` on stderr (or the `{"error": ...}` object with --json) and
exit 2, like every other input error, instead of click's usage block and hint."""

from __future__ import annotations

import json
from typing import Any

import click

# click >= 8.2 raises this for a bare group (its help); older click prints the help itself
_NoArgsIsHelp: type[Exception] = getattr(click.exceptions, "NoArgsIsHelpError", type("_Never", (Exception,), {}))


class OneLineUsageError(click.ClickException):
    exit_code = 2

    def __init__(self, cause: click.ClickException, *, as_json: bool) -> None:
        ctx = getattr(cause, "ctx", None)
        where = f"{ctx.command_path}: " if ctx is not None else ""
        text = " ".join(cause.format_message().split())  # click's messages may span lines
        super().__init__(f"{where}{text}")
        self.kind = type(cause).__name__
        self.as_json = as_json

    def show(self, file: Any = None) -> None:
        if self.as_json:
            click.echo(json.dumps({"error": {"type": self.kind, "message": self.message}}))
        else:
            click.echo(f"error: {self.message}", err=True)


class OneLineGroup(click.Group):
    """The top-level group: its parse and every subcommand's parse report usage errors in one line."""

    _as_json = False

    def make_context(self, info_name: str | None, args: list[str], parent: click.Context | None = None,
                     **extra: Any) -> click.Context:
        if parent is None:
            OneLineGroup._as_json = "--json" in args
        try:
            return super().make_context(info_name, args, parent=parent, **extra)
        except (OneLineUsageError, _NoArgsIsHelp):  # a bare group prints its help, as before
            raise
        except click.ClickException as exc:
            raise OneLineUsageError(exc, as_json=OneLineGroup._as_json) from exc

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except (OneLineUsageError, _NoArgsIsHelp):  # a bare group prints its help, as before
            raise
        except click.ClickException as exc:
            raise OneLineUsageError(exc, as_json=OneLineGroup._as_json) from exc
