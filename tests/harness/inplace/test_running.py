"""The stop gate between a round's steps and the watchers' stops (running.py): threads
only, no store, no process group."""

from __future__ import annotations

import threading

import pytest

from rankgate.harness.inplace.running import RunningTest, StopGate, shows_verdict

pytestmark = pytest.mark.unit


class _Round:
    """A round of three steps, the middle one writing the verdict; ``done`` says which ran."""

    def __init__(self) -> None:
        self.done: list[str] = []

    def first(self):
        self.done.append("first")
        return self.verdict

    @shows_verdict
    def verdict(self):
        self.done.append("verdict")
        return self.last

    def last(self):
        self.done.append("last")


def _play(gate: StopGate, played: _Round) -> None:
    step = played.first
    while step is not None:
        step = gate.run(step)


def test_each_step_returns_the_next_and_the_gate_runs_them_in_turn():
    played = _Round()
    _play(StopGate(), played)
    assert played.done == ["first", "verdict", "last"]


def test_a_stop_begun_during_a_step_parks_the_main_thread_after_it():
    gate, played = StopGate(), _Round()
    original = played.first

    def first_then_a_watcher_stops():
        following = original()
        gate.begin()  # a watcher began a stop while the step ran
        return following

    played.first = first_then_a_watcher_stops
    main = threading.Thread(target=_play, args=(gate, played), daemon=True)
    main.start()
    main.join(timeout=0.5)
    assert main.is_alive()  # parked: the watcher records the test and ends the process
    assert played.done == ["first"]


def test_a_verdict_step_does_not_run_once_a_stop_began():
    gate, played = StopGate(), _Round()
    gate.begin()
    outcome = []
    thread = threading.Thread(target=lambda: outcome.append(gate.run(played.verdict)), daemon=True)
    thread.start()
    thread.join(timeout=0.5)
    assert played.done == [] and outcome == [] and thread.is_alive()


def test_a_watcher_waits_for_the_verdict_being_written():
    gate, entered, release = StopGate(), threading.Event(), threading.Event()

    @shows_verdict
    def writing():
        entered.set()
        release.wait(5)

    main = threading.Thread(target=gate.run, args=(writing,), daemon=True)
    main.start()
    assert entered.wait(5)
    watcher = threading.Thread(target=gate.begin, daemon=True)
    watcher.start()
    watcher.join(timeout=0.2)
    assert watcher.is_alive() and not gate.begun.is_set()  # it waits for the lock
    release.set()
    watcher.join(timeout=5)
    assert gate.begun.is_set()


def test_one_thread_claims_the_stop():
    gate = StopGate()
    assert [gate.claim() for _ in range(3)] == [True, False, False]


def test_a_new_test_starts_at_its_first_attempt():
    running = RunningTest()
    running.begin(item := object())
    running.attempt, running.own, running.logged, running.group_trouble = 3, [], True, True
    running.begin(item)
    assert (running.item, running.attempt, running.own, running.logged) == (item, 1, None, False)
    assert not running.group_trouble
