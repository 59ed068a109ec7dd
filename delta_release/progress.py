"""Progress on long work, shown on stderr only when it is a terminal and the output is not `--json`.

One module, small call sites:

    from . import progress
    with progress.step("ingest big.jsonl"):          # a spinner with elapsed time, then "✓ ... 3.2 s"
        ...
    for p in progress.track(points, "crash points"): # a bar with n/N
        ...
    with progress.work("ingest big.jsonl", size, phases=INGEST_PHASES):  # bytes, phase and ETA on one bar
        progress.item("part 1/2", part_size)          # code below marks the way; no-ops without a work
        progress.phase("apply"); progress.advance(n_bytes); progress.note("check audit")

Off by default (the Python API and tests print nothing); the CLI turns it on with `configure()` when
stderr is a terminal and `--json` is not given. Nested steps share one live display (rich allows only one):
an inner step is an indented, transient row under the outer one. When off, every call is a cheap no-op.
"""

from __future__ import annotations

import io
import sys
import threading
import time
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any, TypeVar

T = TypeVar("T")

_enabled = False
_live: Any = None  # the rich Progress of the outermost running step
_depth = 0
_console: Any = None
_work: Work | None = None  # the byte-based work in progress (`work()`), for phase()/item()/advance()
_work_thread: int | None = None  # the thread that runs it: only its calls move the bar


def configure(enabled: bool, *, console: Any = None) -> None:
    """Turn progress on or off (the CLI: on when stderr is a terminal and --json is off). `console`: a
    rich Console to draw on instead of stderr (tests)."""
    global _enabled, _console
    _enabled = bool(enabled)
    _console = console


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


def _amount(task: Any) -> str:
    """`120.0 MiB/360.0 MiB` for work in bytes, `3/14` for counted work, nothing without a total (never `0/?`)."""
    if task.total is None or task.fields.get("unit") == "none":
        return ""
    if task.fields.get("unit") == "bytes":
        return f"{human_bytes(task.completed)}/{human_bytes(task.total)}"
    return f"{int(task.completed)}/{int(task.total)}"


def _new_live() -> Any:
    from rich.console import Console
    from rich.progress import BarColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

    class Amount(TextColumn):
        def render(self, task: Any) -> Any:
            from rich.text import Text

            return Text(_amount(task))

    class Eta(TextColumn):
        def render(self, task: Any) -> Any:
            from rich.text import Text

            eta = task.fields.get("eta", "")
            return Text(f"ETA {eta}" if eta else "", style="cyan")

    return Progress(SpinnerColumn(finished_text="[green]✓[/green]"), TextColumn("{task.description}"),
                    BarColumn(bar_width=24), Amount(""), TimeElapsedColumn(), Eta(""),
                    console=_console or Console(stderr=True), transient=False)


@contextmanager
def step(label: str, total: int | None = None, **fields: Any) -> Iterator[Task]:
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
    task_id = live.add_task(text, total=total, **fields)
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


# -- long work measured in bytes, through phases, with an ETA ----------------------------------------------

# The phases a write goes through (commit/writer.py, contract/source.py mark them) and their share of the
# work, for the ETA: reading (hash + decode, streamed by bytes) and writing the new files dominate.
INGEST_PHASES = (("read and decode", 0.35), ("apply", 0.25), ("stage", 0.25), ("gate", 0.05), ("commit", 0.05),
                 ("publish", 0.05))
RUN_PHASES = (("read and decode", 0.25), ("apply", 0.15), ("stage", 0.15), ("gate", 0.03), ("checks", 0.3),
              ("commit", 0.03), ("publish", 0.04), ("report", 0.05))

def _clock() -> float:
    return time.perf_counter()


