"""The fork server: one process with torch and the rank code imported, that forks the
ranks of every pool of a pytest run (``python -m rankgate.harness.pool.forkserver``).

One serves the whole run: under pytest-xdist every worker's pools fork from it, so the
run imports torch once for its ranks, not once per worker (multiprocessing's fork server
belongs to the process that started it, and sharing it would take its private state).
:mod:`.forkclient` starts it, finds it and asks it for ranks.

Protocol, one Unix-socket connection per rank:

- client -> server: one message, the pickled request ``("fork", target, args, cwd)``
  with one file descriptor (the rank's end of its pipe); the server forks, and the child
  calls ``target(Connection(fd), *args)`` (``target`` is ``"module:function"``) in
  ``cwd`` and exits with 0 when it returns.
- server -> client: the rank's pid, later its exit code (negative: the signal that killed
  it), each as 8 bytes; then the connection closes. It is the rank's sentinel: readable
  once the rank has ended (or the server did). What is left in the rank's process group
  is killed before the rank is reaped, so no one signals its pid after it ended.
- ``("program", request)`` with the client's file descriptors 0, 1 and 2
  (:mod:`.programclient`): a Python program forked in place of a cold ``python``
  (:mod:`.program`; pytest-xdist's workers start so), in a session of its own. The
  server answers its pid (0: "start it cold", :func:`.program.cold_reason`), later its
  exit code. A client that closes its connection before its program ended was killed:
  the program's session is killed too.
- ``("stop",)``: the server stops listening and answers how many programs still run; it
  ends once they have (a worker's last words after the controller's end of session).

The socket appears at its address only once the preload is imported, so a client that
sees it can fork at once. The server ends when its owner (the pytest process that owns
the run) does, killing the programs' sessions, or when asked; the ranks end themselves
when their controller is gone.
"""

from __future__ import annotations

import argparse
import gc
import hashlib
import importlib
import importlib.util
import os
import pickle
import selectors
import shutil
import signal
import socket
import sys
import traceback
import weakref
from multiprocessing.connection import Connection

from rankgate.harness import vector_math
from rankgate.harness.pool.program import ForkedProgram, cold_reason, exit_code
from rankgate.harness.pool.programclient import WORD
from rankgate.harness.pool.rankbudget import pid_alive

PRELOAD = (
    "rankgate.harness.pool.worker",
    "rankgate.pytest_plugin",
    "rankgate.harness.adopt.hooks",
    "rankgate.harness.rerun_report",
    "rankgate.harness.shards.plugin",
)
"""Imported before the first fork: the rank code, and with it torch and torch.distributed;
then rankgate's pytest plugins, which every pytest process forked from here (xdist's
workers, launched programs) loads as it starts."""

MAX_REQUEST = 1 << 26
"""The largest request (a rank's config carries the controller's environment)."""

FAILED_SUFFIX = ".failed"
"""Beside the address: why the server could not start (its preload failed)."""

LONGEST_SOCKET_PATH = 100
"""Bytes: a Unix socket's path has room for about 107 (a temp dir under a long TMPDIR
has more)."""


def socket_name(address: str) -> str:
    """What the server at ``address`` (a path) listens on: the path itself, or, when it is
    too long for a Unix socket and this is Linux, an abstract name made from it (the path
    is then a plain file that appears once the server listens)."""
    if len(os.fsencode(address)) <= LONGEST_SOCKET_PATH or not sys.platform.startswith("linux"):
        return address
    return "\0rankgate-fs-" + hashlib.sha1(os.fsencode(address)).hexdigest()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m rankgate.harness.pool.forkserver")
    parser.add_argument("address", help="path of the Unix socket to listen on")
    parser.add_argument("--owner", type=int, required=True, help="end when this pid ends")
    args = parser.parse_args(argv)
    try:
        for name in (*PRELOAD, *_pytest_builtin_plugins()):
            importlib.import_module(name)
        vector_math.pick_kernels()  # before any fork: every rank inherits the picks
    except BaseException:
        with open(args.address + FAILED_SUFFIX, "w") as f:
            f.write(traceback.format_exc())
        raise
    _keep_finalizers_to_the_server()
    # What the preload built lives as long as every child: out of the collector's reach,
    # a child's collections (pytest runs two at its end) neither walk it nor write to its
    # pages (each a copy-on-write fault in a forked child).
    gc.freeze()
    _Server(args.address, args.owner).serve()


