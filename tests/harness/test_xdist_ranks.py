"""Pools under pytest-xdist: one rank budget for every worker.

Each world test counts, from /proc, the rank processes of its whole run that are alive
while it runs (every worker's), so the budget is checked from outside the ledger that
keeps it.
"""

from __future__ import annotations

import re
import sys
import textwrap

import pytest

pytestmark = [pytest.mark.dist, pytest.mark.slow]  # pytest runs of their own

COUNT_RANKS = """
import os
from pathlib import Path

import pytest
import torch.distributed as dist


def _parent_and_state(pid):
    stat = Path(f"/proc/{pid}/stat").read_bytes()
    fields = stat[stat.rindex(b")") + 2:].split()
    return int(fields[1]), fields[0]


def pytest_sessionstart(session):
    # The run's fork server forks xdist's workers too: each says it is one.
    if hasattr(session.config, "workerinput"):
        workers = session.config._tmp_path_factory.getbasetemp().parent / "workers"
        workers.mkdir(exist_ok=True)
        (workers / str(os.getpid())).touch()


def fork_server():
    # This rank's parent: the server that forked it (the run's one, if the run has one).
    return os.getppid()


def live_ranks(counts):
    # The live processes the run's fork server forked, less xdist's workers (which
    # listed themselves beside ``counts``): every worker's ranks.
    workers = {int(p.name) for p in (counts.parent / "workers").iterdir()}
    server, found = fork_server(), 0
    for pid in map(int, filter(str.isdigit, os.listdir("/proc"))):
        try:
            parent, state = _parent_and_state(pid)
        except (OSError, ValueError):
            continue
        found += parent == server and state != b"Z" and pid not in workers
    return found


def record(out, name, rank, world):
    dist.barrier()  # every rank of this world is up
    if rank == 0:
        (out / name).write_text(f"{world} {live_ranks(out)}")
    dist.barrier()


@pytest.fixture
def counts(tmp_path_factory):
    out = tmp_path_factory.getbasetemp().parent / "counts"
    out.mkdir(exist_ok=True)
    return out
"""


def _counts(base) -> dict[str, tuple[int, int]]:
    """Each world test's (world, live ranks of the run while it ran)."""
    return {f.name: tuple(map(int, f.read_text().split())) for f in (base / "counts").iterdir()}


def _workers_by_test(result) -> dict[str, str]:
    return dict(
        (m.group(2), m.group(1))
        for m in re.finditer(r"\[(gw\d)\] .*?PASSED \S+::(\S+)", result.stdout.str())
    )


def test_each_world_size_runs_on_one_worker_and_the_ranks_stay_in_the_budget(pytester):
    pytester.makepyfile(
        conftest=COUNT_RANKS,
        test_mix=textwrap.dedent(
            """
            import pytest
            from conftest import record

            @pytest.mark.world(1)
            @pytest.mark.parametrize("i", range(3))
            def test_w1(i, rank, counts):
                record(counts, f"w1-{i}", rank, 1)

            @pytest.mark.world(2)
            @pytest.mark.parametrize("i", range(3))
            def test_w2(i, rank, counts):
                record(counts, f"w2-{i}", rank, 2)

            @pytest.mark.world(3)
            @pytest.mark.parametrize("i", range(2))
            def test_w3(i, rank, counts):
                record(counts, f"w3-{i}", rank, 3)

            @pytest.mark.parametrize("i", range(4))
            def test_plain(i):
                pass
            """
        ),
    )
    base = pytester.path / "bt"
    result = pytester.runpytest_subprocess(
        "-p", "no:cacheprovider", "-p", "no:randomly", "-v", "-n", "2",
        "--rankgate-max-ranks=2", "--basetemp", str(base), timeout=300,
    )  # fmt: skip
    result.assert_outcomes(passed=12)
    result.stdout.fnmatch_lines(
        [
            "rankgate: -n 2: the workers' pools hold at most 2 rank processes at once*",
            "rankgate: the workers' pools held at most [123] rank processes at once (budget 2)",
        ]
    )
    counts = _counts(base)
    assert len(counts) == 8
    for test, (world, live) in counts.items():
        assert world <= live <= max(2, world), (test, world, live)
    # A scheduler sending each world size to one worker is not installed: it left a run of
    # two world(2) tests with both workers idle. The budget holds under xdist's own order.
    assert set(_workers_by_test(result).values()) <= {"gw0", "gw1"}


def test_a_worker_waiting_for_ranks_gets_another_workers_idle_pool(pytester):
    # loadfile sends each file to one worker: both need a world(2) pool, and a budget
    # of 2 ranks holds one. The first worker's last test is held back by xdist until the
    # run ends, so its pool is given back while idle, or the run would never end.
    body = """
        import pytest
        from conftest import record

        @pytest.mark.world(2)
        @pytest.mark.parametrize("i", range(3))
        def test_w2(i, rank, counts):
            record(counts, f"{__name__}-{i}", rank, 2)
        """
    pytester.makepyfile(
        conftest=COUNT_RANKS,
        test_one=textwrap.dedent(body),
        test_two=textwrap.dedent(body.replace("test_w2", "test_w2_again")),
    )
    base = pytester.path / "bt"
    result = pytester.runpytest_subprocess(
        "-p", "no:cacheprovider", "-p", "no:randomly", "-v", "-n", "2", "--dist", "loadfile",
        "--rankgate-max-ranks=2", "--basetemp", str(base), timeout=300,
    )  # fmt: skip
    result.assert_outcomes(passed=6)
    counts = _counts(base)
    assert len(counts) == 6
    assert {live for _, live in counts.values()} == {2}, counts
    workers = _workers_by_test(result)
    assert len(set(workers.values())) == 2, workers  # both workers ran world(2) tests


