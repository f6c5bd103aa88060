"""Infrastructure failures are errors with their cause; nothing is left running."""

from __future__ import annotations

import ast
import os
import shutil
import tempfile
import time
from pathlib import Path

import pytest

from rankgate.harness.leaks import running

pytestmark = pytest.mark.dist

HELPERS = """
import os, time

def fail_on_rank_1(rank):
    with open(f"start-attempt-{rank}-{os.getpid()}", "w"):
        pass
    if rank == 1:
        raise OSError("no such interconnect on rank 1")

def slow_rank_1(rank):
    if rank == 1:
        time.sleep(60)
"""

TEST = """
import pytest

@pytest.mark.world(2, backend="gloo")
def test_needs_pool():
    pass

def test_plain():
    pass
"""


def test_pool_that_cannot_start_is_an_error_with_the_cause(inner):
    inner.pytester.makepyfile(rg_helpers=HELPERS)
    result = inner(TEST, ini="rankgate_worker_setup = rg_helpers:fail_on_rank_1")
    result.assert_outcomes(passed=1, errors=1)
    result.stdout.fnmatch_lines(
        [
            "*ERROR at setup of test_needs_pool*",
            "rankgate: infrastructure error: could not start a pool of world 2 with backend gloo: rank 1 failed to start:",
            "*OSError: no such interconnect on rank 1",
        ]
    )


def test_pool_that_cannot_start_is_not_retried_for_later_tests(inner):
    inner.pytester.makepyfile(rg_helpers=HELPERS)
    result = inner(
        """
        import pytest

        @pytest.mark.world(2, backend="gloo")
        @pytest.mark.parametrize("i", range(3))
        def test_needs_pool(i):
            pass

        def test_plain():
            pass
        """,
        ini="rankgate_worker_setup = rg_helpers:fail_on_rank_1",
    )
    result.assert_outcomes(passed=1, errors=3)
    cause = (
        "rankgate: infrastructure error: could not start a pool of world 2 with backend gloo: "
        "rank 1 failed to start:"
    )
    for i in (1, 2):
        result.stdout.fnmatch_lines(
            [
                f"*ERROR at setup of test_needs_pool[[]{i}]*",
                cause,
                "*OSError: no such interconnect on rank 1",
                "(not retried: this pool already failed to start earlier in this session)",
            ]
        )
    # One attempt to start the pool, not one per test: rank 1 (which fails in its set-up)
    # started once. Rank 0 may be torn down before it reaches its set-up, so 0 or 1 there.
    assert len(list(inner.pytester.path.glob("start-attempt-1-*"))) == 1
    assert len(list(inner.pytester.path.glob("start-attempt-0-*"))) <= 1


def test_rendezvous_that_times_out_is_an_error_naming_the_ranks(inner):
    inner.pytester.makepyfile(rg_helpers=HELPERS)
    start = time.monotonic()
    result = inner(
        TEST,
        ini="rankgate_worker_setup = rg_helpers:slow_rank_1\nrankgate_start_timeout = 3",
    )
    result.assert_outcomes(passed=1, errors=1)
    result.stdout.fnmatch_lines(
        [
            "rankgate: infrastructure error: could not start a pool of world 2 with backend gloo: "
            "ranks [[]0, 1] did not finish rendezvous within 3 s (rankgate_start_timeout)*"
        ]
    )
    assert time.monotonic() - start < 30


