"""A release's notes, from CHANGELOG.md, and the check that its tag is the package's version.

CHANGELOG.md lists each release's changes, newest first, under ``## X.Y.Z - YYYY-MM-DD``,
with the changes not yet released under ``## Unreleased`` at the top (CONTRIBUTING.md
says how an entry is added). The release workflow runs, before it publishes anything,

``python -m rankgate.pipeline.changelog vX.Y.Z``

which prints that version's section (the GitHub release's notes) and fails, naming the
fix, when the tag is not ``v`` + ``rankgate.__version__`` or the changelog has no dated,
non-empty section for it. It needs only the standard library and the checkout
(``PYTHONPATH=src``), so it runs before anything is installed.
"""

from __future__ import annotations

import re
import sys
from dataclasses import dataclass
from pathlib import Path

from rankgate.errors import RankgateError
from rankgate.pipeline.distfiles import DistProblem, version

CHANGELOG = "CHANGELOG.md"
UNRELEASED = "Unreleased"
_HEADING = re.compile(r"^## (?P<name>\S+)(?: - (?P<date>\d{4}-\d{2}-\d{2}))?\s*$")


class ChangelogProblem(RankgateError, Exception):
    """CHANGELOG.md or the tag cannot give a release its notes."""


@dataclass(frozen=True, slots=True)
class Section:
    """One ``## `` section of the changelog."""

    name: str
    """A version (``0.1.0``) or ``Unreleased``."""
    date: str
    """``YYYY-MM-DD`` of a release; "" for Unreleased."""
    body: str
    """Its entries, as written."""


def sections(text: str) -> list[Section]:
    """Every ``## `` section, in order; a heading of another shape is an error."""
    found: list[Section] = []
    name = date = ""
    lines: list[str] = []
    for number, line in enumerate(text.splitlines(), start=1):
        if line.startswith("## "):
            match = _HEADING.match(line)
            if not match:
                raise ChangelogProblem(
                    f"{CHANGELOG}:{number}: {line!r} is not '## X.Y.Z - YYYY-MM-DD' or "
                    f"'## {UNRELEASED}'"
                )
            if name:
                found.append(Section(name, date, "\n".join(lines).strip()))
            name, date, lines = match["name"], match["date"] or "", []
        elif name:
            lines.append(line)
    if name:
        found.append(Section(name, date, "\n".join(lines).strip()))
    return found


def notes(text: str, tag: str, wanted_version: str) -> str:
    """The notes of release ``tag``: its section's entries."""
    if tag != f"v{wanted_version}":
        raise ChangelogProblem(
            f"tag {tag} is not v{wanted_version}, the version src/rankgate/__init__.py "
            f"sets: set __version__ = {tag.removeprefix('v')!r} there (and in "
            f"{CHANGELOG}), or tag v{wanted_version}"
        )
    by_name = {section.name: section for section in sections(text)}
    section = by_name.get(wanted_version)
    if section is None:
        raise ChangelogProblem(
            f"{CHANGELOG} has no '## {wanted_version} - YYYY-MM-DD' section: move the "
            f"'## {UNRELEASED}' entries under it before tagging {tag}"
        )
    if not section.date:
        raise ChangelogProblem(f"{CHANGELOG}: '## {wanted_version}' has no date (- YYYY-MM-DD)")
    if not section.body:
        raise ChangelogProblem(f"{CHANGELOG}: '## {wanted_version}' lists no change")
    return section.body


def main(argv: list[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if len(args) != 1:
        raise SystemExit("usage: python -m rankgate.pipeline.changelog vX.Y.Z (the tag)")
    root = Path.cwd()
    try:
        print(notes((root / CHANGELOG).read_text(), args[0], version(root)))
    except (ChangelogProblem, DistProblem, OSError) as exc:
        print(f"rankgate: changelog: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
