"""Release notes from CHANGELOG.md, and the tag that must be the package's version."""

from __future__ import annotations

from pathlib import Path

import pytest

import rankgate
from rankgate.pipeline import changelog
from rankgate.pipeline.changelog import ChangelogProblem, Section

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[2]
TEXT = """# Changelog

Intro.

## Unreleased

### Fixed

- a fix

## 1.2.0 - 2026-12-01

### Added

- a feature

## 1.1.0 - 2026-11-01

- older
"""


def test_sections_in_order_with_their_dates_and_entries():
    assert changelog.sections(TEXT) == [
        Section("Unreleased", "", "### Fixed\n\n- a fix"),
        Section("1.2.0", "2026-12-01", "### Added\n\n- a feature"),
        Section("1.1.0", "2026-11-01", "- older"),
    ]


def test_a_heading_of_another_shape_is_named_with_its_line():
    with pytest.raises(ChangelogProblem, match=r"CHANGELOG.md:3: '## v1.0 \(soon\)' is not"):
        changelog.sections("# Changelog\n\n## v1.0 (soon)\n")


def test_the_notes_of_a_release_are_its_section():
    assert changelog.notes(TEXT, "v1.2.0", "1.2.0") == "### Added\n\n- a feature"


@pytest.mark.parametrize(
    ("text", "tag", "version", "problem"),
    [
        (
            TEXT,
            "v1.2.1",
            "1.2.0",
            "tag v1.2.1 is not v1.2.0, the version src/rankgate/__init__.py sets: set __version__ = '1.2.1' there",
        ),
        (
            TEXT,
            "v1.3.0",
            "1.3.0",
            "CHANGELOG.md has no '## 1.3.0 - YYYY-MM-DD' section: move the '## Unreleased' entries under it before tagging v1.3.0",
        ),
        (
            "## 1.3.0\n\n- x\n",
            "v1.3.0",
            "1.3.0",
            "CHANGELOG.md: '## 1.3.0' has no date (- YYYY-MM-DD)",
        ),
        (
            "## 1.3.0 - 2026-12-02\n\n",
            "v1.3.0",
            "1.3.0",
            "CHANGELOG.md: '## 1.3.0' lists no change",
        ),
    ],
    ids=["tag-is-not-the-version", "no-section", "undated", "empty"],
)
def test_a_tag_that_is_not_a_release_is_refused_naming_the_fix(text, tag, version, problem):
    with pytest.raises(ChangelogProblem) as refused:
        changelog.notes(text, tag, version)
    assert str(refused.value).startswith(problem)


def test_the_projects_changelog_parses_and_starts_with_unreleased_or_this_version():
    found = changelog.sections((ROOT / "CHANGELOG.md").read_text())
    assert found and found[0].name in ("Unreleased", rankgate.__version__)
    assert all(s.date for s in found if s.name != "Unreleased")  # every release is dated
