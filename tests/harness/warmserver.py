"""The warm server: one process with torch and pytest imported that forks the Python
programs rankgate's own tests launch (torchrun's ranks, inner pytest sessions), so each
starts with torch imported instead of importing it again (1.6-1.9 CPU-s a process on 2
cores, hundreds of processes a CI run).

    python tests/harness/warmserver.py FOLDER --owner PID

:mod:`warmstart` starts it; :mod:`warmclient` is the program a test launches in place of
``python``. Protocol, one Unix-socket connection per program, framed as rankgate's fork
server frames its own; the server imports nothing of rankgate (a module imported before a
child's pytest starts cannot be assert-rewritten, and pytest warns in every such run):

- client -> server: a word (its length) and a pickled request ``{"argv", "env", "cwd",
  "ignored", "mask"}`` (Python's arguments after ``python``, the environment, the folder,
  the signals ignored and blocked where the client started), with the client's file
  descriptors 0, 1 and 2.
- server -> client: the program's pid, later its exit code (negative: the signal that
  killed it), each as a word. A pid of 0 says "start cold": the program needs what a
  warm start cannot give it (see :func:`cold_reason`), and the client execs ``python``.

A child is a session of its own, and the client forwards the signals it gets to it;
when a client's connection closes before its program ended (the client was killed), the
server kills the program's session.
"""

from __future__ import annotations

import argparse
import atexit
import hashlib
import io
import os
import pickle
import runpy
import selectors
import shutil
import signal
import socket
import struct
import sys
import tempfile
import threading
import traceback

WORD = struct.Struct("q")

PRELOAD = ("torch", "torch.distributed", "pytest", "_pytest.main", "_pytest.python")
"""What every child starts with: what a rank or an inner session imports first."""

READ_AT_IMPORT = (
    "PYTHON", "TORCH", "PYTORCH", "OMP_", "MKL_", "KMP_", "GOMP_", "LD_", "CUDA_", "NVIDIA_",
    "HIP_", "ROCR_", "MALLOC_", "GLIBC_",
)  # fmt: skip
"""Prefixes of variables that the interpreter, torch or its libraries read while
importing: a child whose value differs from the server's would not see its own."""

SET_BY_LAUNCHERS = ("TORCHELASTIC_", "TORCH_NCCL_ASYNC_ERROR_HANDLING")
"""What torchrun sets for its ranks and torch reads only later. Its OMP_NUM_THREADS is
applied to a warm child through ``torch.set_num_threads``."""


def cold_reason(argv: list[str], env: dict[str, str], own_env: dict[str, str]) -> str | None:
    """Why the program ``python *argv`` with ``env`` must start cold, or None."""
    if _program(argv) is None:
        return f"arguments a warm start does not take: {argv[:3]}"
    keys = {k for k in (*env, *own_env) if k.startswith(READ_AT_IMPORT)}
    for key in sorted(keys):
        if env.get(key) == own_env.get(key) or key.startswith(SET_BY_LAUNCHERS):
            continue
        if key == "OMP_NUM_THREADS" and _threads(env) is not None:
            continue
        if key == "PYTHONPATH" and not own_env.get(key):
            continue  # put on sys.path as Python would; the server imported none of it
        return f"{key} differs from the warm server's"
    return None


def _threads(env: dict[str, str]) -> int | None:
    value = env.get("OMP_NUM_THREADS", "")
    return int(value) if value.isdigit() and int(value) > 0 else None


def _program(argv: list[str]) -> tuple[bool, str, str, list[str]] | None:
    """(unbuffered, "module" or "script", its name, its arguments) of ``python *argv``,
    or None for options a warm start does not take."""
    unbuffered = False
    rest = list(argv)
    while rest and rest[0] == "-u":
        unbuffered = True
        rest.pop(0)
    if rest and rest[0].startswith("-m") and rest[0] != "-m":
        return unbuffered, "module", rest[0][2:], rest[1:]
    if len(rest) >= 2 and rest[0] == "-m":
        return unbuffered, "module", rest[1], rest[2:]
    if rest and not rest[0].startswith("-"):
        return unbuffered, "script", rest[0], rest[1:]
    return None


