"""In-place mode for real: pytest started on every rank by torchrun or mpirun."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import textwrap
import time
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from jobs import run_torchrun_pytest

from rankgate.harness import ledger
from rankgate.harness.item_settings import seed_for_test
from rankgate.harness.leaks import running
from rankgate.report.junit import merge_junit
from tests.warmstart import WARM_PYTHON

# slow: each test starts torchrun or mpirun, and pytest on every rank
pytestmark = [pytest.mark.dist, pytest.mark.torch_dist, pytest.mark.slow]

SUITE = """
import pytest
import torch
import torch.distributed as dist

@pytest.mark.world(2)
def test_allreduce(rank, world_size, dist_tmp_path):
    t = torch.ones(1) * (rank + 1)
    dist.all_reduce(t)
    assert t.item() == 3
    (dist_tmp_path / f"rank{rank}").write_text("seen")
    dist.barrier()
    assert sorted(p.name for p in dist_tmp_path.iterdir()) == ["rank0", "rank1"]

@pytest.mark.world(2)
def test_fails_on_rank_1(rank):
    print(f"stdout of rank {rank}")
    assert rank == 0, "rank 1 disagrees"

@pytest.mark.world(4)
def test_needs_four():
    pass

def test_plain(rank, world_size):  # on one rank, as in the pool
    assert (rank, world_size) == (0, 1)

@pytest.mark.world(2)
def test_fails_on_every_rank(rank):
    assert rank < 0, f"rank {rank} fails"
