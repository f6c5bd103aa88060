"""pytest's entry point (``pytest11``, named ``rankgate``): registers the harness's plugin
and report's tracing plugin together.

One entry point, so ``-p no:rankgate`` turns every part of rankgate off;
``-p no:rankgate-harness`` or ``-p no:rankgate-tracing`` turns off one part. It sits above
both parts, so neither imports the other.

PYTEST_DONT_REWRITE: imported before pytest starts in a forked process (see :mod:`rankgate`).
"""

from __future__ import annotations

import pytest

from rankgate import fastexit
from rankgate.harness import plugin as harness_plugin
from rankgate.harness.pluginnames import HARNESS_PLUGIN, TRACING_PLUGIN
from rankgate.report import tracing_plugin

PLUGINS = ((HARNESS_PLUGIN, harness_plugin), (TRACING_PLUGIN, tracing_plugin))
"""The plugins this entry point registers, by name (rankgate.docsite reads their options)."""

fastexit.skip_last_collection()  # at exit: every pytest with rankgate ends sooner


def pytest_addoption(parser: pytest.Parser, pluginmanager: pytest.PytestPluginManager) -> None:
    # Registered here, not at import, because pytest hands over its plugin manager only
    # through a hook; pytest_addoption is the first one and is replayed for late plugins.
    for name, plugin in PLUGINS:
        if not pluginmanager.is_registered(plugin):  # also given with -p MODULE
            pluginmanager.register(plugin, name)  # does nothing when -p no:NAME blocked it
