"""Adoption of PyTorch's own distributed test classes (MultiProcessTestCase and
DistributedTestBase from the installed torch), on a planted suite written as PyTorch's
own distributed tests are: each test starts its ranks in setUp, makes its own process
group over a FileStore or env://, and reads ``world_size`` from a property."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch
from jobs import run_torchrun_pytest
from torch_testing import needs_torch_testing

from rankgate.report.junit import merge_junit, read_junit

pytestmark = [pytest.mark.dist, pytest.mark.slow]  # pytest runs of their own

TESTS = '''
import os
import socket

import torch
import torch.distributed as dist
from torch.testing._internal.common_distributed import (
    DistributedTestBase,
    MultiProcessTestCase,
    skip_if_lt_x_gpu,
)


class TestFileStore(MultiProcessTestCase):
    @property
    def world_size(self):
        return 2

    def setUp(self):
        super().setUp()
        self._spawn_processes()

    def _init(self):
        store = dist.FileStore(self.file_name, self.world_size)
        dist.init_process_group("gloo", store=store, rank=self.rank, world_size=self.world_size)

    def test_all_reduce(self):
        self._init()
        t = torch.ones(2) * (self.rank + 1)
        dist.all_reduce(t)
        self.assertEqual(t.tolist(), [3.0, 3.0])
        dist.destroy_process_group()

    def test_no_group_before_its_init(self):
        self.assertFalse(dist.is_initialized())  # as in a child its own way starts

    def test_store_is_shared(self):
        store = dist.FileStore(self.file_name, self.world_size)
        store.set(f"rank{self.rank}", "here")
        store.wait([f"rank{1 - self.rank}"])

    def test_wrong_on_rank_1(self):
        self._init()
        value = torch.tensor([float(self.rank != 1)])  # planted wrong value on rank 1
        self.assertEqual(value.item(), 1.0)

    @skip_if_lt_x_gpu(2)
    def test_needs_gpus(self):
        assert torch.cuda.device_count() >= 2, "ran without GPUs"


def _gloo_by_another_name(store, rank, size, timeout):
    return dist.ProcessGroupGloo(store, rank, size, timeout)


if not hasattr(dist.Backend, "OTHERGLOO"):
    dist.Backend.register_backend("othergloo", _gloo_by_another_name, devices=["cpu"])


class TestOtherBackend(MultiProcessTestCase):
    """Asks for a backend rankgate's world has not, as a gloo test does on a GPU host."""

    @property
    def world_size(self):
        return 2

    def setUp(self):
        super().setUp()
        self._spawn_processes()

    def test_other_backend(self):
        store = dist.FileStore(self.file_name, self.world_size)
        dist.init_process_group("othergloo", store=store, rank=self.rank,
                                world_size=self.world_size)
        self.assertEqual(dist.get_backend(), "othergloo")
        t = torch.ones(1) * (self.rank + 1)
        dist.all_reduce(t)
        self.assertEqual(t.item(), 3.0)
        dist.destroy_process_group()


class TestEnvInit(MultiProcessTestCase):
    @property
    def world_size(self):
        return 2

    def setUp(self):
        super().setUp()
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(s.getsockname()[1]))
        self._spawn_processes()

    def test_env_init(self):
        dist.init_process_group("gloo", init_method="env://", rank=self.rank,
                                world_size=self.world_size)
        self.assertEqual(dist.get_rank(), self.rank)
        t = torch.ones(1)
        dist.all_reduce(t)
        self.assertEqual(t.item(), 2.0)


class TestBase(DistributedTestBase):
    @property
    def world_size(self):
        return 2

    def test_create_pg(self):
        pg = self.create_pg("cpu")
        t = torch.ones(1)
        dist.all_reduce(t, group=pg)
        self.assertEqual(t.item(), 2.0)