"""


def _write(tmp_path: Path, source: str) -> Path:
    path = tmp_path / "test_suite.py"
    path.write_text(textwrap.dedent(source))
    (tmp_path / "pytest.ini").write_text("[pytest]\n")
    return path


RANKGATE_WARNING = re.compile(r"\S*rankgate/\S+\.py:\d+: \w*Warning: .*")


def test_torchrun_runs_tests_on_every_rank_and_rank_0_reports_all(tmp_path, auto_backend):
    _write(tmp_path, SUITE)
    proc = run_torchrun_pytest(tmp_path, "-q", "--junitxml=out/junit.xml", "-rfEs", "test_suite.py")
    out = proc.stdout
    assert proc.returncode != 0
    # No rank warns of rankgate's own code (a deprecated pytest API it calls, say): one
    # raised outside a test, as at session start, shows as file:line: Category: message.
    assert not RANKGATE_WARNING.findall(out + proc.stderr)
    # Only rank 0 writes to the terminal; it counts rank 1's failure.
    assert out.count("short test summary info") == 1
    assert "FAILED test_suite.py::test_fails_on_rank_1 - rank 1 failed; rank 0 passed" in out
    assert "rank 1 disagrees" in out
    # A test that failed on every rank is one failure, reported with rank 0's own traceback.
    assert out.count("FAILED test_suite.py::test_fails_on_every_rank - ") == 1
    assert "FAILED test_suite.py::test_fails_on_every_rank: ranks 0, 1 failed" in out
    # Rank 0 ran its share (the world(2) tests, the skip), rank 1 the plain test too; the
    # closing line counts the whole run, rank 1's plain test included.
    assert "2 failed, 2 passed, 1 skipped" in out
    # Every failure names the command that reproduces it, launcher included.
    for name in ("test_fails_on_rank_1", "test_fails_on_every_rank"):
        nodeid = f"test_suite.py::{name}"
        assert (
            "reproduce: torchrun --standalone --nproc-per-node=2 -m pytest -p no:cacheprovider "
            f"'{nodeid}' "
            f"--rankgate-seed=0  # world=2 backend={auto_backend} "
            f"seed={seed_for_test(0, nodeid)}"
        ) in out
    assert (
        "test_suite.py:20: world(4) needs 4 ranks; this run has 2 ranks launched by torchrun"
        in out
    )
    # Each rank wrote its own JUnit file; rank 1's terminal went to its log, whose closing
    # line counts the run as rank 0's does.
    files = sorted(p.name for p in (tmp_path / "out").iterdir())
    assert {"junit.rank0.xml", "junit.rank1.xml", "pytest.rank1.log"} <= set(files)
    assert "2 failed, 2 passed, 1 skipped in" in (tmp_path / "out" / "pytest.rank1.log").read_text()
    merged = merge_junit(
        [tmp_path / "out" / "junit.rank0.xml", tmp_path / "out" / "junit.rank1.xml"]
    )
    verdicts = {t.name: t for t in merged.tests}
    assert verdicts["test_fails_on_rank_1"].verdict == "failed"
    assert verdicts["test_fails_on_rank_1"].failing_ranks == (1,)
    assert verdicts["test_fails_on_every_rank"].failing_ranks == (0, 1)
    assert verdicts["test_allreduce"].verdict == "passed"
    assert verdicts["test_needs_four"].verdict == "skipped"


def test_torchrun_dist_tmp_path_is_empty_in_every_run(tmp_path):
    # Two runs of the same test: what the first left behind must not be seen by the second.
    _write(
        tmp_path,
        """
        import pytest
        import torch.distributed as dist

        @pytest.mark.every_rank
        def test_fresh(rank, dist_tmp_path):
            assert list(dist_tmp_path.iterdir()) == []
            dist.barrier()
            (dist_tmp_path / f"left-by-rank{rank}").write_text("stale")
        """,
    )
    for run in (1, 2):
        proc = run_torchrun_pytest(tmp_path, "-q", "test_suite.py", "--junitxml=out/junit.xml")
        assert proc.returncode == 0, f"run {run}:\n{proc.stdout}\n{proc.stderr}"
        assert "1 passed" in proc.stdout
    # Each run's directory is removed at its end, not left in the JUnit directory (the
    # run's plan stays beside each JUnit file: merge-junit names a test no rank recorded).
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == [
        "junit.rank0.plan", "junit.rank0.xml", "junit.rank1.plan", "junit.rank1.xml",
        "pytest.rank1.log",
    ]  # fmt: skip


def test_torchrun_mismatched_collection_fails_loudly(tmp_path):
    _write(
        tmp_path,
        """
        import os

        def test_everywhere():
            pass

        if os.environ["RANK"] == "1":
            def test_only_on_rank_1():
                pass
        """,
    )
    proc = run_torchrun_pytest(tmp_path, "-q", "test_suite.py")
    assert proc.returncode != 0
    both = proc.stdout + proc.stderr
    assert "rankgate in-place: ranks collected different tests" in both
    assert (
        "rank 1 collected 2 tests, rank 0 1; only on rank 1: ['test_suite.py::test_only_on_rank_1']"
        in both
    )


def test_torchrun_runs_rank_0s_order_and_seed_of_pytest_randomly_on_every_rank(tmp_path):
    # pytest-randomly orders the tests, and reseeds random before each, with a seed of its
    # own on each rank. Before: "ranks collected different tests" (the same tests in
    # another order); with the order alone made one, a fixture's random size differed.
    pytest.importorskip("pytest_randomly")
    _write(
        tmp_path,
        """
        import random

        import pytest
        import torch
        import torch.distributed as dist

        @pytest.fixture
        def size():
            return random.randint(1, 10**6)

        @pytest.mark.world(2)
        @pytest.mark.parametrize("i", range(8))
        def test_sizes_agree(i, size):
            mine = torch.tensor([i, size, random.randint(1, 10**6)])
            both = [torch.zeros(3, dtype=torch.long) for _ in range(2)]
            dist.all_gather(both, mine)
            assert torch.equal(both[0], both[1]), both

        def test_the_plugin_is_on(pytestconfig):
            assert pytestconfig.pluginmanager.hasplugin("randomly")
        """,
    )
    # "-p randomly": this project blocks it
    proc = run_torchrun_pytest(tmp_path, "-q", "-p", "randomly", "test_suite.py")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.strip().splitlines()[-1].startswith("9 passed")


def test_torchrun_hang_dumps_stacks_and_ends_at_the_timeout(tmp_path):
    _write(
        tmp_path,
        """
        import time
        import pytest

        @pytest.mark.world(2, timeout=3)
        def test_hangs():
            time.sleep(1000)
        """,
    )
    start = time.monotonic()
    proc = run_torchrun_pytest(tmp_path, "-q", "test_suite.py", "--junitxml=out/junit.xml")
    assert proc.returncode != 0
    # A rank that timed out recorded the hung test in its JUnit file before exiting (the
    # launcher may stop the other rank first, so at least one file).
    written = sorted((tmp_path / "out").glob("junit.rank*.xml"))
    assert written, proc.stderr
    for path in written:
        rank = path.name.split(".")[1].removeprefix("rank")
        (case,) = ET.parse(path).getroot().iter("testcase")
        failure = case.find("failure")
        assert case.get("name") == "test_hangs"
        assert failure.get("message").startswith(
            f"rank {rank} hung (did not finish within the test's timeout of 3 s; the rank exited)"
        )
        assert 'test_suite.py", line 7 in test_hangs' in failure.text
    # Ranks time out together; each line of a dump carries its rank and is never torn
    # by the other rank's (the launcher may stop the second rank before it dumps).
    dumps = {
        rank: [line for line in proc.stderr.splitlines() if line.startswith(f"[rank {rank}] ")]
        for rank in (0, 1)
    }
    assert any(dumps.values()), proc.stderr
    for lines in (d for d in dumps.values() if d):
        assert lines[0].endswith("] Timeout (0:00:03)! Python stacks of every thread:"), lines
        assert any(line.endswith('test_suite.py", line 7 in test_hangs') for line in lines), lines
    assert time.monotonic() - start < 60


def test_torchrun_hang_in_a_collective_outlives_the_rendezvous_timeout(tmp_path, monkeypatch):
    # The group's operation timeout must not end the hang first (as a gloo error, with
    # no stacks and a broken outcome exchange): the hang watch ends it.
    monkeypatch.setenv(ledger.ENV, "1")  # the cause below is the ledger's, GPUs seen or not
    _write(
        tmp_path,
        """
        import time
        import pytest
        import torch
        import torch.distributed as dist

        @pytest.mark.world(2, timeout=6)
        def test_hangs(rank):
            if rank == 0:
                dist.all_reduce(torch.zeros(1))  # rank 1 never joins
            else:
                time.sleep(1000)
        """,
    )
    (tmp_path / "pytest.ini").write_text("[pytest]\nrankgate_rendezvous_timeout = 2\n")
    proc = run_torchrun_pytest(tmp_path, "-q", "test_suite.py", "--junitxml=out/junit.xml")
    assert proc.returncode != 0
    assert "Timed out waiting" not in proc.stdout + proc.stderr
    written = sorted((tmp_path / "out").glob("junit.rank*.xml"))
    assert written, proc.stderr
    for path in written:
        rank = path.name.split(".")[1].removeprefix("rank")
        (case,) = ET.parse(path).getroot().iter("testcase")
        # Root cause first: rank 1 never joined the all_reduce; it sleeps outside any.
        assert case.find("failure").get("message") == (
            f"rank {rank} hung (did not finish within the test's timeout of 6 s; the rank "
            "exited); likely cause: rank 1 never issued all_reduce #1 (float32[1]) that "
            "rank 0 issued at test_suite.py:10; rank 1 issued no collective (now in user "
            "code at test_suite.py:12)"
        )


@pytest.mark.mpi_dist
@pytest.mark.skipif(
    shutil.which("mpirun") is None, reason="mpirun is not installed (apt-get install openmpi-bin)"
)
def test_mpirun_runs_the_same_file(tmp_path, auto_backend):
    _write(tmp_path, SUITE)
    proc = _launch("mpirun", tmp_path, "--junitxml=out/junit.xml", "test_suite.py")
    assert proc.returncode != 0
    assert "FAILED test_suite.py::test_fails_on_rank_1 - rank 1 failed; rank 0 passed" in proc.stdout
    assert "2 failed, 2 passed, 1 skipped" in proc.stdout  # the run's: rank 1 ran test_plain
    assert (
        "reproduce: mpirun -np 2 python -m pytest -p no:cacheprovider "
        "'test_suite.py::test_fails_on_every_rank' "
        f"--rankgate-seed=0  # world=2 backend={auto_backend} seed="
    ) in proc.stdout
    merged = merge_junit(sorted((tmp_path / "out").glob("junit.rank*.xml")))
    assert {t.name: t.verdict for t in merged.tests} == {
        "test_allreduce": "passed",
        "test_fails_on_every_rank": "failed",
        "test_fails_on_rank_1": "failed",
        "test_needs_four": "skipped",
        "test_plain": "passed",
    }


ONE_RANK_DIFFERS = """
import pytest

