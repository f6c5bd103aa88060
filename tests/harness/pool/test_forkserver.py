"""The run's fork server: one per run, found by every process of it, ending with its owner;
a rank's exit, a signal and the server's own end come back to the pool that asked."""

from __future__ import annotations

import json
import multiprocessing
import os
import signal
import subprocess
import sys
import textwrap

import pytest
from ended import ended_within

from rankgate.harness.pool.forkclient import RECORD, SERVER_PYTHON_ENV, RunForkServer
from rankgate.harness.pool.pool import describe_exit

pytestmark = pytest.mark.dist  # real processes: the server imports torch

TARGET = """
import os, subprocess, sys

def echo(conn, code):
    conn.send_bytes(f"{os.getpid()} {os.getcwd()}".encode())
    if conn.recv_bytes() == b"die":
        os.kill(os.getpid(), 9)
    sys.exit(code)


def leader(conn, code):
    # A rank leads its own group (as the pool's worker does) and starts a child in it.
    os.setsid()
    child = subprocess.Popen(["sleep", "600"])
    conn.send_bytes(str(child.pid).encode())
    conn.recv_bytes()
    os.kill(os.getpid(), 9)
"""


@pytest.fixture(autouse=True)
def cold_servers(monkeypatch):
    """Each server here starts from this interpreter. Once a test of this process has used
    the warm python (tests/warmstart.py) a server starts through its client, whose
    pid the record then holds: a test killing "the server" by that pid killed the client,
    and the warm server then ended the program's whole session, its ranks too."""
    monkeypatch.delenv(SERVER_PYTHON_ENV, raising=False)


@pytest.fixture
def target(tmp_path, monkeypatch):
    """``fs_target:echo`` importable in a server started from now on."""
    home = tmp_path / "target"
    home.mkdir()
    (home / "fs_target.py").write_text(textwrap.dedent(TARGET))
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(home), os.environ.get("PYTHONPATH", "")]))
    return "fs_target:echo"


def _fork(server: RunForkServer, target: str, code: int, cwd):
    mine, theirs = multiprocessing.Pipe()
    process = server.fork(target, (code,), theirs.fileno(), str(cwd))
    theirs.close()
    pid, where = mine.recv_bytes().decode().split()
    assert (int(pid), where) == (process.pid, str(cwd))
    return mine, process


def _server_pid(directory) -> int:
    return json.loads((directory / RECORD).read_text())["pid"]


def test_every_process_of_the_run_forks_from_one_server(tmp_path, target):
    run = tmp_path / "run"
    owner = RunForkServer(run, os.getpid())
    worker = RunForkServer(run, os.getpid())  # another xdist worker's view
    owner.start_early()
    worker.start_early()  # finds the first one's record: no second server
    server = _server_pid(run)
    conn, rank = _fork(owner, target, 5, tmp_path)
    conn2, rank2 = _fork(worker, target, 0, "/")
    assert _server_pid(run) == server
    assert rank.is_alive() and rank2.is_alive()
    conn.send_bytes(b"bye")
    rank.join(30)
    assert (rank.is_alive(), rank.exitcode) == (False, 5)
    conn2.send_bytes(b"die")
    rank2.join(30)
    assert rank2.exitcode == -signal.SIGKILL
    assert describe_exit(rank2) == "killed by SIGKILL (exit code -9)"
    address = json.loads((run / RECORD).read_text())["address"]
    owner.stop()
    assert ended_within(server, 10)
    assert not os.path.exists(os.path.dirname(address)) and not (run / RECORD).exists()


def test_the_server_ends_with_its_owner(tmp_path, target):
    owner = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    try:
        run = tmp_path / "run"
        server = RunForkServer(run, owner.pid)
        conn, rank = _fork(server, target, 0, tmp_path)  # the server is up
        conn.send_bytes(b"bye")
        rank.join(30)
        owner.kill()
        owner.wait()
        assert ended_within(_server_pid(run), 10)
    finally:
        owner.kill()
        owner.wait()


def test_a_rank_whose_server_died_is_lost_and_the_next_fork_starts_a_new_server(tmp_path, target):
    run = tmp_path / "run"
    server = RunForkServer(run, os.getpid())
    conn, rank = _fork(server, target, 0, tmp_path)
    first = _server_pid(run)
    os.kill(first, signal.SIGKILL)
    rank.join(30)
    assert rank.lost and not rank.is_alive()
    assert describe_exit(rank) == "its fork server ended first (exit code unknown)"
    conn.send_bytes(b"bye")  # the rank itself lives on until told
    conn2, rank2 = _fork(server, target, 0, tmp_path)
    assert _server_pid(run) != first
    conn2.send_bytes(b"bye")
    rank2.join(30)
    assert rank2.exitcode == 0
    server.stop()


def test_a_temp_dir_too_long_for_a_unix_socket_still_serves(tmp_path, target, monkeypatch):
    # A socket's path has room for about 107 bytes; a run's temp dir can be longer (a
    # scheduler's per-job TMPDIR, pytester's folders): "OSError: AF_UNIX path too long".
    deep = tmp_path / ("x" * 60) / ("y" * 60)
    deep.mkdir(parents=True)
    monkeypatch.setenv("TMPDIR", str(deep))
    monkeypatch.setattr("tempfile.tempdir", None)  # gettempdir() reads TMPDIR again
    run = tmp_path / "run"
    server = RunForkServer(run, os.getpid())
    conn, rank = _fork(server, target, 3, tmp_path)
    address = json.loads((run / RECORD).read_text())["address"]
    assert address.startswith(str(deep)) and len(address) > 120
    conn.send_bytes(b"bye")
    rank.join(30)
    assert rank.exitcode == 3
    server.stop()
    assert not os.path.exists(os.path.dirname(address))


def test_a_server_keeps_the_environment_it_was_started_under(tmp_path, monkeypatch):
    # Read at torch's import: a program asking for another value of it starts cold.
    monkeypatch.delenv("TORCH_SHOW_CPP_STACKTRACES", raising=False)
    started_under = {**os.environ, "TORCH_SHOW_CPP_STACKTRACES": "1"}
    server = RunForkServer(tmp_path / "run", os.getpid(), env=started_under)
    python = server.python()
    server.ready()
    probe = [python, "-c", "import os, sys; print('torch' in sys.modules)"]
    try:
        warm = subprocess.run(probe, env=started_under, capture_output=True, text=True, timeout=60)
        cold = subprocess.run(probe, capture_output=True, text=True, timeout=60)
    finally:
        server.stop()
    assert (warm.stdout, cold.stdout) == ("True\n", "False\n"), warm.stderr + cold.stderr


def test_what_a_rank_left_in_its_group_ends_as_the_server_reaps_it(tmp_path, target):
    """The pool never signals a rank the server reported ended (its pid may be another
    process's by then): the server ends the rank's group itself, before it reaps it."""
    server = RunForkServer(tmp_path / "run", os.getpid())
    mine, theirs = multiprocessing.Pipe()
    rank = server.fork("fs_target:leader", (0,), theirs.fileno(), str(tmp_path))
    theirs.close()
    child = int(mine.recv_bytes())
    try:
        assert os.getpgid(child) == rank.pid  # in the rank's group
        mine.send_bytes(b"die")
        rank.join(30)
        assert rank.exitcode == -signal.SIGKILL
        assert ended_within(child, 5), f"pid {child} (sleep 600) outlived its rank's reaping"
    finally:
        if not ended_within(child, 0):
            os.kill(child, signal.SIGKILL)
        server.stop()
