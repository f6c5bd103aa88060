"""ranklogs: a rank catches its body's records as pytest would, then leaves logging as it was."""

from __future__ import annotations

import logging

import pytest

from rankgate.harness.pool import ranklogs

pytestmark = pytest.mark.unit

SETTINGS = ranklogs.LogSettings(
    level=logging.INFO, format="%(levelname)s %(message)s", date_format=None
)


def test_records_at_the_level_in_the_format_then_the_root_logger_as_it_was(capsys):
    root = logging.getLogger()
    level, handlers = root.level, list(root.handlers)
    with ranklogs.catching(SETTINGS):
        logging.getLogger("project").debug("not shown")
        logging.getLogger("project").info("shown")
    logging.getLogger("project").info("after the test")
    assert capsys.readouterr().err == "INFO shown\n"
    assert (root.level, root.handlers) == (level, handlers)


def test_without_a_level_the_loggers_own_levels_hold(capsys):
    with ranklogs.catching(ranklogs.LogSettings(None, "%(message)s", None)):
        logging.getLogger("project").info("below the root's WARNING")
        logging.getLogger("project").warning("shown")
    assert capsys.readouterr().err == "shown\n"


def test_without_pytests_logging_plugin_nothing_is_added():
    handlers = list(logging.getLogger().handlers)
    with ranklogs.catching(None):
        assert logging.getLogger().handlers == handlers


def test_a_root_level_the_body_changed_is_put_back():
    root = logging.getLogger()
    level = root.level
    with ranklogs.catching(ranklogs.LogSettings(None, "%(message)s", None)):
        root.setLevel(logging.DEBUG if level != logging.DEBUG else logging.ERROR)
    assert root.level == level
    with ranklogs.catching(SETTINGS):
        root.setLevel(logging.CRITICAL)
    assert root.level == level


def test_a_level_above_the_roots_leaves_the_root_as_it_is(capsys):
    root = logging.getLogger()
    level = root.level
    root.setLevel(logging.DEBUG)
    try:
        with ranklogs.catching(ranklogs.LogSettings(logging.ERROR, "%(message)s", None)):
            assert root.level == logging.DEBUG  # min(root's, the setting's), as before
            logging.getLogger("project").warning("below the handler's ERROR")
            logging.getLogger("project").error("shown")
        assert root.level == logging.DEBUG
    finally:
        root.setLevel(level)
    assert capsys.readouterr().err == "shown\n"
