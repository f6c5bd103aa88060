"""Adoption of a suite's own spawn helper and of its own distributed test class, on
planted projects that start their ranks their own way (as public projects do)."""

from __future__ import annotations

import pytest
from jobs import run_torchrun_pytest

from rankgate.harness.adopt.config import AdoptConfigError, parse_spawn_helper, parse_world_class
from rankgate.report.junit import merge_junit, read_junit

pytestmark = pytest.mark.dist

HELPER_PROJECT = '''
import os
import socket

import torch.distributed as dist
import torch.multiprocessing as mp


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _init_process(rank, world_size, backend, func, func_args, port):
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank),
                      WORLD_SIZE=str(world_size), LOCAL_RANK=str(rank), NUM_NODES="1")
    dist.init_process_group(backend, rank=rank, world_size=world_size)
    try:
        func(*(func_args or ()))
    finally:
        dist.destroy_process_group()


def run_distributed_test(func, world_size=2, backend="gloo", func_args=None):
    """The project's way: new processes for every test."""
    mp.start_processes(_init_process, args=(world_size, backend, func, func_args, _free_port()),
                       nprocs=world_size, start_method="fork")
'''

HELPER_TESTS = '''
import os
import pytest
import torch
import torch.distributed as dist
from helperproj.testing import run_distributed_test

BACKENDS = ["gloo", pytest.param("nccl", marks=pytest.mark.skipif(True, reason="needs GPUs"))]


def all_reduce_sum():
    t = torch.ones(1) * (dist.get_rank() + 1)
    dist.all_reduce(t)
    assert t.item() == 3
    assert os.environ["LOCAL_RANK"] == str(dist.get_rank())
    assert os.environ["NUM_NODES"] == "1"


@pytest.mark.parametrize("backend", BACKENDS)
def test_sum(backend):
    run_distributed_test(all_reduce_sum, backend=backend)


def save_then_load(path):
    (path / f"shard{dist.get_rank()}").write_text("saved")
    dist.barrier()
    assert sorted(p.name for p in path.iterdir()) == ["shard0", "shard1"]


def test_checkpoint(tmp_path):
    run_distributed_test(save_then_load, func_args=(tmp_path,))


def wrong_on_rank_1():
    assert dist.get_rank() == 0, "planted wrong value on rank 1"


def test_wrong():
    run_distributed_test(wrong_on_rank_1, world_size=2)


def test_world_known_only_when_running():
    n = len("ab")
    run_distributed_test(all_reduce_sum, world_size=n)


def test_reads_back_in_one_process(tmp_path):
    run_distributed_test(save_then_load, func_args=(tmp_path,))
    assert not dist.is_initialized()  # back in one process, as the helper leaves it
    assert sorted(p.name for p in tmp_path.iterdir()) == ["shard0", "shard1"]
    (tmp_path / "read back").open("x").close()  # once: a second reader fails here


def test_reads_back_a_wrong_value(tmp_path):
    run_distributed_test(save_then_load, func_args=(tmp_path,))
    assert (tmp_path / "shard1").read_text() == "planted wrong value after the helper"
'''

HELPER_INI = (
    "rankgate_spawn_helpers =\n"
    "    helperproj.testing:run_distributed_test args=func_args env=NUM_NODES=1\n"
)

