"""Pools under pytest-xdist: one rank budget for all workers, and world tests sent to
the workers whose pools fit them.

The controller (the pytest process that runs ``-n N``) makes the budget's directory in
the run's shared temp directory, hands it to each worker through ``workerinput`` and
says the rule once in the report header. Each worker's :class:`.registry.PoolRegistry`
takes its ranks from it (:mod:`.rankbudget`).

With xdist's default ``--dist load`` the controller schedules through
:class:`WorldAffinityScheduling`: a worker gets the tests of the world sizes it already
has pools for first, then a world size no other worker has taken, then plain tests,
and only then a share of another worker's world size. Each world size's pool is then
started about once in the whole run, where plain ``load`` made every worker start one
per world size. Other ``--dist`` modes keep their own order; the budget holds there too.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from rankgate.harness.item_settings import SPEC_KEY
from rankgate.harness.pool.rankbudget import BUDGET_DIR_KEY, RankBudget, usable_cpus

GROUPS_FILE = "world-groups.json"
"""Beside the budget: each collected test's world group ("2/gloo"), written by the
workers after collection, read by the controller's scheduler."""

XDIST_RANKS_PLUGIN = "rankgate-xdist-ranks"


def rank_budget_of_worker(config: pytest.Config) -> RankBudget | None:
    """This xdist worker's share of the run's budget; None outside xdist."""
    given = getattr(config, "workerinput", {}).get(BUDGET_DIR_KEY)
    if not given:
        return None
    directory, limit = given
    return RankBudget(Path(directory), int(limit))


def max_ranks(config: pytest.Config) -> int:
    """``--rankgate-max-ranks`` (ini ``rankgate_max_ranks``), else the CPUs the run may use."""
    raw = config.getoption("rankgate_max_ranks", None) or config.getini("rankgate_max_ranks")
    if not raw:
        return usable_cpus()
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

    def directory(self) -> Path:
        if self._directory is None:
            base = self.config._tmp_path_factory.getbasetemp()  # the run's shared temp dir
            self._directory = base / "rankgate-ranks"
            self._directory.mkdir(parents=True, exist_ok=True)
        return self._directory

    def pytest_report_header(self) -> str:
        return (
            f"rankgate: -n {self.workers}: the workers' pools hold at most {self.limit} "
            "rank processes at once (--rankgate-max-ranks, default: the CPUs this run may "
            "use); a larger world runs alone; a worker gives back idle pools while another "
            "waits"
        )

    def pytest_terminal_summary(self, terminalreporter) -> None:
        peak = RankBudget(self.directory(), self.limit).peak()
        if peak:  # a run without world tests has nothing to say
            terminalreporter.write_line(
                f"rankgate: the workers' pools held at most {peak} rank processes at "
                f"once (budget {self.limit})"
            )

    @pytest.hookimpl(optionalhook=True)
    def pytest_configure_node(self, node) -> None:
        node.workerinput[BUDGET_DIR_KEY] = [str(self.directory()), self.limit]

    # xdist_schedule.WorldAffinityScheduling (each world size to one worker) is not
    # installed: under -n 2 a run of two world(2) tests never started a test with it (both
    # workers idle until the run's timeout). xdist's own scheduling runs, within the budget.


class XdistWorker:
    """An xdist worker's side: tell the controller each test's world group."""

    def __init__(self, config: pytest.Config) -> None:
        self.directory = Path(config.workerinput[BUDGET_DIR_KEY][0])

    @pytest.hookimpl(tryfirst=True)  # before xdist sends the collection to the controller
    def pytest_collection_finish(self, session: pytest.Session) -> None:
        groups = {}
        for item in session.items:
            spec = item.stash.get(SPEC_KEY, None)
            groups[item.nodeid] = f"{spec.size}/{spec.backend}" if spec is not None else None
        path = self.directory / GROUPS_FILE
        tmp = path.with_name(f"{GROUPS_FILE}.{os.getpid()}")
        tmp.write_text(json.dumps(groups))
        os.replace(tmp, path)  # every worker collects the same tests: the last one stays


def register(config: pytest.Config, workers: str) -> None:
    """The controller's or a worker's side, when this pytest runs under ``-n``."""
    if workers:
        config.pluginmanager.register(XdistController(config, workers), XDIST_RANKS_PLUGIN)
    elif BUDGET_DIR_KEY in getattr(config, "workerinput", {}):
        config.pluginmanager.register(XdistWorker(config), XDIST_RANKS_PLUGIN)
