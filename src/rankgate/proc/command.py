"""Every subprocess rankgate starts is started here, and every failure is a :class:`CommandFailed`.

- :func:`run`: a pipeline command with the terminal (or a stage's log) as its output;
- :func:`finish`: a command whose output is captured, ended whole past its deadline
  (dispatch's shell, a launched pytest job, benchmark runs);
- :func:`output` / :func:`capture`: a quiet query (git, nvidia-smi, ``--version``).

A command runs in its own session (process group), so it can be ended as a whole:
on a timeout, on Ctrl-C, and when this process gets SIGTERM or SIGHUP (a CI runner
cancelling the job, ``timeout``, a closed terminal). Python's default for those two
is to die at once, which would leave the command's tree running under PID 1; here
the tree is ended first, then this process dies of the same signal.
"""

from __future__ import annotations

import contextlib
import os
import shlex
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from rankgate.errors import RankgateError

END_SIGNALS = (signal.SIGTERM, signal.SIGHUP)


class EndSignal(BaseException):
    """This process received one of END_SIGNALS while a command ran (``args[0]``: it)."""


@contextlib.contextmanager
def signals_raise_ended():
    """While a command runs, END_SIGNALS raise EndSignal in the main thread."""
    if threading.current_thread() is not threading.main_thread():
        yield  # only the main thread can take signals; its own run() handles them
        return

    def raise_ended(signum, frame):
        raise EndSignal(signum)

    previous = {sig: signal.signal(sig, raise_ended) for sig in END_SIGNALS}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


_last_words: list[Callable[[int], None]] = []
"""What :func:`die_of` runs first, newest first (:func:`last_words`)."""


@contextlib.contextmanager
def last_words(callback: Callable[[int], None]):
    """While the block runs, :func:`die_of` calls ``callback(signum)`` before this process
    dies of an END_SIGNAL, once the commands' trees have ended: a stopped gate rewrites
    its page on the way out. A callback's error is one line; the process dies anyway."""
    _last_words.append(callback)
    try:
        yield
    finally:
        _last_words.remove(callback)


def die_of(signum: int) -> None:
    """End this process by ``signum``, as it would have without the handler, after the
    :func:`last_words` callbacks."""
    for callback in reversed(list(_last_words)):
        try:
            callback(signum)
        except Exception as exc:  # dying of the signal matters more than any last word
            print(f"rankgate: on the way out: {type(exc).__name__}: {exc}", file=sys.stderr)
    sys.stdout.flush()
    sys.stderr.flush()
    signal.signal(signum, signal.SIG_DFL)
    os.kill(os.getpid(), signum)
    raise SystemExit(128 + signum)  # only if the signal is blocked


_running: set[subprocess.Popen] = set()
"""Commands :func:`run` is waiting on, from any thread (background stages run in threads)."""
_starting = threading.Lock()
"""Held from a command's start until it is in ``_running``: a :func:`stop_all` in another
thread then either finds it or runs before it started, never between the two."""


_before_stop: list[Callable[[], None]] = []
"""What :func:`stop_all` calls before it ends anything (:func:`before_stop_all`)."""


@contextlib.contextmanager
def before_stop_all(callback: Callable[[], None]):
    """While the block runs, :func:`stop_all` calls ``callback()`` before it ends any
    command: a gate notes which background stages a stop ends while they run."""
    _before_stop.append(callback)
    try:
        yield
    finally:
        _before_stop.remove(callback)


def stop_all() -> None:
    """End every command :func:`run` is waiting on, in any thread (process group, TERM
    then KILL): an interrupt reaches only the main thread, not the threads that wait."""
    for callback in list(_before_stop):
        callback()
    with _starting:
        procs = list(_running)
    _end_trees(procs)


class CommandFailed(RankgateError, RuntimeError):
    """A command exited non-zero, could not start or ran out of time.

    Carries the command, its code (127: no such program, 124: timed out) and, where it
    was captured, what it printed: a tool's own words are the most useful error a user
    can get (sbatch's, git's).
    """

    def __init__(
        self,
        argv: Sequence[str],
        returncode: int,
        reason: str = "",
        *,
        stdout: str = "",
        stderr: str = "",
    ) -> None:
        self.argv = list(argv)
        self.returncode = returncode
        self.stdout = stdout
        self.stderr = stderr
        detail = (stderr or stdout).strip()
        self.reason = reason or f"exit code {returncode}" + (f": {detail}" if detail else "")
        super().__init__(f"{shlex.join(self.argv)}: {self.reason}")