CLASS_PROJECT = '''
import os
import socket

import torch.distributed as dist
import torch.multiprocessing as mp

SEEN = {}


def init():
    """The project's init code: reads the launcher's variables."""
    SEEN.update(rank=os.environ["RANK"], local_size=os.environ["LOCAL_SIZE"])


CACHE = {}


def world_group():
    """The project's group kept in a module global, as DeepSpeed keeps its groups."""
    if "world" not in CACHE:
        CACHE["world"] = dist.new_group(ranks=list(range(dist.get_world_size())))
    return CACHE["world"]


def release():
    """The project's reset of its kept groups (its own way never needs it: new processes)."""
    CACHE.clear()


class DistributedTest:
    world_size = 2
    backend = "gloo"
    is_dist_test = True
    init_distributed = True


def _run(rank, cls, name, world, port):
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank),
                      WORLD_SIZE=str(world), LOCAL_RANK=str(rank), LOCAL_SIZE=str(world))
    if cls.init_distributed:
        dist.init_process_group(cls.backend, rank=rank, world_size=world)
        init()
    getattr(cls(), name)()
    if dist.is_initialized():
        # rank 0 hosts the store: it must outlast every rank's rendezvous
        dist.barrier()
        dist.destroy_process_group()


def launch(item):
    """The project's way: new processes for every test (and for every size in a list)."""
    marker = item.get_closest_marker("world_size")
    world = marker.args[0] if marker else item.cls.world_size
    for size in world if isinstance(world, list) else [world]:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        mp.start_processes(_run, args=(item.cls, item.originalname, size, port), nprocs=size,
                           start_method="fork")
'''

CLASS_CONFTEST = '''
import pytest


def pytest_configure(config):
    config.addinivalue_line("markers", "world_size(n): the project's own world marker")


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_call(item):
    if getattr(item.cls, "is_dist_test", False):
        from classproj.common import launch
        launch(item)
        item.runtest = lambda: None
'''

CLASS_TESTS = '''
import os
import pytest
import torch
import torch.distributed as dist
from classproj.common import SEEN, DistributedTest, world_group


class TestComm(DistributedTest):
    def test_all_reduce(self):
        t = torch.ones(1)
        dist.all_reduce(t)
        assert t.item() == 2
        assert SEEN == {"rank": str(dist.get_rank()), "local_size": "2"}

    @pytest.mark.world_size(1)
    def test_alone(self):
        assert dist.get_world_size() == 1

    def test_wrong(self):
        assert dist.get_rank() == 0, "planted wrong value on rank 1"


class TestEachSize(DistributedTest):
    world_size = [1, 2]  # one run per size: rankgate makes one test per size

    def test_sizes(self):
        assert dist.get_world_size() in (1, 2)

    def test_all_reduce_broken_on_rank_1(self):
        t = torch.ones(2)
        if dist.get_rank() == 1:
            t[0] = 0  # planted: all_reduce loses an element on rank 1
        dist.all_reduce(t)
        assert t.tolist() == [dist.get_world_size()] * 2


class TestSizeParameter(DistributedTest):
    @pytest.mark.parametrize("world_size", [1, 2])
    def test_world_size_parameter(self, world_size):
        assert dist.get_world_size() == world_size


class TestKeptGroup(DistributedTest):
    def test_a_first(self):
        assert dist.get_global_rank(world_group(), 1) == 1

    def test_b_again(self):  # the group kept by the test before was ended: teardown=
        assert dist.get_global_rank(world_group(), 1) == 1


class TestInit(DistributedTest):
    init_distributed = False  # tests how the project makes its group: own_group=

    def test_starts_without_a_group(self):
        assert not dist.is_initialized()
        assert os.environ["WORLD_SIZE"] == "2"

    def test_makes_its_own_group(self):
        dist.init_process_group("gloo")  # env://, from the launcher's variables
        t = torch.ones(1) * (dist.get_rank() + 1)
        dist.all_reduce(t)
        assert t.item() == 3
        dist.destroy_process_group()
        assert not dist.is_initialized()

    def test_own_group_broken_on_rank_1(self):
        dist.init_process_group("gloo")
        t = torch.ones(1)
        if dist.get_rank() == 1:
            t[0] = 0  # planted: rank 1 loses its part
        dist.all_reduce(t)
        assert t.item() == 2
'''

CLASS_INI = (
    "rankgate_world_classes =\n"
    "    classproj.common:DistributedTest marker=world_size backend=backend "
    "launcher=is_dist_test launches=own_launcher:True own_group=init_distributed:False "
    "setup=classproj.common:init teardown=classproj.common:release "
    "env=LOCAL_SIZE={local_world_size}\n"
)


