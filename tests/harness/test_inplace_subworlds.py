"""One launch runs every test (issue 61): under torchrun with 4 ranks, world(1), (2), (3)
and (4) tests run in sub-worlds of the launched ranks, world(8) is skipped with the
reason, each plain test runs on one rank, and merge-junit names the global ranks that
ran each test. A wrong value, a hang and a crash in one sub-world are red, naming the
right global ranks, while the other sub-worlds' tests keep their verdicts."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from rankgate.launch.launchers import launcher_argv
from tests.once import once_per_run
from tests.warmstart import WARM_PYTHON

# slow: starts torchrun with 4 ranks, and pytest on every rank
pytestmark = [pytest.mark.dist, pytest.mark.torch_dist, pytest.mark.slow]

NOTE = """\
import json
import os
import torch.distributed as dist


# One node: the global rank is the launcher's local one, read at import (in a sub-world
# RANK and LOCAL_RANK count its own ranks).
LOCAL = ("LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_RANK", "SLURM_LOCALID")  # torchrun, mpirun, srun
LAUNCHED_AS = next(os.environ[name] for name in LOCAL if name in os.environ)


def note(name, **values):
    # One file per run of a test on one rank: counts how often and where it ran.
    folder = os.environ["SUBWORLD_NOTES"]
    rank = LAUNCHED_AS
    variables = {name: os.environ.get(name) for name in ("RANK", "WORLD_SIZE")}
    record = dict(name=name, global_rank=int(rank), variables=variables, **values)
    path = os.path.join(folder, f"{name}.{rank}.{os.urandom(4).hex()}")
    with open(path, "w") as f:
        json.dump(record, f)
"""

SUITE = """\
import os
import time

import pytest
import torch
import torch.distributed as dist

from note import note


def seen(name, rank, world_size, **extra):
    assert dist.get_world_size() == world_size
    assert dist.get_rank() == rank
    note(name, rank=rank, world=dist.get_world_size(), **extra)


@pytest.mark.world(4)
def test_w4(rank, world_size):
    t = torch.ones(1)
    dist.all_reduce(t)
    assert t.item() == 4
    seen("w4", rank, world_size)


@pytest.mark.world(3)
def test_w3(rank, world_size, dist_tmp_path):
    t = torch.ones(1)
    dist.all_reduce(t)  # no group=: the sub-world's
    assert t.item() == 3
    (dist_tmp_path / str(rank)).write_text("")
    dist.barrier()
    seen("w3", rank, world_size, files=sorted(p.name for p in dist_tmp_path.iterdir()))


@pytest.mark.world(2)
@pytest.mark.parametrize("i", [0, 1, 2, 3])
def test_w2(rank, world_size, tmp_path, i):
    t = torch.tensor([float(rank)])
    dist.all_reduce(t)
    (tmp_path / str(rank)).write_text("")
    dist.barrier()
    seen(f"w2_{i}", rank, world_size, files=sorted(p.name for p in tmp_path.iterdir()))
    if i == 1 and rank == 1:  # the second world(2) test runs on ranks 2, 3: rank 3 is wrong
        t += 100
    assert t.item() == 1.0


@pytest.mark.world(1)
@pytest.mark.parametrize("i", [0, 1])
def test_w1(rank, world_size, i):
    seen(f"w1_{i}", rank, world_size)


@pytest.mark.world(8)
def test_w8():
    note("w8")


@pytest.mark.parametrize("i", range(6))
def test_plain(i):
    note(f"plain_{i}", group=dist.is_initialized())


@pytest.mark.every_rank
def test_on_every_rank(world_size):
    note("every", world=dist.get_world_size(), world_size=world_size)
"""

HANG = """\
import time

import pytest
import torch
import torch.distributed as dist

from note import note


@pytest.mark.world(2)
@pytest.mark.parametrize("i", [0, 1, 2])
def test_w2(rank, i):
    t = torch.ones(1)
    if i == 1 and rank == 1:  # ranks 2, 3: rank 3 skips the collective, rank 2 hangs
        return
    dist.all_reduce(t)
    note(f"w2_{i}")


@pytest.mark.parametrize("i", range(4))
def test_plain(i):
    note(f"plain_{i}")
"""

CRASH = """\
import os
import time

import pytest
import torch
import torch.distributed as dist

from note import note


@pytest.mark.world(4)
def test_w4():
    t = torch.ones(1)
    dist.all_reduce(t)
    note("w4")


