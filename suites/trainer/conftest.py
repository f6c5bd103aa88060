"""The training suite's launcher gate: a strategy test under a launcher its markers do not
allow is skipped with the launchers that work (rankgate.launch.markers), never run into a hang."""

from __future__ import annotations

import os
import pickle
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

from rankgate.launch.markers import current_launcher, launcher_skip_reason

# Read once, before any test runs: strategies export torchrun's variable names (RANK,
# WORLD_SIZE, ...) for the libraries that read only those, which would make a later
# look at the environment see torchrun under mpirun or srun.
LAUNCHER = current_launcher()


def pytest_runtest_setup(item: pytest.Item) -> None:
    reason = launcher_skip_reason((m.name for m in item.iter_markers()), LAUNCHER)
    if reason:
        pytest.skip(reason)


@pytest.fixture(autouse=True)
def _one_torch_thread():
    """Tiny models gain nothing from a second intra-op thread; on 2 busy cores it made a
    single-process training test 10x slower (14.5 s against 1.4 s)."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


_SLURM_SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "slurm" / "local-slurm.sh"


@pytest.fixture(scope="session")
def local_slurm_conf() -> Path:
    """A running local SLURM (scripts/slurm/local-slurm.sh, honouring RANKGATE_SLURM_DIR and
    RANKGATE_SLURM_PORT); SLURM_CONF points at it for the session. Stopped afterwards
    unless someone else started it."""
    if shutil.which("slurmctld") is None or shutil.which("srun") is None:
        why = "needs SLURM: apt-get install slurm-wlm"
        if os.environ.get("CI"):
            pytest.fail(why)  # CI must run the srun column, not skip it
        pytest.skip(why)

    def script(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([str(_SLURM_SCRIPT), *args], capture_output=True, text=True,
                              timeout=120)  # fmt: skip

    # A lease: the cluster starts if it is not running, and the last lease of a session
    # that started it stops it and removes its folder.
    started = script("acquire", str(os.getpid()))
    if started.returncode != 0:
        pytest.fail(f"local SLURM did not start:\n{started.stdout}{started.stderr}")
    conf = Path(started.stdout.strip().splitlines()[-1].removeprefix("export SLURM_CONF="))
    patch = pytest.MonkeyPatch()
    patch.setenv("SLURM_CONF", str(conf))
    try:
        yield conf
    finally:
        patch.undo()
        script("release", str(os.getpid()))


@pytest.fixture(scope="session")
def ray_cluster() -> Path:
    """A private local Ray (2 CPUs, no dashboard) for the session's ray_dist tests."""
    from rankgate.workloads.trainer.strategies.ray import local_ray

    with local_ray(num_cpus=2) as root:
        yield root


@pytest.fixture(scope="session")
def once_per_run(request, tmp_path_factory) -> Callable[[str, Callable[[], object]], object]:
    """``once_per_run(name, compute)``: compute() once for the whole test run.

    xdist may hand the tests that share an expensive result (a class fixture's Ray fit)
    to both workers, and each would compute it. The first to ask computes it, under a
    lock in the run's shared temp dir, and pickles the value or the exception; the
    others wait and read it.
    """
    if not hasattr(request.config, "workerinput"):  # one process: the caller's scope does it
        return lambda name, compute: compute()
    from filelock import FileLock

    shared = tmp_path_factory.getbasetemp().parent  # pytest-N/, above each worker's popen-gwK

    def once(name: str, compute: Callable[[], object]) -> object:
        path = shared / f"once-{name}.pkl"
        with FileLock(f"{path}.lock"):
            if not path.exists():
                try:
                    outcome = ("value", compute())
                except Exception as exc:
                    outcome = ("error", exc)
                path.write_bytes(pickle.dumps(outcome))
            kind, payload = pickle.loads(path.read_bytes())
        if kind == "error":
            raise payload
        return payload

    return once
