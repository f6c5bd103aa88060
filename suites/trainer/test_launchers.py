"""The launcher matrix: the strategy suite run for real under torchrun, srun and mpirun.

Each test starts pytest on two ranks with a launcher (rankgate.report.launched) over
test_strategies.py: the torch and DeepSpeed strategies pass on every launcher, the
mpirun-only check passes under mpirun, and each test whose markers do not allow the
launcher is skipped with the launchers that work -- Ray's, which would start a Ray
cluster on every rank, among them. The Ray column is test_strategies.py::TestRay in this
very run (plain pytest starts the Ray cluster). These tests start launchers themselves,
so they carry no strategy markers (which would gate them to a launcher), except the Ray
test, which starts Ray Train's workers itself as TestRay does. Failures carry every
rank's log, as do failures inside the launched runs.
"""

from __future__ import annotations

import os
import shutil
import textwrap
from pathlib import Path

import pytest

from rankgate.report.launched import run_pytest_under
from rankgate.workloads.trainer.strategies import unavailable_reason
from tests.warmstart import WARM_PYTHON

# Each test starts launchers (or Ray's workers) itself: not once per rank in place, and
# slow (seconds of CPU each).
pytestmark = [pytest.mark.launches, pytest.mark.slow]

NEEDS_MPIRUN = pytest.mark.skipif(
    shutil.which("mpirun") is None, reason="mpirun is not installed (apt-get install openmpi-bin)"
)
REPO = Path(__file__).resolve().parents[2]
SUITE = "suites/trainer/test_strategies.py"
SHOWN = {"torchrun": "torchrun", "srun": "srun", "mpirun": "mpirun"}
CONTRACT = ["identity", "errors_before_init_and_on_second_init", "gather_object",
            "dataloader_shards", "training_steps", "shutdown"]  # fmt: skip


def _ranks_python(launcher: str) -> str | None:
    """The ranks start warm (tests/warmstart.py) where they start on this host: always
    under torchrun --standalone and under srun (the local one-node SLURM); under mpirun
    unless a SLURM allocation of several nodes hands it other hosts."""
    if launcher == "mpirun" and int(os.environ.get("SLURM_JOB_NUM_NODES", "1")) > 1:
        return None
    return WARM_PYTHON.executable()


def expected_verdicts(launcher: str) -> dict[str, str]:
    prefix = "suites.trainer.test_strategies"
    expected = {}
    deepspeed = "skipped" if unavailable_reason("deepspeed") else "passed"
    classes = {"TestLocal": "passed", "TestDDP": "passed", "TestFSDP2": "passed",
               "TestDeepSpeedZero1": deepspeed, "TestDeepSpeedZero2": deepspeed,
               "TestDeepSpeedZero3": deepspeed, "TestRay": "skipped"}  # fmt: skip
    for cls, verdict in classes.items():
        for check in CONTRACT:
            expected[f"{prefix}.{cls}::test_{check}"] = verdict
    mpi = "passed" if launcher == "mpirun" else "skipped"
    expected[f"{prefix}::test_mpirun_rank_variables_are_mapped_for_torchrun_readers"] = mpi
    return expected


def run_strategy_suite(launcher: str, tmp_path: Path):
    run = run_pytest_under(launcher, 2, [SUITE, "-q", "-rs"], cwd=REPO, out_dir=tmp_path / "out",
                           timeout=480, python=_ranks_python(launcher))  # fmt: skip
    report = run.report()
    assert not run.timed_out, report
    verdicts = run.verdicts()
    assert verdicts.items() >= expected_verdicts(launcher).items(), report
    assert not {t: v for t, v in verdicts.items() if v not in ("passed", "skipped")}, report
    assert run.returncode == 0, report
    reasons = run.skip_reasons()
    shown = SHOWN[launcher]
    ray = "suites.trainer.test_strategies.TestRay::test_identity"
    # Where Ray Train is missing (a GPU host without it) that is the reason given first.
    why_not_ray = unavailable_reason("ray") or f"ray_dist tests run under plain pytest, which starts a local Ray cluster and Ray Train's workers itself; this run was started by {shown}"
    assert why_not_ray in reasons[ray], reasons[ray]
    if launcher != "mpirun":
        mpi = "suites.trainer.test_strategies::test_mpirun_rank_variables_are_mapped_for_torchrun_readers"
        assert f"mpi_dist tests run under mpirun, mpiexec; this run was started by {shown}" in reasons[mpi]
    return run


