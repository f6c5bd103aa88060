"""In-place mode: pytest was started on every rank by torchrun, srun or mpirun.

One process group for the session; test bodies run directly on every rank.
Only rank 0 writes to the terminal (rank r > 0 writes to ``pytest.rank<r>.log``),
each rank writes its own JUnit file (``<name>.rank<r>.xml``, with the rank and the
world size as properties), and after every test the ranks exchange their outcomes
(through the store, see ``control``) so rank 0's summary and exit status count a
failure on any rank. world(n) with n different from the launched world is skipped
with a reason: in-place mode never runs a test on a subgroup, because a subgroup's
idle ranks would report a pass they did not earn.

Every rank shows and counts each test's cross-rank verdict (``verdict``), so
``-x``/``--maxfail`` stop every rank after the same test. Beside its JUnit file each
rank appends each test's outcome to its results file as the test ends
(``results_writer``): a rank killed outright loses at most the test it was in, and
merge-junit reads the rest from that file.

A test that loses the group (destroys it, or breaks it with a backend error) fails,
and every rank joins a new group before the next test. A rank whose test hangs, or
outlives a failed peer by PEER_GRACE_S, and a rank that receives SIGTERM or SIGHUP (a
launcher stopping the survivors of a dead rank) or SIGINT (Ctrl-C), prints its stacks
or names the dead ranks, records that test and every test not yet run (as "not run", red;
one whose skip is known without running it keeps its skip) in its JUnit file, prints its
summary, ends its child processes, tells the other ranks, and exits: a process stuck in a
collective cannot be freed any other way. A signal with no dead peer behind it marks the rank's
JUnit file interrupted (``rankgate.interrupted``): merge-junit and the report then say
INCOMPLETE.
"""

from __future__ import annotations

import hashlib
import os
import shlex
import shutil
import signal
import socket
import sys
import tempfile
import threading
import time
import traceback
from collections.abc import Sequence
from datetime import timedelta
from pathlib import Path
from typing import NamedTuple, NoReturn

import pytest
from _pytest.runner import runtestprotocol

from rankgate.harness import leaks, locks, options, verdict_lines
from rankgate.harness.failure_repr import failure_repr, item_report, not_run_report
from rankgate.harness.inplace import collection, control, tempdirs
from rankgate.harness.inplace.control import PeerGone, RunAborted
from rankgate.harness.inplace.group import InPlaceGroup
from rankgate.harness.inplace.hangwatch import HangWatch
from rankgate.harness.inplace.results_writer import ResultsWriter, results_path
from rankgate.harness.inplace.signalwatch import SignalWatch
from rankgate.harness.inplace.verdict import (
    DISAGREE_PREFIX,
    RankResult,
    cross_rank_problem,
    own_result,
    plain_report,
    report_text,
    verdict_reports,
)
from rankgate.harness.item_settings import (
    NOT_ADOPTED_KEY,
    collective_timeout,
    seed_for_test,
    skip_at_test,
    test_timeout,
    world_spec,
)
from rankgate.harness.rankstate import (
    EnvironmentSnapshot,
    WorkerSetupError,
    after_test_problems,
    breaks_process_group,
    call_worker_setup,
    destroy_subgroups,
    hint_for,
    reset_state,
    same_examples_on_every_rank,
    seed_everything,
    set_collective_timeout,
)
from rankgate.harness.spec import WorldSpec
from rankgate.harness.stacks import where as stack_where
from rankgate.harness.verdict import disagreement_status, reproduction_line, run_options
from rankgate.harness.verdict_lines import (
    INTERRUPTED_PREFIX,
    INTERRUPTED_PROPERTY,
    INTERRUPTED_TEST_PROPERTY,
    NODE_ID_PROPERTY,
)
from rankgate.launch.env import LaunchEnv

EXIT_WAIT_S = 5.0
"""A rank that stops the run waits this long for the others to write their JUnit files."""
SIGNAL_PEER_WAIT_S = 1.0
"""After a stop signal, how long a rank waits to hear that each peer got it too; a peer
that says nothing (and whose process is gone, where it runs on this host) is dead."""
STORE_TIMEOUT_WHEN_STOPPING = timedelta(seconds=2)
"""The store may be gone with the launcher: a stopping rank never waits long on it."""
WHERE_WAIT_S = 2.0
"""A hung rank waits this long for the other hung ranks to say where they wait (the
ranks of one test time out together), to name the likely cause."""


class Problem(NamedTuple):
    """A test that failed (or whose ranks disagreed) on another rank than this one."""

    nodeid: str
    text: str


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