@pytest.mark.world(2)
@pytest.mark.xfail(reason="rank 1 known bad", strict=True)
def test_strict_fails_on_rank_1(rank):
    assert rank == 0

@pytest.mark.world(2)
@pytest.mark.xfail(reason="rank 1 known bad")
def test_fails_on_rank_1(rank):
    assert rank == 0

@pytest.mark.world(2)
@pytest.mark.xfail(reason="fixed", strict=True)
def test_strict_passes_everywhere(rank):
    pass

@pytest.mark.world(2)
def test_skips_on_rank_1(rank):
    if rank == 1:
        pytest.skip("only rank 1 skips")
"""


def test_a_test_that_one_rank_xfails_or_skips_has_the_pools_verdict_in_place(tmp_path):
    # An xfail test whose body failed on one rank failed as a whole, as expected. In
    # place each rank's pytest judged its own run: rank 0 reported a strict unexpected
    # pass, "rank 0 failed; rank 1 xfailed", where the pool said XFAIL. A skip on one
    # rank is an error in the pool (no rank failed); in place it was a failure.
    _write(tmp_path, ONE_RANK_DIFFERS)
    expected = [
        "XFAIL test_suite.py::test_strict_fails_on_rank_1 - rank 1 known bad",
        "XFAIL test_suite.py::test_fails_on_rank_1 - rank 1 known bad",
        "FAILED test_suite.py::test_strict_passes_everywhere - [XPASS(strict)] fixed",
        "ERROR test_suite.py::test_skips_on_rank_1 - ranks disagree",
    ]
    pool = subprocess.run(
        [WARM_PYTHON.executable(), "-m", "pytest", "-p", "no:cacheprovider", "-q", "-rfEx", "test_suite.py"],
        cwd=tmp_path, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    in_place = run_torchrun_pytest(
        tmp_path, "-q", "--junitxml=out/junit.xml", "-rfEx", "test_suite.py"
    )
    for proc in (pool, in_place):
        summary = proc.stdout.split("short test summary info")[-1]
        lines = [line for line in summary.splitlines() if line.startswith(("XF", "FA", "ER"))]
        assert len(lines) == len(expected), proc.stdout
        for start in expected:  # the disagreement's line goes on as each mode words it
            assert [line for line in lines if line.startswith(start)], start
        last = summary.strip().splitlines()[-1]
        counts = {word: int(n) for n, word in re.findall(r"(\d+) (failed|error|xfailed|passed)", last)}
        assert counts == {"failed": 1, "error": 1, "xfailed": 2}, summary
    merged = merge_junit(sorted((tmp_path / "out").glob("junit.rank*.xml")))
    assert {t.name: (t.verdict, t.message) for t in merged.tests} == {
        "test_strict_fails_on_rank_1": ("xfailed", "rank 1 known bad (rank 0 xpassed; rank 1 xfailed)"),
        "test_fails_on_rank_1": ("xfailed", "rank 1 known bad (rank 0 xpassed; rank 1 xfailed)"),
        "test_strict_passes_everywhere": ("failed", "ranks 0, 1 xpassed"),  # strict: red
        "test_skips_on_rank_1": ("error", "ranks disagree: rank 1 skipped; rank 0 passed"),
    }


# --- what a hostile test does to an in-place run, under both launchers -----------------

LAUNCHERS = [
    pytest.param("torchrun", id="torchrun"),
    pytest.param(
        "mpirun",
        id="mpirun",
        marks=[
            pytest.mark.mpi_dist,
            pytest.mark.skipif(
                shutil.which("mpirun") is None,
                reason="mpirun is not installed (apt-get install openmpi-bin)",
            ),
        ],
    ),
]


def _launch(launcher: str, tmp_path: Path, *args: str, env: dict | None = None, timeout=120):
    """pytest on 2 ranks started by ``launcher``, in ``tmp_path``."""
    python = WARM_PYTHON.executable()
    if launcher == "torchrun":
        start = [python, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2"]
        start += ["--no-python", python, "-m", "pytest"]
    else:
        # 3 s from mpirun's SIGTERM to its SIGKILL (Open MPI's default is 1 s): on a loaded
        # CI host rank 0 needs more to write its files and summary (docs/inplace-stops.md)
        start = ["mpirun", "--allow-run-as-root", "--oversubscribe", "-np", "2"]
        start += ["--mca", "odls_base_sigkill_timeout", "3"]
        for name in env or {}:  # Open MPI forwards only the variables it is told to
            start += ["-x", name]
        start += [python, "-m", "pytest"]
    cmd = [*start, "-p", "no:cacheprovider", "-q", "--color=no", *args]
    full_env = {**os.environ, **(env or {})}
    return subprocess.run(
        cmd, cwd=tmp_path, capture_output=True, text=True, timeout=timeout, env=full_env
    )


def _verdicts(out: Path, world: int = 2) -> dict[str, str]:
    merged = merge_junit(sorted(out.glob("junit.rank*.xml")), world_size=world)
    return {t.name: t.verdict for t in merged.tests}


HOSTILE = """
import os, subprocess, time
import pytest
import torch
import torch.distributed as dist
from torch.distributed.distributed_c10d import _world