BESIDE_THE_OTHER = """
import time

import pytest
import torch.distributed as dist
from conftest import fork_server, live_ranks

ME, OTHER = "{me}", "{other}"


def _meet(marks, step):
    # Say this world reached ``step``; wait until the other file's world did too.
    (marks / f"{{step}}-{{ME}}").touch()
    deadline = time.monotonic() + 240  # one CPU for both workers, on a loaded machine
    while not (marks / f"{{step}}-{{OTHER}}").exists():
        assert time.monotonic() < deadline, f"{{OTHER}}'s world(2) never ran beside this one"
        time.sleep(0.05)


@pytest.mark.world(2)
def test_beside_the_other_world(rank, counts):
    marks = counts.parent / "marks"
    marks.mkdir(exist_ok=True)
    dist.barrier()
    if rank == 0:
        _meet(marks, "up")
        (counts / ME).write_text(f"2 {{live_ranks(counts)}}")
        (counts.parent / f"server-{{ME}}").write_text(str(fork_server()))
        _meet(marks, "counted")  # neither world ends before both counted
    dist.barrier()
"""

ONE_CPU_PYTEST = (
    "import os, sys; os.sched_setaffinity(0, [min(os.sched_getaffinity(0))]); "
    "import pytest; sys.exit(pytest.main(sys.argv[1:]))"
)


def test_the_default_budget_is_eight_ranks_per_cpu(pytester):
    # The run may use one CPU: the default budget is 8 ranks, so two workers' world(2)
    # pools are alive at once (a budget of one rank per CPU held them apart: each test
    # waits for the other file's world, and would time out).
    pytester.makepyfile(
        conftest=COUNT_RANKS,
        test_one=BESIDE_THE_OTHER.format(me="one", other="two"),
        test_two=BESIDE_THE_OTHER.format(me="two", other="one"),
    )
    base = pytester.path / "bt"
    result = pytester.run(
        sys.executable, "-c", ONE_CPU_PYTEST, "-p", "no:cacheprovider", "-p", "no:randomly",
        "-v", "-n", "2", "--dist", "loadfile", "--basetemp", str(base), timeout=600,
    )  # fmt: skip
    result.assert_outcomes(passed=2)
    result.stdout.fnmatch_lines(
        [
            "rankgate: -n 2: the workers' pools hold at most 8 rank processes at once "
            "(8 per CPU this run may use, 1 CPU); a larger world runs alone*",
            "rankgate: the workers' pools held at most 4 rank processes at once (budget 8)",
        ]
    )
    # Both worlds were alive while each counted: 4 ranks, each worker's 2 (the two tests
    # wait for each other, so they passed on two workers at once).
    assert _counts(base) == {"one": (2, 4), "two": (2, 4)}
    # Both workers' ranks were forked by the run's one fork server (each worker had its
    # own before, each importing torch).
    assert len({(base / f"server-{me}").read_text() for me in ("one", "two")}) == 1


LEFT_AT_THE_END = """
import os
import tempfile
from pathlib import Path

import pytest


@pytest.hookimpl(trylast=True)
def pytest_sessionfinish(session):
    # Where an end-of-run check (the project's leftovers plugin) looks: the controller's
    # temp dir, after every other plugin's sessionfinish.
    if not hasattr(session.config, "workerinput"):
        left = sorted(p.name for p in Path(tempfile.gettempdir()).glob("rankgate-*"))
        Path(os.environ["LEFT_FILE"]).write_text(repr(left))
"""


def test_the_fork_server_and_its_folder_are_gone_before_the_end_of_run_checks(
    pytester, monkeypatch
):
    # Under -n the controller owns the run's fork server: it ended it only when pytest
    # unconfigured, after the checks of what the run left behind (a GPU host's run of the
    # project's own tests failed on "rankgate-fs-*" left in its temp dir).
    private = pytester.path / "private-tmp"
    private.mkdir()
    monkeypatch.setenv("TMPDIR", str(private))
    monkeypatch.setenv("LEFT_FILE", str(pytester.path / "left.txt"))
    pytester.makeconftest(LEFT_AT_THE_END)
    pytester.makepyfile(
        test_w="import pytest\n\n@pytest.mark.world(2)\ndef test_w(rank):\n    pass\n"
    )
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-n", "2", timeout=300)
    result.assert_outcomes(passed=1)
    assert (pytester.path / "left.txt").read_text() == "[]"


SERVER_AT_WORKER_START = """
import json, os
from pathlib import Path

def pytest_sessionstart(session):
    given = getattr(session.config, "workerinput", {}).get("rankgate_fork_server")
    if given:  # a worker, before it collects: has the run's server been started?
        started = (Path(given[0]) / "forkserver.json").exists()
        Path(os.environ["SEEN_DIR"], os.environ["PYTEST_XDIST_WORKER"]).write_text(
            json.dumps(started)
        )
"""


def test_the_controller_starts_the_fork_server_before_any_worker_collects(
    pytester, monkeypatch
):
    # The server's import of torch runs while the workers start and collect; a worker that
    # started it after its collection kept every world test waiting for that import.
    seen = pytester.path / "seen"
    seen.mkdir()
    monkeypatch.setenv("SEEN_DIR", str(seen))
    pytester.makeconftest(SERVER_AT_WORKER_START)
    pytester.makepyfile(
        test_w="import pytest\n\n@pytest.mark.world(2)\ndef test_w(rank):\n    pass\n"
    )
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-n", "2", timeout=300)
    result.assert_outcomes(passed=1)
    assert {f.name: f.read_text() for f in seen.iterdir()} == {"gw0": "true", "gw1": "true"}