def junit_names(nodeid: str) -> tuple[str, str]:
    """The classname and name pytest's JUnit writer gives this test."""
    from _pytest.junitxml import mangle_test_address

    names = mangle_test_address(nodeid)
    return ".".join(names[:-1]), names[-1]


def add_section(report: pytest.TestReport, title: str, text: str) -> None:
    """Append a titled section to a failure report, whatever shape its longrepr has."""
    if hasattr(report.longrepr, "addsection"):
        report.longrepr.addsection(title, text)
    elif isinstance(report.longrepr, str):
        report.longrepr += f"\n{text}"


def _cwd_relative(config: pytest.Config, nodeid: str) -> str:
    """A node id relative to where pytest was started (pytest 9.2 takes a NodeId)."""
    try:
        from _pytest.nodeid import coerce_node_id
    except ImportError:  # before pytest 9.2: a str
        return config.cwd_relative_nodeid(nodeid)
    return str(config.cwd_relative_nodeid(coerce_node_id(nodeid)))


class AfterTestProblem(AssertionError):
    """A test that lost the process group or left processes running."""


def _crashed(ranks: Sequence[int]) -> str:
    """How a rank that ended inside a test without sending its result is named."""
    return (
        f"{verdict_lines.ranks(ranks)} crashed (ended without a result: os._exit, a signal or "
        "the OOM killer)"
    )


