"""Whether the other ranks of an in-place run still run: their processes, learnt at
collection, and what each says through the store once the run stops."""

from __future__ import annotations

import socket
import time
from collections.abc import Sequence

from rankgate.harness import leaks
from rankgate.harness.inplace import control

EXIT_WAIT_S = 5.0
"""A rank that stops the run waits this long for the others to write their JUnit files."""
SIGNAL_PEER_WAIT_S = 1.0
"""After a stop signal, how long a rank waits to hear that each peer got it too; a peer
that says nothing (and whose process is gone, where it runs on this host) is dead."""


class Peers:
    """The other ranks of the run, as this one can tell whether they still run."""

    def __init__(self, channel: control.ControlChannel, rank: int, world_size: int) -> None:
        self.control, self.rank, self.world_size = channel, rank, world_size
        self.where: list[tuple[str, int]] = []
        """Each rank's (host, pid), learnt at collection."""

    def others(self, gone: Sequence[int] = ()) -> list[int]:
        return [r for r in range(self.world_size) if r != self.rank and r not in gone]

    def may_be_running(self, rank: int) -> bool:
        """False when ``rank``'s process is known to be gone (it runs on this host)."""
        if rank >= len(self.where):
            return False
        host, pid = self.where[rank]
        if host != socket.gethostname():
            return True  # cannot look; silence alone decides after SIGNAL_PEER_WAIT_S
        return leaks.running(pid)

    def ended_here(self, ranks: list[int]) -> list[int]:
        """Of ``ranks``, those known to have ended: on this host, their process is gone
        (a rank whose host and pid this one never learned is not presumed dead)."""
        return [r for r in ranks if r < len(self.where) and not self.may_be_running(r)]

    def dead_after_signal(self) -> list[int]:
        """Peers that gave no sign after the stop signal and whose process is gone."""
        store = self.control.store
        deadline = time.monotonic() + SIGNAL_PEER_WAIT_S
        while True:
            silent = [
                r
                for r in self.others()
                if not store.check([control.stopped_key(r)])
                and not store.check([control.exited_key(r)])
            ]
            gone = [r for r in silent if not self.may_be_running(r)]
            if gone == silent or time.monotonic() > deadline:
                return gone
            time.sleep(0.05)

    def wait_for_exit(self, gone: Sequence[int] = (), finish_s: float = 0.0) -> bool:
        """True when every other rank but those ``gone`` said it exited within EXIT_WAIT_S
        and ``finish_s`` more (other sub-worlds finish the test each is in, recording its
        verdict, before a launcher stops them all)."""
        keys = [control.exited_key(r) for r in self.others(gone)]
        deadline = time.monotonic() + EXIT_WAIT_S + finish_s
        while time.monotonic() < deadline:
            if self.control.store.check(keys):
                return True
            time.sleep(0.05)
        return False
