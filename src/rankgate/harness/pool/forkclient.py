"""The run's fork server (:mod:`.forkserver`), from a pytest process's side: start it,
find it, fork ranks from it.

The pytest process that owns the run (the pool alone's pytest, or the pytest-xdist
controller) owns the server: the server ends with it, and it stops the server when the
run ends. The server's record (address and pid) is a file in the run's directory; under
xdist the controller starts the server as its session starts and every worker reads the
record there (a worker that finds none, the server gone, starts one under a lock), so the
run has one fork server whatever ``-n`` is.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import pickle
import select
import shutil
import signal
import socket
import sys
import tempfile
import time
from collections.abc import Mapping
from pathlib import Path

from rankgate.errors import RankgateError
from rankgate.harness import leaks
from rankgate.harness.pool import programclient
from rankgate.harness.pool.forkserver import FAILED_SUFFIX, WORD, socket_name

SERVER_MODULE = "rankgate.harness.pool.forkserver"
SERVER_PYTHON_ENV = "RANKGATE_FORK_SERVER_PYTHON"
"""The ``python`` that starts the server, where not this process's: another server's
(:meth:`RunForkServer.python`), whose fork of it has torch imported already (rankgate's
own tests set it for the pytest sessions they start)."""
RECORD = "forkserver.json"
"""In the run's directory: the server's address and pid."""
LOG = "log"
"""The server's stderr, beside its socket."""
STOP_ANSWER_S = 5.0
"""How long the owner waits for the server's answer to "stop" (it answers at once)."""
START_TIMEOUT_S = 600.0
"""How long a process waits for the server's preload (``import torch``, seconds on a
saturated machine); not ``rankgate_start_timeout``, which bounds a pool's rendezvous."""


class ForkServerError(RankgateError, RuntimeError):
    """The fork server could not be started or reached."""


class RankProcess:
    """A process the fork server forked: what a pool asks of its ranks' processes
    (``pid``, ``sentinel``, ``is_alive``, ``join``, ``exitcode``), as of a
    ``multiprocessing.Process``."""

    def __init__(self, sock: socket.socket, pid: int) -> None:
        self.pid = pid
        self._sock = sock
        self.sentinel = sock.fileno()
        """Readable once the process has ended (its exit code is there to read)."""
        self.exitcode: int | None = None
        self.lost = False
        """The fork server ended before the process did: its exit code is unknown."""

    def _ended(self, timeout: float | None) -> bool:
        if self.exitcode is not None or self.lost or self._sock.fileno() < 0:
            return True
        poll = select.poll()
        poll.register(self.sentinel, select.POLLIN)
        if not poll.poll(None if timeout is None else max(0, int(timeout * 1000))):
            return False
        data = _recv_exactly(self._sock, WORD.size)
        if data is None:
            self.lost = True
        else:
            (self.exitcode,) = WORD.unpack(data)
        return True

    def is_alive(self) -> bool:
        return not self._ended(0)

    def join(self, timeout: float | None = None) -> None:
        self._ended(timeout)

    def signal(self, sig: int, *, group: bool = False) -> None:
        """Send ``sig`` to the process, and to its process group with ``group``, unless
        the server has said it ended: it was reaped then, and its pid may be another
        process's by now (the server ended what was left in its group before reaping it).
        With the server gone (``lost``) the pid is signalled as before: nothing tells."""
        if not self._ended(0) or self.lost:
            for kill in (os.killpg, os.kill) if group else (os.kill,):
                try:
                    kill(self.pid, sig)
                except (ProcessLookupError, PermissionError):
                    pass

    def close(self) -> None:
        self._sock.close()


class ForkServerClient:
    """Asks one running fork server for processes."""

    def __init__(self, address: str) -> None:
        self.address = address

    def fork(self, target: str, args: tuple, fd: int, cwd: str) -> RankProcess:
        """A process running ``target(Connection(fd), *args)`` in ``cwd``.

        Raises ConnectionError (OSError) when the server cannot be reached."""
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            sock.connect(socket_name(self.address))
            _send(sock, ("fork", target, args, cwd), [fd])
            data = _recv_exactly(sock, WORD.size)
        except BaseException:
            sock.close()
            raise
        if data is None:
            sock.close()
            raise ConnectionError(f"the fork server at {self.address} closed the connection")
        return RankProcess(sock, WORD.unpack(data)[0])

    def stop(self) -> int | None:
        """How many programs the server still waits for before it ends (0: it ends now);
        None when it did not take the request (one still starting listens nowhere yet)."""
        try:
            with socket.socket(socket.AF_UNIX) as sock:
                sock.connect(socket_name(self.address))
                _send(sock, ("stop",), [])
                sock.settimeout(STOP_ANSWER_S)
                data = _recv_exactly(sock, WORD.size)
        except OSError:
            return None
        return WORD.unpack(data)[0] if data is not None else 0


