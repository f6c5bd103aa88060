"""Claim blocks in Markdown: find each, render it again, and find figures typed outside.

A block is the text between ``<!-- claims:NAME -->`` and ``<!-- /claims:NAME -->``; a
:class:`Claim` says which document holds it and renders it from result files through a
:data:`Loader`. Which claims exist and which sections are checked for typed figures is
:mod:`rankgate.bench.claims`'s business; this module is the format alone.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

Loader = Callable[[str], object]
"""Reads a result file by its path in the repository: JSON parsed, text as text."""


@dataclass(frozen=True, slots=True)
class Claim:
    """One rendered block: where it lives, what it is made from, how."""

    name: str
    doc: str
    sources: tuple[str, ...]
    render: Callable[[Loader], str]


_MEASURED = re.compile(
    r"\d[\d.,]*\s?(?:us\b|\u00b5s|ms\b|GB/s|GiB\b|KiB per|%|[x\u00d7](?![A-Za-z0-9]))"
)


def _block(name: str) -> re.Pattern:
    name = re.escape(name)
    return re.compile(rf"(<!-- claims:{name} -->\n)(.*?)(\n<!-- /claims:{name} -->)", re.S)


def file_loader(root: Path) -> Loader:
    def load(path: str):
        text = (root / path).read_text()
        return json.loads(text) if path.endswith(".json") else text

    return load


def render_doc(
    text: str, doc: str, load: Loader, claims: Iterable[Claim]
) -> tuple[str, list[str]]:
    """``text`` with every block of ``claims`` that lives in ``doc`` rendered again, and
    the problems found."""
    problems = []
    for claim in (c for c in claims if c.doc == doc):
        match = _block(claim.name).search(text)
        if match is None:
            problems.append(f"{doc}: block {claim.name} is missing")
            continue
        fresh = claim.render(load)
        if match.group(2) != fresh:
            problems.append(
                f"{doc}: block {claim.name} differs from {', '.join(claim.sources)}"
            )
            text = text[: match.start(2)] + fresh + text[match.end(2) :]
    return text, problems


def typed_figures(text: str, doc: str, headings: Iterable[str]) -> list[str]:
    """Measured figures typed outside blocks in ``doc``'s sections under ``headings``."""
    found = []
    for heading in headings:
        start = text.find(heading)
        if start < 0:
            found.append(f"{doc}: section {heading!r} not found")
            continue
        end = text.find("\n## ", start + 1)
        section = text[start : end if end > 0 else len(text)]
        section = re.sub(r"<!-- claims:(\S+) -->\n.*?<!-- /claims:\1 -->", "", section, flags=re.S)
        section = re.sub(r"`[^`]*`", "", section)  # commands and paths, not figures
        for match in _MEASURED.finditer(section):
            found.append(f"{doc}: {heading!r}: typed figure {match.group(0)!r}; render it")
    return found
