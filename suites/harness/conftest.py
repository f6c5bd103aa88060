"""Runs small test files through the rankgate plugin and inspects what it reports."""

from __future__ import annotations

import textwrap
import xml.etree.ElementTree as ET

import pytest

# Imported before pytester snapshots sys.modules (torch cannot be imported twice).
import torch  # noqa: F401

import rankgate.harness.worker  # noqa: F401


class InnerRun:
    """One inner pytest session over a generated test file."""

    def __init__(self, pytester: pytest.Pytester) -> None:
        self.pytester = pytester

    def __call__(self, source: str, *args: str, ini: str = "", subprocess: bool = False):
        self.pytester.makepyfile(test_inner=textwrap.dedent(source))
        self.pytester.makeini(f"[pytest]\n{textwrap.dedent(ini)}")
        run = (
            self.pytester.runpytest_subprocess if subprocess else self.pytester.runpytest_inprocess
        )
        return run("-p", "no:cacheprovider", "-rA", *args)

    @staticmethod
    def properties(case) -> dict[str, str]:
        """A JUnit testcase's properties as a dict."""
        return {p.get("name"): p.get("value") for p in case.iter("property")}

    def junit(self, *args: str, source: str, ini: str = ""):
        """Run and return (result, {test name: testcase element})."""
        result = self(source, "--junitxml=junit.xml", *args, ini=ini)
        root = ET.parse(self.pytester.path / "junit.xml").getroot()
        return result, {case.get("name"): case for case in root.iter("testcase")}


@pytest.fixture
def inner(pytester: pytest.Pytester) -> InnerRun:
    return InnerRun(pytester)
