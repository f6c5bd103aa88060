"""A pool cleans up after itself and nothing else: a start that fails partway leaves no
bell open and no rank running; a kill signals no process that took an ended rank's pid."""

from __future__ import annotations

import os
import signal
import subprocess
from pathlib import Path

import pytest

from rankgate.harness.pool import bells, ledgerdump
from rankgate.harness.pool.forkclient import RunForkServer
from rankgate.harness.pool.pool import Pool, PoolKey, PoolSettings


def _open_paths_under(directory: Path) -> list[str]:
    """This process's descriptors that name a file in ``directory``."""
    found = []
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:  # the listing's own descriptor, closed by now
            continue
        if target.startswith(f"{directory}{os.sep}"):
            found.append(target)
    return found


def _processes_of(directory: Path) -> list[int]:
    """Processes whose environment names ``directory`` as their pool's."""
    wanted = f"RANKGATE_POOL_DIR={directory}".encode()
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            environ = Path(f"/proc/{pid}/environ").read_bytes()
        except OSError:  # gone meanwhile, or not ours to read
            continue
        if wanted in environ.split(b"\0"):
            found.append(int(pid))
    return found


@pytest.mark.unit
def test_a_belfry_that_cannot_open_its_second_bell_keeps_the_first_closed(tmp_path):
    bells.make(tmp_path)
    (tmp_path / bells.NAMES[1]).unlink()
    with pytest.raises(FileNotFoundError):
        bells.Belfry(tmp_path)
    assert _open_paths_under(tmp_path) == []


@pytest.mark.dist  # a real rank process, forked by a real fork server
def test_a_start_failing_after_a_rank_forked_closes_the_bells_and_kills_that_rank(tmp_path):
    server = RunForkServer(tmp_path / "run", os.getpid())
    directory = tmp_path / "w2"
    directory.mkdir()
    # Rank 1's ledger pipe cannot be made (a folder where it goes): the start fails
    # after rank 0 was forked and while the bells were open.
    ledgerdump.paths(directory, 1)[0].mkdir()
    settings = PoolSettings(rendezvous_timeout=120.0, start_timeout=120.0)
    pool = Pool(PoolKey(world=2, backend="gloo", gpus=()), directory, settings, server)
    try:
        with pytest.raises(IsADirectoryError):
            pool.start()
        assert len(pool.ranks) == 1  # rank 0 had been forked: the failure came after it
        assert _open_paths_under(directory) == []
        assert _processes_of(directory) == []
        assert not pool.alive
    finally:
        server.stop()


@pytest.fixture
def started_pool(tmp_path):
    """A started world(1) pool of a fork server of its own, stopped after the test."""
    server = RunForkServer(tmp_path / "run", os.getpid())
    settings = PoolSettings(rendezvous_timeout=120.0, start_timeout=120.0)
    pool = Pool(PoolKey(world=1, backend="gloo", gpus=()), tmp_path / "w1", settings, server)
    try:
        pool.start()
        yield pool
    finally:
        server.stop()


@pytest.fixture
def newcomer():
    """A process leading its own group, as another process holding a reused pid would;
    a kill of the pool must leave it running."""
    process = subprocess.Popen(["sleep", "60"], start_new_session=True)
    yield process
    process.kill()
    process.wait()


def _still_running_a_second_later(process: subprocess.Popen) -> bool:
    try:
        process.wait(timeout=1)  # a SIGKILL would land well within
    except subprocess.TimeoutExpired:
        return True
    return False


@pytest.mark.dist  # a real rank process, forked by a real fork server
def test_a_second_kill_signals_no_process_that_came_after_the_first(started_pool, newcomer):
    started_pool.kill()  # as run() does when a test breaks its world
    # The rank's pid now names another process: the registry's kill of the dropped pool
    # comes later, at the next test.
    started_pool.ranks[0].process.pid = newcomer.pid
    started_pool.kill()
    assert _still_running_a_second_later(newcomer)


@pytest.mark.dist  # a real rank process, forked by a real fork server
def test_a_kill_after_a_rank_ended_signals_no_process_that_took_its_pid(started_pool, newcomer):
    rank = started_pool.ranks[0].process
    os.kill(rank.pid, signal.SIGKILL)  # the rank crashes between tests
    rank.join(30)
    assert rank.exitcode == -signal.SIGKILL  # the server reaped it: its pid is free
    # The pid now names another process, by the time run() kills the pool whose rank died.
    rank.pid = newcomer.pid
    started_pool.kill()
    assert _still_running_a_second_later(newcomer)
