"""summary.md as GitHub renders it: CommonMark with GFM tables (markdown-it-py)."""

from __future__ import annotations

from markdown_it import MarkdownIt


def parse(text: str) -> list:
    """The block tokens of ``text``, after checking what breaks a job summary:

    a folded block (``<details>``) whose fence CommonMark does not see as a fence,
    an empty fence, an indented code block (a fence nested wrongly), or an unbalanced
    ``<details>``.
    """
    tokens = MarkdownIt("commonmark").enable("table").parse(text)
    assert not [t for t in tokens if t.type == "code_block"], "indented code: a misplaced fence"
    fences = [t for t in tokens if t.type == "fence"]
    assert all(t.content.strip() for t in fences), "an empty fence"
    html = [t.content for t in tokens if t.type == "html_block"]
    assert not [h for h in html if "```" in h], "a fence swallowed by an HTML block"
    opened = sum(h.count("<details>") for h in html)
    assert opened == sum(h.count("</details>") for h in html), "unbalanced <details>"
    assert not [t for t in fences if "</details>" in t.content], "</details> inside code"
    return tokens


def render(text: str) -> str:
    """``text`` as HTML, raw HTML passed through as CommonMark does: what a page shows."""
    return MarkdownIt("commonmark").enable("table").render(text)


def headings(tokens: list, level: int) -> list[str]:
    """The text of every heading of ``level`` (2 for ##)."""
    return [
        tokens[i + 1].content
        for i, t in enumerate(tokens)
        if t.type == "heading_open" and t.tag == f"h{level}"
    ]


def tables(tokens: list) -> list[list[list[str]]]:
    """Each table as rows of cell texts (the header row first)."""
    found, rows, row = [], None, None
    for t in tokens:
        if t.type == "table_open":
            rows = []
        elif t.type == "tr_open":
            row = []
        elif t.type == "inline" and row is not None and rows is not None:
            row.append(t.content)
        elif t.type == "tr_close" and rows is not None:
            rows.append(row)
            row = None
        elif t.type == "table_close":
            found.append(rows)
            rows = None
    return found
