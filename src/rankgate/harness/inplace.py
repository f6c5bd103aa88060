"""In-place mode: pytest was started on every rank by torchrun, srun or mpirun.

One process group for the session; test bodies run directly on every rank.
Only rank 0 writes to the terminal (rank r > 0 writes to ``pytest.rank<r>.log``),
each rank writes its own JUnit file (``<name>.rank<r>.xml``, with the rank and the
world size as properties), and after every test the ranks exchange their outcomes
(through the store, see ``control``) so rank 0's summary and exit status count a
failure on any rank. world(n) with n different from the launched world is skipped
with a reason: in-place mode never runs a test on a subgroup, because a subgroup's
idle ranks would report a pass they did not earn.

A test that loses the group (destroys it, or breaks it with a backend error) fails,
and every rank joins a new group before the next test. A rank whose test hangs, or
outlives a failed peer by PEER_GRACE_S, prints its stacks, records that test and
every test not yet run (as "not run", red; one whose skip is known without running it
keeps its skip) in its JUnit file, tells the other ranks, and
exits: a process stuck in a collective cannot be freed any other way.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import NamedTuple

import pytest

from rankgate.harness import control, leaks, options, rankwords
from rankgate.harness.control import RunAborted
from rankgate.harness.hangwatch import HangWatch
from rankgate.harness.inplace_group import InPlaceGroup
from rankgate.harness.pool import collective_timeout
from rankgate.harness.rankstate import (
    after_test_problems,
    breaks_process_group,
    destroy_subgroups,
    reset_state,
    seed_everything,
    set_collective_timeout,
)
from rankgate.harness.spec import WorldSpec
from rankgate.harness.stackwhere import where as stack_where
from rankgate.harness.testitem import seed_for_test, skip_at_test, test_timeout, world_spec
from rankgate.harness.verdict import reproduction_line
from rankgate.launch.env import LaunchEnv

EXIT_WAIT_S = 5.0
"""A rank that stops the run waits this long for the others to write their JUnit files."""
WHERE_WAIT_S = 2.0
"""A hung rank waits this long for the other hung ranks to say where they wait (the
ranks of one test time out together), to name the likely cause."""

WORST_FIRST = ("error", "failed", "skipped", "passed")


class Problem(NamedTuple):
    """A test that failed (or whose ranks disagreed) on ranks other than rank 0."""

    nodeid: str
    text: str
    counted: bool
    """Rank 0 failed it too, so its own report already counts it."""


def launcher_command(launch: LaunchEnv) -> str:
    """How to start this job's launcher again, for the reproduction line."""
    n, local = launch.world_size, launch.local_world_size
    if launch.launcher == "torchrun":
        if n == local:
            return f"torchrun --standalone --nproc-per-node={local}"
        return f"torchrun --nnodes={n // max(local, 1)} --nproc-per-node={local}"
    if launch.launcher == "slurm":
        return f"srun -n {n} python"
    if launch.launcher == "mpi":
        return f"mpirun -np {n} python"
    return f"mpiexec -n {n} python"


def add_section(report: pytest.TestReport, title: str, text: str) -> None:
    """Append a titled section to a failure report, whatever shape its longrepr has."""
    if hasattr(report.longrepr, "addsection"):
        report.longrepr.addsection(title, text)
    elif isinstance(report.longrepr, str):
        report.longrepr += f"\n{text}"


class AfterTestProblem(AssertionError):
    """A test that lost the process group or left processes running."""