@pytest.mark.dist
def test_strategy_suite_under_torchrun(tmp_path):
    run_strategy_suite("torchrun", tmp_path)


@pytest.mark.dist
@NEEDS_MPIRUN
def test_strategy_suite_under_mpirun(tmp_path):
    run_strategy_suite("mpirun", tmp_path)


@pytest.mark.hpc
def test_strategy_suite_under_srun(tmp_path, local_slurm_conf):
    run_strategy_suite("srun", tmp_path)


FAILING = """
import pytest
import torch.distributed as dist

@pytest.mark.world(2)
def test_rank_1_fails(rank):
    print(f"only in the log of rank {rank}: {'%s'}")
    dist.barrier()
    assert rank == 0, "rank 1 disagrees"
"""


def _failing_run(launcher: str, tmp_path: Path):
    token = f"token-{launcher}-{tmp_path.name}"
    (tmp_path / "test_fails.py").write_text(textwrap.dedent(FAILING % token))
    (tmp_path / "pytest.ini").write_text("[pytest]\n")
    run = run_pytest_under(launcher, 2, ["test_fails.py"], cwd=tmp_path, out_dir=tmp_path / "out",
                           timeout=240, python=_ranks_python(launcher))  # fmt: skip
    return run, token


def _assert_every_rank_log_is_in_the_report(run, token: str) -> None:
    assert not run.timed_out and run.returncode != 0, run.report()
    assert run.verdicts() == {"test_fails::test_rank_1_fails": "failed"}, run.report()
    report = run.report()
    # Rank 1's own output (only in its log file) and rank 0's are in the report.
    assert f"only in the log of rank 1: {token}" in run.rank_logs()[1]
    assert f"only in the log of rank 1: {token}" in report
    assert "--- rank 1 log (pytest.rank1.log) ---" in report
    assert "rank 1 disagrees" in report


@pytest.mark.dist
@pytest.mark.parametrize("launcher", ["torchrun", pytest.param("mpirun", marks=NEEDS_MPIRUN)])
def test_every_rank_log_reaches_the_report(launcher, tmp_path):
    _assert_every_rank_log_is_in_the_report(*_failing_run(launcher, tmp_path))


@pytest.mark.hpc
def test_every_rank_log_reaches_the_report_under_srun(tmp_path, local_slurm_conf):
    _assert_every_rank_log_is_in_the_report(*_failing_run("srun", tmp_path))


def _fails_on_rank_1(token: str) -> int:
    """Runs on each Ray Train worker."""
    import ray.train

    rank = ray.train.get_context().get_world_rank()
    print(f"only in the log of Ray worker {rank}: {token}", flush=True)
    if rank == 1:
        raise RuntimeError("worker 1 disagrees")
    return rank


@pytest.mark.dist
@pytest.mark.ray_dist
@pytest.mark.skipif(unavailable_reason("ray") is not None, reason=str(unavailable_reason("ray")))
def test_every_ray_worker_log_reaches_the_report(ray_cluster, tmp_path):
    from rankgate.workloads.trainer.strategies.ray import run_on_ray, worker_logs

    token = f"token-ray-{tmp_path.name}"
    results = run_on_ray(_fails_on_rank_1, token, ray_root=ray_cluster, timeout=300)
    assert [(r.rank, r.value) for r in results] == [(0, 0), (1, None)]
    assert results[0].error is None
    assert "RuntimeError: worker 1 disagrees" in results[1].error
    logs = worker_logs(ray_cluster)  # what TestRay puts in a failing check's report
    for rank in (0, 1):
        assert f"only in the log of Ray worker {rank}: {token}" in logs