def _plant(pytester: pytest.Pytester, package: str, project: str, tests: str, ini: str,
           conftest: str = "") -> None:
    pkg = pytester.mkpydir(package)
    (pkg / ("testing.py" if "helper" in package else "common.py")).write_text(project)
    pytester.makepyfile(test_planted=tests)
    pytester.makeini(f"[pytest]\n{ini}")
    if conftest:
        pytester.makeconftest(conftest)


def _junit(pytester: pytest.Pytester, *args: str) -> tuple:
    result = pytester.runpytest_subprocess(
        "-p", "no:cacheprovider", "-rA", "--junitxml=junit.xml", *args
    )
    cases = read_junit(pytester.path / "junit.xml").cases
    return result, {case.name: case for case in cases}


def _world(case) -> str | None:
    return dict(case.properties).get("rankgate.world")


@pytest.mark.slow  # pytest runs of its own
def test_spawn_helper_tests_run_on_the_pool(pytester):
    _plant(pytester, "helperproj", HELPER_PROJECT, HELPER_TESTS, HELPER_INI)
    result, tests = _junit(pytester)
    verdicts = {name: case.outcome for name, case in tests.items()}
    assert verdicts == {
        "test_sum[gloo]": "passed",
        "test_sum[nccl]": "skipped",
        "test_checkpoint": "passed",
        "test_wrong": "failed",
        "test_world_known_only_when_running": "passed",  # the helper's own way
        "test_reads_back_in_one_process": "passed",  # code after the helper: rank 0, once
        "test_reads_back_a_wrong_value": "failed",
    }
    adopted = ("test_sum[gloo]", "test_checkpoint", "test_wrong", "test_reads_back_in_one_process")
    assert [_world(tests[n]) for n in adopted] == ["2", "2", "2", "2"]
    assert _world(tests["test_world_known_only_when_running"]) is None
    assert tests["test_wrong"].message == "rank 1 failed; rank 0 passed (world 2, backend gloo)"
    assert "planted wrong value on rank 1" in tests["test_wrong"].text
    assert tests["test_reads_back_a_wrong_value"].message == (
        "rank 0 failed; rank 1 passed (world 2, backend gloo)"
    )
    result.stdout.fnmatch_lines(
        [
            "*rankgate: test_planted.py::test_world_known_only_when_running runs its own way, "
            "not on rankgate's ranks (helperproj.testing:run_distributed_test): "
            "run_distributed_test(all_reduce_sum, world_size=n): world_size=n is known only "
            "when the test runs",
        ]
    )
    assert "test_reads_back_in_one_process runs its own way" not in result.stdout.str()


@pytest.mark.slow  # pytest runs of its own
def test_class_tests_run_on_the_pool_and_init_tests_get_a_group_of_their_own(pytester):
    _plant(pytester, "classproj", CLASS_PROJECT, CLASS_TESTS, CLASS_INI, CLASS_CONFTEST)
    _, tests = _junit(pytester)
    verdicts = {name: case.outcome for name, case in tests.items()}
    assert verdicts == {
        "test_all_reduce": "passed",
        "test_alone": "passed",
        "test_wrong": "failed",
        "test_a_first": "passed",
        "test_b_again": "passed",  # teardown=: the project forgets the group rankgate ended
        "test_starts_without_a_group": "passed",  # rankgate's group hidden: own_group=
        "test_makes_its_own_group": "passed",  # a fresh group from its own init
        "test_own_group_broken_on_rank_1": "failed",
        "test_sizes[world1]": "passed",  # world_size = [1, 2]: one test per size
        "test_sizes[world2]": "passed",
        "test_all_reduce_broken_on_rank_1[world1]": "passed",
        "test_all_reduce_broken_on_rank_1[world2]": "failed",
        "test_world_size_parameter[1]": "passed",  # the test's own world_size parameter
        "test_world_size_parameter[2]": "passed",
    }
    worlds = {name: _world(case) for name, case in tests.items()}
    assert worlds == {
        "test_all_reduce": "2",
        "test_alone": "1",
        "test_wrong": "2",
        "test_a_first": "2",
        "test_b_again": "2",
        "test_starts_without_a_group": "2",
        "test_makes_its_own_group": "2",
        "test_own_group_broken_on_rank_1": "2",
        "test_sizes[world1]": "1",
        "test_sizes[world2]": "2",
        "test_all_reduce_broken_on_rank_1[world1]": "1",
        "test_all_reduce_broken_on_rank_1[world2]": "2",
        "test_world_size_parameter[1]": "1",
        "test_world_size_parameter[2]": "2",
    }
    assert tests["test_wrong"].message == "rank 1 failed; rank 0 passed (world 2, backend gloo)"
    broken = tests["test_all_reduce_broken_on_rank_1[world2]"]
    assert broken.message.startswith("ranks 0, 1 failed"), broken.message
    own = tests["test_own_group_broken_on_rank_1"]
    assert own.message == "ranks 0, 1 failed (world 2, backend gloo)", own.message


