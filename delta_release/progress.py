"""Progress on long work, shown on stderr only when it is a terminal and the output is not `--json`.

One module, small call sites:

    from . import progress
    with progress.step("ingest big.jsonl"):          # a spinner with elapsed time, then "✓ ... 3.2 s"
        ...
    for p in progress.track(points, "crash points"): # a bar with n/N
        ...

Off by default (the Python API and tests print nothing); the CLI turns it on with `configure()` when
stderr is a terminal and `--json` is not given. Nested steps share one live display (rich allows only one):
an inner step is an indented, transient row under the outer one. When off, every call is a cheap no-op.
"""

from __future__ import annotations

import io
import sys
import time
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any, TypeVar

T = TypeVar("T")

_enabled = False
_live: Any = None  # the rich Progress of the outermost running step
_depth = 0


def configure(enabled: bool) -> None:
    """Turn progress on or off (the CLI: on when stderr is a terminal and --json is off)."""
    global _enabled
    _enabled = bool(enabled)


def wanted(as_json: bool) -> bool:
    return not as_json and sys.stderr.isatty()


def enabled() -> bool:
    return _enabled


class Task:
    """Handle of a running step: `advance()` moves its bar, `note()` changes its text. No-op when off."""

    def __init__(self, live: Any = None, task_id: Any = None, label: str = "") -> None:
        self._live, self._id, self.label = live, task_id, label

    def advance(self, n: int = 1) -> None:
        if self._live is not None:
            self._live.advance(self._id, n)

    def note(self, text: str) -> None:
        if self._live is not None:
            self._live.update(self._id, description=f"{self.label} [dim]{text}[/dim]")


def _new_live() -> Any:
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

    return Progress(SpinnerColumn(finished_text="[green]✓[/green]"), TextColumn("{task.description}"),
                    BarColumn(bar_width=24), MofNCompleteColumn(), TimeElapsedColumn(),
                    console=Console(stderr=True), transient=False)


@contextmanager
def step(label: str, total: int | None = None) -> Iterator[Task]:
    """A unit of long work. On a terminal: a spinner (or a bar when `total` is given) with elapsed time."""
    global _live, _depth
    if not _enabled:
        yield Task()
        return
    outer = _live is None
    if outer:
        _live = _new_live()
        _live.start()
    live = _live
    _depth += 1
    text = "  " * (_depth - 1) + label
    task_id = live.add_task(text, total=total)
    started = time.perf_counter()
    ok = False
    try:
        yield Task(live, task_id, text)
        ok = True
    finally:
        _depth -= 1
        seconds = time.perf_counter() - started
        if outer:
            mark = "" if ok else "[red]✗[/red] "
            live.update(task_id, description=f"{mark}{text} [dim]({seconds:.1f} s)[/dim]",
                        total=total or 1, completed=total or 1)
            live.stop()
            _live = None
        else:
            live.remove_task(task_id)


def track(items: Iterable[T], label: str, total: int | None = None) -> Iterator[T]:
    """Iterate with a bar of n/N on a terminal; a plain pass-through otherwise."""
    if not _enabled:
        yield from items
        return
    if total is None and isinstance(items, Sequence):
        total = len(items)
    with step(label, total=total) as task:
        for item in items:
            yield item
            task.advance()


def table(columns: Sequence[str], rows: Sequence[Sequence[Any]], *, title: str = "",
          styles: Sequence[str | None] | None = None, colour: bool | None = None) -> str:
    """A summary table as text: rich box drawing and colour when stdout is a terminal, else plain aligned
    columns (so pipes and logs stay greppable). `styles` colours whole rows (e.g. "green", "red")."""
    if colour is None:
        colour = sys.stdout.isatty()
    if colour:
        from rich.console import Console
        from rich.table import Table

        t = Table(title=title or None, title_justify="left")
        for c in columns:
            t.add_column(c, overflow="fold")
        for i, row in enumerate(rows):
            t.add_row(*(str(v) for v in row), style=(styles[i] if styles else None))
        buf = io.StringIO()
        Console(file=buf, force_terminal=True, width=max(100, min(160, _term_width()))).print(t)
        return buf.getvalue().rstrip("\n")
    cells = [[str(c) for c in columns]] + [[str(v) for v in row] for row in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(columns))]
    lines = [title] if title else []
    for n, r in enumerate(cells):
        lines.append("  ".join(v.ljust(widths[i]) if i < len(r) - 1 else v for i, v in enumerate(r)).rstrip())
        if n == 0:
            lines.append("  ".join("-" * w for w in widths))
    return "\n".join(lines)


def _term_width() -> int:
    import shutil

    return shutil.get_terminal_size((120, 24)).columns


def human_bytes(n: float | int | None) -> str:
    """1536 -> '1.5 KiB'."""
    if n is None:
        return "-"
    value = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(value) < 1024 or unit == "TiB":
            return f"{value:,.0f} {unit}" if unit == "B" else f"{value:,.1f} {unit}"
        value /= 1024
    return f"{value:,.1f} TiB"