class InPlaceSession:
    def __init__(self, config: pytest.Config, launch: LaunchEnv) -> None:
        self.config = config
        self.launch = launch
        self.default_timeout = options.default_timeout(config)
        self.base_seed = config.getoption("rankgate_seed")
        self.problems: list[Problem] = []
        self._failed_tests: list[tuple[str, list[int]]] = []  # node id, ranks that failed it
        self._current: pytest.Item | None = None
        self._current_logged = False  # its own reports are in the JUnit file already
        self._current_start = 0.0  # time.monotonic() when the current test began
        self._tests_failed = 0  # on any rank: what -x and --maxfail count, alike on every rank
        self._results: ResultsWriter | None = None
        self._log_shown = None  # pytest_runtest_logreport of every plugin but JUnit's
        self._stop_lock = threading.Lock()
        self._stopping = False
        # Set when a watcher thread decides to stop the run, before it asks the store
        # anything: the main thread then parks instead of going on (a new group's
        # rendezvous with a peer that left blocks in C++ holding the GIL, which would
        # freeze the watchers until the launcher's SIGKILL).
        self._stop_begun = threading.Event()
        # Held while the main thread shows a test's verdict and while a watcher takes the
        # current test over: one of them reports it, never both.
        self._verdict_lock = threading.Lock()
        self._peers: list[tuple[str, int]] = []  # each rank's (host, pid)
        self._signals = SignalWatch(self._on_signal)
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
        # -rA/-rP show a passed test's output: then every rank sends its output, not
        # only a failure's, so rank 0's terminal shows all of them as the pool's does.
        self._shows_passes = bool({"A", "P"} & set(config.getoption("reportchars") or ""))
        # Why a signal cut the run short (no rank had failed), and the test it stopped.
        self._interrupted: tuple[str, pytest.Item | None] | None = None
        self._call_worker_setup()
        self._join()
        self._warn_of_split_temp_dirs()

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

    def _call_worker_setup(self) -> None:
        """The ini option rankgate_worker_setup, on this rank before it joins the group,
        as each rank of a pool calls it: a failure stops the run before any test."""
        spec = options.worker_setup(self.config)
        try:
            call_worker_setup(spec, self.launch.rank)
        except WorkerSetupError as exc:
            raise pytest.UsageError(str(exc)) from None
        except Exception:
            raise pytest.UsageError(
                f"ini option rankgate_worker_setup = {spec} failed on rank {self.launch.rank}:\n"
                + traceback.format_exc()
            ) from None

    def _join(self) -> None:
        """Open the store, join this run's generation in it, start the process group."""
        self.group = InPlaceGroup(self.launch, options.rendezvous_timeout(self.config))
        self.backend, self.has_gpus, self.device = (
            self.group.backend,
            self.group.has_gpus,
            self.group.device,
        )
        self.control = self.group.control

    def _warn_of_split_temp_dirs(self) -> None:
        split = tempdirs.split_temp_dirs(self.control.all_gather("tempdir", tempdirs.this_rank()))
        if split:
            self.config.issue_config_time_warning(pytest.PytestWarning(split), stacklevel=2)

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
        options = run_options(list(self.config.invocation_params.args))
        return reproduction_line(
            item.nodeid,
            self.launch.world_size,
            self.backend,
            seed_for_test(self.base_seed, item.nodeid) if seeded else None,
            self.base_seed,
            command=shlex.join([*launcher_command(self.launch).split(), "-m", "pytest", *options]),
            timeout=self.config.getoption("rankgate_timeout"),
        )

    def _xml(self):
        from _pytest.junitxml import xml_key

        return self.config.stash.get(xml_key, None)

    def pytest_sessionstart(self, session: pytest.Session) -> None:
        xml = self._xml()
        others = [session]  # -x/--maxfail count the verdicts, alike on every rank (below)
        if xml is not None:  # merge-junit reads these: a missing rank is then a failure
            xml.add_global_property("rank", str(self.launch.rank))
            xml.add_global_property("world_size", str(self.launch.world_size))
            if self._junit_logging_unset():
                xml.logging = "out-err"  # every rank's output in its file, as pool mode does
            self._results = ResultsWriter(
                results_path(self.config.option.xmlpath),
                self.launch.rank,
                self.launch.world_size,
            )
            others.append(xml)
        self._log_shown = self.config.pluginmanager.subset_hook_caller(
            "pytest_runtest_logreport", remove_plugins=others
        )
        self._signals.start()

    def _junit_logging_unset(self) -> bool:
        # pytest's default ("no"), from the ini file, -o or nowhere alike: pytest has no
        # public way to tell them apart (config.inicfg is deprecated since pytest 9.2)
        return self.config.getini("junit_logging") == "no"

    # -- collection -------------------------------------------------------------------

    def pytest_collectreport(self, report: pytest.CollectReport) -> None:
        if report.failed:
            text = str(report.longrepr).strip().splitlines()
            self._collect_errors.append(f"{report.nodeid}: " + "\n    ".join(text[-12:]))

    def pytest_collection_finish(self, session: pytest.Session) -> None:
        mine = collection.collected(
            session, self._collect_errors, (socket.gethostname(), os.getpid())
        )
        everyone = self.control.all_gather("collected", mine)
        self._peers = [c.where for c in everyone]
        collection.make_one(session, everyone, self.log_dir)  # UsageError: they differ
        self._items = list(session.items)
        self._index = {item.nodeid: i for i, item in enumerate(self._items)}

    # -- running ----------------------------------------------------------------------

    def skip_reason(self, item: pytest.Item) -> str | None:
        """Why this run skips the test, known before it starts (None: it runs)."""
        n = self.launch.world_size
        if item.get_closest_marker("launches") is not None:
            not_adopted = item.stash.get(NOT_ADOPTED_KEY, None)
            what = (
                f"runs its own way, not on rankgate's ranks ({not_adopted[0]}): {not_adopted[1]}"
                if not_adopted is not None
                else "starts pytest sessions or launchers of its own"
            )
            return (
                f"{what}: run it without a launcher (in place each of the "
                f"{verdict_lines.count(n, 'rank')} would start them)"
            )
        spec = world_spec(item)
        if spec is None:
            return None
        launched = f"{verdict_lines.count(n, 'rank')} launched by {self.launch.launcher}"
        if spec.size != n:
            needs = verdict_lines.count(spec.size, "rank")
            return f"world({spec.size}) needs {needs}; this run has {launched}"
        if spec.backend == "nccl" and not self.has_gpus:
            return f"backend 'nccl' requested; this run's process group is {self.backend}"
        return None

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtest_setup(self, item: pytest.Item) -> None:
        reason = self.skip_reason(item)
        if reason is not None:
            skip_at_test(reason)
        if world_spec(item) is not None:
            seed = seed_for_test(self.base_seed, item.nodeid)
            seed_everything(seed)
            same_examples_on_every_rank(getattr(item, "obj", None), seed)

    def run_step(self, item: pytest.Item, seconds: float, what: str, step) -> None:
        """``step()`` before the test's own timeout starts, under ``seconds`` of its own
        (an adopted set-up): past them this rank stops the run as for a hang, naming
        ``what``."""
        self._hang_watch.arm(
            seconds,
            on_timeout=lambda stacks, why: self._stop_run(item, stacks, why),
            what=what,
        )
        try:
            step()
        finally:
            self._hang_watch.disarm()

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
        saved_env, saved_cwd = EnvironmentSnapshot(), os.getcwd()
        spec = world_spec(item)
        backend = spec.backend if spec is not None else self.backend
        try:
            with self.group.default_group_for(backend, collective_timeout(timeout)):
                return (yield)
        finally:
            self._hang_watch.disarm()
            problems = after_test_problems(children)
            self._group_trouble |= not self._group_alive()
            # What a pool's rank undoes after every test (environment, cwd, default dtype;
            # subgroups after the exchange): a world test finds the same process here.
            if spec is not None:
                reset_state(saved_env, saved_cwd)
            if problems:
                raise AfterTestProblem("\n".join(problems))

    @staticmethod
    def _group_alive() -> bool:
        import torch.distributed as dist

        return dist.is_initialized()

    def _peer_failed(self, index: int) -> str | None:
        """What the hang watch polls: "rank N failed" for the first peer that failed."""
        failed = self._ranks_that_failed(index)
        return f"rank {failed[0]} failed" if failed else None

    def _ranks_that_failed(self, index: int) -> list[int]:
        """The other ranks that marked test ``index`` failed (control.failed_key)."""
        return [
            r for r in range(self.launch.world_size)
            if r != self.launch.rank and self.control.peek(control.failed_key(index, r))
        ]  # fmt: skip

    def _stop_run(self, item: pytest.Item, stacks: str, why: str) -> None:
        """From the hang watcher, just before this rank exits: record, tell, wait."""
        self._stop_begun.set()
        if not self._claim_stop():
            threading.Event().wait()  # a signal is stopping this rank: it records and exits
        rank = self.launch.rank
        reason = f"rank {rank} stopped the run: {item.nodeid} {why}"
        failed: dict[int, str] = {}
        try:
            self.control.set(control.ABORT_KEY, reason)
            failed = self._failed_peers(item)
            wheres = self._where_hung_ranks_wait(item, stacks, failed)
        except Exception:  # the store is gone: name where this rank waits only
            wheres = {rank: stack_where(stacks, str(item.path))}
        notes = {"hung": f"{why}; the rank exited"}
        cause = verdict_lines.hang_cause(wheres)
        headline = verdict_lines.with_cause(
            verdict_lines.outcomes_line({rank: "hung"}, notes=notes), cause
        )
        own_text = f"{headline}\nPython stacks of every thread:\n{stacks}"
        shown_text = None
        if failed:  # the terminal names the peers' failures first, with their texts
            outcomes = {**dict.fromkeys(failed, "failed"), rank: "hung"}
            sections = [f"--- rank {r}: failed ---\n{text}" for r, text in failed.items()]
            sections.append(f"--- rank {rank}: hung ---\nPython stacks of every thread:\n{stacks}")
            line = verdict_lines.with_cause(
                verdict_lines.outcomes_line(outcomes, notes=notes), cause
            )
            shown_text = "\n".join([line, *sections])
        self._stop(item, reason, own_text, verdict="hung", shown_text=shown_text)

    def _failed_peers(self, item: pytest.Item) -> dict[int, str]:
        """The other ranks that failed ``item``, with their failures' texts: the results
        they sent for the exchange, which they entered once the test ended there."""
        index = self._index.get(item.nodeid)
        if index is None:
            return {}
        failed = {}
        for r in self._ranks_that_failed(index):
            sent = self.control.peek(control.outcome_key(index, r))
            failed[r] = RankResult(*sent).text if sent is not None else ""
        return failed

    def _claim_stop(self) -> bool:
        """True for the one watcher (hang or signal) that records this rank's stop."""
        with self._stop_lock:
            if self._stopping:
                return False
            self._stopping = True
            return True

    def _on_signal(self, signum: int) -> None:
        """From the signal watch: a launcher (or CI) stops this rank; record, tell, exit."""
        with self._verdict_lock:  # this test's verdict is shown by the main thread or here
            self._stop_begun.set()
            item = self._current
        if not self._claim_stop():
            return  # the hang watch is stopping this rank already, and exits when done
        name = signal.Signals(signum).name
        rank = self.launch.rank
        try:
            self.control.store.set_timeout(STORE_TIMEOUT_WHEN_STOPPING)
            self.control.set(control.stopped_key(rank), name)
            dead = self._dead_peers()
        except Exception:
            dead = []  # the store went with the launcher: say only what this rank knows
        if dead:
            cause = f"{_crashed(dead)}, and the launcher sent {name} to rank {rank}"
        else:
            who = "the launcher or the CI stopped the job"
            if signum == signal.SIGINT:
                who = "Ctrl-C, or the launcher passing it on"
            cause = f"rank {rank} received {name} ({who})"
        where = f"while {item.nodeid} ran" if item is not None else "between tests"
        text, verdict = f"{cause} {where}", "crashed"
        if not dead:  # no rank failed: the run was cut short, and its files must say so
            self._interrupted = (text, item)
            text, verdict = f"{INTERRUPTED_PREFIX}{text}", "interrupted"
        self._stop(item, f"{cause} {where}", text, verdict=verdict, gone=dead)
        os._exit(128 + signum)

    def _dead_peers(self) -> list[int]:
        """Peers that gave no sign after the stop signal and whose process is gone."""
        others = [r for r in range(self.launch.world_size) if r != self.launch.rank]
        deadline = time.monotonic() + SIGNAL_PEER_WAIT_S
        while True:
            silent = [
                r
                for r in others
                if not self.control.store.check([control.stopped_key(r)])
                and not self.control.store.check([control.exited_key(r)])
            ]
            gone = [r for r in silent if not self._may_be_running(r)]
            if gone == silent or time.monotonic() > deadline:
                return gone
            time.sleep(0.05)

    def _may_be_running(self, rank: int) -> bool:
        """False when ``rank``'s process is known to be gone (it runs on this host)."""
        if rank >= len(self._peers):
            return False
        host, pid = self._peers[rank]
        if host != socket.gethostname():
            return True  # cannot look; silence alone decides after SIGNAL_PEER_WAIT_S
        return leaks.running(pid)

    def _stop(
        self,
        item: pytest.Item | None,
        reason: str,
        text: str,
        *,
        verdict: str,
        gone: Sequence[int] = (),
        shown_text: str | None = None,
    ) -> None:
        """Record ``item`` as failed with ``text`` (the terminal shows ``shown_text``
        when given), the rest as not run, write the JUnit file, print the summary, end
        this rank's children, tell the others, wait for them (but not for the ranks in
        ``gone``, whose processes are known to have ended).

        Runs in the thread that claimed the stop (a watcher, while the main thread is
        stuck or parked; or the main thread, when a peer's process ended during the
        exchange), so nothing else touches pytest's state; the session never finishes.
        """
        rank = self.launch.rank
        # This rank exits next: a lock file that only its existence makes a lock (torch's
        # FileBaton) would hold every later run that takes it.
        held = locks.release(locks.survey([os.getpid(), *leaks.children()]), [])
        if held:
            text = f"{text}\n{held}"
            shown_text = None if shown_text is None else f"{shown_text}\n{held}"
            self._hang_watch.write(f"[rank {rank}] rankgate: {held}")
        capman = self.config.pluginmanager.get_plugin("capturemanager")
        captured = ("", "")
        if capman is not None:  # the test's output so far, and the terminal back for us
            try:
                capman.suspend_global_capture(in_=True)
                captured = capman.read_global_capture()
            except Exception:
                pass
        try:
            self.control.store.set_timeout(STORE_TIMEOUT_WHEN_STOPPING)
            self.control.set(control.ABORT_KEY, reason)
        except Exception:
            pass  # the store is gone; the others learn it from the launcher
        if item is not None:
            report = self._stop_report(item, text, captured, verdict)
            shown = (
                report
                if shown_text is None
                else self._stop_report(item, shown_text, captured, verdict)
            )
            if self._current_logged:  # its own result is in the JUnit file already
                self._log_shown(report=shown)
            else:
                self._log_both(item, [report], shown=[shown])
            self._last_index = self._index.get(item.nodeid, self._last_index)
        not_run = self._report_not_run(reason)
        xml = self._xml()
        if xml is not None:
            if self._interrupted is not None:
                why, running = self._interrupted
                xml.add_global_property(INTERRUPTED_PROPERTY, why)
                if running is not None:
                    test = "::".join(junit_names(running.nodeid))
                    xml.add_global_property(INTERRUPTED_TEST_PROPERTY, test)
            xml.pytest_sessionfinish()
            self._close_results()
        self._print_summary(reason)
        self._end_children()
        self._hang_watch.write(f"[rank {rank}] rankgate: {reason}; {not_run}")
        try:
            self.control.set(control.exited_key(rank), True)
            if self._wait_for_peers_to_exit(gone) and self.group.store_path is not None:
                # Each rank's last store operation was its "exited" (a dead one's was
                # earlier): nobody reads the FileStore again, and a killed run must not
                # leave it in the temp dir.
                self.group.store_path.unlink(missing_ok=True)
        except Exception:
            pass

    def _stop_report(
        self, item: pytest.Item, text: str, captured: tuple[str, str], verdict: str
    ) -> pytest.TestReport:
        """The failure a stopping rank records for the test it was in."""
        return item_report(
            item,
            outcome="failed",
            longrepr=failure_repr(item, f"{text}\n{self.reproduction_line(item)}"),
            when="call",
            sections=[
                (f"Captured {name} call", out)
                for name, out in zip(("stdout", "stderr"), captured, strict=True)
                if out
            ],
            user_properties=[("rankgate.verdict", verdict)],
            duration=time.monotonic() - self._current_start if self._current is item else 0.0,
        )

    def _print_summary(self, reason: str) -> None:
        """What pytest prints at the end of a session, for a session that ends here."""
        tr = self.config.pluginmanager.get_plugin("terminalreporter")
        if tr is None:
            return
        try:
            tr.write_line("")
            self.config.hook.pytest_terminal_summary(
                terminalreporter=tr, exitstatus=pytest.ExitCode.TESTS_FAILED, config=self.config
            )
            tr.write_sep("!", f"rankgate: {reason}", red=True)
            tr.summary_stats()
            tr._tw.flush()
        except Exception as exc:  # the process exits next: say why the summary is short
            self._hang_watch.write(f"[rank {self.launch.rank}] rankgate: no summary: {exc!r}")

    @staticmethod
    def _end_children() -> None:
        """End every process this rank started (forkservers, pool workers, helpers):
        the rank exits now, and they would outlive it under PID 1."""
        tree, todo = [], [os.getpid()]
        while todo:
            found = list(leaks.children(todo.pop()))
            tree += found
            todo += found
        for sig, wait in ((signal.SIGTERM, 1.0), (signal.SIGKILL, 0.0)):
            for pid in tree:
                try:
                    os.kill(pid, sig)
                except (ProcessLookupError, PermissionError):
                    pass
            deadline = time.monotonic() + wait
            while time.monotonic() < deadline and any(Path(f"/proc/{p}").exists() for p in tree):
                leaks.reap(tree)
                time.sleep(0.05)
            leaks.reap(tree)

    def _where_hung_ranks_wait(
        self, item: pytest.Item, stacks: str, failed: Sequence[int] = ()
    ) -> dict:
        """Where this rank waits, and where the others that hung in this test say they do
        (the ranks that ``failed`` it are not waited for: they are not in it any more)."""
        key = f"where/{item.nodeid}/"
        mine = stack_where(stacks, str(item.path))
        self.control.set(key + str(self.launch.rank), mine)
        others = [
            key + str(r)
            for r in range(self.launch.world_size)
            if r != self.launch.rank and r not in failed
        ]
        deadline = time.monotonic() + WHERE_WAIT_S
        while time.monotonic() < deadline and not self.control.store.check(others):
            time.sleep(0.05)
        wheres = {self.launch.rank: mine}
        for r in range(self.launch.world_size):
            if r != self.launch.rank and self.control.store.check([key + str(r)]):
                wheres[r] = self.control.peek(key + str(r))
        return wheres

    def _wait_for_peers_to_exit(self, gone: Sequence[int] = ()) -> bool:
        """True when every other rank but those ``gone`` said it exited within EXIT_WAIT_S."""
        others = [r for r in range(self.launch.world_size) if r not in (self.launch.rank, *gone)]
        keys = [control.exited_key(r) for r in others]
        deadline = time.monotonic() + EXIT_WAIT_S
        while time.monotonic() < deadline:
            if self.control.store.check(keys):
                return True
            time.sleep(0.05)
        return False

    def _report_not_run(self, reason: str) -> str:
        """Every test after the last one started: "not run" saying why (a known skip stays).
        Returns how many of each, as merge-junit counts them ("12 later tests not run, 1
        skipped")."""
        rest = self._items[self._last_index + 1 :]
        skipped = 0
        for item in rest:
            skip = self._known_skip(item)
            if skip is None:
                report = not_run_report(item, reason)
            else:
                path, lineno, _ = item.location
                skipped_at = (path, (lineno or 0) + 1, f"Skipped: {skip}")
                report = item_report(item, outcome="skipped", longrepr=skipped_at, when="setup")
            self._log_both(item, [report])
            skipped += skip is not None
        self._last_index = len(self._items) - 1
        words = f"{verdict_lines.count(len(rest) - skipped, 'later test')} not run"
        return words + (f", {skipped} skipped" if skipped else "")

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
            index = self._index.get(item.nodeid)
            if index is not None and report.when in ("setup", "call"):
                self.control.set(control.failed_key(index, self.launch.rank), True)
            add_section(report, "rankgate reproduce", self.reproduction_line(item))
            hint = hint_for(call.excinfo.value) if call.excinfo is not None else ""
            if hint:
                add_section(report, "rankgate hint", hint)
        return report

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtest_protocol(self, item: pytest.Item, nextitem) -> bool:
        """Run the phases unlogged, exchange, then log own results and the verdict."""
        # Longer than the hang watch's timeout, which ends a hang with stacks.
        seconds = collective_timeout(self._timeout(item))
        if self._group_alive():
            set_collective_timeout(seconds)
        index = self._index.get(item.nodeid)
        item.ihook.pytest_runtest_logstart(nodeid=item.nodeid, location=item.location)
        self._current, self._current_logged = item, False
        self._current_start = time.monotonic()  # a stop's record of it keeps its duration
        if self._results is not None:
            self._results.begin(*junit_names(item.nodeid))
        own = runtestprotocol(item, nextitem=nextitem, log=False)
        self._park_if_stopping()
        self._log_own(item, own)
        self._current_logged = True
        everyone = None
        if index is not None and self._aborted is None:
            self._last_index = index
            everyone = self._exchange(item, index, seconds, own)
        # A launcher's signal during the exchange (a peer crashed): its watcher reports
        # this test, naming the crash; a second verdict here would count it twice.
        self._park_if_stopping()
        # After the exchange every rank has finished the test: none is still connecting
        # to a group this one destroys (see reset_state).
        destroy_subgroups(self.group.kept_groups())
        shown = own if everyone is None else verdict_reports(item, own, everyone, self.launch.rank)
        with self._verdict_lock:
            if not self._stop_begun.is_set():
                for report in shown:
                    self._log_shown(report=report)
                self._current = None
        self._park_if_stopping()
        self._count_failure(item, shown)
        item.ihook.pytest_runtest_logfinish(nodeid=item.nodeid, location=item.location)
        return True

    def _park_if_stopping(self) -> None:
        """A watcher thread records this test and ends the process: wait for that."""
        if self._stop_begun.is_set():
            threading.Event().wait()

    def _log_own(self, item: pytest.Item, reports: list[pytest.TestReport]) -> None:
        """This rank's own reports: into its JUnit file and its results file."""
        reports = [plain_report(item, r) for r in reports]
        xml = self._xml()
        if xml is not None:
            if reports:  # merge-junit names the test as pytest does, not as JUnit mangles it
                node = xml.node_reporter(reports[0])
                if (NODE_ID_PROPERTY, item.nodeid) not in node.properties:
                    node.add_property(NODE_ID_PROPERTY, item.nodeid)
            for report in reports:
                xml.pytest_runtest_logreport(report=report)
        if self._results is not None:
            mine = own_result(reports)
            classname, name = junit_names(item.nodeid)
            failed = [r for r in reports if r.failed or r.skipped]
            message = ""
            if failed and getattr(failed[0].longrepr, "reprcrash", None) is not None:
                message = failed[0].longrepr.reprcrash.message
            elif failed:
                message = report_text(failed[0]).split("\n", 1)[0]
            self._results.end(
                {
                    "classname": classname,
                    "name": name,
                    "nodeid": item.nodeid,
                    # as the JUnit file says it: an expected failure is no plain skip
                    "outcome": "xfailed" if mine.xfail == "xfailed" else mine.outcome,
                    "message": message,
                    "text": mine.text,
                    "time": sum(r.duration for r in reports),
                    # The last phase's report carries every phase's captured output.
                    "stdout": reports[-1].capstdout if reports else "",
                    "stderr": reports[-1].capstderr if reports else "",
                }
            )

    def _log_both(
        self,
        item: pytest.Item,
        reports: list[pytest.TestReport],
        shown: list[pytest.TestReport] | None = None,
    ) -> None:
        """A report this rank makes for itself (not run, hung): its files, and its terminal
        (``shown`` there instead, when given)."""
        self._log_own(item, reports)
        shown = reports if shown is None else shown
        for report in shown:
            self._log_shown(report=report)
        self._count_failure(item, shown)

    def _count_failure(self, item: pytest.Item, shown: list[pytest.TestReport]) -> None:
        """-x and --maxfail count tests failed on any rank, so every rank stops together."""
        if not any(r.failed and not hasattr(r, "wasxfail") for r in shown):
            return
        self._tests_failed += 1
        item.session.testsfailed += 1
        maxfail = self.config.getoption("maxfail")
        if maxfail and self._tests_failed >= maxfail:
            item.session.shouldfail = (
                f"stopping after {self._tests_failed} failures (counted on every rank)"
            )

    def _exchange(
        self, item: pytest.Item, index: int, seconds: float, own: list[pytest.TestReport]
    ) -> list[RankResult] | None:
        """Every rank's result of this test; a new group where any rank lost its own."""
        mine = own_result(own, all_output=self._shows_passes)
        mine = mine._replace(group_trouble=self._group_trouble)
        self._group_trouble = False
        try:
            # Each rank's value stays at control.outcome_key(index, rank): _failed_peers reads it.
            gathered = self.control.all_gather(
                f"t{index}/outcome", tuple(mine), timeout=seconds, gone=self._ended_here
            )
        except (RunAborted, TimeoutError) as exc:
            self._stop_gracefully(item, str(exc))
            return None
        except PeerGone as exc:
            self._stop_for_crashed_peers(item, exc.ranks)
        everyone = [RankResult(*result) for result in gathered]
        self._note_failure(item, everyone)
        problem = cross_rank_problem(everyone, self.launch.rank)
        if problem is not None:
            self.problems.append(Problem(item.nodeid, problem))
        if any(result.group_trouble for result in everyone):
            self._park_if_stopping()
            self.group.renew()
        return everyone

    def _ended_here(self, ranks: list[int]) -> list[int]:
        """Of ``ranks``, those known to have ended: on this host, their process is gone
        (a rank whose host and pid this one never learned is not presumed dead)."""
        return [r for r in ranks if r < len(self._peers) and not self._may_be_running(r)]

    def _stop_for_crashed_peers(self, item: pytest.Item, dead: list[int]) -> NoReturn:
        """Peers died in this test without a result (os._exit, a signal, the OOM killer):
        record it and end now, as when the launcher's signal says so, without waiting for
        that signal (mpirun's SIGKILL follows its SIGTERM within a second)."""
        with self._verdict_lock:
            self._stop_begun.set()
        if not self._claim_stop():
            threading.Event().wait()  # a signal's watcher records this rank and exits it
        cause = f"{_crashed(dead)} while {item.nodeid} ran"
        self._stop(item, cause, cause, verdict="crashed", gone=dead)
        os._exit(pytest.ExitCode.TESTS_FAILED)

    def _note_failure(self, item: pytest.Item, everyone: list[RankResult]) -> None:
        """The ranks that failed this test (or errored), for the run's last line."""
        if verdict_lines.xfailed_as_one({r: res.xfail for r, res in enumerate(everyone)}):
            return
        bad = [r for r, res in enumerate(everyone) if res.outcome in ("failed", "error")]
        if bad:
            self._failed_tests.append((item.nodeid, bad))

    def _torchrun_note(self, tr) -> None:
        """Rank 0's line under torchrun, in its summary: torchrun's own summary follows
        the run, and its "Root Cause" is the first rank to exit: every rank exits 1 when
        any rank failed a test, so that rank is often not the one that failed."""
        if self.launch.launcher != "torchrun" or self.launch.rank != 0 or not self._failed_tests:
            return
        ranks = sorted({r for _, bad in self._failed_tests for r in bad})
        ids = ", ".join(nodeid for nodeid, _ in self._failed_tests[:3])
        more = ", ..." if len(self._failed_tests) > 3 else ""
        tr.write_line(
            f"rankgate: {verdict_lines.count(len(self._failed_tests), 'test')} failed on "
            f'{verdict_lines.ranks(ranks)}: {ids}{more} (torchrun\'s "Root Cause" after the run '
            "is the first rank to exit, not the rank that failed: every rank exits 1 when any "
            "rank fails a test)",
            red=True,
        )

    def _stop_gracefully(self, item: pytest.Item, reason: str) -> None:
        """Another rank stopped the run: finish this session, the rest as not run."""
        self._aborted = reason
        self.control.set(control.ABORT_KEY, reason)  # a timeout here stops the others too
        self.problems.append(Problem(item.nodeid, reason))
        item.session.shouldstop = f"rankgate: {reason}"

    # -- reporting --------------------------------------------------------------------

    def pytest_report_teststatus(self, report: pytest.TestReport):
        return disagreement_status(report)

    def pytest_terminal_summary(self, terminalreporter) -> None:
        tr = terminalreporter
        if self.problems:
            tr.section("rankgate: failures on other ranks", sep="=", red=True, bold=True)
        for nodeid, text in self.problems:
            # pytest's word for the test: no rank failed a test whose ranks disagree
            word = "ERROR" if text.startswith(DISAGREE_PREFIX) else "FAILED"
            where = _cwd_relative(self.config, nodeid)  # as pytest's own summary says it
            tr.write_line(f"{word} {where}: {text.splitlines()[0]}")
        self._torchrun_note(tr)

    @pytest.hookimpl(tryfirst=True)
    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        if self._aborted is not None:
            self._report_not_run(self._aborted)  # before the JUnit file is written

    def _close_results(self) -> None:
        """The JUnit file holds everything now: the results file can go."""
        if self._results is not None:
            self._results.close(remove=True)
            self._results = None

    @pytest.hookimpl(trylast=True, specname="pytest_sessionfinish")
    def pytest_sessionfinish_last(self, session: pytest.Session) -> None:
        self._close_results()  # junitxml has written this rank's file by now
        if (self.problems or self._aborted) and session.exitstatus == pytest.ExitCode.OK:
            session.exitstatus = pytest.ExitCode.TESTS_FAILED

    def pytest_unconfigure(self) -> None:
        import torch.distributed as dist

        self._signals.stop()

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
