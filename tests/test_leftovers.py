"""The run's leftover check (tests/leftovers.py) fails a run that leaves rankgate-* folders."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
if str(HERE / "harness") not in sys.path:  # run alone, tests/harness/conftest.py is not loaded
    sys.path.insert(0, str(HERE / "harness"))
from jobs import torchrun_pytest_cmd  # noqa: E402

from tests.warmstart import WARM_PYTHON  # noqa: E402

# Marked one by one: the two session tests below are dist tests only (a module-wide unit
# mark ran them in the unit stage as well, twice per CI run).

LEAKY = """
import tempfile

def test_forgets_its_folder():
    tempfile.mkdtemp(prefix="rankgate-hpc-")

def test_cleans_up(tmp_path):
    with tempfile.TemporaryDirectory(prefix="rankgate-gpu-"):
        pass
"""


def _run(pytester: pytest.Pytester, source: str, python: str = sys.executable):
    pytester.makepyfile(test_inner=source)
    pytester.makeconftest('pytest_plugins = ["leftovers"]')
    env_path = os.pathsep.join([str(HERE), os.environ.get("PYTHONPATH", "")])
    pytester._monkeypatch.setenv("PYTHONPATH", env_path)
    return pytester.run(python, "-m", "pytest", "-p", "no:cacheprovider", "-q")


@pytest.mark.unit
def test_a_folder_left_in_the_temp_dir_fails_the_run_naming_it(pytester):
    result = _run(pytester, LEAKY)
    assert result.ret == 1
    result.stdout.fnmatch_lines([
        "*= leftover temp folders =*",
        "the run left 1 rankgate-* folder(s) in its temp dir */pytest-run-tmp-*: rankgate-hpc-*",
        "2 passed in *",
    ])  # fmt: skip


@pytest.mark.unit
def test_a_clean_run_passes(pytester):
    result = _run(pytester, LEAKY.replace('tempfile.mkdtemp(prefix="rankgate-hpc-")', "pass"))
    assert result.ret == 0
    assert "leftover" not in result.stdout.str()


@pytest.mark.unit
def test_the_dir_of_a_killed_run_goes_at_the_next_start(pytester, tmp_path):
    # A killed run (its owner files name processes that are gone) cannot remove its dir;
    # the next run does. A live run's dir and one kept for a look (no owner file) stay.
    import subprocess

    parent = tmp_path / "temp"
    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True, check=True)  # fmt: skip
    for name, owner in (("killed", gone.stdout.strip()), ("live", str(os.getpid())),
                        ("kept", None)):  # fmt: skip
        run_dir = parent / f"pytest-run-tmp-{name}"
        (run_dir / "rankgate-pools-x").mkdir(parents=True)
        if owner is not None:
            (run_dir / f"owner.{owner}").touch()
    pytester._monkeypatch.setenv("TMPDIR", str(parent))
    result = _run(pytester, LEAKY.replace('tempfile.mkdtemp(prefix="rankgate-hpc-")', "pass"))
    assert result.ret == 0, result.stdout.str()
    assert sorted(p.name for p in parent.iterdir()) == [
        "pytest-run-tmp-kept", "pytest-run-tmp-live",
    ]  # fmt: skip


WORLD_TESTS = """
import pytest
import torch
import torch.distributed as dist

@pytest.mark.world(2)
def test_all_reduce(rank):
    t = torch.ones(1)
    dist.all_reduce(t)
    assert t.item() == 2
"""


@pytest.mark.dist
@pytest.mark.slow  # a pytest run of its own
@pytest.mark.launches  # in place every rank would start it once more
def test_the_pools_leave_nothing_behind(pytester):
    """The pools' folders go with the session, before the check looks; and no error is
    printed at exit (multiprocessing removes its own folder in the temp dir last)."""
    # From the warm ``python`` (torch imported, as in the other dist tests' launches): what
    # is checked happens at the session's end. The unit tests above start no warm server.
    result = _run(pytester, WORLD_TESTS, python=WARM_PYTHON.executable())
    assert result.ret == 0, result.stdout.str()
    assert "leftover" not in result.stdout.str()
    assert "Traceback" not in result.stderr.str(), result.stderr.str()


SLEEPY_WORLD = """
import time
import pytest

