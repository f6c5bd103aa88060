"""One ring wakes every rank waiting for its next message; the last message's ring wakes
no one; the controller's end wakes them all."""

from __future__ import annotations

import threading

import pytest

from rankgate.harness.pool import bells

pytestmark = pytest.mark.unit


class Ranks:
    """Threads standing in for a pool's ranks: each waits on its own rope, then counts."""

    def __init__(self, folder, count: int) -> None:
        self.ropes = [bells.BellRope(folder) for _ in range(count)]
        self.woken = [threading.Event() for _ in range(count)]

    def wait_once(self) -> None:
        for event in self.woken:
            event.clear()
        for i in range(len(self.ropes)):
            threading.Thread(target=self._wait, args=(i,), daemon=True).start()

    def _wait(self, i: int) -> None:
        self.ropes[i].wait()
        self.woken[i].set()

    def awake(self, seconds: float) -> list[bool]:
        return [event.wait(seconds) for event in self.woken]


@pytest.fixture
def folder(tmp_path):
    bells.make(tmp_path)
    return tmp_path


def test_one_ring_wakes_every_waiting_rank(folder):
    belfry, ranks = bells.Belfry(folder), Ranks(folder, 3)
    ranks.wait_once()
    assert ranks.awake(0.2) == [False, False, False]  # nothing rang yet
    belfry.ring()
    assert ranks.awake(10) == [True, True, True]
    belfry.close()


def test_the_last_messages_ring_does_not_wake_a_rank_for_the_next(folder):
    belfry, ranks = bells.Belfry(folder), Ranks(folder, 2)
    for message in range(4):
        ranks.wait_once()
        belfry.ring()
        assert ranks.awake(10) == [True, True], f"message {message}"
        # the ranks wait again before the controller has emptied the bell it rang
        ranks.wait_once()
        assert ranks.awake(0.2) == [False, False], f"after message {message}"
        belfry.answered()
        assert ranks.awake(0.2) == [False, False], f"after message {message} was answered"
        belfry.ring()
        assert ranks.awake(10) == [True, True], f"message {message}'s next"
        belfry.answered()
    belfry.close()


def test_the_controllers_end_wakes_every_waiting_rank(folder):
    belfry, ranks = bells.Belfry(folder), Ranks(folder, 2)
    ranks.wait_once()
    belfry.close()  # as the controller's process ends: the bells hang up
    assert ranks.awake(10) == [True, True]


def test_making_the_bells_again_replaces_an_earlier_pools(folder):
    (folder / "bell0").unlink()
    (folder / "bell0").write_text("a file left where a bell goes")
    bells.make(folder)
    belfry, ranks = bells.Belfry(folder), Ranks(folder, 1)
    ranks.wait_once()
    belfry.ring()
    assert ranks.awake(10) == [True]
    belfry.close()
