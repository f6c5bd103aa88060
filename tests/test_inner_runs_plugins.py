"""The pytest runs the tests start: what the project's conftest gives them.

They block hypothesis's pytest plugin (its terminal summary imports most of hypothesis,
about a second of CPU in every inner session and launched rank), unless the test asks for
it; the session running the tests keeps it.
"""

from __future__ import annotations

import subprocess
import sys

import pytest

pytest.importorskip("hypothesis")

pytestmark = pytest.mark.unit

PLUGINS = "import pytest\n\ndef test_plugins(pytestconfig):\n    print('hypothesis plugin:', pytestconfig.pluginmanager.has_plugin('hypothesispytest'))\n"


def _inner_sees_the_plugin(folder) -> bool:
    (folder / "test_plugins.py").write_text(PLUGINS)
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-s", "-p", "no:cacheprovider", "test_plugins.py"],
        cwd=folder, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    (line,) = [x for x in done.stdout.splitlines() if "hypothesis plugin:" in x]
    return line.endswith("True")


def test_this_session_keeps_hypothesis_plugin(pytestconfig):
    assert pytestconfig.pluginmanager.has_plugin("hypothesispytest")


def test_a_run_a_test_starts_has_no_hypothesis_plugin(tmp_path):
    assert not _inner_sees_the_plugin(tmp_path)


def test_a_test_that_asks_gives_its_runs_the_plugin(tmp_path, hypothesis_plugin_in_inner_runs):
    assert _inner_sees_the_plugin(tmp_path)


def test_pytester_runs_follow_the_same_rule(pytester):
    pytester.makepyfile(test_plugins=PLUGINS)
    pytester.runpytest_subprocess("-s").stdout.fnmatch_lines(["*hypothesis plugin: False*"])


def test_pytester_runs_of_a_test_that_asks_have_the_plugin(
    pytester, hypothesis_plugin_in_inner_runs
):
    pytester.makepyfile(test_plugins=PLUGINS)
    pytester.runpytest_subprocess("-s").stdout.fnmatch_lines(["*hypothesis plugin: True*"])