@pytest.mark.world(3)
def test_w3_crash(rank):
    time.sleep(2)  # rank 3, idle in this phase, runs its plain test meanwhile
    if rank == 1:
        os._exit(1)
    t = torch.ones(1)
    dist.all_reduce(t)


@pytest.mark.parametrize("i", range(4))
def test_plain(i):
    note(f"plain_{i}")
"""


PLAIN_COLLECTIVE = """\
import pytest
import torch
import torch.distributed as dist


def test_uses_the_group():  # needs @pytest.mark.every_rank
    t = torch.ones(1)
    dist.all_reduce(t)


def test_uses_the_group_too():  # at the same time on the other rank: they must not meet
    t = torch.ones(1)
    dist.all_reduce(t)


def test_alone():
    assert not dist.is_initialized()


@pytest.mark.world(2)
def test_w2_after_plain_ones(rank):  # the plan runs it before them; the group is there
    t = torch.ones(1)
    dist.all_reduce(t)
    assert t.item() == 2


@pytest.mark.world(1)
def test_w1(rank):
    t = torch.ones(1)
    dist.all_reduce(t)
    assert dist.get_world_size() == 1


@pytest.mark.every_rank
def test_every_rank(world_size):
    assert dist.get_world_size() == world_size == 2
"""


def launch(
    folder: Path,
    suite: str,
    timeout_s: int = 60,
    ranks: int = 4,
    launcher="torchrun",
    pytest_args: tuple[str, ...] = (),
):
    """``launcher`` (torchrun or mpirun) with ``ranks`` ranks on ``suite`` (and pytest's
    ``pytest_args``), then merge-junit: (the launcher's run, merged json, notes)."""
    folder.mkdir()
    (folder / "test_suite.py").write_text(suite)
    (folder / "note.py").write_text(NOTE)
    (folder / "pytest.ini").write_text("[pytest]\n")
    notes = folder / "notes"
    notes.mkdir()
    env = {**os.environ, "SUBWORLD_NOTES": str(notes), "PYTHONPATH": _pythonpath(folder)}
    python = WARM_PYTHON.executable()
    if launcher == "torchrun":
        start = launcher_argv("torchrun", ranks, python=python)
    else:  # Open MPI forwards only the variables it is told to; 3 s to write at a stop
        start = ["mpirun", "--allow-run-as-root", "--oversubscribe", "-np", str(ranks),
                 "--mca", "odls_base_sigkill_timeout", "3",
                 "-x", "SUBWORLD_NOTES", "-x", "PYTHONPATH", python]  # fmt: skip
    cmd = [
        *start, "-m", "pytest", "-p", "no:cacheprovider", "-p", "no:randomly", "-q",
        "--color=no", f"--rankgate-timeout={timeout_s}", "--junitxml=out/junit.xml",
        *pytest_args, "test_suite.py",
    ]  # fmt: skip
    proc = subprocess.run(cmd, cwd=folder, env=env, capture_output=True, text=True, timeout=300)
    merge = [sys.executable, "-m", "rankgate.cli", "merge-junit", "--json", "out"]
    merged = subprocess.run(merge, cwd=folder, env=env, capture_output=True, text=True, timeout=60)
    assert merged.stdout, merged.stderr + proc.stdout[-3000:] + proc.stderr[-3000:]
    records = [json.loads(p.read_text()) for p in sorted(notes.iterdir())]
    return proc, merged, json.loads(merged.stdout), records


def _pythonpath(folder: Path) -> str:
    return os.pathsep.join(p for p in (str(folder), os.environ.get("PYTHONPATH", "")) if p)


def by_id(report: dict) -> dict[str, dict]:
    return {t["id"].split("::", 1)[1]: t for t in report["tests"]}


# Each planted run is launched once per run and shared by the xdist workers (tests/once.py);
# its folder is fixed first, for the tests that read it.
@pytest.fixture(scope="module")
def everything_folder(request, tmp_path_factory):
    return once_per_run(request, lambda: tmp_path_factory.mktemp("subworlds") / "all")


@pytest.fixture(scope="module")
def everything(request, everything_folder):
    return once_per_run(request, lambda: launch(everything_folder, SUITE))


@pytest.fixture(scope="module")
def hang_folder(request, tmp_path_factory):
    return once_per_run(request, lambda: tmp_path_factory.mktemp("subworlds") / "hang")


@pytest.fixture(scope="module")
def hang_run(request, hang_folder):
    return once_per_run(request, lambda: launch(hang_folder, HANG, timeout_s=8))


@pytest.fixture(scope="module")
def crash_run(request, tmp_path_factory):
    return once_per_run(
        request, lambda: launch(tmp_path_factory.mktemp("subworlds") / "crash", CRASH)
    )


def test_every_test_runs_but_world_8(everything):
    proc, merged, report, _ = everything
    tests = by_id(report)
    assert tests["test_w8"]["verdict"] == "skipped"
    assert tests["test_w8"]["message"] == (
        "world(8) needs 8 ranks; this run has 4 ranks launched by torchrun"
    )
    verdicts = {name: t["verdict"] for name, t in tests.items() if name != "test_w8"}
    assert verdicts == {**dict.fromkeys(verdicts, "passed"), "test_w2[1]": "failed"}
    assert len(verdicts) == 15, verdicts
    assert report["counts"]["tests"] == 16
    assert proc.returncode == 1 and merged.returncode == 1


def test_each_test_names_the_global_ranks_that_ran_it(everything):
    tests = by_id(everything[2])
    ranks = {name: sorted(int(r) for r in t["ranks"]) for name, t in tests.items()}
    assert ranks["test_w4"] == [0, 1, 2, 3]
    assert ranks["test_w3"] == [0, 1, 2]
    assert ranks["test_w2[0]"] == ranks["test_w2[2]"] == [0, 1]
    assert ranks["test_w2[1]"] == ranks["test_w2[3]"] == [2, 3]
    assert ranks["test_w1[0]"] == [0] and ranks["test_w1[1]"] == [1]
    assert ranks["test_on_every_rank"] == [0, 1, 2, 3]
    # dealt round-robin in the run's order: world(8)'s skip first, then the plain tests
    assert ranks["test_w8"] == [0]
    assert [ranks[f"test_plain[{i}]"] for i in range(6)] == [[1], [2], [3], [0], [1], [2]]


def test_the_body_sees_its_sub_world(everything):
    records = everything[3]
    seen = {(r["name"], r["global_rank"]): r for r in records if "world" in r}
    for name, world, first in [("w4", 4, 0), ("w3", 3, 0), ("w2_0", 2, 0), ("w2_1", 2, 2),
                               ("w1_0", 1, 0), ("w1_1", 1, 1)]:  # fmt: skip
        for local in range(world):
            record = seen[(name, first + local)]
            assert (record["rank"], record["world"]) == (local, world), record
            # as the pool's ranks see them (DeepSpeed checks WORLD_SIZE against the group)
            assert record["variables"] == {"RANK": str(local), "WORLD_SIZE": str(world)}
    # dist_tmp_path and a world test's tmp_path: one directory per sub-world
    assert seen[("w3", 2)]["files"] == ["0", "1", "2"]
    assert seen[("w2_1", 3)]["files"] == seen[("w2_0", 0)]["files"] == ["0", "1"]


def test_plain_tests_run_once_and_every_rank_ones_on_every_rank(everything):
    names = [r["name"] for r in everything[3]]
    assert all(names.count(f"plain_{i}") == 1 for i in range(6)), names
    every = [r for r in everything[3] if r["name"] == "every"]
    assert sorted(r["global_rank"] for r in every) == [0, 1, 2, 3]
    assert {(r["world"], r["world_size"]) for r in every} == {(4, 4)}  # the launcher's group
    assert "w8" not in names


def test_plain_tests_see_no_process_group(everything):
    # As in the pool's controller: no sub-world's group is left for them to meet in.
    plain = [r for r in everything[3] if r["name"].startswith("plain_")]
    assert len(plain) == 6 and not any(r["group"] for r in plain), plain
    # and the launcher's RANK and WORLD_SIZE
    assert all(
        r["variables"] == {"RANK": str(r["global_rank"]), "WORLD_SIZE": "4"} for r in plain
    ), plain


def test_a_wrong_value_names_its_global_rank(everything):
    test = by_id(everything[2])["test_w2[1]"]
    assert test["ranks"] == {"2": "passed", "3": "failed"}
    assert test["message"].startswith("rank 3 failed; rank 2 passed"), test["message"]


def test_a_sub_world_tests_reproduce_line_names_its_world_as_the_pools_does(
    everything, everything_folder, auto_backend_for
):
    # test_w2[1] ran on ranks 2 and 3 of 4: its world is 2, as the pool's line says; its
    # backend is the launch's group, auto for 4 ranks (cpu:gloo,cuda:nccl on 4 GPUs).
    junit = everything_folder / "out" / "junit.rank3.xml"
    (line,) = {x for x in junit.read_text().splitlines() if x.startswith("reproduce:")}
    assert line.startswith(
        "reproduce: torchrun --standalone --nproc-per-node=4 -m pytest -p no:cacheprovider "
        "-p no:randomly 'test_suite.py::test_w2[1]' --rankgate-seed=0 --rankgate-timeout=60"
        f"  # world=2 backend={auto_backend_for(4)} seed="
    ), line


def test_a_hang_in_one_sub_world_leaves_the_others_verdicts(hang_run):
    proc, merged, report, _records = hang_run
    tests = by_id(report)
    hung = tests["test_w2[1]"]
    assert hung["verdict"] == "failed"
    assert hung["ranks"]["2"] == "hung", hung
    assert set(hung["ranks"]) == {"2", "3"}
    assert tests["test_w2[0]"]["verdict"] == tests["test_w2[2]"]["verdict"] == "passed"
    assert (
        tests["test_w2[0]"]["ranks"]
        == tests["test_w2[2]"]["ranks"]
        == {
            "0": "passed",
            "1": "passed",
        }
    )
    # ranks 0 and 1 ran their plain tests; ranks 2 and 3 stopped: theirs are not run, saying why
    assert tests["test_plain[0]"]["verdict"] == tests["test_plain[1]"]["verdict"] == "passed"
    for i in (2, 3):
        plain = tests[f"test_plain[{i}]"]
        assert plain["verdict"] == "not run", plain
        assert "stopped the run" in plain["message"], plain
    assert report["counts"]["tests"] == 7
    assert proc.returncode != 0 and merged.returncode == 1
    # Rank 0 had finished its share: its terminal still says the run was stopped.
    assert re.search(
        r"^rankgate: rank [23] stopped the run: test_suite.py::test_w2\[1\] ", proc.stdout, re.M
    ), proc.stdout[-3000:]


def test_a_crash_in_a_sub_world_names_its_global_rank(crash_run):
    _proc, merged, report, _records = crash_run
    tests = by_id(report)
    crashed = tests["test_w3_crash"]
    assert crashed["verdict"] == "failed"
    assert crashed["ranks"]["1"] == "crashed", crashed
    assert set(crashed["ranks"]) == {"0", "1", "2"}
    assert "rank 1" in crashed["message"]
    assert tests["test_w4"]["verdict"] == "passed"
    assert tests["test_plain[3]"]["verdict"] == "passed"  # rank 3 idled in world(3)'s phase
    for i in (0, 1, 2):
        assert tests[f"test_plain[{i}]"]["verdict"] == "not run", tests[f"test_plain[{i}]"]
    assert merged.returncode == 1


def test_a_plain_test_in_a_collective_of_the_group_is_told_of_every_rank(tmp_path):
    # Each runs on one rank with no group, as in the pool: they fail at once, never meeting
    # each other's all_reduce (before, both passed, each reducing with the other's).
    proc, merged, report, _records = launch(
        tmp_path / "plain", PLAIN_COLLECTIVE, timeout_s=30, ranks=2
    )
    tests = by_id(report)
    for name, rank in (("test_uses_the_group", "0"), ("test_uses_the_group_too", "1")):
        failed = tests[name]
        assert failed["verdict"] == "failed" and failed["ranks"] == {rank: "failed"}, failed
        assert failed["message"] == f"rank {rank} failed", failed
        junit = (tmp_path / "plain" / "out" / f"junit.rank{rank}.xml").read_text()
        assert "Default process group has not been initialized" in junit, junit[-3000:]
        assert junit.count(HINT) == 1, junit[-3000:]  # the failure's "rankgate hint"
    assert proc.stdout.count(HINT) == 1, proc.stdout[-3000:]  # rank 0's terminal: its share
    assert "FAILED test_suite.py::test_uses_the_group_too: rank 1 failed" in proc.stdout
    passed = {name: t["ranks"] for name, t in tests.items() if t["verdict"] == "passed"}
    assert passed == {
        "test_alone": {"0": "passed"},
        "test_w2_after_plain_ones": {"0": "passed", "1": "passed"},
        "test_w1": {"0": "passed"},  # one sub-world of one rank
        "test_every_rank": {"0": "passed", "1": "passed"},
    }, passed
    assert merged.returncode == 1


HINT = (
    "a plain test runs on one rank in place, as in the pool; one that uses the launcher's "
    "group needs @pytest.mark.every_rank"
)


def test_a_rank_whose_share_is_empty_exits_0(tmp_path):
    # One plain test at N=2: rank 1 runs nothing, which is no "no tests collected" (exit 5).
    suite = "from note import note\n\n\ndef test_once():\n    note('once')\n"
    proc, merged, report, records = launch(tmp_path / "one", suite, ranks=2)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert by_id(report)["test_once"]["ranks"] == {"0": "passed"}
    assert [r["name"] for r in records] == ["once"]
    assert merged.returncode == 0


def verdicts(report: dict) -> dict[str, tuple]:
    """Each test's verdict and the global ranks' outcomes: what must not depend on the
    launcher."""
    return {name: (t["verdict"], t.get("ranks")) for name, t in by_id(report).items()}


PLANTED = {"wrong-value": (SUITE, 60), "hang": (HANG, 8), "crash": (CRASH, 60)}
PLANTED_RUNS = {"wrong-value": "everything", "hang": "hang_run", "crash": "crash_run"}
"""The fixture of each planted suite's torchrun run."""


@pytest.mark.skipif(
    shutil.which("mpirun") is None, reason="mpirun is not installed (apt-get install openmpi-bin)"
)
@pytest.mark.parametrize("planted", sorted(PLANTED))
def test_mpirun_gives_torchrun_verdicts(request, tmp_path, planted):
    suite, timeout_s = PLANTED[planted]
    torchrun = request.getfixturevalue(PLANTED_RUNS[planted])[2]
    _proc, merged, mpirun, _records = launch(
        tmp_path / "mpirun", suite, timeout_s=timeout_s, launcher="mpirun"
    )
    assert merged.returncode == 1
    assert verdicts(mpirun) == verdicts(torchrun)


def _closing_line(text: str) -> str:
    """pytest's last line, its duration left out."""
    return re.sub(r" in [\d.]+s\b.*$", "", text.rstrip().splitlines()[-1])


def test_a_hang_in_another_sub_world_is_counted_in_every_ranks_closing_line(hang_run, hang_folder):
    # Rank 0 had finished its share (w2[0], w2[2], plain[0]) when rank 2 hung in w2[1];
    # its line said "3 passed". Every rank's line now counts the run as merge-junit
    # does: the hung test, every sub-world's passed ones, the 2 not run (pytest's errors).
    proc, _merged, report, _records = hang_run
    assert {k: report["counts"][k] for k in ("passed", "failed", "not run")} == {
        "passed": 4, "failed": 1, "not run": 2,
    }, report["counts"]  # fmt: skip
    merge = [sys.executable, "-m", "rankgate.cli", "merge-junit", "out"]
    text = subprocess.run(merge, cwd=hang_folder, capture_output=True, text=True).stdout
    assert text.splitlines()[-1] == (
        "rankgate merge-junit: 7 tests on ranks 0, 1, 2, 3 of world 4: 4 passed, 1 failed, "
        "0 error, 0 skipped, 0 xfailed, 0 xpassed, 2 not run"
    ), text
    assert _closing_line(proc.stdout) == "1 failed, 4 passed, 2 errors", proc.stdout[-3000:]
    for rank in (1, 2, 3):
        log = (hang_folder / "out" / f"pytest.rank{rank}.log").read_text()
        assert _closing_line(log) == "1 failed, 4 passed, 2 errors", (rank, log[-3000:])
    # Rank 0's terminal names the hung test's verdict and global ranks, as merge-junit
    # does, and the tests the hung sub-world did not run.
    (hung,) = [line for line in text.splitlines() if line.startswith("FAILED ")]
    assert hung.startswith("FAILED test_suite.py::test_w2[1]: rank 3 diverged; rank 2 hung"), hung
    stopped = "rank 2 stopped the run: test_suite.py::test_w2[1] did not finish within the test's timeout of 8 s"
    lines = proc.stdout.splitlines()
    assert [line for line in lines if line.startswith(("FAILED ", "NOT RUN "))] == [
        "FAILED test_suite.py::test_w2[1]: rank 3 diverged; rank 2 hung (did not finish "
        "within the test's timeout of 8 s; the rank exited); likely cause: rank 3 never "
        "issued all_reduce #1 (float32[1]) that rank 2 issued at test_suite.py:16; rank 3 "
        "issued no collective",
        f"NOT RUN test_suite.py::test_plain[2]: {stopped}",
        f"NOT RUN test_suite.py::test_plain[3]: {stopped}",
    ], proc.stdout[-3000:]


STOP_AT_THE_SECOND = """\
import pytest
import torch
import torch.distributed as dist


@pytest.mark.world(2)
@pytest.mark.parametrize("i", range(6))
def test_w2(rank, i):
    t = torch.ones(1)
    dist.all_reduce(t)
    assert i != 1, "the second fails on both of its ranks"


@pytest.mark.parametrize("i", range(2))
def test_plain(i):
    pass
"""


@pytest.fixture(scope="module")
def x_run(request, tmp_path_factory):
    def run():
        folder = tmp_path_factory.mktemp("subworlds") / "x"
        return folder, *launch(folder, STOP_AT_THE_SECOND, pytest_args=("-x",))

    return once_per_run(request, run)


def test_x_under_sub_worlds_names_every_test_once(x_run):
    # w2[1] fails on ranks 2, 3 (the second sub-world): -x stops them there, and their
    # share's later tests (w2[3], w2[5]) are "not run"; the first sub-world and the
    # plain tests' ranks finish their shares. Before, the two were named nowhere.
    folder, proc, merged, report, _records = x_run
    assert proc.returncode == 1 and merged.returncode == 1, merged.stdout
    verdicts = {test_id: test["verdict"] for test_id, test in by_id(report).items()}
    assert verdicts == {
        **{f"test_w2[{i}]": "passed" for i in (0, 2, 4)},
        "test_w2[1]": "failed",
        "test_w2[3]": "not run",
        "test_w2[5]": "not run",
        "test_plain[0]": "passed",
        "test_plain[1]": "passed",
    }
    text = subprocess.run(
        [sys.executable, "-m", "rankgate.cli", "merge-junit", "out"],
        cwd=folder, capture_output=True, text=True, timeout=60,
    ).stdout  # fmt: skip
    assert text.splitlines()[-1] == (
        "rankgate merge-junit: 8 tests on ranks 0, 1, 2, 3 of world 4: 5 passed, 1 failed, "
        "0 error, 0 skipped, 0 xfailed, 0 xpassed, 2 not run"
    ), text


def test_x_under_sub_worlds_says_the_stop_on_rank_0(x_run):
    folder, proc, _merged, report, _records = x_run
    stop = "stopping after 1 failures (counted on every rank)"
    # w2[1] fails on ranks 2, 3: rank 0 counts it as its result comes (pytest's "!!!
    # stopping after ... !!!") or, its own share ended first (a slow machine, CI's once),
    # hears the stop from them after its last test ("rankgate: stopping after ...").
    said = (f" {stop} ", f"\nrankgate: {stop}\n")
    assert any(words in proc.stdout for words in said), proc.stdout[-3000:]
    assert _closing_line(proc.stdout) == "1 failed, 5 passed, 2 errors", proc.stdout[-3000:]
    # the tests rank 0 counts of the other sub-world are named, as merge-junit names them
    failed = by_id(report)["test_w2[1]"]["message"].splitlines()[0]
    named = [line for line in proc.stdout.splitlines() if line.startswith(("FAILED ", "NOT RUN "))]
    assert named == [
        f"FAILED test_suite.py::test_w2[1]: {failed}",
        f"NOT RUN test_suite.py::test_w2[3]: {stop}",
        f"NOT RUN test_suite.py::test_w2[5]: {stop}",
    ], proc.stdout[-3000:]
    for rank in (2, 3):  # the ranks that stopped say it too, and count the same run
        log = (folder / "out" / f"pytest.rank{rank}.log").read_text()
        assert f" {stop} " in log and _closing_line(log) == "1 failed, 5 passed, 2 errors", log


ONE_RANK_FAILS = """\
import pytest
import torch
import torch.distributed as dist


@pytest.mark.world(2)
@pytest.mark.parametrize("i", range(4))
def test_w2(rank, i):
    t = torch.ones(1)
    dist.all_reduce(t)
    assert not (i == 1 and rank == 1), "fails on the second rank of its sub-world"
"""


def test_rank_0_words_another_sub_worlds_failure_as_merge_junit_does(tmp_path):
    proc, _merged, report, _records = launch(tmp_path / "run", ONE_RANK_FAILS)
    assert by_id(report)["test_w2[1]"]["message"].splitlines()[0] == (
        "rank 3 failed; rank 2 passed"
    )
    named = [line for line in proc.stdout.splitlines() if line.startswith("FAILED ")]
    end = proc.stdout[-3000:]
    assert named == ["FAILED test_suite.py::test_w2[1]: rank 3 failed; rank 2 passed"], end
