"""pytest-timeout beside rankgate: its timeout of a world test becomes rankgate's.

pytest-timeout stops a test by raising inside the process that runs it. For a world
test that is the pool's controller waiting on the ranks (or one rank's pytest in
place): the verdict then named no hung rank, showed the controller's wait as the
stack and lost the ledger. So on a world test ``@pytest.mark.timeout(N)`` and
``--timeout`` (``PYTEST_TIMEOUT``, ini ``timeout``) only set the test's timeout,
rankgate's hang watch ends it, and pytest-timeout's own timer is not armed. Plain
tests keep pytest-timeout's behaviour.

Precedence for a world test: the world marker's ``timeout=``, then
``@pytest.mark.timeout``, then ``--rankgate-timeout`` / ini ``rankgate_timeout``,
then pytest-timeout's session timeout, then rankgate's default.
"""

from __future__ import annotations

import pytest

from rankgate.harness.spec import timeout_problem

TIMEOUT_PLUGIN_NAME = "timeout"
"""pytest-timeout's name in pytest's plugin manager (its entry point)."""
TIMEOUT_BRIDGE = "rankgate-timeout-bridge"


def active(config: pytest.Config) -> bool:
    return config.pluginmanager.has_plugin(TIMEOUT_PLUGIN_NAME)


def marker_seconds(item: pytest.Item) -> float | None:
    """The test's ``@pytest.mark.timeout`` seconds; None without one, or with 0 (off)."""
    if not active(item.config):
        return None
    marker = item.get_closest_marker("timeout")
    if marker is None:
        return None
    seconds = marker.kwargs.get("timeout", marker.args[0] if marker.args else None)
    return _checked(seconds, f"{item.nodeid}: @pytest.mark.timeout")


def session_seconds(config: pytest.Config) -> float | None:
    """pytest-timeout's timeout for every test (``--timeout``, ``PYTEST_TIMEOUT``, ini
    ``timeout``); None when unset or 0 (off)."""
    if not active(config):
        return None
    import pytest_timeout

    seconds = pytest_timeout.get_env_settings(config).timeout
    return _checked(seconds, "pytest-timeout's --timeout")


def _checked(seconds, what: str) -> float | None:
    if seconds is None:
        return None
    try:
        seconds = float(seconds)
    except (TypeError, ValueError):
        raise pytest.UsageError(f"{what} must be a number of seconds, got {seconds!r}") from None
    if seconds == 0:
        return None  # pytest-timeout's "no timeout": rankgate's own applies
    problem = timeout_problem(seconds, what)
    if problem:
        raise pytest.UsageError(problem + " (on a world test it is rankgate's timeout)")
    return seconds


class TimeoutBridge:
    """Keeps pytest-timeout's timer off world tests (firstresult hooks: True = handled)."""

    @staticmethod
    def _is_world_test(item: pytest.Item) -> bool:
        return item.get_closest_marker("world") is not None  # rankgate's hang watch ends it

    @pytest.hookimpl(tryfirst=True)
    def pytest_timeout_set_timer(self, item: pytest.Item, settings):
        return True if self._is_world_test(item) else None

    @pytest.hookimpl(tryfirst=True)
    def pytest_timeout_cancel_timer(self, item: pytest.Item):
        return True if self._is_world_test(item) else None


def register(config: pytest.Config) -> None:
    if active(config) and not config.pluginmanager.has_plugin(TIMEOUT_BRIDGE):
        config.pluginmanager.register(TimeoutBridge(), TIMEOUT_BRIDGE)