@pytest.mark.world(2)
def test_a_destroys_the_group(rank):
    dist.barrier()
    dist.destroy_process_group()

@pytest.mark.world(2)
def test_b_group_is_back(rank):
    t = torch.ones(1)
    dist.all_reduce(t)
    assert t.item() == 2

@pytest.mark.world(2)
def test_c_leaks_a_subgroup(rank):
    dist.new_group([0, 1])

@pytest.mark.world(2)
def test_d_no_subgroup_left(rank):
    assert list(_world.pg_map) == [dist.GroupMember.WORLD]

@pytest.mark.world(2)
def test_e_leaves_a_child(rank):
    child = subprocess.Popen(["sleep", "1000"], start_new_session=True)
    with open(os.path.join(os.environ["CHILD_DIR"], f"child{rank}"), "w") as f:
        f.write(str(child.pid))

@pytest.mark.world(2)
def test_f_next_is_healthy(rank):
    t = torch.tensor([rank])
    dist.broadcast(t, src=1)
    assert t.item() == 1

@pytest.mark.world(2)
def test_g_changes_the_process(rank, dist_tmp_path):
    os.environ["LEAKED"] = "1"
    del os.environ["CHILD_DIR"]
    os.chdir(dist_tmp_path)
    torch.set_default_dtype(torch.float64)
    torch.set_grad_enabled(False)