def _keep_finalizers_to_the_server() -> None:
    """The finalizers the preload made are not run at a child's exit: they are the server's
    (torch's import makes one per operator library, 134 here, each deregistering its
    operators: 45 ms at the end of every forked program). A child's own still run."""
    for obj in gc.get_objects():
        if isinstance(obj, weakref.finalize):
            obj.atexit = False


def _pytest_builtin_plugins() -> list[str]:
    """The modules of pytest's own plugins, which every pytest session imports (none where
    a pytest names them otherwise: they only save the children their import). Not a third
    party's: pytest marks a plugin's modules for assert rewriting and warns about one
    imported before it started."""
    import _pytest.config

    names = getattr(_pytest.config, "default_plugins", ())
    return [f"_pytest.{name}" for name in names if importlib.util.find_spec(f"_pytest.{name}")]


class _Server:
    def __init__(self, address: str, owner: int) -> None:
        self.address = address
        self.listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        name = socket_name(address)
        bound = f"{address}.{os.getpid()}"
        if name == address:
            self.listener.bind(bound)
        else:  # abstract: the path becomes a file saying the server listens
            self.listener.bind(name)
            open(bound, "x").close()
        self.listener.listen(128)
        self.ranks: dict[int, socket.socket] = {}
        """Each live rank's client connection, by pid: its exit code goes there."""
        self.programs: dict[int, socket.socket] = {}
        """The same for each live program (:mod:`.program`)."""
        self.own_env = dict(os.environ)
        """What the preload was imported under: a program wanting other values starts cold."""
        self.stopping = False
        self.wake_r, wake_w = os.pipe()
        os.set_blocking(self.wake_r, False)
        os.set_blocking(wake_w, False)
        signal.signal(signal.SIGCHLD, lambda *_: None)  # a handler, so the wakeup fd fires
        signal.set_wakeup_fd(wake_w)
        self.selector = selectors.DefaultSelector()
        self.selector.register(self.listener, selectors.EVENT_READ, "listen")
        self.selector.register(self.wake_r, selectors.EVENT_READ, "child")
        self.owner = owner
        self.owner_fd = _pidfd(owner)
        if self.owner_fd is not None:
            self.selector.register(self.owner_fd, selectors.EVENT_READ, "owner")
        os.rename(bound, address)  # clients see the socket once it accepts

    def serve(self) -> None:
        while True:
            # Without a pidfd the owner is looked at once a second.
            for key, _ in self.selector.select(None if self.owner_fd is not None else 1.0):
                if key.data == "listen":
                    self._request()
                elif key.data == "child":
                    self._reap()
                elif key.data == "owner":
                    self._exit()
                else:
                    self._program_client_closed(key.fileobj, key.data)
            if self.owner_fd is None and not pid_alive(self.owner):
                self._exit()

    def _request(self) -> None:
        client, _ = self.listener.accept()
        try:
            request, fds = _receive(client)
        except Exception:  # a client that went away mid-request
            client.close()
            return
        if request[0] == "stop":
            self._stop(client)
            return
        if request[0] == "program":
            self._program(client, request[1], fds)
            return
        if len(fds) != 1:
            for fd in fds:
                os.close(fd)
            client.close()
            return
        _, target, args, cwd = request
        pid = os.fork()
        if pid == 0:
            self._child(client, fds[0], target, args, cwd)
        os.close(fds[0])
        try:
            client.sendall(WORD.pack(pid))
        except OSError:  # the client is gone; its rank ends with its controller
            client.close()
            return
        self.ranks[pid] = client

    def _program(self, client: socket.socket, request: dict, fds: list[int]) -> None:
        if len(fds) != 3 or cold_reason(request["argv"], request["env"], self.own_env):
            for fd in fds:
                os.close(fd)
            _send_word(client, 0)
            client.close()
            return
        pid = os.fork()
        if pid == 0:
            self._program_child(client, fds, request)
        for fd in fds:
            os.close(fd)
        self.programs[pid] = client
        self.selector.register(client, selectors.EVENT_READ, pid)
        _send_word(client, pid)  # a client gone already reads as closed

    def _program_client_closed(self, client: socket.socket, pid: int) -> None:
        """A client says nothing after its request: readable means it closed, killed
        before its program ended. The program's session goes with it."""
        self.selector.unregister(client)
        _kill_session(pid)

    def _program_child(self, client: socket.socket, fds: list[int], request: dict):
        code = 1
        try:
            self._leave(client)
            os.setsid()  # the client forwards the signals it gets
            for target, fd in enumerate(fds):
                os.dup2(fd, target)
                os.close(fd)
            code = ForkedProgram(request).run()
        except SystemExit as exc:
            code = exit_code(exc.code)
        except BaseException:
            traceback.print_exc()
        finally:
            os._exit(code)

    def _leave(self, client: socket.socket) -> None:
        """In a child: drop the server's sockets and signal set-up."""
        signal.set_wakeup_fd(-1)
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        self.selector.close()
        for sock in (self.listener, client, *self.ranks.values(), *self.programs.values()):
            sock.close()
        for extra in (self.wake_r, self.owner_fd):
            if extra is not None:
                os.close(extra)

    def _child(self, client: socket.socket, fd: int, target: str, args: tuple, cwd: str):
        """In the rank: drop the server's sockets and signal set-up, then run ``target``."""
        code = 1
        try:
            self._leave(client)
            os.chdir(cwd)
            module, function = target.split(":")
            getattr(importlib.import_module(module), function)(Connection(fd), *args)
            code = 0
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else 1
        except BaseException:
            traceback.print_exc()
        finally:
            for stream in (sys.stdout, sys.stderr):
                try:
                    stream.flush()
                except Exception:
                    pass
            os._exit(code)

    def _reap(self) -> None:
        try:
            while os.read(self.wake_r, 4096):
                pass
        except BlockingIOError:
            pass
        while True:
            try:
                ended = os.waitid(os.P_ALL, 0, os.WEXITED | os.WNOHANG | os.WNOWAIT)
            except ChildProcessError:
                return
            if ended is None:
                return
            pid = ended.si_pid
            if pid in self.ranks:
                # What the rank left in its process group ends with it, signalled while
                # its zombie still holds the pid: once reaped, the number can be another
                # process's, so the pool never signals an ended rank's pid.
                _kill_session(pid)
            _, status = os.waitpid(pid, 0)
            client = self.ranks.pop(pid, None) or self.programs.pop(pid, None)
            if client is not None:
                if client.fileno() in self.selector.get_map():
                    self.selector.unregister(client)
                _send_word(client, os.waitstatus_to_exitcode(status))
                client.close()
        if self.stopping and not self.programs:
            self._exit()

    def _stop(self, client: socket.socket) -> None:
        """Asked by the owner: no more forks; the server ends now, or once the programs
        still running (xdist's workers, finishing) have ended."""
        _send_word(client, len(self.programs))
        client.close()
        if not self.programs:
            self._exit()
        self.stopping = True
        self.selector.unregister(self.listener)
        self.listener.close()
        shutil.rmtree(os.path.dirname(self.address), ignore_errors=True)

    def _exit(self) -> None:
        # Its folder (the socket and its log) is its own: made for it by the client.
        shutil.rmtree(os.path.dirname(self.address), ignore_errors=True)
        for pid in self.programs:  # only when the owner ended first
            _kill_session(pid)
        os._exit(0)  # torch's interpreter teardown would take a second for nothing


