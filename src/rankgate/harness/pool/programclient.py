"""What runs in place of ``python`` to start a program warm: it asks the fork server
(:mod:`.forkserver`) to fork the program (:mod:`.program`), passes on the signals it gets
and ends as the program ended. Where the server says "cold", or cannot be reached, it
execs ``python`` itself. The standard library only, loaded by its path: it starts in a
few milliseconds (``python -IS``) and imports no rankgate module.

:meth:`.forkclient.RunForkServer.python` writes the executable that calls :func:`main`
with the server's socket and the ``python`` to exec.
"""

from __future__ import annotations

import os
import pickle
import signal
import socket
import struct
import sys

WORD = struct.Struct("q")
"""A request's length, a pid or an exit code on the wire (the fork server's framing)."""

FORWARDED = (
    signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGQUIT, signal.SIGUSR1,
    signal.SIGUSR2, signal.SIGALRM, signal.SIGABRT,
)  # fmt: skip
"""Signals a launcher sends its ranks, or xdist its workers: each goes on to the program."""


def main(address: str, python: str) -> None:
    argv = sys.argv[1:]
    ignored = [s for s in signal.valid_signals() if _ignored_at_start(s)]
    # Held until the program's pid is known: a signal that came before would end this
    # process by its default action, and the server would kill the program with it.
    mask = sorted(signal.pthread_sigmask(signal.SIG_BLOCK, FORWARDED))
    request = {"argv": argv, "env": dict(os.environ), "cwd": os.getcwd(), "ignored": ignored,
               "mask": mask}  # fmt: skip
    try:
        server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        server.connect(address)
        body = pickle.dumps(("program", request))
        socket.send_fds(server, [WORD.pack(len(body)) + body], _standard_fds())
        pid = _word(server)
    except OSError:
        pid = 0  # no server: start cold
    if pid == 0:
        signal.pthread_sigmask(signal.SIG_SETMASK, mask)
        os.execv(python, [python, *argv])
    for sig in FORWARDED:
        if sig not in ignored:
            signal.signal(sig, lambda sig, _frame: _forward(pid, sig))
    signal.pthread_sigmask(signal.SIG_SETMASK, mask)  # what came meanwhile goes on now
    try:
        code = _word(server)
    except OSError:
        code = 1  # the server went away; it killed the program's session as it went
    if code < 0:
        if -code != signal.SIGKILL:
            signal.signal(-code, signal.SIG_DFL)
        signal.pthread_sigmask(signal.SIG_UNBLOCK, [-code])
        os.kill(os.getpid(), -code)
    os._exit(code)


def _ignored_at_start(sig: int) -> bool:
    """Ignored where this process started (Python ignores SIGPIPE and SIGXFSZ itself)."""
    if sig in (signal.SIGPIPE, signal.SIGXFSZ, signal.SIGKILL, signal.SIGSTOP):
        return False
    try:
        return signal.getsignal(sig) == signal.SIG_IGN
    except (OSError, ValueError):
        return False


def _standard_fds() -> list[int]:
    """0, 1 and 2, with /dev/null standing in for one that is closed."""
    fds = []
    for fd in (0, 1, 2):
        try:
            os.fstat(fd)
            fds.append(fd)
        except OSError:
            fds.append(os.open(os.devnull, os.O_RDWR))
    return fds


def _forward(pid: int, sig: int) -> None:
    """To the program's process group: the signals a launcher, nox or a terminal sends
    go to a process group, where a cold program's children would get them too (a
    signal meant for its pid alone reaches them as well; a SIGKILL to the client ends
    the program's whole session: the server kills it)."""
    try:
        os.killpg(pid, sig)
    except (ProcessLookupError, PermissionError):  # not its group's leader yet
        try:
            os.kill(pid, sig)
        except ProcessLookupError:
            pass


def _word(server: socket.socket) -> int:
    data = b""
    while len(data) < WORD.size:
        chunk = server.recv(WORD.size - len(data))
        if not chunk:
            raise ConnectionResetError("the fork server closed the connection")
        data += chunk
    return WORD.unpack(data)[0]
