"""How a pool rank waits for its controller's next message: as a SCHED_BATCH task.

The controller sends a test to its ranks one after another. To Linux's scheduler a rank
woken by the first send is a task that slept, and it may preempt the task that woke it:
with few cores the controller then stops before its send to the next rank, which starts
the test late while the first one waits for it in the test's first collective (two ranks
on 2 cores: 0.20-0.21 ms between the ranks' starts at the median, 25-31 us waiting so).
A task of policy SCHED_BATCH never preempts the running task as it wakes (sched(7)). A
rank waits as one and is back to the default policy before it decodes the message: the
test, the threads and the processes it starts are scheduled as in any process.

Only the waiting thread's policy changes (Linux's policy is per thread), and only from the
default one: a rank started under another policy (``chrt``, SCHED_IDLE) waits under it,
as does a rank where the switch is refused (a sandbox) or does not exist (not Linux).
"""

from __future__ import annotations

import os

_BATCH = getattr(os, "SCHED_BATCH", None)
_DEFAULT = getattr(os, "SCHED_OTHER", None)
_switchable: bool | None = None  # decided at the first wait of this process


def receive(conn) -> bytes:
    """``conn.recv_bytes()``, waited for as a SCHED_BATCH task where that can be done."""
    global _switchable
    if _switchable is None:
        _switchable = _BATCH is not None and _policy() == _DEFAULT
    if not _switchable or not _set(_BATCH):
        return conn.recv_bytes()
    try:
        return conn.recv_bytes()
    finally:
        _set(_DEFAULT)


def _policy() -> int | None:
    try:
        return os.sched_getscheduler(0)
    except (AttributeError, OSError):
        return None


def _set(policy: int) -> bool:
    global _switchable
    try:
        os.sched_setscheduler(0, policy, os.sched_param(0))
    except OSError:  # refused: wait as this process is, from now on
        _switchable = False
        return False
    return True
