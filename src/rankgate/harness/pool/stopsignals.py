"""SIGTERM or SIGHUP end a pool-mode session as Ctrl-C does (a CI cancel, a gate
stopping its stage): the pools end and their folder goes, instead of the process dying
with them left behind."""

from __future__ import annotations

import os
import signal
import threading

import pytest

STOP_SIGNALS = (signal.SIGTERM, signal.SIGHUP)


def end_the_session_on_stop_signals() -> dict:
    """SIGTERM or SIGHUP (a CI cancel, a gate stopping its stage) end the session as
    Ctrl-C does, so the pools end and their folder goes, instead of the process dying
    with them left behind. Signals someone else handles are left to them."""
    if threading.current_thread() is not threading.main_thread():
        return {}
    _session_pid[0] = os.getpid()
    previous = {}
    for signum in STOP_SIGNALS:
        if signal.getsignal(signum) is signal.SIG_DFL:
            previous[signum] = signal.signal(signum, _stop_the_session)
    return previous


_session_pid = [0]
"""The pytest process whose session the stop signals end."""


def _stop_the_session(signum, frame) -> None:
    signal.signal(signum, signal.SIG_DFL)  # a second one ends the process at once
    if os.getpid() != _session_pid[0]:
        # A process forked from pytest's (a project's own launcher, in a test rankgate did
        # not adopt) inherited the handler: the signal ends it as it would have.
        os.kill(os.getpid(), signum)
        return
    pytest.exit(f"rankgate: received {signal.Signals(signum).name}", returncode=128 + signum)
