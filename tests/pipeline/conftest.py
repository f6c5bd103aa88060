"""Shared fixtures of the pipeline tests."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest


@pytest.fixture(scope="session")
def registered() -> dict:
    """The Dagger module's functions and arguments as its SDK registers them (no engine);
    ci/tests/conftest.py has the same fixture for the module's own tests."""
    pytest.importorskip("dagger", reason="dagger-io is in the dev extra: pip install -e '.[dev]'")
    out = subprocess.run(
        [sys.executable, str(Path(__file__).parents[2] / "ci" / "tests" / "dagger_typedefs.py")],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return json.loads(out)


@pytest.fixture(scope="session")
def collected_tree(tmp_path_factory):
    """Every test of the tree (one collection, a subprocess): node ID -> marker names.
    Under xdist the workers share one collection through their common temp dir."""
    from tree_collection import collect_once_for_run

    return collect_once_for_run(tmp_path_factory)
