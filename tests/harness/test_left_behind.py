"""What a world test leaves behind beyond processes: a non-daemon thread still running,
a torch.distributed function it replaced. The test fails naming it, the run still ends,
and later tests run with the real function, in the pool and in place alike."""

from __future__ import annotations

import subprocess
import sys
import xml.etree.ElementTree as ET

import pytest
from jobs import run_torchrun_pytest

# slow: starts pytest sessions and torchrun of their own
pytestmark = [pytest.mark.dist, pytest.mark.torch_dist, pytest.mark.slow]

SUITE = """\
import threading
import time

import pytest
import torch
import torch.distributed as dist


@pytest.mark.world(2)
def test_a_leaves_a_thread(rank):
    threading.Thread(target=time.sleep, args=(1000,), name="stuck-worker").start()  # start


@pytest.mark.world(2)
def test_b_replaces_all_reduce(rank):
    dist.all_reduce = lambda *a, **k: None


@pytest.mark.world(2)
def test_c_all_reduce_is_torchs_again(rank):
    t = torch.ones(1)
    dist.all_reduce(t)
    assert t.item() == 2


def test_d_monkeypatch_undoes_its_own(monkeypatch):
    monkeypatch.setattr(dist, "barrier", lambda *a, **k: None)
    dist.barrier()
"""


def _line(tag: str) -> int:
    (line,) = [n for n, text in enumerate(SUITE.splitlines(), 1) if text.endswith(f"# {tag}")]
    return line


THREAD = (
    "left 1 thread running: 'stuck-worker' (started at test_suite.py:{line} in "
    "test_a_leaves_a_thread)"
)
REPLACED = "replaced torch.distributed.all_reduce (now <lambda> at test_suite.py:16)"


def _messages(path) -> dict[str, str]:
    root = ET.parse(path).getroot()
    return {
        case.get("name"): failure.get("message")
        for case in root.iter("testcase")
        for failure in case.iter("failure")
    }


def _outcomes(path) -> dict[str, str]:
    root = ET.parse(path).getroot()
    return {
        case.get("name"): "failed" if case.find("failure") is not None else "passed"
        for case in root.iter("testcase")
    }


@pytest.fixture
def folder(tmp_path):
    (tmp_path / "test_suite.py").write_text(SUITE)
    (tmp_path / "pytest.ini").write_text("[pytest]\n")
    return tmp_path


def test_in_the_pool(folder, auto_backend):
    cmd = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-p", "no:randomly", "-q",
           "--junitxml=junit.xml", "test_suite.py"]  # fmt: skip
    proc = subprocess.run(cmd, cwd=folder, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert proc.stdout.splitlines()[-1].startswith("2 failed, 2 passed in ")
    thread = THREAD.format(line=_line("start"))
    assert _messages(folder / "junit.xml") == {
        "test_a_leaves_a_thread": (
            f"ranks 0, 1 failed; ranks 0, 1 {thread} (world 2, backend {auto_backend})"
        ),
        "test_b_replaces_all_reduce": (
            f"ranks 0, 1 failed; ranks 0, 1 {REPLACED} (world 2, backend {auto_backend})"
        ),
    }


def test_in_place(folder):
    proc = run_torchrun_pytest(
        folder, "-p", "no:randomly", "-q", "--color=no", "--junitxml=out/junit.xml",
        "test_suite.py", timeout=150,
    )  # fmt: skip
    assert proc.returncode == 1, proc.stdout + proc.stderr
    thread = THREAD.format(line=_line("start"))
    assert "rankgate: ending the process without waiting for 'stuck-worker' (started at " in (
        proc.stderr + proc.stdout
    )
    assert "2 failed, 2 passed in " in proc.stdout
    assert _messages(folder / "out" / "junit.rank0.xml") == {
        "test_a_leaves_a_thread": (
            f"rankgate: the test {thread}. A non-daemon thread keeps its process alive at exit: "
            "stop and join it before the test returns, or start it with daemon=True"
        ),
        "test_b_replaces_all_reduce": (
            f"rankgate: the test {REPLACED}. It is put back for the tests after it: patch it "
            "with the monkeypatch fixture or unittest.mock.patch (undone when the test ends), "
            "never by assignment"
        ),
    }
    merged = subprocess.run(
        [sys.executable, "-m", "rankgate.cli", "merge-junit", "out"],
        cwd=folder, capture_output=True, text=True,
    )  # fmt: skip
    assert merged.returncode == 1, merged.stdout + merged.stderr
    assert merged.stdout.splitlines()[:2] == [
        f"FAILED test_suite.py::test_a_leaves_a_thread: ranks 0, 1 failed; ranks 0, 1 {thread}",
        f"FAILED test_suite.py::test_b_replaces_all_reduce: ranks 0, 1 failed; ranks 0, 1 {REPLACED}",
    ]
    assert merged.stdout.splitlines()[-1] == (
        "rankgate merge-junit: 4 tests on ranks 0, 1 of world 2: 2 passed, 2 failed, 0 error, "
        "0 skipped, 0 xfailed, 0 xpassed, 0 not run"
    )
