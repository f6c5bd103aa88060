"""Fixtures of the dispatch suite: a real one-node SLURM on localhost.

``local_slurm`` takes a lease on the cluster with scripts/slurm/local-slurm.sh once
per session (``acquire``: started unless running) and points SLURM_CONF at it; at the
end it gives the lease back (``release``), which stops the cluster only when an
``acquire`` started it and no other live process holds a lease: a cluster started by
hand or used by another session is never stopped. The cluster's folder and port are
this checkout's and this user's own (RANKGATE_SLURM_DIR/PORT override them).
"""

from __future__ import annotations

import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "slurm" / "local-slurm.sh"


@dataclass(frozen=True, slots=True)
class LocalSlurm:
    """A running local cluster: its slurm.conf, state folder and partition."""

    conf: Path
    partition: str = "debug"
    node: str = "rankgate-node"
    script: Path = SCRIPT

    @property
    def state_dir(self) -> Path:
        return self.conf.parent


def _script(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(SCRIPT), *args], capture_output=True, text=True, timeout=120)


@pytest.fixture(scope="session")
def local_slurm() -> LocalSlurm:
    if shutil.which("slurmctld") is None or shutil.which("sbatch") is None:
        why = "needs SLURM: apt-get install slurm-wlm (then scripts/slurm/local-slurm.sh start)"
        if os.environ.get("CI"):
            pytest.fail(why)  # a CI that cannot run the hpc tests must say so, not skip
        pytest.skip(why)
    lease = str(os.getpid())
    started = _script("acquire", lease)
    if started.returncode != 0:
        pytest.fail(f"local SLURM did not start:\n{started.stdout}{started.stderr}")
    conf = started.stdout.strip().splitlines()[-1].removeprefix("export SLURM_CONF=")
    patch = pytest.MonkeyPatch()
    patch.setenv("SLURM_CONF", conf)
    try:
        yield LocalSlurm(conf=Path(conf))
    finally:
        patch.undo()
        _script("release", lease)
