"""The harness's pytest plugin (registered as ``rankgate-harness`` by the entry point
:mod:`rankgate.pytest_plugin`): options, the world marker's
collection, the fixtures, and the choice of mode.

Pool mode (the default, ``pool.session``): a world test's body runs on the ranks of a
reusable pool this process owns. In-place mode (``inplace.session``): pytest itself was
started by torchrun, srun or mpirun, and the body runs directly on every rank.
What both read about a test (its spec, seed, timeout) is in ``item_settings``.

PYTEST_DONT_REWRITE: imported before pytest starts in a forked process (see :mod:`rankgate`).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from _pytest.mark import deselect_by_mark  # pytest's own `-m`, run once markers settle

from rankgate.harness import (
    coverage_ranks,
    hypothesis_bridge,
    options,
    rerun_bridge,
    threads_left,
    timeout_bridge,
    unknown_options,
)
from rankgate.harness.item_settings import MARKERS_SEEN_KEY, SPEC_KEY
from rankgate.harness.pluginnames import (
    INPLACE_PLUGIN,
    PER_PROCESS_FIXTURES,
    POOL_PLUGIN,
)
from rankgate.harness.pool import xdist_ranks
from rankgate.harness.pool.interrupt import INTERRUPT_PLUGIN, InterruptRecord
from rankgate.harness.pool.messages import RankValue
from rankgate.harness.pool.session import PoolSession
from rankgate.harness.spec import (
    WorldMarkerError,
    WorldSpec,
    parse_world_markers,
)
from rankgate.launch.env import LaunchEnvError, inspect_launch

# --- configuration ---------------------------------------------------------------


def pytest_addoption(parser: pytest.Parser) -> None:
    options.add_options(parser)


def pytest_load_initial_conftests(early_config, parser: pytest.Parser, args: list[str]) -> None:
    """A misspelt ``--rankgate-*`` option: a usage error naming the nearest one, before
    pytest's own "unrecognized arguments" (which names none)."""
    problem = unknown_options.cli_problem(args, unknown_options.cli_options(parser))
    if problem:
        raise pytest.UsageError(problem)


@pytest.hookimpl(tryfirst=True)
def pytest_configure(config: pytest.Config) -> None:
    options.register_markers(config)
    problem = unknown_options.ini_problem(config)  # a misspelt key would read as unset
    if problem:
        raise pytest.UsageError(problem)
    options.check(config)
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
    workers = _xdist_workers(config)
    if launch is not None and workers:
        raise pytest.UsageError(
            f"rankgate: {launch.launcher} started this pytest as rank {launch.rank} of "
            f"{launch.world_size}, and pytest-xdist was asked for {workers} "
            "worker(s) (-n): in place, every rank runs every test itself, in the same order. "
            "Pass -n 0 under the launcher, or run pytest without the launcher to use worker "
            "pools (-n works there)"
        )
    if launch is not None and config.option.xmlpath:
        _mark_launch(config.option.xmlpath, launch)
    from rankgate.harness.adopt.hooks import ADOPT_PLUGIN, Adoption
    from rankgate.harness.rerun_report import RERUN_PLUGIN, RerunReport
    from rankgate.harness.shards.plugin import SHARD_PLUGIN, ShardPlugin

    config.pluginmanager.register(RerunReport(), RERUN_PLUGIN)
    timeout_bridge.register(config)
    hypothesis_bridge.register(config)
    rerun_bridge.register(config)
    coverage_ranks.register(config)
    _register_quarantine(config)
    # The durations file has one writer: the controller under xdist, rank 0 in place.
    writes = not hasattr(config, "workerinput") and (launch is None or launch.rank == 0)
    config.pluginmanager.register(ShardPlugin.from_config(config, writes=writes), SHARD_PLUGIN)
    adoption = Adoption.from_config(config)
    if adoption is not None:
        config.pluginmanager.register(adoption, ADOPT_PLUGIN)
    if launch is not None:
        from rankgate.harness.inplace.session import InPlaceSession

        config.pluginmanager.register(InPlaceSession(config, launch), INPLACE_PLUGIN)
    else:
        config.pluginmanager.register(PoolSession(config, ignored), POOL_PLUGIN)
        xdist_ranks.register(config, workers)
        config.pluginmanager.register(InterruptRecord(config), INTERRUPT_PLUGIN)


@pytest.hookimpl(wrapper=True)
def pytest_sessionfinish(session: pytest.Session):
    """The session's final exit status: a process a test's thread would keep alive at exit
    ends with it (:mod:`rankgate.harness.threads_left`)."""
    result = yield
    threads_left.session_ended(session.exitstatus)
    return result