@pytest.mark.world(2)
def test_h_finds_the_process_as_before(rank):
    assert "LEAKED" not in os.environ
    assert os.path.samefile(os.getcwd(), os.environ["CHILD_DIR"])
    assert torch.get_default_dtype() == torch.float32
    assert torch.is_grad_enabled()
"""

NO_NUMPY = "raise ModuleNotFoundError('numpy is hidden: in-place mode must not need it', name='numpy')\n"


@pytest.mark.parametrize("launcher", LAUNCHERS)
def test_hostile_tests_fail_alone_without_numpy(tmp_path, launcher):
    _write(tmp_path, HOSTILE)
    shim = tmp_path / "shim" / "numpy"
    shim.mkdir(parents=True)
    (shim / "__init__.py").write_text(NO_NUMPY)
    pythonpath = os.pathsep.join([str(tmp_path / "shim"), os.environ.get("PYTHONPATH", "")])
    # Only rankgate's plugin: other plugins a host has installed may import numpy
    # themselves (a GPU host's jaxtyping does), which is not what this test is about.
    proc = _launch(
        launcher,
        tmp_path,
        "-p",
        "rankgate.harness.plugin",
        "--junitxml=out/junit.xml",
        "test_suite.py",
        env={
            "PYTHONPATH": pythonpath,
            "CHILD_DIR": str(tmp_path),
            "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1",
        },
    )
    both = proc.stdout + proc.stderr
    assert "Numpy is not available" not in both
    assert list((tmp_path / "out").glob("junit.rank*.xml")), both
    assert _verdicts(tmp_path / "out") == {
        "test_a_destroys_the_group": "failed",
        "test_b_group_is_back": "passed",
        "test_c_leaks_a_subgroup": "passed",
        "test_d_no_subgroup_left": "passed",
        "test_e_leaves_a_child": "failed",
        "test_f_next_is_healthy": "passed",
        "test_g_changes_the_process": "passed",
        "test_h_finds_the_process_as_before": "passed",
    }, both
    assert "rankgate: the test destroyed the default process group" in proc.stdout
    pids = [int(p.read_text()) for p in tmp_path.glob("child*")]
    assert len(pids) == 2
    for pid in pids:
        assert f"they were ended: pid {pid} (sleep 1000), in its own session" in both
        assert not running(pid)
    # Each rank's file says which rank and world it holds: rank 0's alone is incomplete.
    alone = merge_junit([tmp_path / "out" / "junit.rank0.xml"])
    assert alone.world_size == 2 and not alone.ok
    assert alone.tests[0].test_id == "rankgate.merge::missing_ranks"
    assert alone.tests[0].message == "no JUnit file for rank 1 of world 2"


SYS_EXIT = """
import sys
import pytest
import torch.distributed as dist

