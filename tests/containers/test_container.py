"""The image built by the container stage proves itself: non-root, the variant's torch,
rankgate and its pytest plugin importable, a world(2) test on gloo ranks, and torchrun
and mpirun running the same tests in place inside it.

The suites themselves (unit, dist) run on the host in their own stages; inside the image
only what the image can break is checked: its environment (user, packages, shared memory,
pids, launchers). The container stage (``nox -s container``) builds
``localhost/rankgate:cpu-local`` first (RANKGATE_IMAGE and RANKGATE_VARIANT pick
another). Run alone, these tests skip with the command that builds the image; under the
container stage (RANKGATE_REQUIRE_CONTAINER=1) or in CI, a missing engine or image fails
them, so the stage cannot pass untested.
"""

from __future__ import annotations

import os
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from rankgate.pipeline import container
from rankgate.pipeline.container import load_matrix, run_args
from rankgate.pipeline.probe import Machine
from rankgate.proc import command as process

pytestmark = pytest.mark.container

ROOT = Path(__file__).resolve().parents[2]
VARIANT = os.environ.get("RANKGATE_VARIANT", "cpu-local")
IMAGE = os.environ.get("RANKGATE_IMAGE", f"localhost/rankgate:{VARIANT}")


@pytest.fixture(scope="module")
def engine() -> str:
    engine, why = Machine().container_engine
    reason = container.unavailable(engine, why, IMAGE, VARIANT)
    if reason and container.required():
        pytest.fail(f"{reason} (required: RANKGATE_REQUIRE_CONTAINER=1 or CI is set)")
    if reason:
        pytest.skip(reason)
    return engine


def in_image(engine: str, argv: list[str], results: Path | None = None) -> tuple[int, str]:
    mounts = {}
    if results is not None:
        results.chmod(0o777)  # the image's user (uid 10001) writes its JUnit here
        mounts[str(results)] = "/results"
    return process.capture(run_args(engine, IMAGE, argv, mounts=mounts), timeout=600)


def junit_totals(path: Path) -> dict[str, int]:
    root = ET.parse(path).getroot()
    suites = [root] if root.tag == "testsuite" else root.findall("testsuite")
    keys = ("tests", "failures", "errors", "skipped")
    return {key: sum(int(s.get(key, 0)) for s in suites) for key in keys}


def test_runs_as_a_non_root_user(engine):
    code, out = in_image(engine, ["id", "-u"])
    assert code == 0, out
    assert out.splitlines()[-1] == "10001"


def test_has_the_variants_torch_and_rankgate(engine):
    code, out = in_image(
        engine, ["python", "-c", "import torch, rankgate; print(torch.__version__)"]
    )
    assert code == 0, out
    wanted = load_matrix(ROOT / "containers" / "matrix.toml")[VARIANT].torch.split("==")[1]
    assert out.splitlines()[-1] == wanted


def test_the_plugin_is_loaded_inside(engine):
    """pytest in the image finds rankgate's plugin through its entry point (world marker)."""
    code, out = in_image(engine, ["pytest", "--markers", "-p", "no:cacheprovider"])
    assert code == 0, out
    assert "@pytest.mark.world(" in out, out[-2000:]


def test_a_distributed_test_passes_inside(engine, tmp_path):
    argv = [
        "pytest",
        "suites/pipeline/test_dist_smoke.py",
        "-m",
        "dist",
        "-q",
        "-p",
        "no:cacheprovider",
        "--junitxml=/results/dist.xml",
    ]
    code, out = in_image(engine, argv, tmp_path)
    totals = junit_totals(tmp_path / "dist.xml")
    assert code == 0, out[-4000:]
    assert totals == {"tests": 1, "failures": 0, "errors": 0, "skipped": 0}


# In-place runs under each launcher: pytest started by torchrun and by mpirun on 2 ranks.
IN_PLACE = (
    "tests/harness/test_inplace.py::test_torchrun_runs_tests_on_every_rank_and_rank_0_reports_all",
    "tests/harness/test_inplace.py::test_mpirun_runs_the_same_file",
)


def test_torchrun_and_mpirun_run_tests_in_place_inside(engine, tmp_path):
    argv = [
        "pytest", *IN_PLACE, "-q", "-p", "no:cacheprovider", "-rs",
        "--junitxml=/results/in-place.xml",
    ]  # fmt: skip
    code, out = in_image(engine, argv, tmp_path)
    totals = junit_totals(tmp_path / "in-place.xml")
    assert code == 0, out[-4000:]
    # Neither skips: the image has both launchers (mpirun from openmpi-bin in the base).
    assert totals == {"tests": 2, "failures": 0, "errors": 0, "skipped": 0}, out[-4000:]
