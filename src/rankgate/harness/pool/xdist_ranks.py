"""Pools under pytest-xdist: one rank budget and one fork server for all workers.

The controller (the pytest process that runs ``-n N``) makes the budget's directory in
the run's shared temp directory, hands it to each worker through ``workerinput`` and
says the rule once in the report header. Each worker's :class:`.registry.PoolRegistry`
takes its ranks from it (:mod:`.rankbudget`) and forks them from the run's one fork
server, recorded in the same directory (:mod:`.forkclient`); the controller owns that
server: it starts it as the session starts, before xdist spawns the workers, and stops
it at the end of the run. The workers themselves are forked from it (:mod:`.program`),
so the run imports torch once (ini ``rankgate_cold_workers`` starts them as new pythons).

xdist's own scheduling sends the tests: one that sent each world size to one worker left
a run of two world(2) tests idle under ``-n 2``.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from rankgate.harness.options import cold_workers
from rankgate.harness.pool.forkclient import ForkServerError, RunForkServer
from rankgate.harness.pool.program import environment_cold_reason
from rankgate.harness.pool.rankbudget import (
    BUDGET_DIR_KEY,
    RANKS_PER_CPU,
    RankBudget,
    default_max_ranks,
    usable_cpus,
)

XDIST_RANKS_PLUGIN = "rankgate-xdist-ranks"
FORK_SERVER_KEY = "rankgate_fork_server"
"""The key of ``workerinput`` that hands each worker the fork server's directory and owner."""


def rank_budget_of_worker(config: pytest.Config) -> RankBudget | None:
    """This xdist worker's share of the run's budget; None outside xdist."""
    given = getattr(config, "workerinput", {}).get(BUDGET_DIR_KEY)
    if not given:
        return None
    directory, limit = given
    return RankBudget(Path(directory), int(limit))


def fork_server_of_worker(config: pytest.Config) -> RunForkServer | None:
    """The run's fork server, as this xdist worker reaches it; None outside xdist."""
    given = getattr(config, "workerinput", {}).get(FORK_SERVER_KEY)
    if not given:
        return None
    directory, owner = given
    return RunForkServer(Path(directory), int(owner))


def _given_max_ranks(config: pytest.Config) -> str:
    return config.getoption("rankgate_max_ranks", None) or config.getini("rankgate_max_ranks")


def max_ranks(config: pytest.Config) -> int:
    """``--rankgate-max-ranks`` (ini ``rankgate_max_ranks``), else
    :data:`.rankbudget.RANKS_PER_CPU` per CPU the run may use."""
    raw = _given_max_ranks(config)
    if not raw:
        return default_max_ranks()
    try:
        value = int(raw)
    except ValueError:
        value = 0
    if value < 1:
        raise pytest.UsageError(
            f"rankgate_max_ranks = {raw!r}: give a whole number of rank processes >= 1 "
            "(the most that all xdist workers' pools hold at once)"
        )
    return value


