"""Pool sessions that pytester runs inline inside another fork their ranks from the one
server of the process; the outermost session ends it."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from ended import ended_within

from rankgate.harness.pool.sessionserver import PROCESS_FORK_SERVER, ProcessForkServer

pytestmark = pytest.mark.dist  # real processes: the server imports torch

PARENT_OF_RANK = """
import os
import pytest

@pytest.mark.world(2)
def test_parent(rank):
    with open(os.path.join(OUT, f"{NAME}-{rank}"), "w") as f:
        f.write(str(os.getppid()))
"""


@pytest.fixture
def open_session():
    """A pool session of this process open around the test, as the one that runs it
    is in the pool alone and under xdist (in place, none is)."""
    PROCESS_FORK_SERVER.session_opened()
    yield
    PROCESS_FORK_SERVER.session_closed()


@pytest.mark.launches  # its pytest sessions would see a launcher's variables in place
def test_inline_sessions_fork_from_the_server_of_the_session_around_them(
    pytester, tmp_path, open_session
):
    out = tmp_path / "parents"
    out.mkdir()
    for name in ("first", "second"):
        source = PARENT_OF_RANK.replace("OUT", repr(str(out))).replace("NAME", repr(name))
        pytester.makepyfile(**{f"test_{name}": source})
        pytester.runpytest_inprocess(f"test_{name}.py").assert_outcomes(passed=1)
    parents = {f.name: f.read_text() for f in out.iterdir()}
    assert sorted(parents) == ["first-0", "first-1", "second-0", "second-1"]
    assert len(set(parents.values())) == 1, parents
    server_pid = int(parents["first-0"])
    assert not ended_within(server_pid, 0.2), "an inline session ended the shared server"


def test_the_last_session_to_close_ends_the_server_and_its_folders():
    sessions = ProcessForkServer()
    sessions.session_opened()  # the outer session
    sessions.session_opened()  # one run inline inside it
    inner_server = sessions.server(lambda: None)
    inner_server.start_early()
    record = inner_server.directory
    sessions.session_closed()
    assert sessions.server(lambda: None) is inner_server
    pid = inner_server._record()["pid"]
    socket_home = Path(inner_server._record()["address"]).parent
    assert not ended_within(pid, 0.2)
    sessions.session_closed()
    assert ended_within(pid, 10)
    assert not record.exists() and not socket_home.exists()


def test_under_xdist_the_run_server_is_used_and_left_to_its_owner(tmp_path):
    from rankgate.harness.pool.forkclient import RunForkServer

    run_server = RunForkServer(tmp_path / "run", owner=os.getppid())  # the controller's
    sessions = ProcessForkServer()
    sessions.session_opened()
    assert sessions.server(lambda: run_server) is run_server
    sessions.session_closed()
    assert not (tmp_path / "run").exists()  # nothing started, nothing made or removed here