@pytest.mark.world(2, timeout=60)
def test_exit_on_rank_1(rank):
    if rank == 1:
        sys.exit(3)
    dist.barrier()

@pytest.mark.world(2)
def test_next(rank):
    dist.barrier()
"""


@pytest.mark.parametrize("launcher", LAUNCHERS)
def test_sys_exit_on_one_rank_stops_the_peer_and_reports_the_rest(tmp_path, launcher):
    _write(tmp_path, SYS_EXIT)
    start = time.monotonic()
    proc = _launch(launcher, tmp_path, "--junitxml=out/junit.xml", "test_suite.py")
    seconds = time.monotonic() - start
    assert proc.returncode != 0
    assert seconds < 45, f"rank 0 waited for its test's timeout: {seconds:.0f} s"
    assert _verdicts(tmp_path / "out") == {"test_exit_on_rank_1": "failed", "test_next": "not run"}
    merged = merge_junit(sorted((tmp_path / "out").glob("junit.rank*.xml")))
    (next_test,) = [t for t in merged.tests if t.name == "test_next"]
    assert (
        "not run: rank 0 stopped the run: test_suite.py::test_exit_on_rank_1 was still "
        "running 3 s after rank 1 failed"
    ) in next_test.details
    (exit_test,) = [t for t in merged.tests if t.name == "test_exit_on_rank_1"]
    assert exit_test.message.startswith("rank 1 failed; rank 0 hung; "), exit_test.message
    # Rank 0's terminal names the rank that failed first, with its failure, whichever
    # stop comes first: its own after PEER_GRACE_S, or the launcher's SIGTERM once rank 1
    # has ended.
    summary = proc.stdout.split("short test summary info")[-1]
    assert "FAILED test_suite.py::test_exit_on_rank_1 - rank 1 failed; rank 0 hung" in summary
    failure = proc.stdout.split("_ test_exit_on_rank_1 _")[1]
    assert "--- rank 1: failed ---" in failure and "SystemExit: 3" in failure, failure


OS_EXIT_UNDER_A_COLLECTIVE = """
import os
import pytest
import torch.distributed as dist

@pytest.mark.world(2)
@pytest.mark.xfail(reason="known bad")
def test_known_bad(rank):
    assert False

@pytest.mark.world(2, timeout=60)
def test_dies_on_rank_1(rank):
    if rank == 1:
        os._exit(7)
    dist.barrier()  # fails at once on rank 0: its peer's connection is gone
