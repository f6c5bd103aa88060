"""The warm ``python`` rankgate's own tests launch ranks and inner sessions with (and
xdist's workers start with under rankgate): a program forked from the fork server ends,
signals and reads its arguments, folder, environment and streams as the same program
started cold; what a warm start cannot give goes cold."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time

import pytest

from rankgate.harness.pool import programclient
from rankgate.harness.pool.program import cold_reason
from tests.warmstart import WarmPython

pytestmark = pytest.mark.unit

# Prints whether it started warm (torch imported before its first line), then what it
# was given, then whether rankgate's pytest plugin came imported; exits with the code in
# its first argument.
PROBE = """
import os, signal, sys
warm = "torch" in sys.modules
print(warm, sys.argv[1:], os.getcwd(), os.environ.get("PROBE_VALUE"), sys.path[:2])
print(signal.getsignal(signal.SIGINT) == signal.SIG_IGN, file=sys.stderr)
print("rankgate.pytest_plugin" in sys.modules, file=sys.stderr)
sys.exit(int(sys.argv[1]))
"""

# Writes its pid, then waits; SIGTERM makes it say so and exit 3.
WAITER = """
import os, signal, sys, time
signal.signal(signal.SIGTERM, lambda *_: (print("terminated", flush=True), os._exit(3)))
print(os.getpid(), flush=True)
time.sleep(600)
"""


@pytest.fixture(scope="module")
def warm():
    python = WarmPython()
    executable = python.executable()  # waits until its server forks
    yield executable
    python.stop()


def _script(tmp_path, name: str, source: str) -> str:
    path = tmp_path / name
    path.write_text(source)
    return str(path)


def test_a_program_started_warm_has_its_arguments_folder_environment_and_exit_code(
    warm, tmp_path
):
    probe = _script(tmp_path, "probe.py", PROBE)
    env = {**os.environ, "PROBE_VALUE": "mine", "PYTHONPATH": "/extra/entry"}
    # SIGINT as a shell's foreground job has it, whatever this process inherited.
    default_sigint = lambda: signal.signal(signal.SIGINT, signal.SIG_DFL)  # noqa: E731
    done = subprocess.run(
        [warm, probe, "7", "x y"], cwd="/", env=env, capture_output=True, text=True, timeout=60,
        preexec_fn=default_sigint,
    )  # fmt: skip
    assert done.returncode == 7, done.stderr
    # Cold where the server has a PYTHONPATH of its own; the same program either way.
    warm_start = not os.environ.get("PYTHONPATH")
    path = [str(tmp_path), "/extra/entry"]
    assert done.stdout == f"{warm_start} ['7', 'x y'] / mine {path}\n"
    # A warm program has rankgate's pytest plugin from the server; a cold one does not.
    assert done.stderr == f"False\n{warm_start}\n"


def test_an_ignored_sigint_stays_ignored(warm, tmp_path):
    probe = _script(tmp_path, "probe.py", PROBE)
    done = subprocess.run(
        [warm, probe, "0"],
        capture_output=True,
        text=True,
        timeout=60,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN),
    )
    assert (done.returncode, done.stderr) == (0, "True\nTrue\n")


def test_a_signal_reaches_the_program_and_its_death_by_signal_is_the_clients(warm, tmp_path):
    waiter = _script(tmp_path, "waiter.py", WAITER)
    job = subprocess.Popen([warm, waiter], stdout=subprocess.PIPE, text=True)
    program = int(job.stdout.readline())
    assert program != job.pid  # forked by the server, not the client itself
    job.send_signal(signal.SIGTERM)
    assert job.stdout.readline() == "terminated\n"
    assert job.wait(timeout=60) == 3

    killed = subprocess.Popen([warm, "-c", "import os; os.kill(os.getpid(), 9)"])
    assert killed.wait(timeout=60) == -signal.SIGKILL


# The fork server's side of one request, played by the test so that a signal lands while
# the client waits for the program's pid (a race under load: CI's client died of it).
def test_a_signal_before_the_programs_pid_is_known_goes_on_to_the_program(tmp_path):
    waiter = _script(tmp_path, "waiter.py", WAITER.replace("600", "30"))
    program = subprocess.Popen(
        [sys.executable, waiter], stdout=subprocess.PIPE, text=True, start_new_session=True
    )
    int(program.stdout.readline())
    address = str(tmp_path / "server.sock")
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(address)
    listener.listen(1)
    client_dir = os.path.dirname(programclient.__file__)
    start = f"import sys; sys.path.insert(0, {client_dir!r}); import programclient; " \
            f"programclient.main({address!r}, sys.executable)"  # fmt: skip
    client = subprocess.Popen(
        [sys.executable, "-IS", "-c", start, waiter], preexec_fn=_sigterm_as_by_default
    )
    connection, _ = listener.accept()
    _, fds, _, _ = socket.recv_fds(connection, 1 << 20, 3)
    for fd in fds:
        os.close(fd)
    client.send_signal(signal.SIGTERM)
    connection.sendall(programclient.WORD.pack(program.pid))
    assert program.stdout.readline() == "terminated\n"
    assert program.wait(timeout=60) == 3
    connection.sendall(programclient.WORD.pack(3))
    assert client.wait(timeout=60) == 3
    connection.close()
    listener.close()


def _sigterm_as_by_default() -> None:
    """SIGTERM neither ignored nor blocked, whatever this process inherited."""
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, [signal.SIGTERM])


def test_a_killed_client_takes_its_program_with_it(warm, tmp_path):
    waiter = _script(tmp_path, "waiter.py", WAITER)
    job = subprocess.Popen([warm, waiter], stdout=subprocess.PIPE, text=True)
    program = int(job.stdout.readline())
    job.kill()
    job.wait(timeout=60)
    deadline = time.monotonic() + 30
    while _alive(program) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _alive(program)


# rankgate's modules marked for assert rewriting, as an installed wheel's are (an editable
# install's are not), and its two plugins named with -p in place of its entry point, as
# without plugin autoload: pytest finds each imported already.
MARKS_RANKGATE = """
import pytest, sys
pytest.register_assert_rewrite("rankgate")
WARM = "rankgate.harness.plugin" in sys.modules
"""
PLUGIN_OPTIONS = ("no:rankgate", "rankgate.harness.plugin", "rankgate.report.tracing_plugin")


def test_a_pytest_started_warm_does_not_warn_about_rankgates_modules(warm, tmp_path):
    (tmp_path / "conftest.py").write_text(MARKS_RANKGATE)
    (tmp_path / "test_it.py").write_text("from conftest import WARM\n\ndef test_warm():\n    assert WARM\n")
    named = [arg for name in PLUGIN_OPTIONS for arg in ("-p", name)]
    done = subprocess.run(
        [warm, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:randomly", *named,
         "-W", "error::pytest.PytestAssertRewriteWarning"],
        cwd=tmp_path, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    assert "1 passed" in done.stdout and "warning" not in done.stdout, done.stdout


# Its own finalizer, and whether any finalizer it came with runs at exit (torch's import
# makes one per operator library).
FINALIZERS = """
import sys, weakref
import torch

