"""One contract, every strategy: local, DDP, FSDP2, DeepSpeed ZeRO 1-3 and Ray Train.

The checks live in rankgate.workloads.trainer.strategies.contract; each runs on every
rank of the strategy's job. The torch and DeepSpeed classes are world(2) tests (the
harness's pool, or in place under torchrun, srun and mpirun); the Ray class starts a
local Ray cluster and runs every check on two Ray Train workers.
"""

from __future__ import annotations

import functools
import os
import re
import subprocess
import sys
import time

import pytest
import torch.distributed

from rankgate.launch.env import detect_launch
from rankgate.workloads.trainer.strategies import (
    StrategyError,
    StrategyOptions,
    contract,
    create_strategy,
    unavailable_reason,
)


class StrategyContract:
    """Every strategy passes these. Subclasses name the strategy and its options."""

    strategy = ""
    kwargs: dict = {}

    def factory(self):
        return functools.partial(create_strategy, self.strategy, **self.kwargs)

    def run_check(self, name: str) -> None:
        contract.CHECKS[name](self.factory())

    def test_identity(self):
        self.run_check("identity")

    def test_errors_before_init_and_on_second_init(self):
        self.run_check("errors")

    def test_gather_object(self):
        self.run_check("gather_object")

    def test_dataloader_shards(self):
        self.run_check("dataloader_shards")

    def test_training_steps(self):
        self.run_check("training_steps")

    def test_shutdown(self):
        self.run_check("shutdown")


@pytest.mark.unit
class TestLocal(StrategyContract):
    strategy = "local"


@pytest.mark.torch_dist
@pytest.mark.world(2)
class TestDDP(StrategyContract):
    strategy = "ddp"


@pytest.mark.torch_dist
@pytest.mark.world(2)
class TestFSDP2(StrategyContract):
    strategy = "fsdp2"


_NO_DEEPSPEED = unavailable_reason("deepspeed")


@pytest.mark.deepspeed_dist
@pytest.mark.world(2)
@pytest.mark.skipif(_NO_DEEPSPEED is not None, reason=str(_NO_DEEPSPEED))
class TestDeepSpeedZero1(StrategyContract):
    strategy = "deepspeed"
    kwargs = {"zero_stage": 1}


@pytest.mark.deepspeed_dist
@pytest.mark.world(2)
@pytest.mark.skipif(_NO_DEEPSPEED is not None, reason=str(_NO_DEEPSPEED))
class TestDeepSpeedZero2(StrategyContract):
    strategy = "deepspeed"
    kwargs = {"zero_stage": 2}


@pytest.mark.deepspeed_dist
@pytest.mark.world(2)
@pytest.mark.skipif(_NO_DEEPSPEED is not None, reason=str(_NO_DEEPSPEED))
class TestDeepSpeedZero3(StrategyContract):
    strategy = "deepspeed"
    kwargs = {"zero_stage": 3}


@pytest.mark.deepspeed_dist
@pytest.mark.world(2)
@pytest.mark.skipif(_NO_DEEPSPEED is not None, reason=str(_NO_DEEPSPEED))
def test_deepspeed_starts_without_its_shared_memory_op():
    """DeepSpeed's comm backend starts without the CPU op it would compile (62 CPU-s in a
    new environment) for inference alone; ZeRO's training passes above without it."""
    import deepspeed.comm.comm

    strategy = create_strategy("deepspeed", zero_stage=1).init()
    try:
        assert deepspeed.comm.comm.cdb.shm_comm_op is None
    finally:
        strategy.shutdown()


_NO_RAY = unavailable_reason("ray")


