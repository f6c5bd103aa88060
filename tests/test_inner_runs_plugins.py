"""The pytest runs the tests start: what the project's conftest gives them.

They block hypothesis's pytest plugin (its terminal summary imports most of hypothesis,
about a second of CPU in every inner session and launched rank) and anyio's (it imports
anyio as it loads), unless the test asks for the plugin; the session running the tests
keeps both.
"""

from __future__ import annotations

import re
import subprocess
import sys

import pytest

pytest.importorskip("hypothesis")
pytest.importorskip("anyio")

pytestmark = pytest.mark.unit

# The name each plugin is registered under, and the fixture that asks for it.
PLUGINS = {
    "hypothesispytest": "hypothesis_plugin_in_inner_runs",
    "anyio": "anyio_plugin_in_inner_runs",
}
PRINTS_PLUGINS = (
    "import pytest\n\ndef test_plugins(pytestconfig):\n"
    f"    for name in {list(PLUGINS)!r}:\n"
    "        print('plugin', name, pytestconfig.pluginmanager.has_plugin(name))\n"
)


def _inner_plugins(folder) -> dict[str, bool]:
    (folder / "test_plugins.py").write_text(PRINTS_PLUGINS)
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-s", "-p", "no:cacheprovider", "test_plugins.py"],
        cwd=folder, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    return _seen(done.stdout.splitlines())


def _seen(lines: list[str]) -> dict[str, bool]:
    # -s: the first line follows the file's name on its line
    found = re.findall(r"plugin (\S+) (True|False)", "\n".join(lines))
    return {name: seen == "True" for name, seen in found}


def test_this_session_keeps_both_plugins(pytestconfig):
    assert all(pytestconfig.pluginmanager.has_plugin(name) for name in PLUGINS)


def test_a_run_a_test_starts_has_neither_plugin(tmp_path):
    assert _inner_plugins(tmp_path) == {"hypothesispytest": False, "anyio": False}


@pytest.mark.parametrize("plugin", list(PLUGINS))
def test_a_test_that_asks_gives_its_runs_that_plugin(tmp_path, request, plugin):
    request.getfixturevalue(PLUGINS[plugin])
    assert _inner_plugins(tmp_path) == {name: name == plugin for name in PLUGINS}


def test_pytester_runs_follow_the_same_rule(pytester):
    pytester.makepyfile(test_plugins=PRINTS_PLUGINS)
    result = pytester.runpytest_subprocess("-s")
    assert _seen(result.outlines) == {"hypothesispytest": False, "anyio": False}


def test_pytester_runs_of_a_test_that_asks_have_the_plugin(
    pytester, hypothesis_plugin_in_inner_runs, anyio_plugin_in_inner_runs
):
    pytester.makepyfile(test_plugins=PRINTS_PLUGINS)
    result = pytester.runpytest_subprocess("-s")
    assert _seen(result.outlines) == {"hypothesispytest": True, "anyio": True}
