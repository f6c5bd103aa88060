"""The one subprocess module: codes, products, missing programs, timeouts."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from rankgate.proc import command as process

pytestmark = pytest.mark.unit

PY = sys.executable
ROOT = Path(__file__).resolve().parents[2]


def test_ok_codes_and_failure_carry_the_command():
    assert process.run([PY, "-c", "raise SystemExit(5)"], ok_codes=(0, 5), echo=False) == 5
    with pytest.raises(process.CommandFailed) as info:
        process.run([PY, "-c", "raise SystemExit(3)"], echo=False)
    assert info.value.returncode == 3
    assert info.value.argv[0] == PY
    assert str(info.value).endswith(": exit code 3")


def test_stdout_is_copied_into_the_product_file(tmp_path, capsys):
    product = tmp_path / "bench" / "out.json"
    process.run([PY, "-c", "print('[1]')"], stdout_path=product, echo=False)
    assert product.read_text() == "[1]\n"
    assert capsys.readouterr().out == "[1]\n"


def test_pytest_runs_with_this_python_whatever_pytest_is_first_on_path(tmp_path, capsys):
    # A venv used without activating it: another interpreter's pytest first on PATH.
    fake = tmp_path / "bin" / "pytest"
    fake.parent.mkdir()
    fake.write_text("#!/bin/sh\necho another pytest\nexit 9\n")
    fake.chmod(0o755)
    env = {"PATH": f"{fake.parent}:{os.environ['PATH']}"}
    code = process.run(["pytest", "--version"], env=env, stdout_path=tmp_path / "out.txt")
    assert code == 0
    assert (tmp_path / "out.txt").read_text().startswith("pytest ")
    assert capsys.readouterr().err == "rankgate > pytest --version\n"
    assert process.with_this_python(["pytest", "-q"]) == [PY, "-m", "pytest", "-q"]
    assert process.with_this_python(["ruff", "check"]) == ["ruff", "check"]


def test_missing_program_names_it():
    with pytest.raises(process.CommandFailed, match="no-such-tool-xyz not found on PATH"):
        process.run(["no-such-tool-xyz"], echo=False)


def test_timeout_kills_the_whole_process_tree(tmp_path):
    pidfile = tmp_path / "child.pid"
    script = (
        "import subprocess, sys, time;"
        f"p = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)']);"
        f"open({str(pidfile)!r}, 'w').write(str(p.pid));"
        "time.sleep(60)"
    )
    with pytest.raises(process.CommandFailed, match="timed out after 2 s") as info:
        process.run([PY, "-c", script], timeout=2, echo=False)
    assert info.value.returncode == 124
    grandchild = int(pidfile.read_text())
    for _ in range(50):  # gone within 5 s of the SIGTERM to its group
        if not running(grandchild):
            break
        time.sleep(0.1)
    else:
        pytest.fail(f"grandchild {grandchild} survived the timeout")


def running(pid: int) -> bool:
    """Alive and not a zombie (a zombie waits for a parent that may never reap it)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return False
    return state != "Z"


def test_capture_never_raises():
    assert process.capture(["no-such-tool-xyz"])[0] == 127
    assert process.capture([PY, "-c", "print('hi')"]) == (0, "hi")


def test_timeout_applies_while_stdout_is_copied(tmp_path):
    script = "import time; print('started', flush=True); time.sleep(60)"
    # 5 s: room for the interpreter to start and print on a saturated machine (with 1 s a
    # loaded CI run killed it before its first line), far below the script's 60.
    with pytest.raises(process.CommandFailed, match="timed out after 5 s"):
        process.run([PY, "-c", script], timeout=5, stdout_path=tmp_path / "log", echo=False)
    assert (tmp_path / "log").read_text() == "started\n"