def _mark_launch(xmlpath: str, launch) -> None:
    """This launch's first act, before its group and any test: its files are the
    folder's newest from now on, so a kill before its first result never shows the last
    run's verdict (:func:`rankgate.harness.rankfiles.mark_launch`). A folder this rank
    cannot write is a usage error, said once, before anything else runs."""
    from rankgate.harness.rankfiles import mark_launch, rank_junit_path

    path = rank_junit_path(xmlpath, launch.rank)
    try:
        mark_launch(path, launch.rank, launch.world_size)
    except OSError as exc:
        raise pytest.UsageError(
            f"rankgate: rank {launch.rank} cannot write its results beside --junitxml "
            f"{xmlpath} ({exc.strerror}: {exc.filename}); pass a --junitxml in a folder "
            "every rank can write"
        ) from None


def _register_quarantine(config: pytest.Config) -> None:
    """The quarantine list, when one is named: a bad file is a usage error now."""
    path = options.quarantine_file(config)
    if path is None:
        return
    from rankgate.harness.quarantine import QuarantineError, load
    from rankgate.harness.quarantine_plugin import QUARANTINE_PLUGIN, Quarantine

    try:
        listed = load(path)
    except QuarantineError as exc:
        raise pytest.UsageError(str(exc)) from None
    config.pluginmanager.register(Quarantine(config, listed), QUARANTINE_PLUGIN)


def _xdist_workers(config: pytest.Config) -> str:
    """How many workers pytest-xdist's -n asks for ("auto" is resolved by then); "" for
    none: no xdist, -n 0, or an xdist worker itself."""
    workers = getattr(config.option, "numprocesses", None)
    if hasattr(config, "workerinput") or workers in (None, 0, "0"):
        return ""
    return str(workers)


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
                settle_world_spec(item)
            except WorldMarkerError as exc:
                item = _InvalidWorldMarker.from_parent(collector, name=item.name, problem=str(exc))
        checked.append(item)
    return checked if isinstance(result, list) else checked[0]


def settle_world_spec(item: pytest.Item) -> None:
    """Read the item's world markers into its spec (none: not a world test).

    Raises WorldMarkerError for a marker that cannot describe a job.
    """
    markers = list(item.iter_markers("world"))
    item.stash[MARKERS_SEEN_KEY] = markers
    if not markers:
        if SPEC_KEY in item.stash:
            del item.stash[SPEC_KEY]
        return
    item.stash[SPEC_KEY] = parse_world_markers(markers)
    _refuse_per_process_fixtures(getattr(item, "_fixtureinfo", None))


def _refuse_per_process_fixtures(fixtureinfo) -> None:
    for name in fixtureinfo.argnames if fixtureinfo is not None else ():
        if name in PER_PROCESS_FIXTURES:
            raise WorldMarkerError(
                f"fixture {name!r} belongs to one process, and a world test's body runs on "
                f"every rank (other processes, or one pytest per rank under a launcher), so "
                f"{name!r} cannot reach it. Use instead: {PER_PROCESS_FIXTURES[name]}"
            )


@pytest.hookimpl(wrapper=True)
def pytest_collection_modifyitems(session, config, items: list[pytest.Item]):
    # Around every other implementation, whatever its order: a conftest that marks
    # tests in bulk here (or in pytest_itemcollected, earlier) is read after it ran.
    # pytest's own `-m` deselection would run inside, before some of those conftests
    # and before the tier markers they imply, so it is held back and done here last.
    # The hooks inside already see the tier markers of the world tests known now.
    _add_tier_markers(items)
    markexpr = config.option.markexpr
    config.option.markexpr = ""
    try:
        result = yield
    finally:
        config.option.markexpr = markexpr
    kept = []
    for item in items:
        try:
            settle_world_spec(item)
        except WorldMarkerError as exc:
            _collection_error(config, item, f"invalid @pytest.mark.world: {exc}")
            continue
        kept.append(item)
    items[:] = kept
    _add_tier_markers(items)
    deselect_by_mark(items, config)
    return result


def _add_tier_markers(items: list[pytest.Item]) -> None:
    """``dist`` on each world test, ``gpu`` on each one that asks for nccl (once)."""
    for item in items:
        spec = item.stash.get(SPEC_KEY, None)
        if spec is None:
            continue
        tier = "gpu" if spec.backend == "nccl" else "dist"
        if not any(m.name == tier for m in item.own_markers):
            item.add_marker(tier)


