"""A pool rank waits for its next message as a SCHED_BATCH task and runs each test under
the policy it started with."""

from __future__ import annotations

import multiprocessing
import os
import threading
import time
from pathlib import Path

import pytest

from rankgate.harness.pool import batchwait

LINUX_POLICIES = pytest.mark.skipif(
    not hasattr(os, "SCHED_BATCH") or not Path("/proc/self/task").is_dir(),
    reason="scheduling policies per thread, read from /proc: Linux only",
)


def _policy_of(tid: int) -> int:
    # /proc's stat: field 41 is the policy; the fields after the name start at field 3
    fields = Path(f"/proc/self/task/{tid}/stat").read_text().rsplit(")", 1)[1].split()
    return int(fields[41 - 3])


def _state_of(tid: int) -> str:
    return Path(f"/proc/self/task/{tid}/stat").read_text().rsplit(")", 1)[1].split()[0]


def _wait_for(condition, what: str, seconds: float = 10.0) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"{what} within {seconds:g} s")
        time.sleep(0.001)


def _receive_in_a_thread(start_policy: int):
    """Start a thread that sets ``start_policy`` on itself and calls batchwait.receive;
    returns (its connection's other end, what it saw, the thread, its tid once known)."""
    parent, child = multiprocessing.Pipe()
    seen: dict = {}
    entered = threading.Event()

    def waiter() -> None:
        seen["tid"] = threading.get_native_id()
        os.sched_setscheduler(0, start_policy, os.sched_param(0))
        entered.set()
        seen["message"] = batchwait.receive(child)
        seen["after"] = os.sched_getscheduler(0)

    thread = threading.Thread(target=waiter, daemon=True)
    thread.start()
    assert entered.wait(10), "the waiting thread did not start"
    tid = seen["tid"]
    _wait_for(lambda: _state_of(tid) == "S", "the thread did not block in its wait")
    return parent, seen, thread, tid


@pytest.fixture
def undecided(monkeypatch):
    """batchwait decides once per process whether it may switch: each test decides anew."""
    monkeypatch.setattr(batchwait, "_switchable", None)


@LINUX_POLICIES
@pytest.mark.unit
def test_the_wait_is_a_batch_task_and_what_follows_runs_under_the_default_policy(undecided):
    parent, seen, thread, tid = _receive_in_a_thread(os.SCHED_OTHER)
    assert _policy_of(tid) == os.SCHED_BATCH
    parent.send_bytes(b"the next test")
    thread.join(10)
    assert seen == {"tid": tid, "message": b"the next test", "after": os.SCHED_OTHER}


@LINUX_POLICIES
@pytest.mark.unit
def test_a_rank_started_under_another_policy_waits_under_it(undecided):
    parent, seen, thread, tid = _receive_in_a_thread(os.SCHED_IDLE)
    assert _policy_of(tid) == os.SCHED_IDLE
    parent.send_bytes(b"the next test")
    thread.join(10)
    assert seen == {"tid": tid, "message": b"the next test", "after": os.SCHED_IDLE}


@pytest.mark.unit
def test_where_the_switch_is_refused_the_rank_waits_as_it_is(undecided, monkeypatch):
    def refuse(*args):
        raise PermissionError(1, "Operation not permitted")

    monkeypatch.setattr(os, "sched_setscheduler", refuse, raising=False)
    monkeypatch.setattr(batchwait, "_policy", lambda: batchwait._DEFAULT)
    parent, child = multiprocessing.Pipe()
    parent.send_bytes(b"first")
    parent.send_bytes(b"second")
    assert (batchwait.receive(child), batchwait.receive(child)) == (b"first", b"second")
    assert batchwait._switchable is False  # asked once, not again for every test


@pytest.fixture
def launch_policy():
    """The policy of the process that made the fixtures: the pool's controller, or in
    place each rank's own pytest."""
    return os.sched_getscheduler(0) if hasattr(os, "sched_getscheduler") else None


@pytest.mark.world(2)
def test_a_world_test_runs_under_the_policy_its_run_started_with(launch_policy):
    if launch_policy is None:
        pytest.skip("no scheduling policies here (not Linux)")
    assert os.sched_getscheduler(0) == launch_policy
    threads_policy: list[int] = []
    thread = threading.Thread(target=lambda: threads_policy.append(os.sched_getscheduler(0)))
    thread.start()
    thread.join()
    assert threads_policy == [launch_policy]