def socket_name(folder: str) -> str:
    """The server's abstract Unix socket (Linux): a path under a deep TMPDIR can be too
    long for one."""
    return "\0warm-python-" + hashlib.sha1(os.fsencode(folder)).hexdigest()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python tests/harness/warmserver.py")
    parser.add_argument("folder", help="the server's folder; it writes 'ready' there")
    parser.add_argument("--owner", type=int, required=True, help="end when this pid ends")
    args = parser.parse_args(argv)
    for name in PRELOAD:
        __import__(name)
    WarmServer(args.folder, args.owner).serve()


class WarmServer:
    def __init__(self, folder: str, owner: int) -> None:
        self.folder = folder
        self.own_env = dict(os.environ)
        self.listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.listener.bind(socket_name(folder))
        self.listener.listen(128)
        self.programs: dict[int, socket.socket] = {}
        """Each live program's client connection, by pid: its exit code goes there."""
        self.wake_r, wake_w = os.pipe()
        os.set_blocking(self.wake_r, False)
        os.set_blocking(wake_w, False)
        signal.signal(signal.SIGCHLD, lambda *_: None)  # a handler, so the wakeup fd fires
        signal.set_wakeup_fd(wake_w)
        self.selector = selectors.DefaultSelector()
        self.selector.register(self.listener, selectors.EVENT_READ, "listen")
        self.selector.register(self.wake_r, selectors.EVENT_READ, "child")
        self.owner_fd = os.pidfd_open(owner)
        self.selector.register(self.owner_fd, selectors.EVENT_READ, "owner")
        open(os.path.join(folder, "ready"), "x").close()

    def serve(self) -> None:
        while True:
            for key, _ in self.selector.select():
                if key.data == "listen":
                    self._request()
                elif key.data == "child":
                    self._reap()
                elif key.data == "owner":
                    self._exit()
                else:
                    self._client_spoke(key.fileobj, key.data)

    def _request(self) -> None:
        client, _ = self.listener.accept()
        try:
            request, fds = _receive(client)
        except Exception:  # a client that went away mid-request
            client.close()
            return
        if len(fds) != 3 or cold_reason(request["argv"], request["env"], self.own_env):
            for fd in fds:
                os.close(fd)
            _send(client, 0)
            client.close()
            return
        pid = os.fork()
        if pid == 0:
            self._child(client, fds, request)
        for fd in fds:
            os.close(fd)
        self.programs[pid] = client
        self.selector.register(client, selectors.EVENT_READ, pid)
        _send(client, pid)  # a client gone already reads as closed: _client_spoke

    def _client_spoke(self, client: socket.socket, pid: int) -> None:
        """A client says nothing after its request: readable means it closed, killed
        before its program ended. The program's session goes with it."""
        self.selector.unregister(client)
        _kill_session(pid)

    def _child(self, client: socket.socket, fds: list[int], request: dict) -> None:
        code = 1
        try:
            signal.set_wakeup_fd(-1)
            self.selector.close()
            for sock in (self.listener, client, *self.programs.values()):
                sock.close()
            os.close(self.wake_r)
            os.close(self.owner_fd)
            os.setsid()
            for target, fd in enumerate(fds):
                os.dup2(fd, target)
                os.close(fd)
            code = WarmProgram(request).run()
        except SystemExit as exc:
            code = _exit_code(exc.code)
        except BaseException:
            traceback.print_exc()
        finally:
            os._exit(code)

    def _reap(self) -> None:
        try:
            while os.read(self.wake_r, 4096):
                pass
        except BlockingIOError:
            pass
        while True:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            client = self.programs.pop(pid, None)
            if client is not None:
                if client.fileno() in self.selector.get_map():
                    self.selector.unregister(client)
                _send(client, os.waitstatus_to_exitcode(status))
                client.close()

    def _exit(self) -> None:
        for pid in self.programs:
            _kill_session(pid)
        shutil.rmtree(self.folder, ignore_errors=True)
        os._exit(0)


