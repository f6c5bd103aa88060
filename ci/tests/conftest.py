"""Shared fixture of the Dagger module's tests."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest


@pytest.fixture(scope="session")
def registered() -> dict:
    """The module's functions and arguments as its SDK registers them (no engine)."""
    pytest.importorskip("dagger", reason="dagger-io is in the dev extra: pip install -e '.[dev]'")
    out = subprocess.run(
        [sys.executable, str(Path(__file__).with_name("dagger_typedefs.py"))],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return json.loads(out)