@pytest.mark.torch_dist
@pytest.mark.parametrize("project", ["helper", "class"])
@pytest.mark.slow  # pytest runs of its own
def test_adopted_suites_run_in_place_under_torchrun(pytester, project):
    if project == "helper":
        _plant(pytester, "helperproj", HELPER_PROJECT, HELPER_TESTS, HELPER_INI)
    else:
        _plant(pytester, "classproj", CLASS_PROJECT, CLASS_TESTS, CLASS_INI, CLASS_CONFTEST)
    proc = run_torchrun_pytest(pytester.path, "-q", "-rs", "--junitxml=out/junit.xml", timeout=300)
    assert proc.returncode == 1, proc.stdout + proc.stderr  # the planted failure only
    merged = merge_junit(sorted((pytester.path / "out").glob("junit.rank*.xml")), world_size=2)
    verdicts = {t.name: t.verdict for t in merged.tests}
    if project == "helper":
        assert verdicts == {
            "test_sum[gloo]": "passed",
            "test_sum[nccl]": "skipped",
            "test_checkpoint": "passed",  # tmp_path: one directory every rank sees
            "test_wrong": "failed",
            "test_world_known_only_when_running": "skipped",  # launches: not on every rank
            "test_reads_back_in_one_process": "passed",  # code after the helper: rank 0, once
            "test_reads_back_a_wrong_value": "failed",
        }
        (after,) = [t for t in merged.tests if t.name == "test_reads_back_a_wrong_value"]
        assert after.message == "rank 0 failed; rank 1 passed"
        # a skip is dealt to one rank (whose terminal shows its reason): the merged file says it
        (unknown,) = [t for t in merged.tests if t.name == "test_world_known_only_when_running"]
        assert (
            "runs its own way, not on rankgate's ranks (helperproj.testing:run_distributed_test): "
            "run_distributed_test(all_reduce_sum, world_size=n): world_size=n is known only when "
            "the test runs: run it without a launcher"
        ) in unknown.message, unknown.message
    else:
        assert verdicts == {
            "test_all_reduce": "passed",
            "test_alone": "passed",  # world(1): a sub-world of one rank
            "test_wrong": "failed",
            "test_a_first": "passed",
            "test_b_again": "passed",
            "test_starts_without_a_group": "passed",  # own_group=: rankgate's group hidden
            "test_makes_its_own_group": "passed",
            "test_own_group_broken_on_rank_1": "failed",  # the plant fails in place
            "test_sizes[world1]": "passed",
            "test_sizes[world2]": "passed",  # the size launched runs
            "test_all_reduce_broken_on_rank_1[world1]": "passed",
            "test_all_reduce_broken_on_rank_1[world2]": "failed",  # the plant fails in place
            "test_world_size_parameter[1]": "passed",
            "test_world_size_parameter[2]": "passed",
        }
    (wrong,) = [t for t in merged.tests if t.name == "test_wrong"]
    assert wrong.message == "rank 1 failed; rank 0 passed"
    where = "test_planted.py::" + ("" if project == "helper" else "TestComm::")
    assert wrong.node_id == where + "test_wrong"  # pytest's node id, to paste back