class WarmProgram:
    """In the forked child: become ``python *argv`` as started by the client, then run."""

    def __init__(self, request: dict) -> None:
        self.request = request

    def run(self) -> int:
        unbuffered, kind, name, args = _program(self.request["argv"])
        os.chdir(self.request["cwd"])
        os.environ.clear()
        os.environ.update(self.request["env"])
        tempfile.tempdir = None  # gettempdir() reads TMPDIR again, as in a new process
        self._signals()
        self._threads()
        self._stdio(unbuffered or bool(os.environ.get("PYTHONUNBUFFERED")))
        if "numpy" in sys.modules:
            sys.modules["numpy"].random.seed()  # the server's global state, not the child's own
        try:
            first = os.getcwd() if kind == "module" else os.path.dirname(os.path.abspath(name))
            extra = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
            sys.path[0:1] = [first, *extra]
            if kind == "module":
                sys.argv = ["-m", *args]
                runpy.run_module(name, run_name="__main__", alter_sys=True)
            else:
                sys.argv = [name, *args]
                runpy.run_path(name, run_name="__main__")
            code = 0
        except SystemExit as exc:
            code = _exit_code(exc.code)
        except KeyboardInterrupt as exc:
            _print_uncaught(exc)
            self._finish()
            signal.signal(signal.SIGINT, signal.SIG_DFL)
            os.kill(os.getpid(), signal.SIGINT)
            code = 130
        except BaseException as exc:
            _print_uncaught(exc)
            code = 1
        self._finish()
        return code

    def _signals(self) -> None:
        """The dispositions ``python`` starts with where the client started."""
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        for sig in signal.valid_signals():
            if sig in (signal.SIGKILL, signal.SIGSTOP):
                continue
            if sig in self.request["ignored"] or sig in (signal.SIGPIPE, signal.SIGXFSZ):
                handler = signal.SIG_IGN
            elif sig == signal.SIGINT:
                handler = signal.default_int_handler
            else:
                handler = signal.SIG_DFL
            try:
                signal.signal(sig, handler)
            except (OSError, ValueError):
                pass
        signal.pthread_sigmask(signal.SIG_SETMASK, self.request["mask"])

    def _threads(self) -> None:
        threads = _threads(os.environ)
        if threads is not None:
            import torch

            torch.set_num_threads(threads)

    def _stdio(self, unbuffered: bool) -> None:
        """New standard streams over fds 0-2 (the server's stay referenced: closing them
        would close the child's fds)."""
        _KEPT.extend((sys.stdin, sys.stdout, sys.stderr))
        sys.stdin = sys.__stdin__ = io.TextIOWrapper(
            io.BufferedReader(io.FileIO(0, "rb", closefd=False)), line_buffering=False
        )
        for fd, name in ((1, "stdout"), (2, "stderr")):
            tty = os.isatty(fd)
            raw = io.FileIO(fd, "wb", closefd=False)
            binary = raw if unbuffered else io.BufferedWriter(raw)
            stream = io.TextIOWrapper(
                binary,
                errors="backslashreplace" if fd == 2 else "strict",
                line_buffering=tty or fd == 2,
                write_through=unbuffered,
            )
            setattr(sys, name, stream)
            setattr(sys, f"__{name}__", stream)

    def _finish(self) -> None:
        """What the interpreter does at its end: wait for threads, run atexit, flush."""
        threading._shutdown()
        atexit._run_exitfuncs()
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except Exception:
                pass


_KEPT: list = []


def _print_uncaught(exc: BaseException) -> None:
    """The traceback Python prints, without the frames of this start."""
    ours = (__file__, runpy.__file__, "<frozen runpy>")
    tb = exc.__traceback__
    while tb is not None and tb.tb_frame.f_code.co_filename in ours:
        tb = tb.tb_next
    traceback.print_exception(type(exc), exc, tb)


def _exit_code(code: object) -> int:
    if code is None:
        return 0
    if isinstance(code, int):
        return code & 0xFF
    print(code, file=sys.stderr)
    return 1


def _kill_session(pid: int) -> None:
    """SIGKILL to the program's session, and to the program itself should it not have
    made its session yet."""
    for kill in (os.killpg, os.kill):
        try:
            kill(pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass


def _send(client: socket.socket, value: int) -> bool:
    try:
        client.sendall(WORD.pack(value))
        return True
    except OSError:
        return False


def _receive(client: socket.socket) -> tuple[dict, list[int]]:
    """One request: its length (a word), then its pickle; the descriptors come with the
    first bytes."""
    data, fds, _, _ = socket.recv_fds(client, 1 << 16, 4)
    while len(data) < WORD.size:
        data += _chunk(client, WORD.size - len(data))
    (size,) = WORD.unpack(data[: WORD.size])
    body = data[WORD.size :]
    while len(body) < size:
        body += _chunk(client, size - len(body))
    return pickle.loads(body), fds


def _chunk(client: socket.socket, size: int) -> bytes:
    chunk = client.recv(min(size, 1 << 16))
    if not chunk:
        raise EOFError("the client closed its connection mid-request")
    return chunk


if __name__ == "__main__":
    main()
