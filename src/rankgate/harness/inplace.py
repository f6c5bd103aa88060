"""In-place mode: pytest was started on every rank by torchrun, srun or mpirun.

One process group for the session; test bodies run directly on every rank.
Only rank 0 writes to the terminal (rank r > 0 writes to ``pytest.rank<r>.log``),
each rank writes its own JUnit file (``<name>.rank<r>.xml``), and after every
test the ranks exchange their outcomes so rank 0's summary and exit status
count a failure on any rank. world(n) with n different from the launched world
is skipped with a reason: in-place mode never runs a test on a subgroup, because
a subgroup's idle ranks would report a pass they did not earn.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import sys
import tempfile
from datetime import timedelta
from pathlib import Path
from typing import NamedTuple

import pytest

from rankgate.harness import options
from rankgate.harness.hangwatch import HangWatch
from rankgate.harness.pool import collective_timeout
from rankgate.harness.spec import WorldSpec
from rankgate.harness.verdict import reproduction_line
from rankgate.launch.env import LaunchEnv

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
        out_dir = self._per_rank_files()
        self._shared_root = Path(os.environ.get("RANKGATE_SHARED_TMP", out_dir))
        self._run_dir: Path | None = None  # made when a test first asks for dist_tmp_path
        self._init_process_group()

    # -- set-up ---------------------------------------------------------------------

    def _per_rank_files(self) -> Path:
        """Rank-suffixed JUnit path; the terminal of ranks > 0 goes to a log file."""
        rank = self.launch.rank
        xmlpath = self.config.option.xmlpath
        out_dir = Path(xmlpath).parent if xmlpath else Path.cwd()
        if xmlpath:
            path = Path(xmlpath)
            self.config.option.xmlpath = str(path.with_name(f"{path.stem}.rank{rank}{path.suffix}"))
        if rank != 0:
            out_dir.mkdir(parents=True, exist_ok=True)
            # Runs before the terminal reporter is created, which binds to sys.stdout.
            sys.stdout = open(out_dir / f"pytest.rank{rank}.log", "w", buffering=1)  # noqa: SIM115
        return out_dir

    def _init_process_group(self) -> None:
        import torch
        import torch.distributed as dist

        launch = self.launch
        gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
        use_nccl = gpus >= launch.local_world_size
        self.backend = "nccl" if use_nccl else "gloo"
        self.device = torch.device("cuda", launch.local_rank) if use_nccl else torch.device("cpu")
        # Bounds the rendezvous only: each test sets its collectives' timeout.
        timeout = timedelta(seconds=options.rendezvous_timeout(self.config))
        kwargs = {"rank": launch.rank, "world_size": launch.world_size, "timeout": timeout}
        if use_nccl:
            torch.cuda.set_device(self.device)
        if not dist.is_initialized():
            if os.environ.get("MASTER_ADDR") and os.environ.get("MASTER_PORT"):
                dist.init_process_group(self.backend, init_method="env://", **kwargs)
            else:
                store = dist.FileStore(str(self._store_path()), launch.world_size)
                dist.init_process_group(self.backend, store=store, **kwargs)
        # Outcomes travel over gloo so a wedged GPU cannot stop the verdict exchange.
        self.control = dist.new_group(backend="gloo") if use_nccl else dist.group.WORLD

    def _store_path(self) -> Path:
        explicit = os.environ.get("RANKGATE_STORE")
        if explicit:
            return Path(explicit)
        safe = hashlib.sha1(self.launch.job_id.encode()).hexdigest()[:16]
        return Path(tempfile.gettempdir()) / f"rankgate-{self.launch.launcher}-{safe}.store"

    def shared_dir(self, nodeid: str) -> Path:
        """An empty directory for this test, the same on every rank (a collective)."""
        import torch.distributed as dist

        if self._run_dir is None:
            self._run_dir = self._make_run_dir()
        path = self._run_dir / hashlib.sha1(nodeid.encode()).hexdigest()[:16]
        if self.launch.rank == 0:
            shutil.rmtree(path, ignore_errors=True)  # a rerun of the same test
            path.mkdir()
        dist.barrier(group=self.control)  # nobody looks before rank 0 made it
        return path

    def _make_run_dir(self) -> Path:
        """Rank 0 makes a new directory for this run and tells the others its name.

        Unique per run, so files an earlier run (or job) left in the shared root
        never show up in a test's ``dist_tmp_path``.
        """
        import torch.distributed as dist

        name = [None]
        if self.launch.rank == 0:
            self._shared_root.mkdir(parents=True, exist_ok=True)
            name = [tempfile.mkdtemp(prefix="rankgate-dist-tmp-", dir=self._shared_root)]
        dist.broadcast_object_list(name, src=0, group=self.control)
        return Path(name[0])

    def reproduction_line(self, item: pytest.Item) -> str:
        from rankgate.harness.plugin import SPEC_KEY, seed_for_test

        seeded = item.stash.get(SPEC_KEY, None) is not None  # plain tests are not seeded
        return reproduction_line(
            item.nodeid,
            self.launch.world_size,
            self.backend,
            seed_for_test(self.base_seed, item.nodeid) if seeded else None,
            self.base_seed,
            command=f"{launcher_command(self.launch)} -m pytest",
        )

    # -- collection -------------------------------------------------------------------

    def pytest_collection_finish(self, session: pytest.Session) -> None:
        import torch.distributed as dist

        mine = [item.nodeid for item in session.items]
        everyone: list[list[str] | None] = [None] * self.launch.world_size
        dist.all_gather_object(everyone, mine, group=self.control)
        differing = [r for r, ids in enumerate(everyone) if ids != everyone[0]]
        if differing:
            lines = []
            for r in differing:
                only_here = sorted(set(everyone[r]) - set(everyone[0]))
                missing = sorted(set(everyone[0]) - set(everyone[r]))
                lines.append(
                    f"rank {r} collected {len(everyone[r])} tests, rank 0 {len(everyone[0])}; "
                    f"only on rank {r}: {only_here[:5]}; missing on rank {r}: {missing[:5]}"
                )
            raise pytest.UsageError(
                "rankgate in-place: ranks collected different tests, so their results "
                "cannot be merged:\n  " + "\n  ".join(lines)
            )

    # -- running ----------------------------------------------------------------------

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtest_setup(self, item: pytest.Item) -> None:
        from rankgate.harness.plugin import SPEC_KEY, seed_for_test, skip_at_test
        from rankgate.harness.worker import seed_everything

        spec: WorldSpec | None = item.stash.get(SPEC_KEY, None)
        if spec is None:
            return
        launched = f"{self.launch.world_size} rank(s) launched by {self.launch.launcher}"
        if spec.size != self.launch.world_size:
            skip_at_test(f"world({spec.size}) needs {spec.size} ranks; this run has {launched}")
        if spec.backend == "nccl" and self.backend != "nccl":
            skip_at_test(f"backend 'nccl' requested; this run's process group is {self.backend}")
        if spec.backend == "gloo" and self.backend != "gloo":
            # A gloo pool's ranks see no GPUs; ranks launched on GPUs cannot be made so.
            skip_at_test(
                f"backend 'gloo' requested (CPU ranks); this run's ranks have GPUs and a "
                f"{self.backend} process group: launch with CUDA_VISIBLE_DEVICES= to run it"
            )
        seed_everything(seed_for_test(self.base_seed, item.nodeid))

    def _timeout(self, item: pytest.Item) -> float:
        from rankgate.harness.plugin import SPEC_KEY

        spec = item.stash.get(SPEC_KEY, None)
        return (spec.timeout if spec else None) or self.default_timeout

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_call(self, item: pytest.Item):
        timeout = self._timeout(item)
        # A hang here would block every rank: dump all stacks and exit so the launcher
        # tears the job down instead of waiting for the CI's global timeout.
        self._hang_watch.arm(
            timeout, on_timeout=lambda stacks: self._record_hang(item, timeout, stacks)
        )
        try:
            return (yield)
        finally:
            self._hang_watch.disarm()

    def _record_hang(self, item: pytest.Item, timeout: float, stacks: str) -> None:
        """From the hang watcher, just before this rank exits: the test fails in JUnit.

        The main thread is stuck in the test, so nothing else touches pytest's state;
        the rank's JUnit file is written now because the session will never finish.
        """
        from _pytest.junitxml import xml_key

        from rankgate.harness.failure_repr import failure_repr

        report = pytest.TestReport(
            nodeid=item.nodeid,
            location=item.location,
            keywords=dict.fromkeys(item.keywords, 1),
            outcome="failed",
            longrepr=failure_repr(
                item,
                f"hung on rank {self.launch.rank}: did not finish within the test's timeout "
                f"of {timeout:g} s; the rank exited\nPython stacks of every thread:\n{stacks}\n"
                f"{self.reproduction_line(item)}",
            ),
            when="call",
            user_properties=[("rankgate.verdict", "hung")],
        )
        item.ihook.pytest_runtest_logreport(report=report)
        xml = self.config.stash.get(xml_key, None)
        if xml is not None:
            xml.pytest_sessionfinish()

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_makereport(self, item: pytest.Item, call):
        report = yield
        if report.failed:
            add_section(report, "rankgate reproduce", self.reproduction_line(item))
        return report

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        if report.failed:
            outcome = "failed" if report.when == "call" else "error"
        else:
            outcome = "skipped" if report.skipped else "passed"
        text = str(report.longrepr) if report.longrepr is not None else ""
        current = self._outcome.get(report.nodeid)
        if current is None or WORST_FIRST.index(outcome) < WORST_FIRST.index(current[0]):
            self._outcome[report.nodeid] = (outcome, text)

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_protocol(self, item: pytest.Item, nextitem):
        import torch.distributed as dist

        from rankgate.harness.worker import set_collective_timeout

        # Longer than the hang watch's timeout, which ends a hang with stacks; this
        # also bounds the outcome exchange below while a peer is still in its test.
        seconds = collective_timeout(self._timeout(item))
        set_collective_timeout(seconds)
        if self.control is not dist.group.WORLD:
            set_collective_timeout(seconds, self.control)
        result = yield
        mine = self._outcome.pop(item.nodeid, ("passed", ""))
        everyone: list[tuple[str, str] | None] = [None] * self.launch.world_size
        dist.all_gather_object(everyone, mine, group=self.control)
        if self.launch.rank == 0:
            self._judge(item.nodeid, everyone)
        return result

    def _judge(self, nodeid: str, everyone: list) -> None:
        outcomes = {r: o for r, (o, _) in enumerate(everyone)}
        # A failure of rank 0's own is in its report and counted already.
        counted = outcomes[0] in ("failed", "error")
        bad = [r for r, o in outcomes.items() if o in ("failed", "error") and r != 0]
        if bad:
            text = "".join(f"\n--- rank {r}: {everyone[r][0]} ---\n{everyone[r][1]}" for r in bad)
            self.problems.append(Problem(nodeid, f"failed on rank(s) {bad}{text}", counted))
        elif len(set(outcomes.values())) > 1 and not counted:
            detail = ", ".join(f"rank {r} {o}" for r, o in outcomes.items())
            self.problems.append(Problem(nodeid, f"ranks disagree: {detail}", counted=False))

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

    @pytest.hookimpl(trylast=True)
    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        if self.problems and session.exitstatus == pytest.ExitCode.OK:
            session.exitstatus = pytest.ExitCode.TESTS_FAILED

    def pytest_unconfigure(self) -> None:
        import torch.distributed as dist

        if dist.is_initialized():
            # Launchers kill the job when one rank exits non-zero: hold every rank
            # here until rank 0 has written its summary.
            dist.barrier(group=self.control)
            dist.destroy_process_group()
        if self._run_dir is not None and self.launch.rank == 0:
            shutil.rmtree(self._run_dir, ignore_errors=True)
