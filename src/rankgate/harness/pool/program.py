"""A Python program forked by the fork server (:mod:`.forkserver`) in place of a cold
``python``: pytest-xdist's workers, and whatever a client (:mod:`.programclient`) asks
for. It starts with torch imported instead of importing it again (about 2 CPU-s a
process on 2 cores) and otherwise runs as the same program started cold: its arguments,
folder, environment, standard streams, signal dispositions, exit code or signal.

What differs: /proc shows the server's command line for it, its parent is the server,
and it shares the server's hash seed. What it cannot be given (a variable the
interpreter or torch reads at import set differently, Python options beyond ``-u``,
``-B`` and ``-c``/``-m``/a script) makes it start cold (:func:`cold_reason`).

The program keeps the ``rankgate`` modules the server imported (its ranks' code and the
pytest plugins): pytest, which rewrites the asserts of a plugin's modules as it imports
them, warns about a plugin imported before it started unless the package's docstring opts
out, and ``rankgate``'s does (PYTEST_DONT_REWRITE).
"""

from __future__ import annotations

import atexit
import importlib.machinery
import io
import os
import runpy
import signal
import sys
import tempfile
import threading
import traceback
import types
from collections.abc import Mapping

READ_AT_IMPORT = (
    "PYTHON", "TORCH", "PYTORCH", "OMP_", "MKL_", "KMP_", "GOMP_", "LD_", "CUDA_", "NVIDIA_",
    "HIP_", "ROCR_", "MALLOC_", "GLIBC_",
)  # fmt: skip
"""Prefixes of variables that the interpreter, torch or its libraries read while
importing: a child whose value differs from the server's would not see its own."""

SET_BY_LAUNCHERS = ("TORCHELASTIC_", "TORCH_NCCL_ASYNC_ERROR_HANDLING")
"""What torchrun sets for its ranks and torch reads only later. Its OMP_NUM_THREADS is
applied to a forked program through ``torch.set_num_threads``."""

READ_AFTER_START = ("PYTHONDONTWRITEBYTECODE", "PYTORCH_NVML_BASED_CUDA_CHECK")
"""Variables of those prefixes read only after the program has started: Python's when it
first compiles a module, torch's at each ``torch.cuda.is_available``. Set as given in the
forked program, which sees its own. DeepSpeed's import sets the second, and
pytest-randomly's seeder imports DeepSpeed in each pytest process once its fork servers
have their environment: xdist's workers, and the programs tests launch through a warm
python, all started cold for it."""


def cold_reason(argv: list[str], env: dict[str, str], own_env: dict[str, str]) -> str | None:
    """Why the program ``python *argv`` with ``env`` must start cold, or None."""
    if _parse(argv) is None:
        return f"arguments a warm start does not take: {argv[:3]}"
    return environment_cold_reason(env, own_env)


def environment_cold_reason(env: dict[str, str], own_env: dict[str, str]) -> str | None:
    """Why any program with ``env`` must start cold from a server under ``own_env``, or
    None: a variable read at import that differs."""
    keys = {k for k in (*env, *own_env) if k.startswith(READ_AT_IMPORT)}
    for key in sorted(keys):
        if env.get(key) == own_env.get(key) or key.startswith(SET_BY_LAUNCHERS):
            continue
        if key in READ_AFTER_START:  # set in the child as given
            continue
        if key == "OMP_NUM_THREADS" and omp_threads(env) is not None:
            continue
        if key == "PYTHONPATH" and not own_env.get(key):
            if startup := _imported_at_start(env[key]):
                return f"PYTHONPATH holds {startup}, which Python imports as it starts"
            continue  # put on sys.path as Python would; the server imported none of it
        return f"{key} differs from the warm server's"
    return None


def _imported_at_start(pythonpath: str) -> str | None:
    """Where ``pythonpath`` holds a ``sitecustomize``/``usercustomize`` (as Python's own
    path finder finds one): the site module imports it before the program runs, which a
    forked program never does."""
    folders = [folder for folder in pythonpath.split(os.pathsep) if folder]
    for name in ("sitecustomize", "usercustomize"):
        spec = importlib.machinery.PathFinder.find_spec(name, folders)
        if spec is not None:
            return spec.origin
    return None


