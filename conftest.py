"""Project-wide test configuration."""

import os
import warnings

import pytest

# pytester drives inner pytest runs in the harness suites; pytest only accepts
# pytest_plugins in the top-level conftest. tests/leftovers.py fails a run that leaves
# rankgate-* folders in its (private) temp dir.
pytest_plugins = ["pytester", "tests.leftovers"]

# pytest-randomly (dev extra, for the one test that runs it) would shuffle every pytest
# run the tests start: blocked in them all, as pyproject's addopts blocks it here.
NO_RANDOM_ORDER = "-p no:randomly"
os.environ["PYTEST_ADDOPTS"] = f"{os.environ.get('PYTEST_ADDOPTS', '')} {NO_RANDOM_ORDER}".strip()


# A deprecation warning raised from rankgate's own modules is an error: pyproject's
# filterwarnings covers collection and the tests (pytest applies it only there); this
# covers the hooks around them (e.g. an in-place run's session start). Warnings rankgate
# gives about a user's test (a world test returning a value) stay warnings.
RANKGATE_MODULES = r"rankgate(\.|$)"
DEPRECATIONS = (DeprecationWarning, PendingDeprecationWarning, FutureWarning)


def pytest_configure(config: pytest.Config) -> None:
    for category in DEPRECATIONS:
        warnings.filterwarnings("error", category=category, module=RANKGATE_MODULES)


@pytest.fixture
def pytester(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> pytest.Pytester:
    monkeypatch.setenv("PYTEST_ADDOPTS", NO_RANDOM_ORDER)  # pytester clears the variable
    return pytester
