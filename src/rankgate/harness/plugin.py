"""The rankgate pytest plugin (entry point ``rankgate``): options, the world marker's
collection, the fixtures, and the choice of mode.

Pool mode (the default, ``poolmode``): a world test's body runs on the ranks of a
reusable pool this process owns. In-place mode (``inplace``): pytest itself was
started by torchrun, srun or mpirun, and the body runs directly on every rank.
What both read about a test (its spec, seed, timeout) is in ``testitem``.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from rankgate.harness import options
from rankgate.harness.messages import RankValue
from rankgate.harness.poolmode import PoolSession
from rankgate.harness.spec import (
    WorldMarkerError,
    WorldSpec,
    parse_world_markers,
)
from rankgate.harness.testitem import SPEC_KEY
from rankgate.launch.env import LaunchEnvError, inspect_launch

INPLACE_PLUGIN = "rankgate-inplace"
POOL_PLUGIN = "rankgate-pools"

_CAPTURED = (
    "print() in the test body: every rank's stdout and stderr are captured and shown per rank"
)
PER_PROCESS_FIXTURES = {
    "capsys": _CAPTURED,
    "capsysbinary": _CAPTURED,
    "capfd": _CAPTURED,
    "capfdbinary": _CAPTURED,
    "caplog": "logging in the test body: each rank's log lines are in its captured stderr",
    "recwarn": "warnings.catch_warnings(record=True) or pytest.warns() in the test body",
    "monkeypatch": "unittest.mock.patch or os.environ in the test body (each rank restores "
    "environment variables after the test)",
    "request": "a fixture of your own that reads what the test needs from request and "
    "returns it as a plain value",
    "pytestconfig": "a fixture of your own that returns the option values the test needs",
    "record_property": "a fixture of your own (fixtures run in the pytest process)",
    "record_xml_attribute": "a fixture of your own (fixtures run in the pytest process)",
    "record_testsuite_property": "a fixture of your own (fixtures run in the pytest process)",
}
"""pytest's fixtures that belong to one process: a world test's body runs elsewhere."""


# --- configuration ---------------------------------------------------------------


def pytest_addoption(parser: pytest.Parser) -> None:
    options.add_options(parser)


@pytest.hookimpl(tryfirst=True)
def pytest_configure(config: pytest.Config) -> None:
    options.register_markers(config)
    mode = config.getoption("rankgate_mode")
    try:
        launch, ignored = (
            inspect_launch(trust=mode == "inplace") if mode != "pool" else (None, None)
        )
    except LaunchEnvError as exc:
        raise pytest.UsageError(
            f"rankgate: the launcher's variables are inconsistent: {exc}. Fix them, or pass "
            "--rankgate-mode=pool to ignore them and run world tests on worker pools"
        ) from None
    if mode == "inplace" and launch is None:
        raise pytest.UsageError(
            "--rankgate-mode=inplace needs a launcher's variables (RANK/WORLD_SIZE, "
            "SLURM_PROCID/SLURM_NTASKS, OMPI_COMM_WORLD_RANK/SIZE or PMI_RANK/SIZE)"
        )
    if launch is not None:
        from rankgate.harness.inplace import InPlaceSession

        config.pluginmanager.register(InPlaceSession(config, launch), INPLACE_PLUGIN)
    else:
        config.pluginmanager.register(PoolSession(config, ignored), POOL_PLUGIN)


# --- collection --------------------------------------------------------------------


class _InvalidWorldMarker(pytest.Collector):
    """Stands in for a test whose world marker is invalid: collecting it is an error."""

    def __init__(self, *, problem: str, **kwargs) -> None:
        super().__init__(**kwargs)
        self.problem = problem

    def collect(self):
        raise self.CollectError(f"{self.nodeid}: invalid @pytest.mark.world: {self.problem}")

    def repr_failure(self, excinfo):
        return str(excinfo.value)


@pytest.hookimpl(wrapper=True)
def pytest_pycollect_makeitem(collector, name, obj):
    result = yield
    items = result if isinstance(result, list) else [result]
    checked = []
    for item in items:
        if isinstance(item, pytest.Function) and item.get_closest_marker("world"):
            try:
                item.stash[SPEC_KEY] = parse_world_markers(list(item.iter_markers("world")))
                _refuse_per_process_fixtures(item._fixtureinfo.argnames)
            except WorldMarkerError as exc:
                item = _InvalidWorldMarker.from_parent(collector, name=item.name, problem=str(exc))
        checked.append(item)
    return checked if isinstance(result, list) else checked[0]


def _refuse_per_process_fixtures(argnames: tuple[str, ...]) -> None:
    for name in argnames:
        if name in PER_PROCESS_FIXTURES:
            raise WorldMarkerError(
                f"fixture {name!r} belongs to one process, and a world test's body runs on "
                f"every rank (other processes, or one pytest per rank under a launcher), so "
                f"{name!r} cannot reach it. Use instead: {PER_PROCESS_FIXTURES[name]}"
            )


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        spec = item.stash.get(SPEC_KEY, None)
        if spec is None:
            continue
        item.add_marker(pytest.mark.gpu if spec.backend == "nccl" else pytest.mark.dist)


# --- fixtures ----------------------------------------------------------------------


def _inplace_session(request: pytest.FixtureRequest):
    """The in-place session when a launcher started pytest, else None."""
    return request.config.pluginmanager.get_plugin(INPLACE_PLUGIN)


def _world_spec(request: pytest.FixtureRequest) -> WorldSpec | None:
    return request.node.stash.get(SPEC_KEY, None)


@pytest.fixture
def rank(request: pytest.FixtureRequest):
    """This rank's index; 0 in a plain single-process test."""
    session = _inplace_session(request)
    if session is not None:
        return session.launch.rank
    return RankValue("rank") if _world_spec(request) else 0


@pytest.fixture
def world_size(request: pytest.FixtureRequest) -> int:
    """Number of ranks running this test; 1 in a plain single-process test."""
    session = _inplace_session(request)
    if session is not None:
        return session.launch.world_size
    spec = _world_spec(request)
    return spec.size if spec else 1


@pytest.fixture
def device(request: pytest.FixtureRequest):
    """cuda:<local rank> when the ranks have GPUs (backend nccl or auto), else cpu."""
    import torch

    session = _inplace_session(request)
    if session is not None:
        return session.device_for(_world_spec(request))
    if _world_spec(request):
        return RankValue("device")
    return torch.device("cuda", 0) if torch.cuda.is_available() else torch.device("cpu")


@pytest.fixture
def dist_tmp_path(request: pytest.FixtureRequest, tmp_path: Path) -> Path:
    """One directory shared by every rank of this test."""
    session = _inplace_session(request)
    if session is not None:
        return session.shared_dir(request.node.nodeid)
    return tmp_path