@pytest.mark.dist
@pytest.mark.ray_dist
@pytest.mark.slow  # a Ray instance and a Ray Train fit
@pytest.mark.skipif(_NO_RAY is not None, reason=str(_NO_RAY))
class TestRay(StrategyContract):
    """Ray Train starts the ranks once: every check runs on both workers in one fit."""

    strategy = "ray"
    outcomes: dict = {}  # filled once per run by the fixture below
    logs = ""

    @pytest.fixture(autouse=True, scope="class")
    def _run_on_ray(self, request, once_per_run):
        def fit():
            from rankgate.workloads.trainer.strategies.ray import run_on_ray, worker_logs

            ray_root = request.getfixturevalue("ray_cluster")  # not started by a reader
            results = run_on_ray(contract.run_all, self.factory(), ray_root=ray_root, timeout=300)
            return results, worker_logs(ray_root)

        results, type(self).logs = once_per_run("ray-contract", fit)
        type(self).outcomes = {r.rank: r for r in results}
        yield
        type(self).outcomes, type(self).logs = {}, ""

    def run_check(self, name: str) -> None:
        for rank, result in sorted(self.outcomes.items()):
            assert result.error is None, f"worker {rank} failed outside the checks:\n{result.error}"
            if name not in result.value:
                pytest.fail(f"worker {rank} did not reach {name!r}: an earlier check failed")
            error = result.value[name]
            if error is not None:
                pytest.fail(f"{name} failed on Ray worker {rank}:\n{error}\n{self.logs}")


ANOTHER_RAY = """
import sys
from rankgate.workloads.trainer.strategies.ray import local_ray

with local_ray(num_cpus=1):
    print("ready", flush=True)
    sys.stdin.read()  # until the test closes it
"""


def _address_ray_finds() -> tuple[str, str]:
    """In a worker: the instance Ray's own lookups find, and the worker's own."""
    import ray
    from ray._private.services import canonicalize_bootstrap_address_or_die

    try:
        found = canonicalize_bootstrap_address_or_die(None)
    except ConnectionError as exc:
        found = str(exc)
    return found, ray.get_runtime_context().gcs_address


@pytest.mark.dist
@pytest.mark.ray_dist
@pytest.mark.skipif(_NO_RAY is not None, reason=str(_NO_RAY))
@pytest.mark.slow  # a Ray instance and Ray Train fits
def test_ray_workers_find_their_own_instance_beside_another(ray_cluster):
    # Another Ray on the machine (two test runs side by side, or someone else's): Ray's
    # own lookups in our workers (Ray Train's state API calls) must still find ours, not
    # fail on "Found multiple active Ray instances".
    import ray

    other = subprocess.Popen([sys.executable, "-c", ANOTHER_RAY], stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, text=True)  # fmt: skip
    try:
        assert other.stdout.readline().strip() == "ready", "the other Ray did not start"
        found, own = ray.get(ray.remote(_address_ray_finds).remote(), timeout=120)
        assert found == own
    finally:
        other.stdin.close()
        other.wait(timeout=60)


def _sleeps_for_an_hour() -> None:
    time.sleep(3600)


def _given_up_fit(ray_root, timeout: float) -> str:
    """The error of a fit of a worker that sleeps for an hour, given up after ``timeout``."""
    from rankgate.workloads.trainer.strategies.ray import RayRunError, run_on_ray

    with pytest.raises(RayRunError) as failure:
        run_on_ray(_sleeps_for_an_hour, ray_root=ray_root, timeout=timeout)
    return str(failure.value)


def _assert_every_cpu_comes_back(cpus: float = 2.0) -> None:
    """Within 60 s the instance has all its CPUs free again (the resource view catches up
    with a removal)."""
    import ray

    deadline = time.monotonic() + 60
    while ray.available_resources().get("CPU") != cpus and time.monotonic() < deadline:
        time.sleep(0.5)
    assert ray.available_resources().get("CPU") == cpus


@pytest.mark.dist
@pytest.mark.ray_dist
@pytest.mark.skipif(_NO_RAY is not None, reason=str(_NO_RAY))
@pytest.mark.slow  # a Ray instance and Ray Train fits
def test_a_fit_past_its_timeout_is_stopped_and_gives_back_its_cpus(ray_cluster):
    # A fit given up on must not keep the instance's CPUs: the next fit of the session
    # would wait for them until its own timeout.
    message = _given_up_fit(ray_cluster, timeout=15)
    # One group, or two: Ray Train retried once a start that the removal cut short. A
    # controller that the removal did not stop (seen under CI's load) is killed; under a
    # heavier load one was still asking for its CPUs 15 s in (no group yet), and only the
    # kill stopped it.
    assert re.match(
        r"Ray Train did not finish within 15 s; stopped: its ([12] placement group\(s\) "
        r"removed(, its controller killed)?|0 placement group\(s\) removed, its controller "
        r"killed), their workers ended\n",
        message,
    ), message
    _assert_every_cpu_comes_back()