def say(line: str, log_path: Path | None = None) -> None:
    """A line for the reader: on stderr, or appended to the log of a stage run in the
    background (its lines then show with its log, not amid another stage's output)."""
    if log_path is None:
        print(line, file=sys.stderr, flush=True)
        return
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with open(log_path, "a") as log:
        log.write(line + "\n")


def with_this_python(argv: list[str]) -> list[str]:
    """``pytest ...`` runs as ``<this python> -m pytest ...``: the pytest that has rankgate's
    plugin. The first ``pytest`` on PATH may belong to another interpreter (a venv used
    without activating it), which runs the tests without the plugin and fails every
    world test with "fixture 'rank' not found"."""
    if argv and argv[0] == "pytest":
        return [sys.executable, "-m", "pytest", *argv[1:]]
    return list(argv)


def run(
    argv: list[str],
    *,
    ok_codes: tuple[int, ...] = (0,),
    stdout_path: Path | None = None,
    env: dict[str, str] | None = None,
    timeout: float | None = None,
    echo: bool = True,
    log_path: Path | None = None,
) -> int:
    """Run ``argv`` with the terminal as its stdout/stderr and return its exit code.

    ``stdout_path``: also copy stdout into this file (the command's product).
    ``log_path``: append stdout and stderr to this file instead of the terminal, so that
    stages run in the background keep their outputs apart.
    Raises :class:`CommandFailed` for a code outside ``ok_codes``, a missing program
    or a timeout. The process gets its own session, so an interrupt reaches its tree.
    """
    if echo:
        say(f"rankgate > {shlex.join(argv)}", log_path)
    program = with_this_python(argv)
    if shutil.which(program[0]) is None:
        raise CommandFailed(argv, 127, f"{argv[0]} not found on PATH")
    full_env = {**os.environ, **(env or {})}
    for path in (stdout_path, log_path):
        if path is not None:
            path.parent.mkdir(parents=True, exist_ok=True)
    with open(stdout_path or os.devnull, "w") as product, open(log_path or os.devnull, "a") as log:
        terminal = log if log_path is not None else sys.stdout
        own = log if log_path is not None else None
        pipe = subprocess.PIPE if stdout_path is not None else own
        with _starting:
            proc = subprocess.Popen(
                program, env=full_env, stdout=pipe, stderr=own, text=True, start_new_session=True
            )
            _running.add(proc)
        tee = threading.Thread(target=_tee, args=(proc.stdout, product, terminal), daemon=True)
        if proc.stdout is not None:
            tee.start()
        try:
            with signals_raise_ended():
                proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            _end_trees([proc])
            raise CommandFailed(argv, 124, f"timed out after {timeout:.0f} s") from None
        except EndSignal as ended:
            name = signal.Signals(ended.args[0]).name
            print(f"rankgate: {name}: ending {shlex.join(argv)}", file=sys.stderr, flush=True)
            stop_all()  # this command and any a stage beside it runs in another thread
            die_of(ended.args[0])
        except BaseException:  # KeyboardInterrupt included: the whole tree goes with us
            _end_trees([proc])
            raise
        finally:
            _running.discard(proc)
            if tee.is_alive():  # ends when the command's stdout closes
                tee.join(timeout=10)
    if proc.returncode not in ok_codes:
        raise CommandFailed(argv, proc.returncode)
    return proc.returncode


def _tee(stream, product, terminal) -> None:
    """Copy the command's stdout into its product file and the terminal (or log), as it comes."""
    for line in stream:
        product.write(line)
        terminal.write(line)
        terminal.flush()


TERM_GRACE_S = 30.0
"""How long a command has between SIGTERM and SIGKILL: an hpc session cancels its
SLURM job, writes its JUnit file and stops its cluster (11 s on 2 busy cores)."""


def _end_trees(procs: list[subprocess.Popen]) -> None:
    """SIGTERM every command's process group at once, then SIGKILL the groups whose
    command is still running after TERM_GRACE_S (at once on a second Ctrl-C)."""
    for proc in procs:
        _signal_group(proc, signal.SIGTERM)
    deadline = time.monotonic() + TERM_GRACE_S
    try:
        for proc in procs:
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=max(0.0, deadline - time.monotonic()))
    finally:
        for proc in procs:
            if proc.poll() is None:
                _signal_group(proc, signal.SIGKILL)
                proc.wait()