class SpawnedWorld(MultiProcessTestCase):
    """A world whose size the subclass gives its own way; no test of its own."""

    def setUp(self):
        super().setUp()
        self._spawn_processes()

    def _world_size_seen(self):
        dist.init_process_group("gloo", init_method=f"file://{self.file_name}",
                                rank=self.rank, world_size=self.world_size)
        return dist.get_world_size()


class TestDefaultWorld(SpawnedWorld):
    def test_default_world(self):
        self.assertEqual(self._world_size_seen(), 4)  # MultiProcessTestCase's default


class TestClassAttribute(SpawnedWorld):
    world_size = 2  # a plain attribute in place of the property

    def test_class_attribute(self):
        self.assertEqual(self._world_size_seen(), 2)


class TestNoWorld(MultiProcessTestCase):
    @property
    def world_size(self):
        # a count of devices the machine lacks (PyTorch sizes worlds by GPU counts); a
        # fixed 0, so the class is refused alike on a laptop and on a GPU host
        return 0

    def test_without_ranks(self):
        pass
'''

INI = (
    "[pytest]\nrankgate_world_classes =\n"
    "    torch.testing._internal.common_distributed:MultiProcessTestCase\n"
)


GPU_TEST = "passed" if torch.cuda.device_count() >= 2 else "skipped"
"""skip_if_lt_x_gpu(2): skipped on a CPU machine, run where there are two GPUs."""


def _plant(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_torchcase=TESTS)
    pytester.makeini(INI)


def _world(case) -> str | None:
    return dict(case.properties).get("rankgate.world")


NOT_ADOPTED = (
    "rankgate: test_torchcase.py::TestNoWorld::test_without_ranks runs its own way, not on "
    "rankgate's ranks (torch.testing._internal.common_distributed:MultiProcessTestCase): "
    "world_size=0 is not a number of ranks"
)


@needs_torch_testing
def test_torch_test_cases_run_on_the_pool(pytester):
    _plant(pytester)
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-rA", "--junitxml=junit.xml")
    tests = {case.name: case for case in read_junit(pytester.path / "junit.xml").cases}
    assert {name: case.outcome for name, case in tests.items()} == {
        "test_all_reduce": "passed",
        "test_no_group_before_its_init": "passed",  # rankgate's group hidden until init
        "test_store_is_shared": "passed",  # self.file_name: one file every rank sees
        "test_wrong_on_rank_1": "failed",
        "test_needs_gpus": GPU_TEST,  # torch's skip exit code, read as the skip it is
        "test_other_backend": "passed",  # a fresh group of the backend it asked for
        "test_env_init": "passed",
        "test_create_pg": "passed",
        "test_default_world": "passed",  # world_size's default: 4
        "test_class_attribute": "passed",  # setUp ran in the controller: no processes
        "test_without_ranks": "passed",  # its own way (no ranks to start)
    }
    worlds = {name: _world(case) for name, case in tests.items()}
    assert worlds == {
        "test_all_reduce": "2",
        "test_no_group_before_its_init": "2",
        "test_store_is_shared": "2",
        "test_wrong_on_rank_1": "2",
        "test_needs_gpus": "2",
        "test_other_backend": "2",
        "test_env_init": "2",
        "test_create_pg": "2",
        "test_default_world": "4",
        "test_class_attribute": "2",
        "test_without_ranks": None,
    }
    wrong = tests["test_wrong_on_rank_1"]
    # auto: gloo on CPU, cpu:gloo,cuda:nccl where every rank has a GPU
    assert wrong.message.startswith("rank 1 failed; rank 0 passed (world 2, backend "), wrong.message
    if GPU_TEST == "skipped":
        assert "Need at least 2 CUDA devices" in tests["test_needs_gpus"].message
    result.stdout.fnmatch_lines(["*" + NOT_ADOPTED])


@needs_torch_testing
@pytest.mark.torch_dist
def test_torch_test_cases_run_in_place_under_torchrun(pytester):
    _plant(pytester)
    proc = run_torchrun_pytest(
        pytester.path, "-q", "-rs", "--junitxml=out/junit.xml",
        "--rankgate-timeout=60",  # a hang ends in rankgate's verdict, inside our timeout
        timeout=300,
    )  # fmt: skip
    assert proc.returncode == 1, proc.stdout + proc.stderr  # the planted failure only
    # Exit code 1 is also torchrun's own failure: without both ranks' files, its output says why.
    junits = sorted((pytester.path / "out").glob("junit.rank*.xml"))
    assert [f.name for f in junits] == ["junit.rank0.xml", "junit.rank1.xml"], (
        proc.stdout[-6000:] + proc.stderr[-6000:]
    )
    merged = merge_junit(junits, world_size=2)
    why = "\n".join(f"{t.name}: {t.message}" for t in merged.tests if t.verdict == "failed")
    assert {t.name: t.verdict for t in merged.tests} == {
        "test_all_reduce": "passed",
        "test_no_group_before_its_init": "passed",
        "test_store_is_shared": "passed",
        "test_wrong_on_rank_1": "failed",
        "test_needs_gpus": GPU_TEST,
        "test_other_backend": "passed",
        "test_env_init": "passed",
        "test_create_pg": "passed",
        "test_default_world": "skipped",  # world(4) in a run of 2 ranks
        "test_class_attribute": "passed",
        "test_without_ranks": "skipped",  # its own way would start processes on each rank
    }, why + "\n" + proc.stdout[-3000:]
    (wrong,) = [t for t in merged.tests if t.name == "test_wrong_on_rank_1"]
    assert wrong.message == "rank 1 failed; rank 0 passed"
    assert wrong.node_id == "test_torchcase.py::TestFileStore::test_wrong_on_rank_1"
    # Rank 0's summary names the rank that failed, against torchrun's own summary after
    # the run (whose "Root Cause" is whichever rank exited first).
    assert (
        "rankgate: 1 test failed on rank 1: test_torchcase.py::TestFileStore::"
        "test_wrong_on_rank_1 (torchrun's \"Root Cause\" after the run is the first rank to "
        "exit, not the rank that failed: every rank exits 1 when any rank fails a test)"
    ) in proc.stdout.splitlines()
    # Rank 0's closing line counts the whole run, as merge-junit does (a skip known
    # before a test starts is dealt to one rank, which shows its reason).
    run = [t.verdict for t in merged.tests]
    stats = ", ".join(f"{run.count(v)} {v}" for v in ("failed", "passed", "skipped") if v in run)
    assert proc.stdout.rstrip().splitlines()[-1].startswith(stats)
    reasons = {t.name: t.message for t in merged.tests if t.verdict == "skipped"}
    assert "world(4) needs 4 ranks; this run has 2 ranks launched by torchrun" in (
        reasons["test_default_world"]
    )
    assert "world_size=0 is not a number of ranks: run it without a launcher" in (
        reasons["test_without_ranks"]
    )


def test_both_skip_saying_why_where_expecttest_is_missing(tmp_path):
    """A host without expecttest (this file's outer process and every process it starts
    see an expecttest that cannot be imported): both tests skip with the reason, before
    any inner run imports torch.testing._internal."""
    blocked = tmp_path / "blocked"
    blocked.mkdir()
    (blocked / "expecttest.py").write_text(
        textwrap.dedent(
            """
            raise ImportError("No module named 'expecttest'", name="expecttest")
            """
        )
    )
    here = Path(__file__)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(blocked), os.environ.get(
        "PYTHONPATH", "")])}  # fmt: skip
    cmd = [
        sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-p", "no:randomly", "-q",
        "-rs", "-o", "addopts=",
        f"{here}::test_torch_test_cases_run_on_the_pool",
        f"{here}::test_torch_test_cases_run_in_place_under_torchrun",
    ]  # fmt: skip
    done = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=300)  # fmt: skip
    why = ("torch.testing._internal needs expecttest, not installed here "
           "(pip install expecttest)")  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.count(why) == 2, done.stdout
    assert done.stdout.rstrip().splitlines()[-1].startswith("2 skipped"), done.stdout