@pytest.mark.world(2)
def test_sleeps(rank, dist_tmp_path):
    (dist_tmp_path.parent / f"started{rank}").write_text("")
    time.sleep(120)
"""


@pytest.mark.dist
@pytest.mark.slow  # a pytest run of its own
@pytest.mark.launches  # in place every rank would start it once more
def test_sigterm_ends_the_session_and_its_pools(tmp_path):
    """A CI cancel or a gate stopping its stage sends SIGTERM: the session ends as Ctrl-C
    ends it, and its pools' folder goes with it."""
    import shutil
    import signal
    import subprocess
    import tempfile
    import time

    (tmp_path / "test_inner.py").write_text(SLEEPY_WORLD)
    temp = Path(tempfile.mkdtemp(prefix="sig-"))  # short: forkserver's socket lives there
    # Cold, not from the warm ``python``: its client passes a signal on to the program's
    # process group, so the pools would get the SIGTERM too; the session must end them.
    proc = subprocess.Popen(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", "test_inner.py",
         f"--basetemp={tmp_path / 'base'}"],
        cwd=tmp_path, env={**os.environ, "TMPDIR": str(temp)},
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 120
        while len(list(tmp_path.glob("base/**/started*"))) < 2:
            if proc.poll() is not None or time.monotonic() > deadline:
                proc.kill()
                pytest.fail(proc.communicate(timeout=30)[0])  # bounded: a leftover holds the pipe
            time.sleep(0.1)
        assert list(temp.glob("rankgate-pools-*")), "the pools' folder is where it is looked for"
        proc.send_signal(signal.SIGTERM)
        output = proc.communicate(timeout=60)[0]
    finally:
        if proc.poll() is None:
            proc.kill()
        left = sorted(p.name for p in temp.iterdir())
        shutil.rmtree(temp, ignore_errors=True)
    assert proc.returncode == 128 + signal.SIGTERM, output
    assert "rankgate: received SIGTERM" in output
    assert not [name for name in left if name.startswith("rankgate-pools-")], output


SEES_ITS_TEMP_DIR = """
import os
import tempfile
from pathlib import Path

import pytest

# Every rank records its temp dir: in place a plain test would run on one rank only.
@pytest.mark.every_rank
def test_records_its_temp_dir():
    seen = Path(os.environ["SEEN"]) / os.environ["RANK"]
    seen.write_text(tempfile.gettempdir())
    if os.environ["RANK"] == os.environ.get("LEAK_ON_RANK"):
        tempfile.mkdtemp(prefix="rankgate-left-by-rank-")
"""


def _torchrun_with_leftovers(tmp_path: Path, leak_on_rank: str = "") -> tuple:
    import subprocess

    project, parent, seen = tmp_path / "project", tmp_path / "temp", tmp_path / "seen"
    for folder in (project, parent, seen):
        folder.mkdir()
    (project / "test_inner.py").write_text(SEES_ITS_TEMP_DIR)
    (project / "conftest.py").write_text('pytest_plugins = ["leftovers"]')
    env = {**os.environ, "TMPDIR": str(parent), "SEEN": str(seen), "LEAK_ON_RANK": leak_on_rank,
           "PYTHONPATH": os.pathsep.join([str(HERE), os.environ.get("PYTHONPATH", "")])}  # fmt: skip
    proc = subprocess.run(torchrun_pytest_cmd("-q", "test_inner.py"), cwd=project, env=env,
                          capture_output=True, text=True, timeout=180)  # fmt: skip
    return proc, parent, {p.name: p.read_text() for p in seen.iterdir()}


