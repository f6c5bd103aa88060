"""The root conftest.py starts the files of LONG_FIRST first, each whole, in its order."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def root_conftest(pytestconfig):
    """The root conftest.py as pytest loaded it (another folder's is also "conftest")."""
    for plugin in pytestconfig.pluginmanager.get_plugins():
        if getattr(plugin, "__file__", None) == str(ROOT / "conftest.py"):
            return plugin
    pytest.fail("the root conftest.py is not loaded")


def test_every_long_first_name_is_a_test_file_once(root_conftest):
    names = root_conftest.LONG_FIRST
    assert [p for p in names if not (ROOT / p).is_file()] == []
    assert len(set(names)) == len(names)


def test_long_files_go_first_in_their_order_the_rest_keep_theirs(root_conftest):
    second, first = root_conftest.LONG_FIRST[1], root_conftest.LONG_FIRST[0]
    ids = ["tests/a_test.py::t1", f"{second}::x", "tests/b_test.py::t2", f"{first}::y",
           f"{second}::z", "tests/a_test.py::t3"]  # fmt: skip
    items = [SimpleNamespace(nodeid=i) for i in ids]
    root_conftest.pytest_collection_modifyitems(items)
    assert [i.nodeid for i in items] == [
        f"{first}::y", f"{second}::x", f"{second}::z",
        "tests/a_test.py::t1", "tests/b_test.py::t2", "tests/a_test.py::t3",
    ]  # fmt: skip
