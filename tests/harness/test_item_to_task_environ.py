"""item_to_task: what a test's set-up changed in the controller's environment goes to
the ranks; a test that changed nothing is found so without decoding a variable."""

from __future__ import annotations

import os

import pytest

from rankgate.harness.pool import item_to_task
from rankgate.harness.pool.forkclient import RunForkServer
from rankgate.harness.pool.pool import Pool, PoolKey, PoolSettings, raw_environ_to_send

pytestmark = pytest.mark.unit


def _pool_started_now(tmp_path) -> Pool:
    """A pool as its start leaves what it saw of the environment (no ranks started)."""
    pool = Pool(
        PoolKey(world=2, backend="gloo", gpus=()),
        tmp_path,
        PoolSettings(rendezvous_timeout=1.0, start_timeout=1.0),
        RunForkServer(tmp_path, os.getpid()),  # never asked for a rank
    )
    pool.environ, pool.environ_raw = dict(os.environ), raw_environ_to_send()
    return pool


def test_nothing_changed_sends_nothing_and_pytests_own_note_never_goes(tmp_path, monkeypatch):
    pool = _pool_started_now(tmp_path)
    monkeypatch.setenv("PYTEST_CURRENT_TEST", "test_x.py::test_y (setup)")
    monkeypatch.setenv("WORLD_SIZE", "8")  # the pool's own for each rank: never sent
    assert item_to_task._environ_changes(pool) == {}


def test_a_set_changed_or_removed_variable_is_sent(tmp_path, monkeypatch):
    monkeypatch.setenv("RANKGATE_TEST_CHANGED", "before")
    monkeypatch.setenv("RANKGATE_TEST_REMOVED", "here")
    pool = _pool_started_now(tmp_path)
    monkeypatch.setenv("RANKGATE_TEST_SET", "1")
    monkeypatch.setenv("RANKGATE_TEST_CHANGED", "after")
    monkeypatch.delenv("RANKGATE_TEST_REMOVED")
    assert item_to_task._environ_changes(pool) == {
        "RANKGATE_TEST_SET": "1",
        "RANKGATE_TEST_CHANGED": "after",
        "RANKGATE_TEST_REMOVED": None,
    }


def test_without_the_raw_mapping_the_str_view_is_compared(tmp_path, monkeypatch):
    pool = _pool_started_now(tmp_path)
    pool.environ_raw = None  # an os.environ without _data: every variable compared
    monkeypatch.setenv("RANKGATE_TEST_SET", "1")
    assert item_to_task._environ_changes(pool) == {"RANKGATE_TEST_SET": "1"}