class Work:
    """Long work of `total` units (bytes of input by default) through weighted phases, as items (the parts
    of a file) each going through every phase. What is done is the weighted sum of what each phase has
    passed (a streaming phase advances by bytes, others count when the next phase starts), shown as
    the equivalent units of `total`; the ETA is the time so far scaled by what is left. Pure arithmetic:
    the display is `work()`'s."""

    def __init__(self, label: str, total: int, *, unit: str = "bytes",
                 phases: Sequence[tuple[str, float]] = (), clock: Any = _clock) -> None:
        self.label, self.total, self.unit = label, max(0, int(total)), unit
        self.phases = [name for name, _ in phases] or [""]
        self.weights = dict(phases) or {"": 1.0}
        self._sum = sum(self.weights.values()) or 1.0
        self._clock = clock
        self.started = float(clock())
        self.item_label, self.item_size, self._item_base = "", self.total, 0.0
        self._items = 0  # items started: before the first, the whole work is one implicit item
        self.parts = False  # whether `item()` marks this work's items (`work(parts=True)`)
        self._index, self._passed = 0, 0.0  # current phase, units it has passed in the current item
        self._finished = 0.0  # weighted work of the finished phases of the current item
        self.text = ""

    @property
    def phase_name(self) -> str:
        return self.phases[self._index]

    def item(self, label: str, size: int) -> None:
        """The next item (e.g. `part 2/3` of `size` bytes): everything of the previous one is done."""
        if self._items:
            self._item_base = min(self._item_base + self.item_size * self._sum, self.total * self._sum)
        self._items += 1
        self.item_label, self.item_size = label, max(0, int(size))
        self._index, self._passed, self._finished = 0, 0.0, 0.0

    def phase(self, name: str) -> bool:
        """Enter phase `name` of the current item; the phases before it are done. An unknown name or one
        already passed is ignored (a retry, or a writer nested in a check, never moves the bar back)."""
        if name not in self.weights or self.phases.index(name) <= self._index:
            return False
        new = self.phases.index(name)
        self._finished += sum(self.weights[p] for p in self.phases[self._index:new]) * self.item_size
        self._index, self._passed = new, 0.0
        return True

    def advance(self, n: float) -> None:
        """`n` more units of the current item through the current phase."""
        self._passed = min(float(self.item_size), self._passed + n)

    def fraction(self, done: int, of: int) -> None:
        """The current phase is `done` of `of` steps through (e.g. checks run)."""
        self._passed = self.item_size * (done / of if of else 1.0)

    @property
    def completed(self) -> float:
        """Units of `total` done, weighted over the phases."""
        work = self._item_base + self._finished + self.weights[self.phase_name] * self._passed
        return min(float(self.total), work / self._sum)

    def eta(self) -> float | None:
        """Seconds left at the rate so far; None until there is a rate to go by."""
        done, elapsed = self.completed, float(self._clock()) - self.started
        if done <= 0 or elapsed < 0.5:
            return None
        return elapsed * (self.total - done) / done

    def description(self) -> str:
        parts = [self.label, self.item_label, self.phase_name, self.text]
        return " · ".join(p for p in parts if p)


def _duration(seconds: float | None) -> str:
    if seconds is None:
        return ""
    s = int(round(seconds))
    return f"{s // 3600}:{s % 3600 // 60:02d}:{s % 60:02d}" if s >= 3600 else f"{s // 60}:{s % 60:02d}"


class _WorkView:
    def __init__(self, work: Work, live: Any, task_id: Any) -> None:
        self.work, self.live, self.task_id = work, live, task_id
        self._shown = 0.0

    def show(self, *, refresh: bool = False) -> None:
        w = self.work
        self.live.update(self.task_id, completed=w.completed, description=w.description(), eta=_duration(w.eta()))
        if refresh:  # a new phase or item is drawn at once, not at the next tick
            self.live.refresh()


_view: _WorkView | None = None


@contextmanager
def work(label: str, total: int, *, unit: str = "bytes", phases: Sequence[tuple[str, float]] = (),
         parts: bool = False) -> Iterator[Work]:
    """Long work measured in `unit`s (bytes of input, or steps) with its phase and ETA on one bar. Code
    below it marks the way with the module functions `item()` (only for a work of `parts`: the parts of
    one file, not the batches a drill writes along the way), `phase()`, `advance()`, `fraction()`,
    `note()`, which are no-ops when no work is running (the API, tests, `--json`)."""
    global _work, _view, _work_thread
    w = Work(label, total, unit=unit, phases=phases)
    w.parts = parts
    if not _enabled or _work is not None:  # off, or inside another work: that one's bar stays the one shown
        yield w
        return
    _work, _work_thread = w, threading.get_ident()
    with step(label, total=max(1, w.total), unit=unit, eta="") as task:
        if task._live is not None:
            _view = _WorkView(w, task._live, task._id)
            _view.show(refresh=True)
        try:
            yield w
        finally:
            if task._live is not None:
                task._live.update(task._id, eta="")
            _work, _view, _work_thread = None, None, None


def _current() -> Work | None:
    """The running work, for a call on the thread that runs it; None otherwise (no work, or a call from a
    helper thread: a part read ahead on one moves the bar when its turn comes, on the work's thread)."""
    return _work if _work_thread == threading.get_ident() else None


def _changed(refresh: bool = False) -> None:
    if _view is not None:
        _view.show(refresh=refresh)


def item(label: str, size: int) -> None:
    if (w := _current()) is not None and w.parts:
        w.item(label, size)
        _changed(refresh=True)


def phase(name: str) -> None:
    if (w := _current()) is not None and w.phase(name):
        _changed(refresh=True)


def advance(n: float, *, during: str | None = None) -> None:
    """`n` more units through the current phase; with `during`, only when that is the current phase (bytes
    read by a drill inside a run's checks are not the run's bytes)."""
    if (w := _current()) is not None and (during is None or during == w.phase_name):
        w.advance(n)
        _changed()


def fraction(done: int, of: int) -> None:
    if (w := _current()) is not None:
        w.fraction(done, of)
        _changed()


def note(text: str) -> None:
    """Text shown after the phase (e.g. the check or kill point at hand)."""
    if (w := _current()) is not None:
        w.text = text
        _changed(refresh=True)


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