@pytest.mark.parametrize(
    ("line", "problem"),
    [
        ("nomodule", "'nomodule' is not module:name"),
        ("a.b:f world", "unknown word 'world'; valid: args=..., backend=..., env=..., func=..."),
        ("a.b:f env=X={rnk}", "env X='{rnk}' uses 'rnk'; valid fields: {rank}, {local_rank}"),
    ],
)
def test_bad_spawn_helper_line_names_the_problem(line, problem):
    with pytest.raises(AdoptConfigError, match=problem.replace("{", r"\{").replace("(", r"\(")):
        parse_spawn_helper(line)


def test_bad_world_class_line_names_the_problem():
    with pytest.raises(AdoptConfigError, match="launches='x' is not attribute:value"):
        parse_world_class("a.b:C launches=x")


def test_a_bad_line_in_the_ini_is_a_usage_error(pytester):
    pytester.makeini("[pytest]\nrankgate_spawn_helpers = a.b:f colour=red\n")
    pytester.makepyfile(test_x="def test_x():\n    pass\n")
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*rankgate adoption: 'a.b:f colour=red': unknown word 'colour=red'*"])




@pytest.mark.slow  # a pytest run of its own
def test_the_pool_reproduce_line_carries_the_runs_options(pytester):
    # Run as printed, the test must go through rankgate's ranks again, not the
    # project's own launcher: the adoption line and the plugins turned off come along.
    _plant(pytester, "helperproj", HELPER_PROJECT, HELPER_TESTS, "")
    line = HELPER_INI.split("=", 1)[1].strip()
    result = pytester.runpytest_subprocess(
        "-p", "no:cacheprovider", "-o", f"rankgate_spawn_helpers={line}", "-p", "no:randomly",
        "-k", "test_wrong",
    )  # fmt: skip
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.stdout.fnmatch_lines(
        [
            "reproduce: pytest -p no:cacheprovider -o 'rankgate_spawn_helpers=helperproj.testing:"
            "run_distributed_test args=func_args env=NUM_NODES=1' -p no:randomly "
            "'test_planted.py::test_wrong' --rankgate-seed=0  # world=2 backend=gloo seed=*"
        ]
    )


@pytest.mark.slow  # pytest runs of its own
def test_adoption_warns_of_selected_tests_only(pytester):
    _plant(pytester, "helperproj", HELPER_PROJECT, HELPER_TESTS, HELPER_INI)
    selected = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-k", "test_sum")
    assert selected.ret == 0
    assert "runs its own way" not in selected.stdout.str()  # deselected: no word of it
    marked = pytester.runpytest_subprocess(
        "-p", "no:cacheprovider", "-m", "not launches", "-k", "not wrong"
    )
    assert marked.ret == 0
    assert "runs its own way" not in marked.stdout.str()


LAUNCHER_FAILS = '''
from classproj.common import DistributedTest


class TestInitFails(DistributedTest):
    own_launcher = True  # launches=own_launcher:True: the project's own launcher runs it

    def test_fails_in_its_launcher(self):
        raise AssertionError("planted failure under the project's launcher")
'''


@pytest.mark.slow  # a pytest run of its own
def test_no_rankgate_frame_in_a_test_it_did_not_adopt(pytester):
    # The project's conftest launches the test from its own pytest_runtest_call hook:
    # the failure's traceback is the project's, with nothing of rankgate's around it.
    _plant(pytester, "classproj", CLASS_PROJECT, LAUNCHER_FAILS, CLASS_INI, CLASS_CONFTEST)
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*planted failure under the project's launcher*"])
    failure = result.stdout.str().split("FAILURES", 1)[1].split(" short test")[0]
    assert "rankgate/harness" not in failure and "hooks.py" not in failure, failure