def _signal_group(proc: subprocess.Popen, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, sig)


@dataclass(frozen=True, slots=True)
class Finished:
    """What a command run by :func:`finish` printed, and how it ended."""

    argv: tuple[str, ...]
    returncode: int | None
    """None when it was ended at its deadline."""
    stdout: str | bytes
    stderr: str | bytes
    seconds: float

    @property
    def timed_out(self) -> bool:
        return self.returncode is None


def finish(
    argv: Sequence[str],
    *,
    input: str | bytes | None = None,
    cwd: Path | str | None = None,
    env: Mapping[str, str] | None = None,
    timeout: float | None = None,
    binary: bool = False,
    grace: float = 0.0,
) -> Finished:
    """Run ``argv`` in its own session with its output captured, and wait for it.

    ``env`` replaces the environment (None: this process's). Past ``timeout`` seconds
    the whole session gets SIGTERM, SIGKILL ``grace`` seconds later (at once for 0), and
    the result's ``returncode`` is None, with what it printed until then. A program that
    cannot start raises :class:`CommandFailed` (127 when it does not exist); a non-zero
    exit is the caller's to judge.
    """
    argv = list(argv)
    binary = binary or isinstance(input, bytes)
    start = time.monotonic()
    try:
        proc = subprocess.Popen(
            argv,
            cwd=cwd,
            env=None if env is None else dict(env),
            stdin=subprocess.DEVNULL if input is None else subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=not binary,
            errors=None if binary else "replace",
            start_new_session=True,  # one signal reaches the command and its children
        )
    except OSError as exc:
        code = 127 if isinstance(exc, FileNotFoundError) else 126
        raise CommandFailed(argv, code, f"cannot run {argv[0]}: {exc.strerror or exc}") from None
    try:
        stdout, stderr = proc.communicate(input, timeout=timeout)
        returncode: int | None = proc.returncode
    except subprocess.TimeoutExpired:
        stdout, stderr = _end_session(proc, grace)
        returncode = None
    except BaseException:  # KeyboardInterrupt included: the whole tree goes with us
        _end_session(proc, 0.0)
        raise
    return Finished(tuple(argv), returncode, stdout, stderr, time.monotonic() - start)


def _end_session(proc: subprocess.Popen, grace: float) -> tuple:
    """SIGTERM (SIGKILL when ``grace`` is 0) the command's session; what it printed."""
    _signal_group(proc, signal.SIGTERM if grace > 0 else signal.SIGKILL)
    try:
        return proc.communicate(timeout=grace) if grace > 0 else proc.communicate()
    except subprocess.TimeoutExpired:
        _signal_group(proc, signal.SIGKILL)
        return proc.communicate()


def output(argv: list[str], *, cwd: Path | None = None, timeout: float = 60.0) -> str:
    """Run a quiet query (git, ...) and return its stdout; its stderr names the failure.

    Raises :class:`CommandFailed` for a missing program, a non-zero exit or a timeout.
    """
    if shutil.which(argv[0]) is None:
        raise CommandFailed(argv, 127, f"{argv[0]} not found on PATH")
    proc = finish(argv, cwd=cwd, timeout=timeout)
    if proc.timed_out:
        raise CommandFailed(argv, 124, f"timed out after {timeout:.0f} s")
    if proc.returncode != 0:
        last = proc.stderr.strip().splitlines()[-1:] or [f"exit code {proc.returncode}"]
        raise CommandFailed(argv, proc.returncode, last[0])
    return proc.stdout


def capture(argv: list[str], *, timeout: float = 30.0) -> tuple[int, str]:
    """Run a quick probe quietly; return (exit code, stdout+stderr). Never raises."""
    if shutil.which(argv[0]) is None:
        return 127, f"{argv[0]} not found on PATH"
    try:
        proc = finish(argv, timeout=timeout)
    except CommandFailed as exc:
        return 124, exc.reason
    if proc.timed_out:
        return 124, f"timed out after {timeout:g} s"
    return proc.returncode, (proc.stdout + proc.stderr).strip()
