"""A rank's captured output, cut to a size a report can carry, saying where it was cut.

A long log matters at both ends: the start says what the test set up, the last
lines usually say why it failed. So a cut keeps the head and the tail, on line
boundaries, and puts one marker line between them that says how much is missing.
"""

from __future__ import annotations

import copy
import os
import re
from pathlib import Path

import pytest
from _pytest._code.code import ReprEntryNative, ReprExceptionInfo, ReprFileLocation, ReprTraceback

TERMINAL_LIMIT = 1 << 20
"""Bytes of one rank's stream shown in the terminal report."""
JUNIT_LIMIT = 64 * 1024
"""Bytes of one rank's stream in a JUnit property."""


def cut_marker(cut_bytes: int) -> str:
    return f"[rankgate: {cut_bytes} bytes of this output cut here; its start and end are kept]\n"


_MARKER = re.compile(
    rb"\[rankgate: (\d+) bytes of this output cut here; its start and end are kept\]\n"
)


def clip_text(text: str, limit: int) -> str:
    """``text`` if it fits in ``limit`` bytes (UTF-8), else its head, a marker, its tail.

    ``text`` may have been cut before (the terminal's share of a rank's output, cut again
    for a JUnit property): the marker counts the bytes of the original output that are
    missing, those an earlier marker in the dropped part stood for among them."""
    data = text.encode("utf-8", "replace")
    if len(data) <= limit:
        return text
    head, tail = _whole_lines(data[: limit // 2], data[-(limit // 2) :])
    dropped = data[len(head) : len(data) - len(tail)]
    cut = len(dropped) + sum(int(m[1]) - len(m[0]) for m in _MARKER.finditer(dropped))
    return _join(head, tail, cut)


def clip_sections(sections: list[tuple[str, str]], limit: int) -> list[tuple[str, str]]:
    """A report's sections, each stream's captured output (``Captured stdout ...``, one
    section per phase) cut to ``limit`` bytes in all, as ``clip_text`` cuts one text: a
    short phase's output stays whole and a long one is cut (each gets an equal share of
    what the shorter ones leave). Other sections stay as they are."""
    streams: dict[str, list[int]] = {}
    for i, (title, _) in enumerate(sections):
        if title.startswith("Captured "):
            streams.setdefault(" ".join(title.split(" ", 2)[:2]), []).append(i)
    out = list(sections)
    for indices in streams.values():
        budget = limit
        by_size = sorted(indices, key=lambda i: len(sections[i][1].encode("utf-8", "replace")))
        for n, i in enumerate(by_size):
            title, text = sections[i]
            out[i] = (title, clip_text(text, budget // (len(by_size) - n)))
            budget -= min(len(out[i][1].encode("utf-8", "replace")), budget)
    return out


def read_clipped(
    path: Path, start: int, end: int | None = None, limit: int = TERMINAL_LIMIT
) -> str:
    """Bytes ``start``..``end`` (end of file when None) of ``path``, clipped to ``limit``."""
    try:
        if end is None and os.stat(path).st_size <= start:
            return ""  # the usual test prints nothing: a stat, not an open, a seek and a read
        with open(path, "rb") as f:
            if end is None:
                end = f.seek(0, 2)
            size = max(0, end - start)
            f.seek(start)
            if size <= limit:
                return f.read(size).decode("utf-8", "replace")
            head = f.read(limit // 2)
            f.seek(end - limit // 2)
            tail = f.read(limit // 2)
    except FileNotFoundError:
        return ""
    return _clip(head, tail, size)


def _clip(head: bytes, tail: bytes, total: int) -> str:
    """Join the head and tail of a ``total``-byte text on whole lines, marking the cut."""
    head, tail = _whole_lines(head, tail)
    return _join(head, tail, total - len(head) - len(tail))


def _whole_lines(head: bytes, tail: bytes) -> tuple[bytes, bytes]:
    """The head up to its last line end, the tail from its first line start."""
    if b"\n" in head:
        head = head[: head.rindex(b"\n") + 1]
    if b"\n" in tail:
        tail = tail[tail.index(b"\n") + 1 :]
    return head, tail


def _join(head: bytes, tail: bytes, cut: int) -> str:
    if not head.endswith(b"\n"):
        head += b"\n"
    return (head + cut_marker(cut).encode() + tail).decode("utf-8", "replace")


_ANSI = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]")


def strip_ansi(text: str) -> str:
    """``text`` without terminal escape codes (colour, cursor moves)."""
    return _ANSI.sub("", text) if "\x1b" in text else text


# -- reports as they go out (in place: the terminal's, a rank's files') ------------


def clipped(reports: list[pytest.TestReport], limit: int) -> list[pytest.TestReport]:
    """``reports`` with each stream's captured output cut to ``limit`` bytes, as the pool
    cuts a rank's (``rankgate.harness.output``): the terminal's share, or a file's."""
    out = []
    for report in reports:
        sections = clip_sections(list(report.sections), limit)
        if sections != list(report.sections):
            report = copy.copy(report)
            report.sections = sections
        out.append(report)
    return out


def plain_report(item: pytest.Item, report: pytest.TestReport) -> pytest.TestReport:
    """``report`` without terminal escape codes (a suite that forces ``--color=yes``
    colours assertion diffs), for files that are read outside a terminal."""
    text = "" if report.longrepr is None else str(report.longrepr)
    if "\x1b" not in text and not any("\x1b" in body for _, body in report.sections):
        return report
    plain = copy.copy(report)
    plain.sections = [(title, strip_ansi(body)) for title, body in report.sections]
    if "\x1b" in text and not isinstance(report.longrepr, tuple):
        crash = getattr(report.longrepr, "reprcrash", None)
        path, lineno, _ = item.location
        plain.longrepr = ReprExceptionInfo(
            reprtraceback=ReprTraceback(
                [ReprEntryNative([strip_ansi(text) + "\n"])], None, "native"
            ),
            reprcrash=ReprFileLocation(
                crash.path if crash else path,
                crash.lineno if crash else (lineno or 0) + 1,
                strip_ansi(crash.message if crash else text.split("\n", 1)[0]),
            ),
        )
    return plain