def _send_word(client: socket.socket, value: int) -> None:
    try:
        client.sendall(WORD.pack(value))
    except OSError:  # the client is gone
        pass


def _kill_session(pid: int) -> None:
    """SIGKILL to the session a program or a rank leads (each makes its own), and to the
    process itself should it not have made it yet."""
    for kill in (os.killpg, os.kill):
        try:
            kill(pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass


def _receive(client: socket.socket) -> tuple[tuple, list[int]]:
    """One request: its length (a word), then its pickle; the file descriptors come
    with the first bytes."""
    data, fds, _, _ = socket.recv_fds(client, 1 << 16, 4)
    while len(data) < WORD.size:
        data += _chunk(client, WORD.size - len(data))
    (size,) = WORD.unpack(data[: WORD.size])
    if size > MAX_REQUEST:
        raise ValueError(f"a request of {size} bytes")
    body = data[WORD.size :]
    while len(body) < size:
        body += _chunk(client, size - len(body))
    return pickle.loads(body), fds


def _chunk(client: socket.socket, size: int) -> bytes:
    chunk = client.recv(min(size, 1 << 16))
    if not chunk:
        raise EOFError("the client closed its connection mid-request")
    return chunk


def _pidfd(pid: int) -> int | None:
    try:
        return os.pidfd_open(pid)
    except (AttributeError, OSError):  # not Linux >= 5.3, or the owner is gone already
        return None


if __name__ == "__main__":
    main()