@pytest.mark.dist
@pytest.mark.ray_dist
@pytest.mark.skipif(_NO_RAY is not None, reason=str(_NO_RAY))
@pytest.mark.slow  # a Ray instance and Ray Train fits
def test_a_controller_the_removal_does_not_stop_is_killed(ray_cluster, monkeypatch):
    # Under CI's load a fit's controller lived on 60 s after its groups were removed: the
    # stop then kills it. Here at once, beside the removal, on a controller that is alive
    # (its workers sleep): the fit ends and the CPUs come back.
    from rankgate.workloads.trainer.strategies import ray as ray_strategy

    monkeypatch.setattr(ray_strategy, "KILL_AFTER_S", 0.0)
    message = _given_up_fit(ray_cluster, timeout=10)
    # No group yet is one outcome too: under CI's load a controller was still waiting for
    # its CPUs (the last fit's, coming back) 10 s in, and the kill stopped it there.
    assert re.match(
        r"Ray Train did not finish within 10 s; stopped: its [012] placement group\(s\) "
        r"removed, its controller killed, their workers ended\n",
        message,
    ), message
    _assert_every_cpu_comes_back()


@pytest.mark.mpi_dist
@pytest.mark.world(2)
def test_mpirun_rank_variables_are_mapped_for_torchrun_readers(rank, world_size):
    """Under mpirun the strategy's ranks come from OMPI_* and are exported under torchrun's
    names (RANK, WORLD_SIZE, LOCAL_RANK), which DeepSpeed and most scripts read."""
    names = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE")
    # Earlier strategies of this run exported them already: start from mpirun's own set.
    saved = {name: os.environ.pop(name) for name in names if name in os.environ}
    try:
        assert detect_launch().launcher == "mpi"
        strategy = create_strategy("ddp").init()
        assert strategy.rank == int(os.environ["OMPI_COMM_WORLD_RANK"]) == rank
        assert strategy.local_rank == int(os.environ["OMPI_COMM_WORLD_LOCAL_RANK"])
        assert os.environ["RANK"] == str(rank)
        assert os.environ["WORLD_SIZE"] == str(world_size) == os.environ["OMPI_COMM_WORLD_SIZE"]
        assert os.environ["LOCAL_RANK"] == os.environ["OMPI_COMM_WORLD_LOCAL_RANK"]
        assert os.environ["LOCAL_WORLD_SIZE"] == os.environ["OMPI_COMM_WORLD_LOCAL_SIZE"]
    finally:
        os.environ.update(saved)


@pytest.mark.unit
def test_an_unknown_strategy_names_the_known_ones():
    with pytest.raises(ValueError, match="unknown strategy 'horovod'; use one of local, ddp, fsdp2, deepspeed, ray"):
        create_strategy("horovod")


@pytest.mark.unit
@pytest.mark.parametrize(
    ("build", "message"),
    [
        (lambda: StrategyOptions(max_grad_norm=0), "max_grad_norm must be > 0 or None, got 0"),
        (lambda: StrategyOptions(mixed_precision="fp16"), "mixed_precision must be None or 'bf16', got 'fp16'"),
        (lambda: create_strategy("deepspeed", zero_stage=4), "zero_stage must be 1, 2 or 3, got 4"),
    ],
)
def test_bad_options_are_refused(build, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        build()


@pytest.mark.unit
def test_ddp_without_a_group_or_launcher_says_what_to_do(monkeypatch):
    if torch.distributed.is_initialized():
        pytest.skip("a process group exists here (in place under a launcher)")
    for name in ("RANK", "WORLD_SIZE", "SLURM_PROCID", "SLURM_NTASKS", "OMPI_COMM_WORLD_RANK",
                 "OMPI_COMM_WORLD_SIZE", "PMI_RANK", "PMI_SIZE"):  # fmt: skip
        monkeypatch.delenv(name, raising=False)
    with pytest.raises(StrategyError, match="no process group and no launcher: start the ranks with torchrun"):
        create_strategy("ddp").init()