class XdistController:
    """The xdist controller's side: the budget's directory, its rule, the scheduler."""

    def __init__(self, config: pytest.Config, workers: str) -> None:
        self.config = config
        self.workers = workers
        self.limit = max_ranks(config)
        self._directory: Path | None = None
        self._server_env: dict[str, str] | None = None
        """The environment the run's fork server started under (None: not started yet)."""

    def directory(self) -> Path:
        if self._directory is None:
            base = self.config._tmp_path_factory.getbasetemp()  # the run's shared temp dir
            self._directory = base / "rankgate-ranks"
            self._directory.mkdir(parents=True, exist_ok=True)
        return self._directory

    def pytest_report_header(self) -> str:
        if _given_max_ranks(self.config):
            source = "--rankgate-max-ranks"
        else:
            cpus = usable_cpus()
            source = f"{RANKS_PER_CPU} per CPU this run may use, {cpus} CPU{'s' * (cpus > 1)}"
        start = "forked from the run's fork server"
        if cold_workers(self.config):
            start = "cold (rankgate_cold_workers)"
        return (
            f"rankgate: -n {self.workers}: the workers' pools hold at most {self.limit} "
            f"rank processes at once ({source}); a larger world runs alone; a worker gives "
            f"back idle pools while another waits; workers start {start}"
        )

    def pytest_terminal_summary(self, terminalreporter) -> None:
        peak = RankBudget(self.directory(), self.limit).peak()
        if peak:  # a run without world tests has nothing to say
            terminalreporter.write_line(
                f"rankgate: the workers' pools held at most {peak} rank processes at "
                f"once (budget {self.limit})"
            )

    @pytest.hookimpl(tryfirst=True)
    def pytest_sessionstart(self) -> None:
        # The run's fork server imports torch while the workers start and collect,
        # before xdist spawns them: a worker that started it after its collection kept
        # every world test waiting for that import (1.5 s on 2 cores). A run with no world
        # test pays the import in the background.
        if not self.config.option.collectonly:
            self._server_env = dict(os.environ)
            RunForkServer(self.directory(), os.getpid()).start_early()

    @pytest.hookimpl(optionalhook=True)
    def pytest_xdist_setupnodes(self, specs: list) -> None:
        # Each worker imports torch as it collects (2 CPU-s each on 2 cores; -n 2 was
        # slower than the pool alone for it): forked from the run's fork server, which
        # has it imported, none does. xdist makes (and remakes, after a crash) its workers
        # from these very specs; one naming its own python keeps it.
        python = self._worker_python()
        if python is None:
            return
        for spec in specs:
            if spec.popen and not spec.python and not spec.via:
                spec.python = python

    def _worker_python(self) -> str | None:
        """The fork server's ``python`` for the workers, once it forks; None for cold ones."""
        if cold_workers(self.config):
            return None
        if changed := self._changed_since_the_server_started():
            self._say(
                f"rankgate: -n {self.workers}: the workers start cold, each importing torch "
                f"itself: {changed} (changed after the run's fork server started)"
            )
            return None
        server = RunForkServer(self.directory(), os.getpid())
        python = server.python()
        if python is None:
            return None
        try:
            server.ready()
        except ForkServerError:
            return None  # the workers start cold; a world test then names the error
        return python

    def _changed_since_the_server_started(self) -> str | None:
        """Why a worker forked from the server would start cold: a variable read at
        import that a plugin or conftest set since the server started; None if none."""
        if self._server_env is None:
            return None
        return environment_cold_reason(dict(os.environ), self._server_env)

    def _say(self, line: str) -> None:
        reporter = self.config.pluginmanager.get_plugin("terminalreporter")
        if reporter is not None:
            reporter.write_line(line)

    @pytest.hookimpl(optionalhook=True)
    def pytest_configure_node(self, node) -> None:
        node.workerinput[BUDGET_DIR_KEY] = [str(self.directory()), self.limit]
        node.workerinput[FORK_SERVER_KEY] = [str(self.directory()), os.getpid()]

    def pytest_sessionfinish(self) -> None:
        # Every worker has finished its session (and ended its pools): end the fork server
        # one of them started (if any did), before any end-of-run check looks for what
        # the run left behind (the server's folder among them).
        self._stop_fork_server()

    def pytest_unconfigure(self) -> None:
        self._stop_fork_server()  # a session that never finished (an internal error)

    def _stop_fork_server(self) -> None:
        if self._directory is not None:
            RunForkServer(self._directory, os.getpid()).stop()

    # No scheduler of rankgate's: one that sent each world size to one worker left a run of
    # two world(2) tests idle under -n 2. xdist's own scheduling runs, within the budget.


def register(config: pytest.Config, workers: str) -> None:
    """The controller's or a worker's side, when this pytest runs under ``-n``."""
    if workers:
        config.pluginmanager.register(XdistController(config, workers), XDIST_RANKS_PLUGIN)