class InPlaceSession:
    def __init__(self, config: pytest.Config, launch: LaunchEnv) -> None:
        self.config = config
        self.launch = launch
        self.default_timeout = options.default_timeout(config)
        self.base_seed = config.getoption("rankgate_seed")
        self._outcome: dict[str, tuple[str, str]] = {}
        self.problems: list[Problem] = []  # on rank 0
        # The real stderr, before pytest's capture swaps fd 2 during tests: hang stacks
        # written to the capture file would vanish with the process.
        self._hang_watch = HangWatch(launch.rank, os.fdopen(os.dup(2), "w"))
        self.log_dir = self._per_rank_files()
        self._shared_root = Path(os.environ.get("RANKGATE_SHARED_TMP", self.log_dir))
        self._run_dir: Path | None = None  # made when a test first asks for dist_tmp_path
        self._shared_dirs: dict[str, Path] = {}  # dist_tmp_path and tmp_path: one per test
        self._collect_errors: list[str] = []
        self._items: list[pytest.Item] = []
        self._index: dict[str, int] = {}
        self._last_index = -1
        self._group_trouble = False  # this rank's group was lost or broken in this test
        self._aborted: str | None = None
        self._join()

    # -- set-up ---------------------------------------------------------------------

    def _per_rank_files(self) -> Path:
        """Rank-suffixed JUnit path; the terminal of ranks > 0 goes to a log file."""
        rank = self.launch.rank
        xmlpath = self.config.option.xmlpath
        out_dir = (Path(xmlpath).parent if xmlpath else Path.cwd()).resolve()
        if xmlpath:
            path = Path(xmlpath)
            self.config.option.xmlpath = str(path.with_name(f"{path.stem}.rank{rank}{path.suffix}"))
        if rank != 0:
            out_dir.mkdir(parents=True, exist_ok=True)
            # Runs before the terminal reporter is created, which binds to sys.stdout.
            sys.stdout = open(out_dir / f"pytest.rank{rank}.log", "w", buffering=1)  # noqa: SIM115
        return out_dir

    def _join(self) -> None:
        """Open the store, join this run's generation in it, start the process group."""
        self.group = InPlaceGroup(self.launch, options.rendezvous_timeout(self.config))
        self.backend, self.has_gpus, self.device = (
            self.group.backend,
            self.group.has_gpus,
            self.group.device,
        )
        self.control = self.group.control

    def shared_dir(self, nodeid: str) -> Path:
        """An empty directory for this test, the same on every rank."""
        if nodeid in self._shared_dirs:  # tmp_path and dist_tmp_path: one directory
            return self._shared_dirs[nodeid]
        index = self._index.get(nodeid)
        if self._run_dir is None:
            self._run_dir = self._make_run_dir(index)
        path = self._run_dir / hashlib.sha1(nodeid.encode()).hexdigest()[:16]
        if self.launch.rank == 0:
            shutil.rmtree(path, ignore_errors=True)  # a rerun of the same test
            path.mkdir()
        # Nobody looks before rank 0 made it.
        self.control.broadcast(f"t{index}/tmp", True, test_index=index)
        self._shared_dirs[nodeid] = path
        return path

    def _make_run_dir(self, index: int | None) -> Path:
        """Rank 0 makes a new directory for this run and tells the others its name.

        Unique per run, so files an earlier run (or job) left in the shared root
        never show up in a test's ``dist_tmp_path``.
        """
        name = None
        if self.launch.rank == 0:
            self._shared_root.mkdir(parents=True, exist_ok=True)
            name = tempfile.mkdtemp(prefix="rankgate-dist-tmp-", dir=self._shared_root)
        return Path(self.control.broadcast("run_dir", name, test_index=index))

    def device_for(self, spec: WorldSpec | None):
        """The ``device`` fixture: cuda:<local rank> on GPUs, cpu for gloo tests."""
        import torch

        if self.device is None or (spec is not None and spec.backend == "gloo"):
            return torch.device("cpu")
        return self.device

    def reproduction_line(self, item: pytest.Item) -> str:
        seeded = world_spec(item) is not None  # plain tests are not seeded
        return reproduction_line(
            item.nodeid,
            self.launch.world_size,
            self.backend,
            seed_for_test(self.base_seed, item.nodeid) if seeded else None,
            self.base_seed,
            command=f"{launcher_command(self.launch)} -m pytest",
        )

    def pytest_sessionstart(self, session: pytest.Session) -> None:
        from _pytest.junitxml import xml_key

        xml = self.config.stash.get(xml_key, None)
        if xml is not None:  # merge-junit reads these: a missing rank is then a failure
            xml.add_global_property("rank", str(self.launch.rank))
            xml.add_global_property("world_size", str(self.launch.world_size))

    # -- collection -------------------------------------------------------------------

    def pytest_collectreport(self, report: pytest.CollectReport) -> None:
        if report.failed:
            text = str(report.longrepr).strip().splitlines()
            self._collect_errors.append(f"{report.nodeid}: " + "\n    ".join(text[-12:]))

    def pytest_collection_finish(self, session: pytest.Session) -> None:
        self._items = list(session.items)
        self._index = {item.nodeid: i for i, item in enumerate(self._items)}
        mine = ([item.nodeid for item in self._items], self._collect_errors)
        everyone = self.control.all_gather("collected", mine)
        ids = [i for i, _ in everyone]
        differing = [r for r in range(len(ids)) if ids[r] != ids[0]]
        if not differing:
            return
        lines = []
        for r in differing:
            only_here = sorted(set(ids[r]) - set(ids[0]))
            missing = sorted(set(ids[0]) - set(ids[r]))
            lines.append(
                f"rank {r} collected {len(ids[r])} tests, rank 0 {len(ids[0])}; "
                f"only on rank {r}: {only_here[:5]}; missing on rank {r}: {missing[:5]}"
            )
        for r in sorted({0, *differing}):
            log = "" if r == 0 else f" (its log: {self.log_dir / f'pytest.rank{r}.log'})"
            for error in everyone[r][1]:
                lines.append(f"rank {r} could not collect {error}{log}")
        raise pytest.UsageError(
            "rankgate in-place: ranks collected different tests, so their results "
            "cannot be merged:\n  " + "\n  ".join(lines)
        )

    # -- running ----------------------------------------------------------------------

    def skip_reason(self, item: pytest.Item) -> str | None:
        """Why this run skips the test, known before it starts (None: it runs)."""
        if item.get_closest_marker("launches") is not None:
            return (
                "starts pytest sessions or launchers of its own: run it without a launcher "
                f"(in place each of the {self.launch.world_size} ranks would start them)"
            )
        spec = world_spec(item)
        if spec is None:
            return None
        launched = f"{self.launch.world_size} rank(s) launched by {self.launch.launcher}"
        if spec.size != self.launch.world_size:
            return f"world({spec.size}) needs {spec.size} ranks; this run has {launched}"
        if spec.backend == "nccl" and not self.has_gpus:
            return f"backend 'nccl' requested; this run's process group is {self.backend}"
        return None

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtest_setup(self, item: pytest.Item) -> None:
        reason = self.skip_reason(item)
        if reason is not None:
            skip_at_test(reason)
        if world_spec(item) is not None:
            seed_everything(seed_for_test(self.base_seed, item.nodeid))

    def _timeout(self, item: pytest.Item) -> float:
        return test_timeout(item, self.default_timeout)

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_call(self, item: pytest.Item):
        timeout = self._timeout(item)
        index = self._index.get(item.nodeid)
        # A hang here would block every rank: dump all stacks and exit so the launcher
        # tears the job down instead of waiting for the CI's global timeout.
        self._hang_watch.arm(
            timeout,
            on_timeout=lambda stacks, why: self._stop_run(item, stacks, why),
            peer_failed=None if index is None else lambda: self._peer_failed(index),
        )
        children = set(leaks.children())
        saved_env, saved_cwd = dict(os.environ), os.getcwd()
        try:
            return (yield)
        finally:
            self._hang_watch.disarm()
            problems = after_test_problems(children)
            self._group_trouble |= not self._group_alive()
            # What a pool's rank undoes after every test (environment, cwd, default dtype,
            # subgroups): a world test must find the same process here as there.
            if world_spec(item) is not None:
                reset_state(saved_env, saved_cwd)
            else:
                destroy_subgroups()
            if problems:
                raise AfterTestProblem("\n".join(problems))

    @staticmethod
    def _group_alive() -> bool:
        import torch.distributed as dist

        return dist.is_initialized()

    def _peer_failed(self, index: int) -> str | None:
        for r in range(self.launch.world_size):
            if r != self.launch.rank and self.control.peek(control.failed_key(index, r)):
                return f"rank {r} failed"
        return None

    def _stop_run(self, item: pytest.Item, stacks: str, why: str) -> None:
        """From the hang watcher, just before this rank exits: record, tell, wait.

        The main thread is stuck in the test, so nothing else touches pytest's state;
        the rank's JUnit file is written now because the session will never finish.
        """
        from _pytest.junitxml import xml_key

        from rankgate.harness.failure_repr import failure_repr

        rank = self.launch.rank
        reason = f"rank {rank} stopped the run: {item.nodeid} {why}"
        self.control.set(control.ABORT_KEY, reason)
        headline = rankwords.with_cause(
            rankwords.outcomes_line({rank: "hung"}, notes={"hung": f"{why}; the rank exited"}),
            rankwords.hang_cause(self._where_hung_ranks_wait(item, stacks)),
        )
        report = pytest.TestReport(
            nodeid=item.nodeid,
            location=item.location,
            keywords=dict.fromkeys(item.keywords, 1),
            outcome="failed",
            longrepr=failure_repr(
                item,
                f"{headline}\nPython stacks of every thread:\n{stacks}\n"
                f"{self.reproduction_line(item)}",
            ),
            when="call",
            user_properties=[("rankgate.verdict", "hung")],
        )
        item.ihook.pytest_runtest_logreport(report=report)
        self._last_index = self._index.get(item.nodeid, self._last_index)
        not_run = self._report_not_run(reason)
        xml = self.config.stash.get(xml_key, None)
        if xml is not None:
            xml.pytest_sessionfinish()
        self._hang_watch.write(
            f"[rank {rank}] rankgate: {reason}; {not_run} later test(s) not run"
        )
        self.control.set(control.exited_key(rank), True)
        self._wait_for_peers_to_exit()

    def _where_hung_ranks_wait(self, item: pytest.Item, stacks: str) -> dict:
        """Where this rank waits, and where the others that hung in this test say they do."""
        key = f"where/{item.nodeid}/"
        mine = stack_where(stacks, str(item.path))
        self.control.set(key + str(self.launch.rank), mine)
        others = [key + str(r) for r in range(self.launch.world_size) if r != self.launch.rank]
        deadline = time.monotonic() + WHERE_WAIT_S
        while time.monotonic() < deadline and not self.control.store.check(others):
            time.sleep(0.05)
        wheres = {self.launch.rank: mine}
        for r in range(self.launch.world_size):
            if r != self.launch.rank and self.control.store.check([key + str(r)]):
                wheres[r] = self.control.peek(key + str(r))
        return wheres

    def _wait_for_peers_to_exit(self) -> None:
        others = [r for r in range(self.launch.world_size) if r != self.launch.rank]
        keys = [control.exited_key(r) for r in others]
        deadline = time.monotonic() + EXIT_WAIT_S
        while time.monotonic() < deadline and not self.control.store.check(keys):
            time.sleep(0.05)

    def _report_not_run(self, reason: str) -> int:
        """Every test after the last one started: an error saying why it did not run."""
        rest = self._items[self._last_index + 1 :]
        for item in rest:
            skip = self._known_skip(item)
            path, lineno, _ = item.location
            report = pytest.TestReport(
                nodeid=item.nodeid,
                location=item.location,
                keywords=dict.fromkeys(item.keywords, 1),
                outcome="failed" if skip is None else "skipped",
                longrepr=f"{rankwords.NOT_RUN_PREFIX}{reason}"
                if skip is None
                else (path, (lineno or 0) + 1, f"Skipped: {skip}"),
                when="setup",
            )
            item.ihook.pytest_runtest_logreport(report=report)
        self._last_index = len(self._items) - 1
        return len(rest)

    def _known_skip(self, item: pytest.Item) -> str | None:
        """The skip a test not run would have had, where it is known without running it."""
        from _pytest.skipping import evaluate_skip_marks

        try:
            marked = evaluate_skip_marks(item)
        except Exception:  # a skipif condition that raises: running it would say so
            return None
        return marked.reason if marked is not None else self.skip_reason(item)

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_makereport(self, item: pytest.Item, call):
        report = yield
        if call.excinfo is not None and breaks_process_group(call.excinfo.value):
            self._group_trouble = True
        if report.failed:
            add_section(report, "rankgate reproduce", self.reproduction_line(item))
            index = self._index.get(item.nodeid)
            if index is not None and report.when in ("setup", "call"):
                self.control.set(control.failed_key(index, self.launch.rank), True)
        return report

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        if report.failed:
            outcome = "failed" if report.when == "call" else "error"
        else:
            outcome = "skipped" if report.skipped else "passed"
        text = str(report.longrepr) if report.longrepr is not None else ""
        current = self._outcome.get(report.nodeid)
        spent = (current[2] if current else 0.0) + report.duration  # until it ended
        if current is None or WORST_FIRST.index(outcome) < WORST_FIRST.index(current[0]):
            self._outcome[report.nodeid] = (outcome, text, spent)
        else:
            self._outcome[report.nodeid] = (*current[:2], spent)

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_protocol(self, item: pytest.Item, nextitem):
        # Longer than the hang watch's timeout, which ends a hang with stacks.
        seconds = collective_timeout(self._timeout(item))
        if self._group_alive():
            set_collective_timeout(seconds)
        index = self._index.get(item.nodeid)
        result = yield
        if index is not None and self._aborted is None:
            self._last_index = index
            self._exchange(item, index, seconds)
        return result

    def _exchange(self, item: pytest.Item, index: int, seconds: float) -> None:
        """Every rank's outcome of this test; a new group where any rank lost its own."""
        outcome, text, spent = self._outcome.pop(item.nodeid, ("passed", "", 0.0))
        mine = (outcome, text, self._group_trouble, spent)
        self._group_trouble = False
        try:
            everyone = self.control.all_gather(f"t{index}/outcome", mine, timeout=seconds)
        except (RunAborted, TimeoutError) as exc:
            self._stop_gracefully(item, str(exc))
            return
        if self.launch.rank == 0:
            self._judge(item.nodeid, [(o, t, spent) for o, t, _, spent in everyone])
        if any(trouble for _, _, trouble, _ in everyone):
            self.group.renew()

    def _stop_gracefully(self, item: pytest.Item, reason: str) -> None:
        """Another rank stopped the run: finish this session, the rest as not run."""
        self._aborted = reason
        self.control.set(control.ABORT_KEY, reason)  # a timeout here stops the others too
        if self.launch.rank == 0:
            self.problems.append(Problem(item.nodeid, reason, counted=False))
        item.session.shouldstop = f"rankgate: {reason}"

    def _judge(self, nodeid: str, everyone: list) -> None:
        outcomes = {r: o for r, (o, _, _) in enumerate(everyone)}
        failed = {r: spent for r, (o, _, spent) in enumerate(everyone) if o == "failed"}
        line = rankwords.outcomes_line(outcomes, first=rankwords.first_failed(failed))
        # A failure of rank 0's own is in its report and counted already.
        counted = outcomes[0] in ("failed", "error")
        bad = [r for r, o in outcomes.items() if o in ("failed", "error") and r != 0]
        if bad:
            text = "".join(f"\n--- rank {r}: {everyone[r][0]} ---\n{everyone[r][1]}" for r in bad)
            self.problems.append(Problem(nodeid, f"{line}{text}", counted))
        elif len(set(outcomes.values())) > 1 and not counted:
            self.problems.append(Problem(nodeid, f"ranks disagree: {line}", counted=False))

    # -- reporting --------------------------------------------------------------------

    def pytest_terminal_summary(self, terminalreporter) -> None:
        if not self.problems:
            return
        tr = terminalreporter
        tr.section("rankgate: failures on other ranks", sep="=", red=True, bold=True)
        for nodeid, text, counted in self.problems:
            tr.write_line(f"FAILED {nodeid}: {text}")
            if counted:
                continue
            # Counted in the final line and the short summary, never in rank 0's JUnit file.
            report = pytest.TestReport(
                nodeid=nodeid,
                location=(nodeid.split("::")[0], None, nodeid),
                keywords={},
                outcome="failed",
                longrepr=text.splitlines()[0],
                when="call",
            )
            tr.stats.setdefault("failed", []).append(report)
            for outcome in ("passed", "skipped"):
                if outcome in tr.stats:
                    reports = tr.stats[outcome]
                    tr.stats[outcome] = [r for r in reports if getattr(r, "nodeid", "") != nodeid]

    @pytest.hookimpl(tryfirst=True)
    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        if self._aborted is not None:
            self._report_not_run(self._aborted)  # before the JUnit file is written

    @pytest.hookimpl(trylast=True, specname="pytest_sessionfinish")
    def _count_other_ranks(self, session: pytest.Session) -> None:
        if (self.problems or self._aborted) and session.exitstatus == pytest.ExitCode.OK:
            session.exitstatus = pytest.ExitCode.TESTS_FAILED

    def pytest_unconfigure(self) -> None:
        import torch.distributed as dist

        if self._aborted is not None:
            self.control.set(control.exited_key(self.launch.rank), True)
            return
        if dist.is_initialized():
            dist.destroy_process_group()
        try:
            # Launchers kill the job when one rank exits non-zero: hold every rank here
            # until rank 0 has written its summary.
            self.control.all_gather("end", None)
            # Then each rank's last store operation is a write; once rank 0 has seen them
            # all, nobody reads the store again and its file can go (a read of a deleted
            # FileStore would recreate the file and wait in it for ever).
            self.control.set(f"left/{self.launch.rank}", True)
            if self.launch.rank == 0:
                others = {r: f"left/{r}" for r in range(self.launch.world_size)}
                self.control.wait(others, what="left")
        except (RunAborted, TimeoutError):
            return
        if self.launch.rank == 0:
            if self._run_dir is not None:
                shutil.rmtree(self._run_dir, ignore_errors=True)
            if self.group.store_path is not None:
                self.group.store_path.unlink(missing_ok=True)