@pytest.mark.dist
@pytest.mark.torch_dist
@pytest.mark.slow  # starts torchrun
@pytest.mark.launches  # in place every rank would start it once more
def test_the_ranks_of_one_torchrun_share_one_temp_dir_and_rank_0_removes_it(tmp_path):
    """Per-rank temp dirs broke symmetric memory ("Failed to send fd") on two GPUs."""
    proc, parent, seen = _torchrun_with_leftovers(tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert sorted(seen) == ["0", "1"]
    assert seen["0"] == seen["1"], seen
    assert Path(seen["0"]).parent == parent
    assert Path(seen["0"]).name.startswith("pytest-run-tmp-torchrun-")
    assert list(parent.glob("pytest-run-tmp-*")) == [], "rank 0 removes the shared dir"


@pytest.mark.dist
@pytest.mark.torch_dist
@pytest.mark.slow  # starts torchrun
@pytest.mark.launches  # in place every rank would start it once more
def test_a_folder_rank_1_leaves_fails_the_run_on_rank_0s_terminal(tmp_path):
    proc, parent, seen = _torchrun_with_leftovers(tmp_path, leak_on_rank="1")
    assert proc.returncode != 0, proc.stdout
    shared = Path(seen["0"])
    assert (
        f"the run left 1 rankgate-* folder(s) in its temp dir {shared}: rankgate-left-by-rank-"
        in proc.stdout
    ), proc.stdout + proc.stderr
    assert [p.name for p in parent.glob("pytest-run-tmp-*")] == [shared.name], "kept for a look"


def _two_nodes_on_one_file_system(tmp_path: Path, leak_on_rank: str = "") -> tuple:
    """Two ranks, each the only rank of its "node" (both local rank 0), on this one machine,
    as the hpc suites' two-node SLURM runs them: they share one temp dir. Started with the
    variables torchrun gives its ranks, without torchrun's agents: an agent whose rank
    passed waits up to 300 s at its exit for an agent whose rank failed."""
    import socket
    import subprocess

    project, parent, seen = tmp_path / "project", tmp_path / "temp", tmp_path / "seen"
    for folder in (project, parent, seen):
        folder.mkdir()
    (project / "test_inner.py").write_text(SEES_ITS_TEMP_DIR)
    (project / "conftest.py").write_text('pytest_plugins = ["leftovers"]')
    with socket.socket() as free:
        free.bind(("127.0.0.1", 0))
        port = free.getsockname()[1]
    env = {**os.environ, "TMPDIR": str(parent), "SEEN": str(seen), "LEAK_ON_RANK": leak_on_rank,
           "PYTHONPATH": os.pathsep.join([str(HERE), os.environ.get("PYTHONPATH", "")]),
           "WORLD_SIZE": "2", "LOCAL_RANK": "0", "LOCAL_WORLD_SIZE": "1",
           "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port),
           "TORCHELASTIC_RUN_ID": "two-nodes"}  # fmt: skip
    cmd = [WARM_PYTHON.executable(), "-m", "pytest", "-p", "no:cacheprovider", "-q",
           "test_inner.py"]  # fmt: skip
    out = {"stdout": subprocess.PIPE, "stderr": subprocess.STDOUT, "text": True}
    ranks = [
        subprocess.Popen(cmd, cwd=project, env={**env, "RANK": str(r), "GROUP_RANK": str(r)}, **out)
        for r in range(2)
    ]
    outs = [rank.communicate(timeout=300)[0] for rank in ranks]
    return [r.returncode for r in ranks], outs, parent, {p.name: p.read_text() for p in seen.iterdir()}


@pytest.mark.dist
@pytest.mark.torch_dist
@pytest.mark.slow  # starts two ranks
@pytest.mark.launches  # in place every rank would start them once more
@pytest.mark.parametrize("leak_on_rank", ["", "1"], ids=["clean", "leak-on-rank-1"])
def test_two_nodes_on_one_file_system_check_their_shared_dir_once(tmp_path, leak_on_rank):
    # Both ranks are local rank 0 of a node: each waited for the other to leave, 120 s.
    codes, outs, parent, seen = _two_nodes_on_one_file_system(tmp_path, leak_on_rank)
    both = "\n".join(outs)
    assert sorted(seen) == ["0", "1"] and seen["0"] == seen["1"], seen
    assert "other ranks still use" not in both, both
    shared = Path(seen["0"])
    if not leak_on_rank:
        assert codes == [0, 0], both
        assert list(parent.glob("pytest-run-tmp-*")) == [], "the lowest rank removes it"
        return
    assert codes != [0, 0], both
    assert both.count(f"the run left 1 rankgate-* folder(s) in its temp dir {shared}") == 1, both
    assert [p.name for p in parent.glob("pytest-run-tmp-*")] == [shared.name], "kept for a look"
