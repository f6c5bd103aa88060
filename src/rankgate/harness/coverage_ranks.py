"""Coverage across ranks (pytest-cov): the lines every rank ran count.

Pool: the ranks are processes pytest-cov does not know (it measures pytest's own
process, and from 7.0 no subprocesses). The controller hands its coverage settings to
the ranks it starts (``RANKGATE_COVERAGE`` in their environment); each rank measures
with them and, when its pool shuts down, saves a parallel data file (``data_suffix``)
beside the session's. The pools shut down as the test loop ends, before pytest-cov
combines the data files in that folder (its ``finish``), so the session's report
includes them. Under ``-n`` each xdist worker's ranks save beside the worker's file,
and the xdist controller combines them all as it does its workers'. A rank that is
killed (a hang, a crash) loses what it measured since its pool started.

In place (torchrun, srun, mpirun): pytest-cov runs in each rank's pytest. Each rank
measures into its own parallel data file; only rank 0 combines and reports, after
every other rank has saved (each leaves a marker file beside its data; rank 0 waits
for them). Before, every rank combined the same files at once, and one died with
"no such table: main.file". The data folder must be one every rank sees (the working
directory of a one-host launch); on several hosts without a shared folder, rank 0
reports what it has and names the ranks it did not wait for.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest

from rankgate.harness.pluginnames import COVERAGE_ENV as ENV
from rankgate.harness.pluginnames import INPLACE_PLUGIN, POOL_PLUGIN

COVERAGE_RANKS = "rankgate-coverage-ranks"
PYTEST_COV = "_cov"
"""pytest-cov's plugin object's name in pytest's plugin manager."""
WAIT_FOR_RANKS_S = 60.0

# --- in pytest -------------------------------------------------------------------------


def _controller(config: pytest.Config):
    plugin = config.pluginmanager.get_plugin(PYTEST_COV)
    return plugin, getattr(plugin, "cov_controller", None)


def rank_settings(controller) -> dict:
    return {
        "source": controller.cov_source,
        "branch": controller.cov_branch,
        "config_file": controller.cov_config,
        "data_file": os.path.abspath(controller.cov.config.data_file),
    }


class CoverageRanks:
    def __init__(self, config: pytest.Config) -> None:
        self.config = config
        self._set_env = False

    @pytest.hookimpl(trylast=True)  # after pytest-cov started (an xdist worker's: here)
    def pytest_sessionstart(self) -> None:
        _, controller = _controller(self.config)
        if controller is None or controller.cov is None:
            return
        if self.config.pluginmanager.get_plugin(POOL_PLUGIN) is not None:
            os.environ[ENV] = json.dumps(rank_settings(controller))
            self._set_env = True

    @pytest.hookimpl(wrapper=True, trylast=True)  # inside pytest-cov's, which combines after
    def pytest_runtestloop(self, session: pytest.Session):
        try:
            return (yield)
        finally:
            plugin, controller = _controller(self.config)
            if controller is not None and controller.cov is not None:
                pool = self.config.pluginmanager.get_plugin(POOL_PLUGIN)
                inplace = self.config.pluginmanager.get_plugin(INPLACE_PLUGIN)
                if pool is not None:
                    pool.shut_down()  # each rank saves its data file
                elif inplace is not None:
                    _one_report_in_place(plugin, controller, inplace)

    def pytest_unconfigure(self) -> None:
        if self._set_env:
            os.environ.pop(ENV, None)


def _one_report_in_place(plugin, controller, inplace) -> None:
    rank, world = inplace.launch.rank, inplace.launch.world_size
    data_file = Path(controller.cov.config.data_file).resolve()
    marker = f"{data_file.name}.rankgate-{inplace.run_id}.saved-rank"
    if rank != 0:
        controller.cov.stop()
        controller.cov.save()
        (data_file.parent / f"{marker}{rank}").write_text(str(os.getpid()))
        controller.finish = lambda: None  # saved; rank 0 combines
        plugin._is_worker = lambda session: True  # and reports
        return
    waiting = {r: data_file.parent / f"{marker}{r}" for r in range(1, world)}
    deadline = time.monotonic() + WAIT_FOR_RANKS_S
    while waiting and time.monotonic() < deadline:
        waiting = {r: p for r, p in waiting.items() if not p.exists()}
        time.sleep(0.05)
    for r in range(1, world):
        (data_file.parent / f"{marker}{r}").unlink(missing_ok=True)
    if waiting:
        ranks = ", ".join(map(str, waiting))
        import warnings

        warnings.warn(
            f"rankgate: coverage of rank(s) {ranks} is not in this report: no data file "
            f"saved in {data_file.parent} within {WAIT_FOR_RANKS_S:g} s (another host's "
            "folder?). Combine their files later with `coverage combine`",
            stacklevel=1,
        )


def register(config: pytest.Config) -> None:
    if config.pluginmanager.has_plugin(PYTEST_COV):
        config.pluginmanager.register(CoverageRanks(config), COVERAGE_RANKS)