def omp_threads(env: Mapping[str, str]) -> int | None:
    """``OMP_NUM_THREADS`` as one positive count, or None (unset, a list, not a number):
    what a forked process applies through ``torch.set_num_threads``."""
    value = env.get("OMP_NUM_THREADS", "")
    return int(value) if value.isdigit() and int(value) > 0 else None


class _Invocation(types.SimpleNamespace):
    """``python *argv`` read: ``unbuffered``, ``no_bytecode``, ``kind`` ("module",
    "script" or "command"), ``name`` (the module, the script's path or the code) and
    ``args`` (what follows it)."""


def _parse(argv: list[str]) -> _Invocation | None:
    """``python *argv`` read, or None for options a warm start does not take."""
    unbuffered = no_bytecode = False
    rest = list(argv)
    while rest and rest[0] in ("-u", "-B"):
        unbuffered |= rest[0] == "-u"
        no_bytecode |= rest[0] == "-B"
        rest.pop(0)
    flags = {"unbuffered": unbuffered, "no_bytecode": no_bytecode}
    for option, kind in (("-m", "module"), ("-c", "command")):
        if rest and rest[0].startswith(option) and rest[0] != option:
            return _Invocation(**flags, kind=kind, name=rest[0][2:], args=rest[1:])
        if len(rest) >= 2 and rest[0] == option:
            return _Invocation(**flags, kind=kind, name=rest[1], args=rest[2:])
    if rest and not rest[0].startswith("-"):
        return _Invocation(**flags, kind="script", name=rest[0], args=rest[1:])
    return None


class ForkedProgram:
    """In the forked child: become ``python *argv`` as the client started it, then run.

    ``request``: the client's ``{"argv", "env", "cwd", "ignored", "mask"}`` (Python's
    arguments after ``python``, the environment, the folder, the signals ignored and
    blocked where the client started)."""

    def __init__(self, request: dict) -> None:
        self.request = request

    def run(self) -> int:
        """Run the program; its exit code (a signal's death is the process's own)."""
        invocation = _parse(self.request["argv"])
        os.chdir(self.request["cwd"])
        os.environ.clear()
        os.environ.update(self.request["env"])
        tempfile.tempdir = None  # gettempdir() reads TMPDIR again, as in a new process
        sys.dont_write_bytecode = invocation.no_bytecode or bool(
            os.environ.get("PYTHONDONTWRITEBYTECODE")
        )
        self._signals()
        self._threads()
        self._stdio(invocation.unbuffered or bool(os.environ.get("PYTHONUNBUFFERED")))
        if "numpy" in sys.modules:
            sys.modules["numpy"].random.seed()  # the server's global state, not the child's own
        try:
            self._start(invocation)
            code = 0
        except SystemExit as exc:
            code = exit_code(exc.code)
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

    def _start(self, invocation: _Invocation) -> None:
        if invocation.kind == "script":
            first = os.path.dirname(os.path.abspath(invocation.name))
        else:
            first = "" if invocation.kind == "command" else os.getcwd()
        extra = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
        sys.path[0:1] = [first, *extra]
        if invocation.kind == "module":
            sys.argv = ["-m", *invocation.args]
            runpy.run_module(invocation.name, run_name="__main__", alter_sys=True)
        elif invocation.kind == "script":
            sys.argv = [invocation.name, *invocation.args]
            runpy.run_path(invocation.name, run_name="__main__")
        else:
            sys.argv = ["-c", *invocation.args]
            main = types.ModuleType("__main__")
            sys.modules["__main__"] = main
            exec(compile(invocation.name, "<string>", "exec"), main.__dict__)

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
        threads = omp_threads(os.environ)
        if threads is not None and "torch" in sys.modules:
            sys.modules["torch"].set_num_threads(threads)

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


def exit_code(code: object) -> int:
    """The process's exit code for ``SystemExit(code)``, as Python gives it."""
    if code is None:
        return 0
    if isinstance(code, int):
        return code & 0xFF
    print(code, file=sys.stderr)
    return 1