@pytest.hookimpl(wrapper=True)
def pytest_collection_finish(session: pytest.Session):
    result = yield
    for item in session.items:
        late = late_world_marker(item)
        if late:
            _collection_error(session.config, item, late + " in pytest_collection_finish")
    return result


def late_world_marker(item: pytest.Item) -> str | None:
    """Why the item's world markers changed after rankgate read them (None if they did not)."""
    seen = item.stash.get(MARKERS_SEEN_KEY, [])
    if list(item.iter_markers("world")) == seen:
        return None
    return (
        "a world marker was added or changed too late to act on: rankgate reads world "
        "markers at the end of pytest_collection_modifyitems, and this one arrived"
    )


def _collection_error(config: pytest.Config, item: pytest.Item, problem: str) -> None:
    """Report a collection error for ``item``: pytest stops before running any test."""
    report = pytest.CollectReport(
        nodeid=item.nodeid, outcome="failed", longrepr=f"{item.nodeid}: {problem}", result=[]
    )
    config.hook.pytest_collectreport(report=report)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_setup(item: pytest.Item):
    # A marker added while running can no longer choose how the test runs.
    late = late_world_marker(item)
    if late:
        raise WorldMarkerError(f"{item.nodeid}: {late} after collection")
    result = yield
    late = late_world_marker(item)
    if late:
        raise WorldMarkerError(f"{item.nodeid}: {late} in pytest_runtest_setup")
    return result


# --- fixtures ----------------------------------------------------------------------

_running: list[pytest.Item] = []
"""The items whose run protocol is under way, innermost last (a pytester session run in
process stacks its own on the outer test's). ``rank``, ``world_size`` and ``device`` read
their test here rather than from ``request``: pytest makes two FixtureDefs for each
fixture that takes ``request`` and one for the test, each reading a signature (14 us): a
world(2) test in the pool took 0.03 ms of CPU less, 1.92 -> 1.88 ms of wall time
(benchmarks/results/cpu/loop-2026-12-01b)."""


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem):
    _running.append(item)
    try:
        return (yield)
    finally:
        _running.pop()


def _running_item() -> pytest.Item:
    if not _running:
        raise RuntimeError(
            "rankgate's rank, world_size and device fixtures are set up by a test's run"
        )
    return _running[-1]


def _inplace_session(node: pytest.Item):
    """The in-place session when a launcher started pytest, else None."""
    return node.config.pluginmanager.get_plugin(INPLACE_PLUGIN)


def _world_spec(node: pytest.Item) -> WorldSpec | None:
    return node.stash.get(SPEC_KEY, None)


@pytest.fixture
def rank():
    """This rank's index; 0 in a plain single-process test."""
    item = _running_item()
    session = _inplace_session(item)
    if session is not None:  # a world test's rank in its sub-world
        return session.rank_in_test(item)
    return RankValue("rank") if _world_spec(item) else 0


@pytest.fixture
def world_size() -> int:
    """Number of ranks running this test; 1 in a plain single-process test."""
    item = _running_item()
    session = _inplace_session(item)
    if session is not None:
        return session.world_in_test(item)
    spec = _world_spec(item)
    return spec.size if spec else 1


@pytest.fixture
def device():
    """cuda:<local rank> when the ranks have GPUs (backend nccl or auto), else cpu."""
    import torch

    item = _running_item()
    session = _inplace_session(item)
    if session is not None:
        return session.device_for(_world_spec(item))
    if _world_spec(item):
        return RankValue("device")
    return torch.device("cuda", 0) if torch.cuda.is_available() else torch.device("cpu")


@pytest.fixture
def dist_tmp_path(request: pytest.FixtureRequest, tmp_path: Path) -> Path:
    """One directory shared by every rank of this test."""
    session = _inplace_session(request.node)
    if session is not None:
        return session.shared_dir(request.node.nodeid)
    return tmp_path


@pytest.fixture
def tmp_path(request: pytest.FixtureRequest, tmp_path: Path) -> Path:
    """pytest's tmp_path; for a world test run in place, one directory every rank sees.

    In the pool a world test's fixtures are made once and sent to every rank, so its
    ranks share one tmp_path; in place each rank's pytest would make its own, and a
    test that saves on every rank and loads on every rank would wait for ever.
    """
    session = _inplace_session(request.node)
    if session is not None and _world_spec(request.node) is not None:
        return session.shared_dir(request.node.nodeid)
    return tmp_path
