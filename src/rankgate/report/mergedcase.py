"""A test case of a file ``rankgate merge-junit`` wrote, split back into its ranks' parts.

merge-junit (:mod:`rankgate.report.junit`) writes one case per test: its failure text
holds one section per failing rank, headed ``----- rank <r>: <outcome>[: <message>]``
(after the ranks' ledgers side by side, when they diverged), and its system-out and
system-err hold every rank's lines, each prefixed ``[rank <r>] ``. The report reads a
merged file as it reads the per-rank files behind it: each rank's traceback, hang stacks
and output, from these.
"""

from __future__ import annotations

import re

from rankgate.report.junitfile import OUTCOMES

_HEADING = re.compile(
    r"^----- rank (\d+): (?:" + "|".join(map(re.escape, OUTCOMES)) + r")(?:: .*)?$",
    re.MULTILINE,
)
"""One rank's section (merge-junit's ``details``)."""
_ANY_HEADING = re.compile(r"^----- ranks? \d[\d, ]*: .*$", re.MULTILINE)
"""Any section merge-junit writes, a missing rank's ("----- rank 2: no result ...") too."""
_PREFIX = re.compile(r"^\[rank (\d+)\] ?(.*)$")


def rank_texts(text: str) -> dict[int, str]:
    """Each rank's section of a merged failure text: rank -> the text under its heading
    (its traceback, or a hung rank's stacks); {} for a text merge-junit did not write."""
    bounds = [m.start() for m in _ANY_HEADING.finditer(text)] + [len(text)]
    found = {}
    for head in _HEADING.finditer(text):
        end = next(b for b in bounds if b > head.start())
        found[int(head.group(1))] = text[head.end() : end].strip("\n")
    return found


def rank_logs(text: str) -> dict[int, str]:
    """Each rank's lines of a merged system-out or system-err, without their prefix;
    {} when the lines carry no ``[rank r]`` prefix (not a merged file's)."""
    found: dict[int, list[str]] = {}
    for line in text.splitlines():
        match = _PREFIX.match(line)
        if match is None:
            return {}
        found.setdefault(int(match.group(1)), []).append(match.group(2))
    return {rank: "\n".join(lines) + "\n" for rank, lines in found.items()}
