"""Shared fixture of the Dagger module's tests."""

from __future__ import annotations

import pytest
from ci.tests import dagger_typedefs


@pytest.fixture(scope="session")
def registered(request) -> dict:
    """The module's functions and arguments as its SDK registers them (no engine)."""
    return dagger_typedefs.registered(request)
