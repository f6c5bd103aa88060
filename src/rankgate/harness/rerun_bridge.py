"""pytest-rerunfailures beside rankgate: ``--reruns N`` on a world test means
``--rankgate-reruns N``.

pytest-rerunfailures runs a failed test's protocol again in the same process. For a
world test that is the same ranks and process group the failure left behind: a hung
world or a broken group (in place there is no other). rankgate's own reruns start the
attempt on a fresh world (the pool respawned where it broke; in place only when every
rank agrees), so on world tests ``--reruns``/``--force-reruns``/ini ``reruns`` set
rankgate's reruns (unless ``--rankgate-reruns`` or ini ``rankgate_reruns`` says
otherwise) and pytest-rerunfailures leaves them alone. Plain tests keep its reruns.
``@pytest.mark.flaky`` on a world test is refused, naming ``--rankgate-reruns``: a
per-test count and its conditions (only_rerun, condition=...) have no rankgate
equivalent, and ignoring them would be silent.
"""

from __future__ import annotations

import pytest

from rankgate.harness.pluginnames import INPLACE_PLUGIN

RERUNFAILURES = "rerunfailures"
"""pytest-rerunfailures's name in pytest's plugin manager (its entry point)."""
RERUN_BRIDGE = "rankgate-rerun-bridge"


def active(config: pytest.Config) -> bool:
    return config.pluginmanager.has_plugin(RERUNFAILURES)


def global_reruns(config: pytest.Config) -> tuple[str, str] | None:
    """(where, value) of pytest-rerunfailures's count for every test; None if unset."""
    if not active(config):
        return None
    for option, where in (("force_reruns", "--force-reruns"), ("reruns", "--reruns")):
        value = config.getoption(option, None)
        if value is not None:
            return where, str(value)
    ini = str(config.getini("reruns") or "").strip()
    return ("pytest-rerunfailures's ini option reruns", ini) if ini else None


def _is_world_test(item: pytest.Item) -> bool:
    return item.get_closest_marker("world") is not None


class RerunBridge:
    @pytest.hookimpl(trylast=True)
    def pytest_collection_modifyitems(self, items: list[pytest.Item]) -> None:
        flaky = [i.nodeid for i in items if _is_world_test(i) and i.get_closest_marker("flaky")]
        if flaky:
            raise pytest.UsageError(
                f"{flaky[0]}: @pytest.mark.flaky (pytest-rerunfailures) on a world test would "
                "rerun it on the same ranks and process group its failure left behind. Remove "
                "the marker and pass --rankgate-reruns N (or ini rankgate_reruns): each "
                "attempt gets a fresh world"
                + (f" ({len(flaky) - 1} more such test(s))" if len(flaky) > 1 else "")
            )

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtest_protocol(self, item: pytest.Item, nextitem) -> bool | None:
        """A world test runs once here: its reruns are rankgate's (options.reruns)."""
        if not _is_world_test(item) or global_reruns(item.config) is None:
            return None  # pytest-rerunfailures would not rerun it (a flaky marker is refused)
        if item.config.pluginmanager.has_plugin(INPLACE_PLUGIN):
            return None  # in place rankgate runs every test's protocol itself
        from _pytest.runner import runtestprotocol

        item.ihook.pytest_runtest_logstart(nodeid=item.nodeid, location=item.location)
        runtestprotocol(item, nextitem=nextitem)
        item.ihook.pytest_runtest_logfinish(nodeid=item.nodeid, location=item.location)
        return True


def register(config: pytest.Config) -> None:
    if active(config):
        config.pluginmanager.register(RerunBridge(), RERUN_BRIDGE)
