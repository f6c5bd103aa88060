"""In-place mode's control channel: the harness's messages between ranks, through the store.

The ranks of an in-place run exchange collected test ids, each test's outcome, the
name of the shared temp directory and "I stopped the run" through the rendezvous
store (the launcher's TCPStore, or the FileStore the ranks share), never through a
process group: a test may destroy, break or wedge the group (a collective a peer
never joins), and the harness must still judge that test, learn that a peer failed,
and stop the run in order. Values are pickled, so no numpy is needed either.

Keys name what they carry (``t12/outcome/3``: rank 3's outcome of the 13th test), so
a rank that skipped a step cannot shift later exchanges.
"""

from __future__ import annotations

import pickle
import time
from typing import Any

from rankgate.errors import RankgateError

POLL_S = 0.01
"""The longest sleep between looks at the store; the first looks come sooner."""
ABORT_KEY = "abort"


class RunAborted(Exception):
    """A rank stopped the run (its test hung); ``args[0]`` says which and why."""


class PeerLeft(RankgateError, Exception):
    """A peer finished the current test without reaching the step this rank waits in."""


class PeerGone(Exception):
    """Peers whose process ended before they gave what this rank waits for."""

    def __init__(self, ranks: list[int]) -> None:
        super().__init__(f"rank(s) {ranks} ended without a result")
        self.ranks = ranks


LIVENESS_EVERY_S = 0.2
"""How often a wait looks whether the peers it waits for still run."""


