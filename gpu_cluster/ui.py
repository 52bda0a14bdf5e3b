"""Terminal output: tables, progress and messages, through `rich`.

On a terminal, long steps show a live progress display; in a CI log (or any pipe) the same steps
print one plain line each, as they happen, on standard error. Results (tables, listings, JSON) go to
standard output; progress, notes and errors go to standard error, so `gpu-cluster ... --json | jq`
stays clean.
"""

from __future__ import annotations

import contextlib
import sys
from typing import Iterable, Iterator, Optional, Sequence

from rich import box
from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn
from rich.table import Table

# Wide enough for a resource listing in a CI log; a terminal uses its own width.
_PIPE_WIDTH = 200

out = Console(highlight=False, emoji=False, soft_wrap=True, width=None if sys.stdout.isatty() else _PIPE_WIDTH)
err = Console(stderr=True, highlight=False, emoji=False, soft_wrap=True, width=None if sys.stderr.isatty() else _PIPE_WIDTH)


def error(message: str) -> None:
    """One problem, as a sentence, on standard error."""
    err.print(f"[bold red]error:[/] {escape(message)}")


def warn(message: str) -> None:
    err.print(f"[yellow]warning:[/] {escape(message)}")


def note(message: str) -> None:
    err.print(f"note: {escape(message)}")


def line(message: str = "") -> None:
    """A plain line of results on standard output."""
    out.print(escape(message))


def heading(message: str) -> None:
    """A block's first line on standard output (a stack's notes and findings follow it)."""
    out.print(f"[bold]{escape(message)}[/]")


def clipped(message: str) -> None:
    """One line of results cut to the output's width (…), for a summary that must fit a screen."""
    width = out.width or 80
    out.print(escape(message if len(message) <= width else message[:width - 1] + "…"), soft_wrap=False)


def json_document(doc: object) -> None:
    """A JSON result on standard output, alone (progress and notes go to standard error)."""
    import json

    sys.stdout.write(json.dumps(doc, indent=1, ensure_ascii=False) + "\n")
    sys.stdout.flush()


def table(header: Sequence[str], rows: Iterable[Sequence[object]], title: Optional[str] = None,
          right: Sequence[str] = ()) -> None:
    """A table of results on standard output; columns named in `right` are right-aligned."""
    t = Table(box=box.SIMPLE_HEAD, title=title, title_justify="left", pad_edge=False, show_edge=False,
              collapse_padding=True)
    for name in header:
        t.add_column(name, justify="right" if name in right else "left", overflow="fold")
    for row in rows:
        t.add_row(*(escape(str(c)) for c in row))
    out.print(t)


class Steps:
    """Progress over a known number of steps: a live bar on a terminal, one line per step elsewhere."""

    def __init__(self, progress: Optional[Progress], task: Optional[int], total: int, what: str):
        self._progress, self._task, self._total, self._what = progress, task, total, what
        self._done = 0

    def start(self, label: str) -> None:
        """Say that the next step begins (e.g. "rendering aws-large")."""
        if self._progress is not None:
            self._progress.update(self._task, description=f"{self._what}: {escape(label)}")
        else:
            err.print(f"[{self._done + 1}/{self._total}] {escape(label)} …")

    def advance(self) -> None:
        self._done += 1
        if self._progress is not None:
            self._progress.advance(self._task)

    def error(self, message: str) -> None:
        """A problem with this step, as a sentence; it stays above the live display."""
        (self._progress.console if self._progress is not None else err).print(
            f"[bold red]error:[/] {escape(message)}")


@contextlib.contextmanager
def steps(what: str, total: int) -> Iterator[Steps]:
    """`with steps("rendering", 6) as s: s.start("aws-entry"); ...; s.advance()`."""
    if not err.is_terminal:
        yield Steps(None, None, total, what)
        return
    progress = Progress(SpinnerColumn(), TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                        TimeElapsedColumn(), console=err, transient=True)
    with progress:
        task = progress.add_task(what, total=total)
        yield Steps(progress, task, total, what)
