"""Progress of long work (the gate's stages, benchmark runs) on stderr.

Three ways to show it, picked from where the output goes:

- ``github``: in GitHub Actions (``GITHUB_ACTIONS=true``), plain lines, and each step's
  output folded in a ``::group::`` so a 5,000-line log opens stage by stage;
- ``rich``: on a terminal with rich installed, a coloured rule per step and, for work
  done in this process (benchmarks), a spinner while it runs;
- ``plain``: anywhere else (CI logs, files), one line when a step starts and one when
  it ends: ``rankgate: [3/7] dist started`` … ``rankgate: [3/7] dist passed in 41.2 s``.

``RANKGATE_PROGRESS=plain|rich|github`` forces one.
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Iterator
from typing import TextIO

_COLOURS = {
    "passed": "green", "failed": "bold red", "incomplete": "bold magenta", "skipped": "yellow",
}  # fmt: skip


def mode(stream: TextIO) -> str:
    """How progress is shown on ``stream`` (see the module docstring)."""
    forced = os.environ.get("RANKGATE_PROGRESS", "")
    if forced in ("plain", "rich", "github"):
        return forced
    if os.environ.get("GITHUB_ACTIONS") == "true":
        return "github"
    if os.environ.get("CI") or os.environ.get("TERM") == "dumb" or not _isatty(stream):
        return "plain"
    try:
        import rich  # noqa: F401
    except ImportError:
        return "plain"
    return "rich"


class Progress:
    """Progress of ``total`` steps of ``what`` (e.g. 7 stages of the gate)."""

    def __init__(self, total: int, what: str, stream: TextIO | None = None) -> None:
        self.total = total
        self.what = what
        self.stream = stream or sys.stderr
        self.mode = mode(self.stream)
        self._console = None
        if self.mode == "rich":
            from rich.console import Console

            self._console = Console(file=self.stream, highlight=False)

    @contextlib.contextmanager
    def step(self, i: int, name: str, detail: str = "", *, spinner: bool = True) -> Iterator[None]:
        """Around one step: says it started; a spinner while it runs (rich, in-process work)."""
        head = f"[{i}/{self.total}] {name}"
        if self.mode == "github":
            self._line(f"::group::{self.what} {head}{' — ' + detail if detail else ''}")
            try:
                yield
            finally:
                self._line("::endgroup::")
            return
        if self._console is not None:
            from rich.markup import escape

            self._console.rule(f"[bold]{escape(self.what)}[/] {escape(head)}", align="left")
            if detail:
                self._console.print(f"[dim]{escape(detail)}[/]")
            if spinner:
                with self._console.status(f"{escape(self.what)} {escape(head)} running …"):
                    yield
                return
            yield
            return
        self._line(f"rankgate: {self.what} {head} started{': ' + detail if detail else ''}")
        yield

    def done(self, i: int, status: str, seconds: float, reason: str = "") -> None:
        """One line when a step ends: its status, time and reason."""
        text = f"[{i}/{self.total}] {status} in {seconds:.1f} s{' — ' + reason if reason else ''}"
        if self._console is not None:
            from rich.markup import escape

            colour = _COLOURS.get(status, "bold")
            self._console.print(f"{escape(self.what)} [{colour}]{escape(text)}[/]")
            return
        self._line(f"rankgate: {self.what} {text}")

    def _line(self, text: str) -> None:
        print(text, file=self.stream, flush=True)


def _isatty(stream: TextIO) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):
        return False