class RunForkServer:
    """This pytest process's way to the run's fork server, recorded in ``directory``.

    ``owner``: the pid of the run's owner (this process in the pool alone, the xdist
    controller under ``-n``); the server ends with it, and only it stops the server.
    ``env``: the environment a server started here imports its preload under and keeps
    as its own (a program asking for other values of what is read at import starts
    cold); this process's, as the server starts, when None."""

    def __init__(
        self,
        directory: Path,
        owner: int,
        start_timeout: float = START_TIMEOUT_S,
        env: Mapping[str, str] | None = None,
    ) -> None:
        self.directory = Path(directory)
        self.owner = owner
        self.start_timeout = start_timeout
        self.env = env
        self._client: ForkServerClient | None = None

    def start_early(self) -> None:
        """Start the server if no process of the run did, without waiting for it: its
        ``import torch`` runs beside collection and the plain tests."""
        with self._lock():
            self._started_record()

    def fork(self, target: str, args: tuple, fd: int, cwd: str) -> RankProcess:
        """A rank forked by the run's server (started now if need be; started again
        once if it is gone)."""
        for attempt in (1, 2):
            client = self._ready_client()
            try:
                return client.fork(target, args, fd, cwd)
            except OSError as exc:
                self._client = None
                if attempt == 2:
                    raise ForkServerError(f"cannot reach the fork server: {exc}") from exc
                self._forget(client.address)
        raise AssertionError("unreachable")

    def _forget(self, address: str) -> None:
        """The server at ``address`` refused a fork: its socket no longer listens, so it
        is gone or going (a killed server's pid can outlive its socket by a moment). End
        it and drop its record, so that the next attempt starts a new one; a record that
        already names another server (another worker's new one) stays."""
        with self._lock():
            record = self._record()
            if record is None or record["address"] != address:
                return
            _kill(record["pid"], address)
            _reap(record["pid"], wait_s=2.0)
            shutil.rmtree(Path(address).parent, ignore_errors=True)
            (self.directory / RECORD).unlink(missing_ok=True)

    def stop(self) -> None:
        """The owner's last act: end the server and remove its files (a no-op elsewhere)."""
        if os.getpid() != self.owner:
            return
        with self._lock():
            record = self._record()
            if record is None:
                return
            running = ForkServerClient(record["address"]).stop()
            if running is None:  # still importing torch
                _kill(record["pid"], record["address"])
            if not running:  # else it ends with its last program (xdist's workers)
                _reap(record["pid"], wait_s=2.0)
            shutil.rmtree(Path(record["address"]).parent, ignore_errors=True)
            (self.directory / RECORD).unlink(missing_ok=True)
        self._client = None

    def ready(self) -> None:
        """Wait until the server forks (started now if need be)."""
        self._ready_client()

    def python(self) -> str | None:
        """An executable that runs ``python ARGS`` as a program forked by this server
        (:mod:`.program`), cold where the server cannot take it; None where this
        ``python``'s path cannot be a ``#!`` line."""
        if any(c.isspace() for c in sys.executable):
            return None
        with self._lock():
            address = self._started_record()["address"]
        launcher = Path(address).parent / "python"
        if not launcher.exists():
            client_dir = os.path.dirname(os.path.abspath(programclient.__file__))
            tmp = launcher.with_name(f"python.{os.getpid()}")
            tmp.write_text(
                f"#!{sys.executable} -IS\n"
                f"import sys\nsys.path.insert(0, {client_dir!r})\nimport programclient\n"
                f"programclient.main({socket_name(address)!r}, {sys.executable!r})\n"
            )
            tmp.chmod(0o755)
            os.replace(tmp, launcher)
        return str(launcher)

    # -- the record and the start ------------------------------------------------------

    @contextlib.contextmanager
    def _lock(self):
        self.directory.mkdir(parents=True, exist_ok=True)
        with open(self.directory / "forkserver.lock", "a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(lock, fcntl.LOCK_UN)

    def _record(self) -> dict | None:
        try:
            return json.loads((self.directory / RECORD).read_text())
        except (FileNotFoundError, ValueError):
            return None

    def _started_record(self) -> dict:
        """The running server's record; a server started now when there is none."""
        record = self._record()
        if record is not None and _running(record["pid"]):
            return record
        if record is not None:  # it died: its socket's folder goes with it
            shutil.rmtree(Path(record["address"]).parent, ignore_errors=True)
        # A folder of its own, short (a socket's path has ~100 bytes) and private.
        home = Path(tempfile.mkdtemp(prefix="rankgate-fs-"))
        address = str(home / "sock")
        env = os.environ if self.env is None else self.env
        python = env.get(SERVER_PYTHON_ENV, "")
        if not os.access(python, os.X_OK):  # unset, or its server has gone
            python = sys.executable
        argv = [python, "-m", SERVER_MODULE, address, "--owner", str(self.owner)]
        pid = os.posix_spawn(
            python, argv, env,
            file_actions=[
                (os.POSIX_SPAWN_OPEN, 0, os.devnull, os.O_RDONLY, 0),
                (os.POSIX_SPAWN_OPEN, 1, os.devnull, os.O_WRONLY, 0),
                (os.POSIX_SPAWN_OPEN, 2, str(home / LOG), os.O_WRONLY | os.O_CREAT, 0o600),
            ],
            setsid=True,  # an interrupt of the terminal's group is the owner's to handle
        )  # fmt: skip
        record = {"address": address, "pid": pid}
        tmp = self.directory / f"{RECORD}.{os.getpid()}"
        tmp.write_text(json.dumps(record))
        os.replace(tmp, self.directory / RECORD)
        return record

    def _ready_client(self) -> ForkServerClient:
        if self._client is not None:
            return self._client
        with self._lock():
            record = self._started_record()
        address, pid = record["address"], record["pid"]
        deadline = time.monotonic() + self.start_timeout
        while not os.path.exists(address):
            failed = Path(address + FAILED_SUFFIX)
            if failed.exists():
                raise ForkServerError(f"the fork server could not start:\n{failed.read_text()}")
            if not _running(pid):
                raise ForkServerError(
                    f"the fork server (pid {pid}) ended while starting; its stderr:\n"
                    + _read(Path(address).parent / LOG)
                )
            if time.monotonic() > deadline:
                raise ForkServerError(
                    f"the fork server (pid {pid}) did not import torch and the rank code "
                    f"within {self.start_timeout:g} s"
                )
            time.sleep(0.01)
        self._client = ForkServerClient(address)
        return self._client


def _send(sock: socket.socket, request: tuple, fds: list[int]) -> None:
    data = pickle.dumps(request)
    socket.send_fds(sock, [WORD.pack(len(data)) + data], fds)


def _recv_exactly(sock: socket.socket, size: int) -> bytes | None:
    """``size`` bytes, or None at the end of the stream."""
    data = b""
    while len(data) < size:
        try:
            chunk = sock.recv(size - len(data))
        except ConnectionResetError:
            return None
        if not chunk:
            return None
        data += chunk
    return data


def _running(pid: int) -> bool:
    """Whether the server runs; reaped here when this process started it and it ended."""
    with contextlib.suppress(ChildProcessError):
        done, _ = os.waitpid(pid, os.WNOHANG)
        if done:
            return False
    return leaks.running(pid)


def _serves(pid: int, address: str) -> bool:
    """Whether ``pid`` is the fork server listening (or once listening) at ``address``."""
    try:
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return False
    return SERVER_MODULE.encode() in argv and address.encode() in argv


def _kill(pid: int, address: str) -> None:
    if _serves(pid, address):  # never a process that took over its pid
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGKILL)


def _reap(pid: int, wait_s: float) -> None:
    deadline = time.monotonic() + wait_s
    while _running(pid) and time.monotonic() < deadline:
        time.sleep(0.01)


def _read(path: Path) -> str:
    try:
        return path.read_text(errors="replace")
    except OSError:
        return "(none)"