@pytest.mark.slow  # pytest runs of its own
def test_no_rank_process_is_left_after_the_session(inner):
    # Pools of two sizes, one of them killed by a hang and respawned.
    result = inner(
        """
        import os, time
        import pytest

        def record(path, rank):
            (path.parent / f"pid-{os.getpid()}").write_text("")

        @pytest.mark.world(2)
        def test_two(rank, dist_tmp_path):
            record(dist_tmp_path, rank)

        @pytest.mark.world(3, timeout=2)
        def test_three_hangs(rank, dist_tmp_path):
            record(dist_tmp_path, rank)
            time.sleep(100)

        @pytest.mark.world(3)
        def test_three_again(rank, dist_tmp_path):
            record(dist_tmp_path, rank)
        """,
        "--basetemp",
        str(inner.pytester.path / "bt"),
        subprocess=True,
    )
    result.assert_outcomes(passed=2, failed=1)
    pids = [int(p.name[4:]) for p in (inner.pytester.path / "bt").glob("pid-*")]
    assert len(pids) == 2 + 3 + 3
    deadline = time.monotonic() + 10
    while any(running(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert [p for p in pids if running(p)] == []


@pytest.mark.slow  # pytest runs of its own
def test_xdist_workers_get_disjoint_pool_directories(inner):
    seen = inner.env_seen_per_xdist_worker("world(2)", "RANKGATE_POOL_DIR")
    assert sorted(seen) == ["gw0", "gw1"]
    assert seen["gw0"].isdisjoint(seen["gw1"]), seen


def test_rank_killed_between_tests_gets_a_fresh_pool(inner):
    result = inner(
        """
        import os, signal, time
        import pytest
        import torch.distributed as dist

        @pytest.mark.world(2)
        def test_a(rank, dist_tmp_path):
            (dist_tmp_path.parent / f"a{rank}").write_text(str(os.getpid()))

        def test_kill_rank_1_while_idle(tmp_path):
            pid = int((tmp_path.parent / "a1").read_text())
            os.kill(pid, signal.SIGKILL)
            time.sleep(0.5)

        @pytest.mark.world(2)
        def test_c(rank, dist_tmp_path):
            dist.barrier()
            (dist_tmp_path.parent / f"c{rank}").write_text(str(os.getpid()))
        """,
        "--basetemp=bt",
    )
    result.assert_outcomes(passed=3)
    base = inner.pytester.path / "bt"
    assert {(base / f"a{r}").read_text() for r in (0, 1)}.isdisjoint(
        {(base / f"c{r}").read_text() for r in (0, 1)}
    )


@pytest.mark.slow  # pytest runs of its own
def test_ranks_exit_when_the_controller_is_killed(pytester, request):
    import signal
    import subprocess
    import sys

    pytester.makepyfile(
        test_inner="""
        import os, time
        import pytest

        @pytest.mark.world(2, timeout=600)
        def test_hangs(rank, dist_tmp_path):
            (dist_tmp_path.parent / f"pid-{os.getpid()}").write_text("")
            time.sleep(600)
        """
    )
    pytester.makeini("[pytest]\n")
    base = pytester.path / "bt"
    # The killed controller cannot remove its pools' folder: it gets a temp dir of its
    # own, removed below (short: the pool's forkserver socket lives there).
    temp = Path(tempfile.mkdtemp(prefix="ctl-"))
    # Cold, not from the warm ``python``: there the killed client's server would kill the
    # controller's whole session, ranks included, and the ranks' own exit would go unseen.
    controller = subprocess.Popen(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", f"--basetemp={base}"],
        cwd=pytester.path,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env={**os.environ, "TMPDIR": str(temp)},
    )
    request.addfinalizer(lambda: shutil.rmtree(temp, ignore_errors=True))
    deadline = time.monotonic() + 60
    while len(list(base.glob("pid-*"))) < 2 and time.monotonic() < deadline:
        time.sleep(0.2)
    pids = [int(p.name[4:]) for p in base.glob("pid-*")]
    assert len(pids) == 2
    controller.send_signal(signal.SIGKILL)
    controller.wait()
    deadline = time.monotonic() + 15
    while any(running(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert [p for p in pids if running(p)] == []


@pytest.mark.parametrize(
    ("line", "message"),
    [
        (
            "rg_helpers",
            "ERROR: ini option rankgate_worker_setup = 'rg_helpers' is not module:function*",
        ),
        (
            "rg_helperz:fail_on_rank_1",
            "*rankgate_worker_setup = rg_helperz:fail_on_rank_1: ModuleNotFoundError: No module named 'rg_helperz'",
        ),
        (
            "rg_helpers:fail_on_rank_one",
            "*rankgate_worker_setup = rg_helpers:fail_on_rank_one: AttributeError: module 'rg_helpers' has no attribute 'fail_on_rank_one'",
        ),
    ],
    ids=["not-module-function", "no-module", "no-function"],
)
def test_a_worker_setup_that_cannot_be_called_names_the_ini_option(inner, line, message):
    # Before: a line without ":" was imported as a module on each rank, and every wrong
    # line was a rank's traceback that never named the option it came from.
    inner.pytester.makepyfile(rg_helpers=HELPERS)
    result = inner(TEST, ini=f"rankgate_worker_setup = {line}")
    if ":" not in line:  # a usage error before any test
        assert result.ret == pytest.ExitCode.USAGE_ERROR
        result.stderr.fnmatch_lines([message])
        return
    result.assert_outcomes(passed=1, errors=1)
    result.stdout.fnmatch_lines([message])


PLUGINS_SEEN = """
def pytest_sessionstart(session):
    names = sorted(
        name for name, plugin in session.config.pluginmanager.list_name_plugin()
        if plugin is not None and name.startswith("rankgate")
    )
    print("rankgate plugins:", names)
"""


# Registered only beside the plugin each one bridges (pytest-timeout, hypothesis,
# pytest-rerunfailures, pytest-cov): which of them a machine shows depends on what it has.
BRIDGES = {
    "rankgate-timeout-bridge", "rankgate-hypothesis-bridge", "rankgate-rerun-bridge",
    "rankgate-coverage-ranks",
}  # fmt: skip
CORE = ["rankgate", "rankgate-harness", "rankgate-interrupt", "rankgate-pools", "rankgate-reruns",
        "rankgate-shards"]  # fmt: skip


@pytest.mark.parametrize(
    ("blocked", "core"),
    [
        ((), [*CORE, "rankgate-outcomes", "rankgate-tracing"]),
        (("-p", "no:rankgate"), []),  # every part of rankgate off, as the flag says
        (("-p", "no:rankgate-tracing"), CORE),  # the outcomes ride on tracing
    ],
    ids=["none-blocked", "no-rankgate", "no-rankgate-tracing"],
)
def test_blocking_rankgate_turns_every_rankgate_plugin_off(pytester, blocked, core):
    pytester.makeconftest(PLUGINS_SEEN)
    pytester.makepyfile(test_x="def test_x():\n    pass\n")
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-s", *blocked)
    assert result.ret == 0
    (line,) = [x for x in result.stdout.lines if x.startswith("rankgate plugins: ")]
    seen = ast.literal_eval(line.removeprefix("rankgate plugins: "))
    assert sorted(set(seen) - BRIDGES) == sorted(core), seen
    if not core:  # -p no:rankgate: the bridges go with the rest
        assert seen == []
    header = next(line for line in result.stdout.lines if line.startswith("plugins:"))
    assert ("rankgate-" in header) == (not blocked or blocked[1] != "no:rankgate"), header


FORKS_A_CHILD = """
import multiprocessing
import signal
import time


def test_a_forked_child_ends_by_the_signal_it_gets():
    child = multiprocessing.get_context("fork").Process(target=time.sleep, args=(60,))
    child.start()
    time.sleep(0.5)
    child.terminate()  # SIGTERM, as torch's spawn stops the ranks left when one failed
    child.join(30)
    assert child.exitcode == -signal.SIGTERM
"""


def test_a_process_forked_from_pytest_does_not_run_rankgates_stop_handler(pytester):
    # The handler ends pytest's session on SIGTERM; a child a test (or a project's own
    # launcher) forks inherits it, and must die of the signal, not raise pytest.exit.
    pytester.makepyfile(test_fork=FORKS_A_CHILD)
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider")
    result.assert_outcomes(passed=1)
    assert "rankgate: received SIGTERM" not in result.stdout.str() + result.stderr.str()
