"""Fixtures of the dispatch tests: a fake interLink, a local SLURM and a two-node one.

A real local HTTP server stands in for interLink. The fake needs
openapi_schema_validator and the kubeconfig fixture serves the kubernetes client (both
in the [dev] extra): tests using them skip without them, so collection works everywhere.

The hpc tests get a real one-node SLURM on localhost, and a two-node one.
``local_slurm`` takes a lease on the cluster with scripts/slurm/local-slurm.sh once
per session (``acquire``: started unless running) and points SLURM_CONF at it; at the
end it gives the lease back (``release``), which stops the cluster only when an
``acquire`` started it and no other live process holds a lease: a cluster started by
hand or used by another session is never stopped. The cluster's folder and port are
this checkout's and this user's own (RANKGATE_SLURM_DIR/PORT override them).

``two_node_cluster`` does the same with scripts/slurm/two-node-slurm.sh (two nodes, each
a network namespace; root only), and ``two_nodes`` points SLURM_CONF at it for one test.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest
from fake_interlink import TOKEN

from tests.warmstart import WARM_PYTHON


@pytest.fixture
def interlink(tmp_path):
    """A running fake interLink API; its token is in ``fake.token_file``."""
    pytest.importorskip("openapi_schema_validator", reason="needs the [dev] extra")
    from fake_interlink import FakeInterlink

    fake = FakeInterlink(token=TOKEN, workdir=tmp_path)
    fake.url = fake.start()
    fake.token_file = tmp_path / "token"
    fake.token_file.write_text(TOKEN + "\n")
    try:
        yield fake
    finally:
        fake.stop()


@pytest.fixture
def interlink_profile(interlink, tmp_path):
    """Profile data for the fake: the local Python (warm, tests/warmstart.py) stands in for
    the image's."""
    (tmp_path / "suite").mkdir()
    return {
        "target": "interlink-rest",
        "tasks_per_node": 2,
        "time_limit": "00:10:00",
        "partition": "gpu",
        "workdir": str(tmp_path / "suite"),
        "python": WARM_PYTHON.executable(),
        "container": {"runtime": "singularity", "image": "/images/rankgate.sif"},
        "interlink": {
            "url": interlink.url,
            "token_file": str(interlink.token_file),
            "node": "vega-new-vk",
            "poll_interval": 0.2,
        },
    }


@pytest.fixture
def kubeconfig(interlink, tmp_path):
    """A kubeconfig pointing the official client at the fake's Kubernetes endpoints."""
    pytest.importorskip("kubernetes", reason="the interlink-kube target needs the [dev] extra")
    path = tmp_path / "kubeconfig"
    path.write_text(
        "apiVersion: v1\nkind: Config\n"
        f"clusters:\n- name: fake\n  cluster:\n    server: {interlink.url}\n"
        f"users:\n- name: ci\n  user:\n    token: {TOKEN}\n"
        "contexts:\n- name: fake\n  context:\n    cluster: fake\n    user: ci\n"
        "current-context: fake\n"
    )
    return path


# --- the local SLURM clusters of the hpc tests -----------------------------------------
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


@pytest.fixture
def private_copy(tmp_path):
    """Copies a cluster script (its whole folder: it sources leases.sh beside it) into a
    checkout of this test's own, so its cluster (state folder, port, tag: derived from
    that path) is not the session's, and returns what runs the copy without the
    session's SLURM variables; every cluster so started is stopped at the end, whatever
    happens."""
    copies = []

    def copy(original: str):
        script = tmp_path / "checkout" / "scripts" / "slurm" / Path(original).name
        shutil.copytree(Path(original).parent, script.parent)
        env = {
            k: v for k, v in os.environ.items() if not k.startswith(("RANKGATE_SLURM", "SLURM_"))
        }
        env["TMPDIR"] = str(tmp_path)

        def run(*args: str) -> subprocess.CompletedProcess:
            return subprocess.run(
                [str(script), *args], capture_output=True, text=True, timeout=120, env=env
            )

        copies.append(run)
        return run

    try:
        yield copy
    finally:
        for run in copies:
            run("stop")


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


# --- the two-node cluster -------------------------------------------------------------
TWO_NODE_SCRIPT = SCRIPT.with_name("two-node-slurm.sh")


@dataclass(frozen=True, slots=True)
class TwoNodeSlurm:
    """A running two-node cluster (scripts/slurm/two-node-slurm.sh): two hosts, each a
    network namespace with its own slurmd, address and hostname, on one machine."""

    conf: Path
    ifname: str = "rgnet0"
    """The cluster network's interface, the same name on every node."""
    partition: str = "debug"
    nodes: tuple[str, ...] = ("node1", "node2")
    script: Path = TWO_NODE_SCRIPT

    @property
    def state_dir(self) -> Path:
        return self.conf.parent

    def slurmd_log(self, node: str) -> Path:
        return self.state_dir / node / "slurmd.log"

    def run(self, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [str(self.script), *args], capture_output=True, text=True, timeout=120
        )


def _two_node_missing() -> str | None:
    """Why this machine cannot run the two-node cluster, or None."""
    for tool in ("slurmctld", "slurmd", "sbatch", "ip", "unshare", "nsenter"):
        if shutil.which(tool) is None:
            return f"needs {tool}: apt-get install slurm-wlm iproute2 util-linux"
    if os.geteuid() != 0:
        return "needs root: each node is a network namespace (ip netns add)"
    return None


@pytest.fixture(scope="session")
def two_node_cluster(request) -> TwoNodeSlurm:
    """Started (after sweeping what a dead run of this checkout left) once per session,
    and torn down by a finalizer however the tests end: namespaces, links, daemons."""
    why = _two_node_missing()
    if why:
        if os.environ.get("CI"):
            pytest.fail(why)
        pytest.skip(why)
    lease = str(os.getpid())
    cluster = TwoNodeSlurm(conf=Path("/nonexistent"))
    request.addfinalizer(lambda: cluster.run("release", lease))
    started = cluster.run("acquire", lease)
    if started.returncode != 0:
        pytest.fail(f"the two-node SLURM did not start:\n{started.stdout}{started.stderr}")
    conf = started.stdout.strip().splitlines()[-1].removeprefix("export SLURM_CONF=")
    return TwoNodeSlurm(conf=Path(conf))


@pytest.fixture
def two_nodes(two_node_cluster, monkeypatch) -> TwoNodeSlurm:
    """The two-node cluster as this test's SLURM (SLURM_CONF; restored after the test, so
    the one-node cluster's tests in the same session keep theirs)."""
    monkeypatch.setenv("SLURM_CONF", str(two_node_cluster.conf))
    return two_node_cluster
