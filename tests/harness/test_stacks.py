"""Where a hung rank waits: pytest's own frames are never the place named."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from rankgate.harness.stacks import where

pytestmark = pytest.mark.unit


def _dump(*frames: tuple[str, int, str]) -> str:
    """faulthandler's dump of one thread, most recent call first."""
    lines = ["Current thread 0x00007f0000000001 (most recent call first):"]
    lines += [f'  File "{file}", line {line} in {func}' for file, line, func in frames]
    return "\n".join(lines) + "\n"


def _here(package: str) -> str:
    """Where ``package`` is installed on this machine."""
    return importlib.util.find_spec(package).submodule_search_locations[0]


@pytest.mark.parametrize(
    "site", ["/opt/venv/lib/python3.12/site-packages", "/usr/lib/python3/dist-packages"]
)
def test_pytests_entry_point_is_not_user_code_wherever_it_is_installed(site):
    # A test that waits inside torch's own test base class: no frame is the user's.
    dump = _dump(
        ("/x/torch/testing/_internal/common_distributed.py", 1160, "_join_processes"),
        (f"{site}/_pytest/python.py", 166, "pytest_pyfunc_call"),
        (f"{site}/pluggy/_callers.py", 121, "_multicall"),
        (f"{site}/pytest/__main__.py", 9, "<module>"),
    )
    found = where(dump, "test_x.py")
    assert found.frame is None, found
    assert str(found) == "in user code"


def test_this_machines_pytest_is_left_out_too():
    dump = _dump(
        ("/proj/utils.py", 418, "broadcast_object"),
        (str(Path(_here("pytest")) / "__main__.py"), 9, "<module>"),
    )
    assert str(where(dump, "test_x.py")) == "in user code at utils.py:418"
    only_pytest = _dump((str(Path(_here("pytest")) / "__main__.py"), 9, "<module>"))
    assert where(only_pytest, "test_x.py").frame is None
