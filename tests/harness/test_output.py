"""A rank's output cut for a report: the marker counts the bytes really cut."""

from __future__ import annotations

import re

import pytest

from rankgate.harness.output import JUNIT_LIMIT, TERMINAL_LIMIT, clip_text, read_clipped

pytestmark = pytest.mark.unit

_CUT = re.compile(r"\[rankgate: (\d+) bytes of this output cut here")


def _cut(text: str) -> int:
    (count,) = _CUT.findall(text)
    return int(count)


def _kept(text: str) -> int:
    """Bytes of the original output a clipped text still holds (all but its marker)."""
    marker = re.search(r"\[rankgate: .*\]\n", text).group(0)
    return len(text.encode()) - len(marker.encode())


def test_a_junit_cut_of_a_terminal_cut_counts_the_bytes_cut_from_the_original(tmp_path):
    # A rank printed 6,060,000 bytes: the terminal keeps 1 MiB of them, the JUnit property
    # 64 KiB of that. Both markers count what is missing from the 6,060,000.
    log = tmp_path / "rank1.out"
    log.write_bytes(b"y" * 99 + b"\n" + (b"z" * 99 + b"\n") * 60_599)
    total = 6_060_000
    terminal = read_clipped(log, 0, limit=TERMINAL_LIMIT)
    assert _cut(terminal) == total - _kept(terminal)
    junit = clip_text(terminal, JUNIT_LIMIT)
    assert _cut(junit) == total - _kept(junit)
    assert 5_990_000 < _cut(junit) < total
    assert junit.startswith("y" * 99 + "\n") and junit.endswith("z" * 99 + "\n")


def test_text_cut_once_counts_its_own_bytes():
    text = "".join(f"line {i}\n" for i in range(100_000))
    clipped = clip_text(text, JUNIT_LIMIT)
    assert _cut(clipped) == len(text) - _kept(clipped)
    assert clip_text("short\n", JUNIT_LIMIT) == "short\n"