class ControlChannel:
    """Named exchanges between the ``world`` ranks over a c10d store."""

    def __init__(self, store, rank: int, world: int, timeout: float, where: str) -> None:
        """``where`` names the store in errors (a path, or host:port)."""
        self.store = store
        self.rank = rank
        self.world = world
        self.timeout = timeout
        self.where = where

    def set(self, key: str, value: Any) -> None:
        self.store.set(key, pickle.dumps(value))

    def peek(self, key: str) -> Any:
        """The value at ``key``, or None when nobody has set it yet."""
        if not self.store.check([key]):
            return None
        return pickle.loads(self.store.get(key))

    def all_gather(
        self,
        name: str,
        value: Any,
        *,
        test_index: int | None = None,
        timeout=None,
        gone=None,
        ranks=None,
    ) -> list[Any]:
        """Every rank's ``value`` for ``name``, in rank order; ``ranks``: of those ranks
        only (a sub-world's), which alone can stop this wait (``wait``'s ``scope``)."""
        self.set(f"{name}/{self.rank}", value)
        keys = {r: f"{name}/{r}" for r in (range(self.world) if ranks is None else ranks)}
        self.wait(keys, what=name, test_index=test_index, timeout=timeout, gone=gone, scope=ranks)
        return [pickle.loads(self.store.get(k)) for k in keys.values()]

    def broadcast(
        self, name: str, value: Any = None, *, src: int = 0, test_index=None, scope=None
    ) -> Any:
        """``src``'s value for ``name`` on every rank (the others pass nothing)."""
        key = f"{name}/{src}"
        if self.rank == src:
            self.set(key, value)
            return value
        self.wait({src: key}, what=name, test_index=test_index, scope=scope)
        return pickle.loads(self.store.get(key))

    def abort(self, reason: str) -> str:
        """Stop the run: every rank learns it (``ABORT_KEY``), and the waits of this
        rank's sub-world end at once (``abort/<rank>``). Returns the run's reason: the
        first rank's to stop it (two ranks that time out together each stop it; the run
        names one of them everywhere, not each its own)."""
        agreed = self.store.compare_set(ABORT_KEY, "", pickle.dumps(reason))
        self.set(rank_abort_key(self.rank), reason)
        try:
            return pickle.loads(agreed)
        except Exception:  # a store that answers otherwise: this rank's own
            return reason

    def stop_here(self, reason: str) -> None:
        """This rank runs no more tests (-x or --maxfail stopped it): a wait for it ends
        (``abort/<rank>``), while the other ranks' runs go on."""
        self.set(rank_abort_key(self.rank), reason)

    def aborted(self, scope=None) -> str | None:
        """Why the run was stopped (by one of ``scope``'s ranks), or None."""
        if scope is None:
            return self.peek(ABORT_KEY)
        stopper = self.stopped_by(scope)
        if stopper is None:
            return None
        return self.peek(ABORT_KEY) or self.peek(rank_abort_key(stopper))

    def stopped_by(self, scope) -> int | None:
        """The first of ``scope``'s ranks that stopped the run, or itself, or None."""
        return next((r for r in scope if self.store.check([rank_abort_key(r)])), None)

    def wait(
        self,
        keys: dict[int, str],
        *,
        what: str,
        test_index: int | None = None,
        timeout=None,
        gone=None,
        scope=None,
    ) -> None:
        """Until each rank's key is set.

        Raises RunAborted when a rank stopped the run (one of ``scope``'s ranks, when
        given: a sub-world's test ends before another sub-world's stop ends the run),
        PeerLeft when, inside test ``test_index``, a rank whose key is missing has
        already finished that test, and
        PeerGone when ``gone(missing ranks)`` names ranks whose process has ended.
        """
        timeout = self.timeout if timeout is None else timeout
        deadline = time.monotonic() + timeout
        next_look = time.monotonic() + LIVENESS_EVERY_S
        pause = POLL_S / 32  # ranks usually arrive together: look again soon, then back off
        while not self.store.check(list(keys.values())):
            aborted = self.aborted(scope)
            if aborted is not None:
                raise RunAborted(aborted)
            missing = [r for r, k in keys.items() if not self.store.check([k])]
            if test_index is not None:
                left = [r for r in missing if self.store.check([outcome_key(test_index, r)])]
                if left:
                    raise PeerLeft(f"rank(s) {left} finished the test without reaching {what!r}")
            if gone is not None and time.monotonic() > next_look:
                next_look = time.monotonic() + LIVENESS_EVERY_S
                dead = gone(missing)
                if dead:
                    raise PeerGone(dead)
            if time.monotonic() > deadline:
                raise TimeoutError(
                    f"rankgate in-place: rank(s) {missing} gave no {what!r} within "
                    f"{timeout:g} s (store: {self.where})"
                )
            time.sleep(pause)
            pause = min(POLL_S, pause * 2)

    def failed_peers(self, test_key, ranks) -> list[int]:
        """Of ``ranks``, the others that marked test ``test_key`` failed (``failed_key``)."""
        return [r for r in ranks if r != self.rank and self.peek(failed_key(test_key, r))]

    def end_together(self) -> bool:
        """At the run's end: hold every rank until rank 0 has written its summary
        (launchers kill the job when one rank exits non-zero), then until rank 0 knows
        that nobody reads the store again. False when the run was aborted or timed out."""
        try:
            self.all_gather("end", None)
            # Each rank's last store operation is then a write; once rank 0 has seen them
            # all its file can go (a read of a deleted FileStore would recreate the file
            # and wait in it for ever).
            self.set(f"left/{self.rank}", True)
            if self.rank == 0:
                self.wait({r: f"left/{r}" for r in range(self.world)}, what="left")
        except (RunAborted, TimeoutError):
            self.set(exited_key(self.rank), True)  # a stopping rank waits for this
            return False
        return True


def rank_abort_key(rank: int) -> str:
    return f"abort/{rank}"


def outcome_key(test_index: int, rank: int) -> str:
    return f"t{test_index}/outcome/{rank}"


def failed_key(test_index: int, rank: int) -> str:
    return f"t{test_index}/failed/{rank}"


def exited_key(rank: int) -> str:
    return f"exited/{rank}"


def stopped_key(rank: int) -> str:
    """Set by a rank that received a stop signal (its value: the signal's name)."""
    return f"stopped/{rank}"