"""


@pytest.mark.parametrize("launcher", LAUNCHERS)
def test_a_crash_under_the_peers_collective_is_one_failure_on_the_terminal(tmp_path, launcher):
    # Rank 0's own failure (connection reset) and the launcher's SIGTERM come together:
    # the terminal shows one verdict for the test, the one that names the crash.
    _write(tmp_path, OS_EXIT_UNDER_A_COLLECTIVE)
    (tmp_path / "tmp").mkdir()
    # Rank 0 sees rank 1's process gone while it waits for its result, and ends the run
    # itself: under mpirun, waiting for mpirun's SIGTERM left a second before its SIGKILL,
    # too little for rank 0 to write its files and its summary on a GPU node.
    proc = _launch(
        launcher, tmp_path, "--junitxml=out/junit.xml", "test_suite.py",
        env={"TMPDIR": str(tmp_path / "tmp")},
    )  # fmt: skip
    assert proc.returncode != 0
    summary = proc.stdout.split("short test summary info")[-1]
    lines = [line for line in summary.splitlines() if line.startswith(("FAILED", "ERROR"))]
    assert len(lines) == 1, summary
    assert lines[0].startswith("FAILED test_suite.py::test_dies_on_rank_1 - rank 1 crash"), summary
    assert re.search(r"^1 failed, 1 xfailed in ", summary, re.MULTILINE), summary
    assert "FAILED test_suite.py::test_dies_on_rank_1 - rank 1 crashed" in proc.stdout
    # The dead rank left its results file, not its JUnit file: an xfailed test reads
    # xfailed there too (it read "skipped", and merge-junit then saw the ranks disagree).
    assert not (tmp_path / "out" / "junit.rank1.xml").exists()
    merged = merge_junit([tmp_path / "out"], world_size=2)  # the folder: results files too
    assert {t.name: t.verdict for t in merged.tests} == {
        "test_known_bad": "xfailed", "test_dies_on_rank_1": "failed",
    }  # fmt: skip
    # The survivor knows its peer is dead: it does not wait for it, nor leave mpirun's
    # FileStore behind.
    assert not list((tmp_path / "tmp").glob("rankgate-*.store"))


@pytest.mark.parametrize("launcher", LAUNCHERS)
def test_mismatched_collection_shows_the_cause_from_the_rank_log(tmp_path, launcher):
    _write(
        tmp_path,
        """
        import os

        if os.environ.get("RANK", os.environ.get("OMPI_COMM_WORLD_RANK")) == "1":
            import a_module_only_rank_1_lacks  # noqa: F401

        def test_everywhere():
            pass
        """,
    )
    proc = _launch(launcher, tmp_path, "--junitxml=out/junit.xml", "test_suite.py")
    assert proc.returncode != 0
    both = proc.stdout + proc.stderr
    assert "rankgate in-place: ranks collected different tests" in both
    assert "rank 1 could not collect test_suite.py: " in both
    assert "ModuleNotFoundError: No module named 'a_module_only_rank_1_lacks'" in both
    assert f"(its log: {tmp_path / 'out' / 'pytest.rank1.log'})" in both


@pytest.mark.mpi_dist
@pytest.mark.skipif(
    shutil.which("mpirun") is None, reason="mpirun is not installed (apt-get install openmpi-bin)"
)
def test_torchrun_runs_an_inherited_world_test_on_its_own_class(tmp_path):
    _write(
        tmp_path,
        """
        import pytest

        class Base:
            name = "base"

            @pytest.mark.world(2)
            def test_names_its_class(self, rank):
                assert self.name != "base", "the base class ran"

        class TestChild(Base):
            name = "child"
        """,
    )
    proc = run_torchrun_pytest(tmp_path, "-q", "test_suite.py")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "1 passed" in proc.stdout


def test_torchrun_skips_tests_that_launch_runs_of_their_own(tmp_path):
    _write(
        tmp_path,
        """
        import pytest

        @pytest.mark.launches
        def test_starts_torchrun_itself():
            raise AssertionError("ran once per rank")

        @pytest.mark.world(2)
        def test_ranks(rank):
            pass
        """,
    )
    proc = run_torchrun_pytest(tmp_path, "-q", "-rs", "test_suite.py")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "1 passed, 1 skipped" in proc.stdout
    assert (
        "starts pytest sessions or launchers of its own: run it without a launcher "
        "(in place each of the 2 ranks would start them)"
    ) in proc.stdout


@pytest.mark.skipif(
    shutil.which("mpirun") is None, reason="mpirun is not installed (apt-get install openmpi-bin)"
)
def test_a_stale_file_store_cannot_hang_the_next_run(tmp_path):
    # A run killed mid-way leaves its FileStore; the next run with the same store path
    # (the same job and step ids, or RANKGATE_STORE) must not read what it left.
    store = tmp_path / "job.store"
    _write(
        tmp_path,
        """
        import os
        import pytest
        import torch
        import torch.distributed as dist

        @pytest.mark.world(2)
        def test_sum(rank):
            t = torch.ones(1)
            dist.all_reduce(t)
            assert t.item() == 2
            if os.environ.get("DIE_AFTER_TEST"):
                os._exit(0)
        """,
    )
    env = {"RANKGATE_STORE": str(store), "DIE_AFTER_TEST": "1"}
    killed = _launch("mpirun", tmp_path, "test_suite.py", env=env)
    assert store.exists(), killed.stdout + killed.stderr
    start = time.monotonic()
    proc = _launch("mpirun", tmp_path, "test_suite.py", env={"RANKGATE_STORE": str(store)})
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "1 passed" in proc.stdout
    assert time.monotonic() - start < 40
    assert not store.exists(), "the run did not delete its FileStore"
    # A store that cannot be made is named in the error.
    bad = tmp_path / "no-such-dir" / "job.store"
    proc = _launch("mpirun", tmp_path, "test_suite.py", env={"RANKGATE_STORE": str(bad)}, timeout=60)
    assert proc.returncode != 0
    assert (
        f"rankgate in-place: cannot open the FileStore at {bad}: {bad.parent} is not a "
        "writable directory"
    ) in proc.stdout + proc.stderr


TMP_AND_STOP = """
import time
import pytest
import torch.distributed as dist