SETUP_PROJECT = '''
import os
import time
from pathlib import Path

import torch.distributed as dist
from torch.utils.file_baton import FileBaton

_built = []


def build_op():
    """The project's init code: builds a C++ op the first time, holding its lock file."""
    if _built:
        return
    lock = Path(os.environ["PLANT_OPS"]) / f"op{dist.get_rank()}" / "lock"
    lock.parent.mkdir(parents=True, exist_ok=True)
    baton = FileBaton(str(lock))
    assert baton.try_acquire()
    time.sleep(float(os.environ["PLANT_BUILD_S"]))
    baton.release()
    _built.append(True)


class DistributedTest:
    world_size = 2
'''

SETUP_TESTS = '''
import torch.distributed as dist
from setupproj.common import DistributedTest


class TestOps(DistributedTest):
    def test_uses_the_op(self):
        assert dist.get_world_size() == 2
'''


def _plant_setup(pytester, monkeypatch, build_s: float, setup_timeout: float):
    ini = (
        "rankgate_world_classes =\n    setupproj.common:DistributedTest "
        f"setup=setupproj.common:build_op setup_timeout={setup_timeout:g}\n"
    )
    pkg = pytester.mkpydir("setupproj")
    (pkg / "common.py").write_text(SETUP_PROJECT)
    pytester.makepyfile(test_planted=SETUP_TESTS)
    pytester.makeini(f"[pytest]\n{ini}")
    ops = pytester.path / "ops"
    monkeypatch.setenv("PLANT_OPS", str(ops))
    monkeypatch.setenv("PLANT_BUILD_S", str(build_s))
    return ops


@pytest.mark.slow  # a pytest run of its own
def test_an_adopted_setup_runs_outside_the_tests_timeout(pytester, monkeypatch):
    _plant_setup(pytester, monkeypatch, build_s=6, setup_timeout=120)
    _, tests = _junit(pytester, "--rankgate-timeout=3")
    assert {n: c.outcome for n, c in tests.items()} == {"test_uses_the_op": "passed"}


@pytest.mark.slow  # a pytest run of its own
def test_an_adopted_setup_past_its_start_timeout_names_it_and_its_lock(pytester, monkeypatch):
    ops = _plant_setup(pytester, monkeypatch, build_s=120, setup_timeout=3)
    _, tests = _junit(pytester)
    case = tests["test_uses_the_op"]
    assert case.outcome == "failed"
    assert case.message.startswith(
        "setup=setupproj.common:build_op (the adoption's set-up, before the test): "
        "ranks 0, 1 hung"
    ), case.message
    assert (
        "did not finish within the start timeout of the adoption's "
        "setup=setupproj.common:build_op of 3 s"
    ) in case.text
    for rank in (0, 1):
        lock = ops / f"op{rank}" / "lock"
        assert f"{lock} (removed: the rank that held it was stopped" in case.text
        assert not lock.exists()  # the next build would wait on it for ever


@pytest.mark.torch_dist
@pytest.mark.slow  # a pytest run of its own
def test_an_adopted_setup_past_its_start_timeout_in_place(pytester, monkeypatch):
    ops = _plant_setup(pytester, monkeypatch, build_s=120, setup_timeout=3)
    proc = run_torchrun_pytest(pytester.path, "-q", "--junitxml=out/junit.xml", timeout=300)
    assert proc.returncode != 0
    merged = merge_junit(sorted((pytester.path / "out").glob("junit.rank*.xml")), world_size=2)
    (test,) = merged.tests
    assert test.verdict == "failed"
    assert test.message.startswith("ranks 0, 1 hung"), test.message
    texts = "\n".join(res.text for res in test.results.values())
    assert (
        "did not finish within the start timeout of the adoption's "
        "setup=setupproj.common:build_op of 3 s"
    ) in texts
    for rank in (0, 1):
        lock = ops / f"op{rank}" / "lock"
        assert f"{lock} (removed: the rank that held it was stopped" in texts
        assert not lock.exists()