SLEEPY_TEST = """
import os, subprocess, sys, time
import pytest

@pytest.mark.unit
def test_sleeps():
    helper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
    with open(os.environ["PIDS"], "w") as f:
        f.write(f"{os.getpid()} {helper.pid}")
    time.sleep(120)
"""


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP, signal.SIGINT], ids=str)
def test_a_signal_to_nox_ends_the_sessions_whole_tree(tmp_path, sig):
    """`timeout 25 nox -s unit`, a CI cancel or a closed terminal signal nox alone: the
    session's pytest (in a session of its own) and its children must end with it."""
    (tmp_path / "test_sleepy.py").write_text(SLEEPY_TEST)
    pids = tmp_path / "pids"
    nox = subprocess.Popen(
        [PY, "-m", "nox", "-f", str(ROOT / "noxfile.py"), "-s", "unit", "--",
         "--out", str(tmp_path / "out"), "-p", "no:cacheprovider", str(tmp_path / "test_sleepy.py")],
        cwd=ROOT, env={**os.environ, "PIDS": str(pids)}, start_new_session=True,
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        # Whatever this run inherited (CI may ignore SIGINT, and Python then keeps it
        # ignored), nox starts with the default disposition of the signal under test.
        preexec_fn=lambda: signal.signal(sig, signal.SIG_DFL),
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 120
        while not (pids.exists() and len(pids.read_text().split()) == 2):
            if nox.poll() is not None or time.monotonic() > deadline:
                with contextlib.suppress(ProcessLookupError):  # its own session: nox's tree
                    os.killpg(nox.pid, signal.SIGKILL)
                pytest.fail(nox.communicate(timeout=30)[0])  # bounded: a leftover holds the pipe
            time.sleep(0.1)
        tree = [int(p) for p in pids.read_text().split()]
        nox.send_signal(sig)  # to nox alone, as `timeout` and a CI runner do
        # Well under the test's 120 s sleep, so a tree left running still fails; loose
        # enough for a loaded 2-core CI machine (30 s was once too short there).
        output = nox.communicate(timeout=90)[0]
        assert nox.returncode != 0
        for _ in range(50):  # no orphan 5 s after nox ended
            if not any(running(pid) for pid in tree):
                break
            time.sleep(0.1)
        assert [pid for pid in tree if running(pid)] == [], output
    finally:
        if nox.poll() is None:
            os.killpg(nox.pid, signal.SIGKILL)


TEARDOWN_ON_TERM = """
import signal, sys, time

def ending(signum, frame):
    open(sys.argv[1] + ".term", "w").write(repr(time.time()))
    time.sleep(float(sys.argv[2]))  # its own teardown: cancel a job, write its JUnit file
    open(sys.argv[1] + ".done", "w").write("done")
    sys.exit(0)

signal.signal(signal.SIGTERM, ending)
open(sys.argv[1] + ".ready", "w").write("")
time.sleep(120)
"""


def test_stop_all_gives_every_command_its_teardown_at_once(tmp_path):
    """Stages in the background: each gets SIGTERM at the same moment, and 8 s to end
    (an hpc session took 11 s on busy cores), before SIGKILL."""
    names = [str(tmp_path / "a"), str(tmp_path / "b")]
    threads = [
        threading.Thread(target=process.run, args=([PY, "-c", TEARDOWN_ON_TERM, name, "8"],),
                         kwargs={"echo": False})
        for name in names
    ]  # fmt: skip
    for thread in threads:
        thread.start()
    deadline = time.monotonic() + 60
    while not all(Path(name + ".ready").exists() for name in names):
        assert time.monotonic() < deadline, "the commands never started"
        time.sleep(0.05)
    process.stop_all()
    for thread in threads:
        thread.join(timeout=60)
    assert [Path(name + ".done").exists() for name in names] == [True, True]
    told = [float(Path(name + ".term").read_text()) for name in names]
    assert abs(told[0] - told[1]) < 4  # one after the other, they would be 8 s apart


def test_stop_all_finds_a_command_its_thread_has_not_yet_recorded(tmp_path, monkeypatch):
    """On busy cores the command can be up before the thread that started it records it
    (a CI run's SIGTERM missed one of two stages); stop_all must still reach it."""

    class SlowToRecord(set):
        def add(self, proc):
            time.sleep(1.0)
            super().add(proc)

    monkeypatch.setattr(process, "_running", SlowToRecord())
    name = str(tmp_path / "late")
    ended = []
    thread = threading.Thread(
        target=lambda: ended.append(process.run([PY, "-c", TEARDOWN_ON_TERM, name, "0"], echo=False))
    )
    thread.start()
    deadline = time.monotonic() + 60
    while not Path(name + ".ready").exists():
        assert time.monotonic() < deadline, "the command never started"
        time.sleep(0.01)
    process.stop_all()
    thread.join(timeout=30)
    assert Path(name + ".done").exists() and ended == [0]


def test_finish_captures_what_the_command_said_and_its_code():
    done = process.finish([PY, "-c", "import sys; print('out'); print('err', file=sys.stderr); sys.exit(3)"])
    assert (done.returncode, done.stdout, done.stderr, done.timed_out) == (3, "out\n", "err\n", False)
    assert done.argv[0] == PY and done.seconds > 0


def test_finish_feeds_input_and_keeps_bytes_as_bytes():
    echo = [PY, "-c", "import sys; sys.stdout.buffer.write(sys.stdin.buffer.read()[::-1])"]
    assert process.finish(echo, input="abc").stdout == "cba"
    assert process.finish(echo, input=b"\x00\xff").stdout == b"\xff\x00"


def test_finish_of_a_missing_program_is_a_command_failed_naming_it():
    with pytest.raises(process.CommandFailed, match="cannot run no-such-tool-xyz") as info:
        process.finish(["no-such-tool-xyz"])
    assert info.value.returncode == 127 and info.value.argv == ["no-such-tool-xyz"]


def test_finish_past_its_deadline_ends_the_whole_tree_and_keeps_what_it_said(tmp_path):
    pidfile = tmp_path / "child.pid"
    script = (
        "import subprocess, sys, time;"
        "p = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)']);"
        f"open({str(pidfile)!r}, 'w').write(str(p.pid));"
        "print('started', flush=True); time.sleep(60)"
    )
    done = process.finish([PY, "-c", script], timeout=3)
    assert done.timed_out and done.returncode is None and done.stdout == "started\n"
    grandchild = int(pidfile.read_text())
    for _ in range(50):
        if not running(grandchild):
            break
        time.sleep(0.1)
    else:
        pytest.fail(f"grandchild {grandchild} survived the deadline")


def test_finish_with_grace_sends_sigterm_first(tmp_path):
    """A launcher given ``grace`` gets SIGTERM and may end its ranks before SIGKILL."""
    script = (
        "import signal, sys, time\n"
        "def bye(*_):\n"
        "    print('got SIGTERM', flush=True); sys.exit(0)\n"
        "signal.signal(signal.SIGTERM, bye)\n"
        "print('ready', flush=True); time.sleep(60)\n"
    )
    done = process.finish([PY, "-c", script], timeout=3, grace=10)
    assert done.timed_out and done.stdout == "ready\ngot SIGTERM\n"


def test_a_failure_carries_what_the_command_said():
    failed = process.CommandFailed(["sbatch", "job.sh"], 1, stderr="sbatch: error: no partition\n")
    assert str(failed) == "sbatch job.sh: exit code 1: sbatch: error: no partition"
    assert failed.stderr == "sbatch: error: no partition\n"