@pytest.mark.world(2)
def test_a_tmp_path_is_one_directory(rank, tmp_path, dist_tmp_path):
    (tmp_path / f"from{rank}").write_text("saved")
    dist.barrier()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["from0", "from1"]
    assert tmp_path == dist_tmp_path

@pytest.mark.world(2, timeout=4)
def test_b_hangs(rank):
    if rank == 1:
        time.sleep(1000)
    dist.barrier()

@pytest.mark.world(4)
def test_c_needs_four_ranks():
    pass

@pytest.mark.skip(reason="known bug")
def test_d_skipped():
    pass

@pytest.mark.world(2)
def test_e_later(rank):
    pass
"""


def test_torchrun_tmp_path_shared_hang_cause_and_tests_not_run(tmp_path, monkeypatch):
    monkeypatch.setenv(ledger.ENV, "1")  # the cause below is the ledger's, GPUs seen or not
    _write(tmp_path, TMP_AND_STOP)
    proc = run_torchrun_pytest(tmp_path, "-q", "test_suite.py", "--junitxml=out/junit.xml")
    assert proc.returncode != 0
    merged = merge_junit(sorted((tmp_path / "out").glob("junit.rank*.xml")), world_size=2)
    verdicts = {t.name: t for t in merged.tests}
    assert {name: t.verdict for name, t in verdicts.items()} == {
        "test_a_tmp_path_is_one_directory": "passed",
        "test_b_hangs": "failed",
        "test_c_needs_four_ranks": "skipped",  # known before running: keeps its skip
        "test_d_skipped": "skipped",
        "test_e_later": "not run",
    }
    assert verdicts["test_d_skipped"].message == "known bug"
    # with the reason, said once; both ranks time out together, and the first to stop
    # the run is the one every record names
    assert re.fullmatch(
        r"ranks 0, 1 not run \(rank [01] stopped the run: test_suite.py::test_b_hangs did "
        r"not finish within the test's timeout of 4 s\)",
        verdicts["test_e_later"].message,
    ), verdicts["test_e_later"].message
    cause = (
        "likely cause: rank 1 never issued barrier #1 that rank 0 issued at test_suite.py:17; "
        "rank 1 issued no collective (now in user code at test_suite.py:16)"
    )
    assert verdicts["test_b_hangs"].message == f"ranks 0, 1 hung; {cause}"
    assert not merged.ok
    hung = verdicts["test_b_hangs"].results[0].message
    assert hung == (
        "rank 0 hung (did not finish within the test's timeout of 4 s; the rank exited); " + cause
    )


SETUP_HELPERS = """
import os

def mark_rank(rank):
    os.environ["SET_UP_AS_RANK"] = str(rank)

def fail_on_rank_1(rank):
    if rank == 1:
        raise OSError("no such interconnect on rank 1")
"""


def test_torchrun_calls_the_worker_setup_on_every_rank_as_the_pool_does(tmp_path):
    # Before: in place the ini option rankgate_worker_setup was never called, so a test
    # that passed in the pool failed under torchrun (and a bad line went unnoticed).
    _write(
        tmp_path,
        """
        import os
        import pytest

        @pytest.mark.world(2)
        def test_set_up(rank):
            assert os.environ["SET_UP_AS_RANK"] == str(rank)
        """,
    )
    (tmp_path / "rg_setup.py").write_text(SETUP_HELPERS)
    (tmp_path / "pytest.ini").write_text("[pytest]\nrankgate_worker_setup = rg_setup:mark_rank\n")
    assert "1 passed" in run_torchrun_pytest(tmp_path, "-q", "test_suite.py").stdout
    (tmp_path / "pytest.ini").write_text(
        "[pytest]\nrankgate_worker_setup = rg_setup:fail_on_rank_1\n"
    )
    proc = run_torchrun_pytest(tmp_path, "-q", "test_suite.py")
    assert proc.returncode != 0
    assert (
        "ERROR: ini option rankgate_worker_setup = rg_setup:fail_on_rank_1 failed on rank 1:"
        in proc.stderr
    )
    assert "OSError: no such interconnect on rank 1" in proc.stderr
    assert "passed" not in proc.stdout  # no test ran

