"""What a rank does before an adopted test: the one entry the rank's loop (and in-place
mode) calls with the test's prelude; apart from ``prelude`` and ``spawnhelper`` so that
neither imports the other."""

from __future__ import annotations

import functools
import os
from collections.abc import Callable, Mapping

from rankgate.harness.adopt import spawnhelper, torchcase
from rankgate.harness.adopt.prelude import LAUNCHER_VARIABLES, call_target, rank_values
from rankgate.harness.adopt.spawnhelper import install_lines


def enter(prelude: Mapping, func: Callable | None = None, *, file_name: str | None = None):
    """Before an adopted test on this rank: install spawn helpers, set variables, set up.
    Returns what to call for the test's body (``func``, or what runs it as the project's
    own child process would).

    ``prelude``: {"helpers": [adoption lines], "env": {NAME: template}, "setup": target,
    "after": helper calls before code for one process, "torch_case": True,
    "own_group": True (rankgate's group hidden, a fresh one from the test's init),
    "teardown": target called after the body,
    "setup_only": True for the set-up's own step (then None is returned)}.
    ``file_name``: the file a torch test case's store uses (one every rank sees).
    The variables stay for the test; the rank restores its environment after it.
    """
    if prelude.get("helpers"):
        install_lines(prelude["helpers"])
    if prelude.get("env") is not None or prelude.get("setup"):
        values = rank_values()
        for name in LAUNCHER_VARIABLES:
            os.environ[name] = values[name.lower()]
        for name, template in (prelude.get("env") or {}).items():
            os.environ[name] = template.format(**values)
    if prelude.get("setup"):
        call_target(prelude["setup"])()
    if func is None or prelude.get("setup_only"):
        return None  # the set-up's own step, timed apart from the test (pool.session)
    if prelude.get("torch_case"):
        func = torchcase.on_this_rank(func.__self__, func, file_name)
    if prelude.get("own_group"):
        func = torchcase.with_own_group(func)
    if prelude.get("teardown"):
        func = _with_teardown(func, prelude["teardown"])
    if prelude.get("after"):
        func = _with_code_after(func, prelude["after"])
    return func


def _with_teardown(func: Callable, target: str) -> Callable:
    """The body, then the project's reset of what it keeps from the test (on every rank,
    whether the body passed or not)."""

    @functools.wraps(func)
    def run(*args, **kwargs):
        try:
            return func(*args, **kwargs)
        finally:
            call_target(target)()

    return run


def _with_code_after(func: Callable, calls: int) -> Callable:
    """The body of a test with code after its ``calls`` helper calls: that code runs on
    rank 0 only, once every rank's body ended (``spawnhelper``)."""

    @functools.wraps(func)
    def run(*args, **kwargs):
        spawnhelper.expect_code_after(calls)
        try:
            return func(*args, **kwargs)
        except spawnhelper.DoneOnThisRank:
            return None  # this rank's part ended with the helper's body
        finally:
            spawnhelper.end_of_test()

    return run