class Thing:
    pass

thing = Thing()
weakref.finalize(thing, print, "its own finalizer ran")
inherited = [f.atexit for f in list(weakref.finalize._registry) if f.peek()[0] is not thing]
print(len(inherited) > 0, any(inherited), "torch" in sys.modules)
"""


def test_a_warm_program_runs_its_own_finalizers_at_exit_and_not_the_servers(warm, tmp_path):
    finalizers = _script(tmp_path, "finalizers.py", FINALIZERS)
    warm_run = subprocess.run([warm, finalizers], capture_output=True, text=True, timeout=60)
    cold_run = subprocess.run(
        [sys.executable, finalizers], capture_output=True, text=True, timeout=120
    )
    assert warm_run.stdout == "True False True\nits own finalizer ran\n", warm_run.stderr
    assert cold_run.stdout == "True True True\nits own finalizer ran\n", cold_run.stderr


def test_what_a_warm_start_cannot_give_starts_cold(warm, tmp_path):
    probe = _script(tmp_path, "probe.py", PROBE)
    env = {**os.environ, "TORCH_SHOW_CPP_STACKTRACES": "1"}
    done = subprocess.run([warm, probe, "0"], env=env, capture_output=True, text=True, timeout=120)
    assert done.stdout.startswith("False "), done.stderr  # cold: torch not imported yet
    assert done.returncode == 0


def test_a_sitecustomize_on_the_programs_pythonpath_runs(warm, tmp_path):
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text("import os\nos.environ['CUSTOMIZED'] = 'yes'\n")
    env = {**os.environ, "PYTHONPATH": str(site)}
    code = "import os, sys; print(os.environ.get('CUSTOMIZED'), 'torch' in sys.modules)"
    done = subprocess.run([warm, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert done.stdout == "yes False\n", done.stderr  # cold, as Python starts it
    assert cold_reason(["-c", code], env, {k: v for k, v in env.items() if k != "PYTHONPATH"}) == (
        f"PYTHONPATH holds {site / 'sitecustomize.py'}, which Python imports as it starts"
    )


def test_the_rule_for_a_cold_start():
    own = {"PATH": "/bin", "TORCH_LOGS": "", "PYTHONHASHSEED": "0"}
    same = dict(own)
    assert cold_reason(["-m", "pytest"], same, own) is None
    assert cold_reason(["-u", "-mpytest", "-q"], same, own) is None
    assert cold_reason(["script.py"], {**own, "RANK": "1", "OMP_NUM_THREADS": "1"}, own) is None
    assert cold_reason(["script.py"], {**own, "TORCHELASTIC_RUN_ID": "x"}, own) is None
    assert cold_reason(["script.py"], {**own, "PYTHONPATH": "/a"}, own) is None
    assert cold_reason(["-u", "-B", "-c", "pass"], same, own) is None
    assert cold_reason(["-X", "dev", "-c", "pass"], same, own) == (
        "arguments a warm start does not take: ['-X', 'dev', '-c']"
    )
    assert cold_reason(["-c", "pass"], {**own, "PYTHONDONTWRITEBYTECODE": "1"}, own) is None
    assert cold_reason(["-m", "pytest"], {**own, "PYTORCH_NVML_BASED_CUDA_CHECK": "1"}, own) is None
    assert cold_reason(["-m", "pytest"], {**own, "TORCH_LOGS": "+dynamo"}, own) == (
        "TORCH_LOGS differs from the warm server's"
    )
    assert cold_reason(["-m", "pytest"], {"PATH": "/bin", "TORCH_LOGS": ""}, own) == (
        "PYTHONHASHSEED differs from the warm server's"
    )
    assert cold_reason(["-m", "pytest"], {**own, "OMP_NUM_THREADS": "all"}, own) == (
        "OMP_NUM_THREADS differs from the warm server's"
    )
    with_path = {**own, "PYTHONPATH": "/a"}
    assert cold_reason(["-m", "pytest"], {**own, "PYTHONPATH": "/b"}, with_path) == (
        "PYTHONPATH differs from the warm server's"
    )


def test_turned_off_it_is_this_python(monkeypatch):
    monkeypatch.setenv("RANKGATE_TESTS_COLD", "1")
    assert WarmPython().executable() == sys.executable
    python = WarmPython()  # as conftest.py turns it off in place
    python.turn_off()
    assert python.executable() == sys.executable


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(") ", 1)[1].split()[0] != "Z"
    except OSError:
        return False
