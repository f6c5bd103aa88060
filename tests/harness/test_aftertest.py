"""What a finished test left behind: threads still running, torch.distributed functions
it replaced (processes: test_leaks.py)."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest
import torch.distributed as dist

from rankgate.harness import replaced, threads_left
from rankgate.harness.aftertest import AfterTestCheck

pytestmark = pytest.mark.unit


def test_a_thread_left_running_is_named_with_where_it_started(monkeypatch):
    monkeypatch.setattr(threads_left, "JOIN_WAIT_S", 0.05)
    monkeypatch.setattr(threads_left, "end_without_them", lambda threads: None)  # no exit hook
    release = threading.Event()
    watch = threads_left.ThreadWatch()
    done = threading.Thread(target=lambda: None, name="quick")
    stuck = threading.Thread(target=release.wait, name="stuck-worker")
    daemon = threading.Thread(target=release.wait, name="helper", daemon=True)
    for thread in (done, stuck, daemon):
        thread.start()  # start
    try:
        left = watch.left_running()
        assert left == [stuck]  # a daemon thread and one that ended are no problem
        (line,) = [
            n
            for n, text in enumerate(Path(__file__).read_text().splitlines(), 1)
            if text.endswith("# start")
        ]
        where = (
            f"test_aftertest.py:{line} in test_a_thread_left_running_is_named_with_where_it_started"
        )
        assert threads_left.problem(left) == (
            f"rankgate: the test left 1 thread running: 'stuck-worker' (started at {where}). "
            "A non-daemon thread keeps its process alive at exit: stop and join it before "
            "the test returns, or start it with daemon=True"
        )
        assert threading.Thread.start is watch._start  # put back
    finally:
        release.set()
        stuck.join()


def test_a_replaced_collective_is_named_and_put_back():
    real = dist.all_reduce
    watch = replaced.FunctionWatch()
    dist.all_reduce = lambda *a, **k: None  # patch
    try:
        found = watch.put_back()
    finally:
        if dist.all_reduce is not real:
            dist.all_reduce = real
    (line,) = [
        n
        for n, text in enumerate(Path(__file__).read_text().splitlines(), 1)
        if text.endswith("# patch")
    ]
    assert found == [f"torch.distributed.all_reduce (now <lambda> at test_aftertest.py:{line})"]
    assert dist.all_reduce is real


def test_a_replaced_function_is_found_beside_a_value_whose_eq_raises(monkeypatch):
    # The namespaces are compared whole first; a tensor that changed there makes that
    # comparison raise, and the names are then looked at one by one.
    import torch

    monkeypatch.setattr(dist, "rankgate_probe", torch.zeros(2), raising=False)
    watch = replaced.FunctionWatch()
    monkeypatch.setattr(dist, "rankgate_probe", torch.ones(2))
    real = dist.barrier
    dist.barrier = print
    try:
        assert watch.put_back() == ["torch.distributed.barrier (now builtin_function_or_method)"]
    finally:
        dist.barrier = real
    assert watch.put_back() == []  # nothing else: the tensor is no function


def test_a_monkeypatch_fixtures_change_is_its_own(monkeypatch):
    watch = replaced.FunctionWatch()
    monkeypatch.setattr(dist, "barrier", lambda *a, **k: None)
    assert watch.put_back([monkeypatch]) == []


def test_the_check_reports_each_kind(monkeypatch):
    real = dist.broadcast
    check = AfterTestCheck()
    dist.broadcast = print
    problems = check.problems(has_group=False)
    assert dist.broadcast is real
    assert problems == [
        "rankgate: the test replaced torch.distributed.broadcast (now builtin_function_or_method). "
        "It is put back for the tests after it: patch it with the monkeypatch fixture or "
        "unittest.mock.patch (undone when the test ends), never by assignment"
    ]
