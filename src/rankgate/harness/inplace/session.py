"""In-place mode: pytest was started on every rank by torchrun, srun or mpirun.

One process group for the session; test bodies run directly on every rank.
Only rank 0 writes to the terminal (rank r > 0 writes to ``pytest.rank<r>.log``),
each rank writes its own JUnit file (``<name>.rank<r>.xml``, with the rank and the
world size as properties), and after every test the ranks exchange their outcomes
(through the store, see ``control``) so rank 0's summary and exit status count a
failure on any rank. The ranks share the tests out (``schedule``): world(k) tests with k
below the launched world run in sub-worlds of k ranks, each plain test on one rank with
no process group (as in the pool's controller); a rank runs, records and exchanges only
its share, with the ranks of its share. world(k) with k above the launched world is
skipped with a reason.

Every rank shows and counts each test's cross-rank verdict (``verdict``), so
``-x``/``--maxfail`` stop every rank after the same test. Beside its JUnit file each
rank appends each test's outcome to its results file as the test ends (``records``,
``rankgate.harness.rankfiles``): a rank killed outright loses at most the test it was in, and
merge-junit reads the rest from that file.

A test that loses the group (destroys it, or breaks it with a backend error) fails,
and every rank joins a new group before the next test. A rank whose test hangs, or
outlives a failed peer by PEER_GRACE_S, and a rank that receives SIGTERM or SIGHUP (a
launcher stopping the survivors of a dead rank) or SIGINT (Ctrl-C), stops the run:
``stop`` records that test and every test not yet run, tells the other ranks and exits.
"""

from __future__ import annotations

import os
import socket
import traceback
from pathlib import Path

import pytest
from _pytest.runner import runtestprotocol

from rankgate.harness import heap, ledger, options
from rankgate.harness.aftertest import AfterTestCheck
from rankgate.harness.failure_repr import failure_repr
from rankgate.harness.inplace import (
    collection,
    control,
    reproduce,
    run_id,
    schedule,
    summary,
    tempdirs,
)
from rankgate.harness.inplace.control import PeerGone, RunAborted
from rankgate.harness.inplace.group import InPlaceGroup
from rankgate.harness.inplace.hangwatch import HangWatch
from rankgate.harness.inplace.records import RankRecords, per_rank_files
from rankgate.harness.inplace.reruns import (
    attempt_of,
    properties,
    with_attempts,
    with_every_attempt,
)
from rankgate.harness.inplace.shares import ShareMixin, Stopped
from rankgate.harness.inplace.signalwatch import SignalWatch
from rankgate.harness.inplace.stop import RunningTest, RunStop
from rankgate.harness.inplace.summary import Problem
from rankgate.harness.inplace.tally import TALLY_PLUGIN, RunTally
from rankgate.harness.inplace.verdict import (
    BAD,
    Judged,
    judged,
    own_result,
    verdict_reports,
    with_ledger,
)
from rankgate.harness.item_settings import (
    collective_timeout,
    seed_for_test,
    skip_at_test,
    test_timeout,
    world_spec,
)
from rankgate.harness.output import TERMINAL_LIMIT, clipped
from rankgate.harness.rankstate import (
    EnvironmentSnapshot,
    WorkerSetupError,
    breaks_process_group,
    call_worker_setup,
    destroy_subgroups,
    hint_for,
    needs_default_group,
    reset_state,
    same_examples_on_every_rank,
    seed_everything,
)
from rankgate.launch.env import LaunchEnv


def add_section(report: pytest.TestReport, title: str, text: str) -> None:
    """Append a titled section to a failure report, whatever shape its longrepr has."""
    if hasattr(report.longrepr, "addsection"):
        report.longrepr.addsection(title, text)
    elif isinstance(report.longrepr, str):
        report.longrepr += f"\n{text}"


def _call_worker_setup(config: pytest.Config, rank: int) -> None:
    """The ini option rankgate_worker_setup, on this rank before it joins the group,
    as each rank of a pool calls it: a failure stops the run before any test."""
    spec = options.worker_setup(config)
    try:
        call_worker_setup(spec, rank)
    except WorkerSetupError as exc:
        raise pytest.UsageError(str(exc)) from None
    except Exception:
        raise pytest.UsageError(
            f"ini option rankgate_worker_setup = {spec} failed on rank {rank}:\n"
            + traceback.format_exc()
        ) from None


def _agree_on_run_id(channel: control.ControlChannel) -> str:
    """This launch's id, the same on every rank (``run_id``); a bad RANKGATE_RUN_ID stops
    the run before any test."""
    try:
        return run_id.agree(channel)
    except ValueError as exc:
        raise pytest.UsageError(str(exc)) from None


class AfterTestProblem(AssertionError):
    """A test that lost the process group or left processes running. Its report is its
    text alone: the frames of the hook that raised it say nothing of the test."""


class InPlaceSession(ShareMixin):
    """In-place mode's pytest hooks on one rank: set-up, each test on every rank and the
    exchange of outcomes, reporting, the session's end. A stop is ``RunStop``'s (stop.py)."""

    def __init__(self, config: pytest.Config, launch: LaunchEnv) -> None:
        self.config = config
        self.launch = launch
        self.default_timeout = options.default_timeout(config)
        self.reruns = options.reruns(config)
        self.flaky_policy = options.flaky_policy(config)
        self.attempt = 1  # of the running test: its store keys name it from the second on
        self.base_seed = config.getoption("rankgate_seed")
        self.problems: list[Problem] = []
        self._failed_tests: list[tuple[str, list[int]]] = []  # node id, ranks that failed it
        self.running = RunningTest()  # what a stop finds of the test in progress
        # The real stderr, before pytest's capture swaps fd 2 during tests: hang stacks
        # written to the capture file would vanish with the process.
        self.hang_watch = HangWatch(launch.rank, os.fdopen(os.dup(2), "w"))
        self.log_dir = per_rank_files(config, launch.rank)
        self._collect_errors: list[str] = []
        self.index: dict[str, int] = {}  # each test's place in the run, alike on every rank
        self.shares: dict[str, schedule.Share] = {}  # which ranks run each test (schedule)
        self.longest_timeout = 0.0  # of the run's tests: how long a peer may still be in one
        self._group_trouble = False  # this rank's group was lost or broken in this test
        self._aborted: str | None = None
        # -rA/-rP show a passed test's output: then every rank sends its output, not
        # only a failure's, so rank 0's terminal shows all of them as the pool's does.
        self._shows_passes = bool({"A", "P"} & set(config.getoption("reportchars") or ""))
        _call_worker_setup(config, launch.rank)
        self._join()
        self.run_id = _agree_on_run_id(self.control)
        self.records = RankRecords(config, launch, self.skip_reason, self.run_id)
        self.tally = RunTally(config, launch.rank, self.control, plan=self)
        config.pluginmanager.register(self.tally, TALLY_PLUGIN)  # next to the session's
        ledger.install(self.backend)
        self.stop = RunStop(
            config,
            launch,
            self.control,
            self.group,
            self.hang_watch,
            records=self.records,
            running=self.running,
            plan=self,
            tally=self.tally,
        )
        shared_root = Path(os.environ.get("RANKGATE_SHARED_TMP", self.log_dir))
        self.shared_dirs = tempdirs.SharedDirs(shared_root, launch.rank, self.control, self.run_id)
        self._signals = SignalWatch(self.stop.on_signal)
        tempdirs.warn_if_split(config, self.control)
        tempdirs.own_pytest_temp_root(config, launch.rank)

    # -- set-up ---------------------------------------------------------------------

    def _join(self) -> None:
        """Open the store, join this run's generation in it, start the process group."""
        group = self.group = InPlaceGroup(
            self.launch,
            options.rendezvous_timeout(self.config),
            options.subworld_local_rank(self.config),
        )
        self.backend, self.has_gpus, self.device = group.backend, group.has_gpus, group.device
        self.control = group.control

    def store_index(self, item: pytest.Item) -> int | str | None:
        """The running test's name in store keys (``t<index>/...``): its index in the
        run, and from its second attempt on, the attempt too, so no attempt reads an
        earlier one's outcomes (None for a test outside the run's list)."""
        index = self.index.get(item.nodeid)
        if index is None or self.attempt == 1:
            return index
        return f"{index}.{self.attempt}"

    def shared_dir(self, nodeid: str) -> Path:
        """An empty directory for this test, the same on every rank that runs it."""
        return self.shared_dirs.get(nodeid, self.index.get(nodeid), self.ranks_of(nodeid))

    def reproduction_line(self, item: pytest.Item) -> str:
        return reproduce.line(item, self.config, self.launch, self.backend, self.base_seed)

    def pytest_sessionstart(self, session: pytest.Session) -> None:
        self.records.start(session)
        self._signals.start()

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
        self.stop.peers = [c.where for c in everyone]
        collection.make_one(session, everyone, self.log_dir)  # UsageError: they differ
        planned = schedule.plan(session.items, self.launch.world_size, self.skip_reason)
        self.index = {item.nodeid: i for i, (item, _) in enumerate(planned)}
        self.shares = {item.nodeid: share for item, share in planned}
        self.run_tests = len(planned)  # the run's, not this rank's share (shares.py)
        self.longest_timeout = max((self._timeout(i) for i, _ in planned), default=0.0)
        session.items[:] = [item for item, share in planned if self.launch.rank in share.ranks]
        self.records.collected(session.items, self.ranks_of, self.group.body_backend, planned)
        heap.keep_out_of_collections(tests_ran=False)  # the test modules are in, none ran

    # -- running ----------------------------------------------------------------------

    def skip_reason(self, item: pytest.Item) -> str | None:
        """Why this run skips the test, known before it starts (None: it runs)."""
        return collection.skip_reason(item, self.launch, self.has_gpus, self.backend)

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
        self.hang_watch.arm(
            seconds,
            on_timeout=lambda stacks, why: self.stop.on_timeout(item, stacks, why),
            what=what,
        )
        try:
            step()
        finally:
            self.hang_watch.disarm()

    def _timeout(self, item: pytest.Item) -> float:
        return test_timeout(item, self.default_timeout)

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_call(self, item: pytest.Item):
        timeout = self._timeout(item)
        index = self.store_index(item)
        # A hang here would block every rank: dump all stacks and exit so the launcher
        # tears the job down instead of waiting for the CI's global timeout.
        self.hang_watch.arm(
            timeout,
            on_timeout=lambda stacks, why: self.stop.on_timeout(item, stacks, why),
            peer_failed=None if index is None else lambda: self._peer_failed(index),
        )
        check = AfterTestCheck()
        saved_env, saved_cwd = EnvironmentSnapshot(), os.getcwd()
        spec = world_spec(item)
        backend = spec.backend if spec is not None else self.backend
        try:
            with self.group.default_group_for(backend, collective_timeout(timeout)):
                return (yield)
        finally:
            self._group_trouble |= self.group.lost()  # a test that destroyed its default group
            try:
                # What a pool's rank undoes after every test (environment, cwd, default
                # dtype; subgroups after the exchange): a world test finds the same process
                # here. Still under the test's timeout, as the pool's task is: its CUDA
                # synchronize waits for the body's GPU work, which an NCCL collective the
                # peers called differently never finishes.
                if spec is not None:
                    reset_state(saved_env, saved_cwd)
            finally:
                self.hang_watch.disarm()
            problems = check.problems(self.group.current != schedule.NO_GROUP, item.funcargs)
            if problems:
                raise AfterTestProblem("\n".join(problems))

    def _peer_failed(self, index: int) -> str | None:
        """What the hang watch polls: "rank N failed" for the first peer that failed."""
        failed = self.ranks_that_failed(index)
        return f"rank {failed[0]} failed" if failed else None

    def ranks_that_failed(self, index: int) -> list[int]:
        """The other ranks of the running test that marked test ``index`` failed
        (control.failed_key)."""
        current = self.running.item
        ranks = self.ranks_of(current.nodeid) if current is not None else ()
        return [
            r for r in ranks
            if r != self.launch.rank and self.control.peek(control.failed_key(index, r))
        ]  # fmt: skip

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_makereport(self, item: pytest.Item, call):
        report = yield
        if call.excinfo is not None and breaks_process_group(call.excinfo.value):
            self._group_trouble = True
        if call.excinfo is not None and isinstance(call.excinfo.value, AfterTestProblem):
            report.longrepr = failure_repr(item, str(call.excinfo.value))  # no hook frames
        if report.failed:
            index = self.store_index(item)
            if index is not None and report.when in ("setup", "call"):
                self.control.set(control.failed_key(index, self.launch.rank), True)
            add_section(report, "rankgate reproduce", self.reproduction_line(item))
            hint = hint_for(call.excinfo.value) if call.excinfo is not None else ""
            if call.excinfo is not None and report.when == "call":
                exc = call.excinfo.value
                in_group = breaks_process_group(exc) or needs_default_group(exc)
                hint = self.every_rank_hint(item, ledger.now(), in_group) or hint
            if hint:
                add_section(report, "rankgate hint", hint)
        return report

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtest_protocol(self, item: pytest.Item, nextitem) -> bool:
        """Run the phases unlogged, exchange, then log own results and the verdict."""
        # Longer than the hang watch's timeout, which ends a hang with stacks.
        seconds = collective_timeout(self._timeout(item))
        stopped = self.control.aborted()
        if stopped is not None and self._aborted is None:  # another sub-world stopped the run
            self._stop_gracefully(item, stopped)
            return True  # it and the rest are recorded "not run" at the session's end
        share = self.shares.get(item.nodeid)
        if share is not None:  # its group, or none for a plain test (group.py)
            try:
                self.group.enter(share, lambda: self._meet(item, share))
            except Stopped:
                return True
        spec = world_spec(item)
        body_backend = self.group.ready(seconds, spec.backend if spec is not None else None)
        index = self.index.get(item.nodeid)
        item.ihook.pytest_runtest_logstart(nodeid=item.nodeid, location=item.location)
        self.running.begin(item)
        self.records.begin(item)
        own, everyone, attempts = self._attempts(item, nextitem, index, seconds, body_backend)
        shown = own if everyone is None else verdict_reports(item, own, everyone, self.launch.rank)
        # A rerun test's failure shown with every attempt (a failure here has them already).
        if len(attempts) > 1 and not any(r.failed for r in own):
            shown = with_every_attempt(item, shown, attempts)
        with self.stop.verdict_lock:
            if not self.stop.begun.is_set():
                for report in shown:
                    self.records.log_shown(report=report)
                self.running.item = None
        self.stop.park_if_stopping()
        self.records.count_failure(item, shown)
        item.ihook.pytest_runtest_logfinish(nodeid=item.nodeid, location=item.location)
        return True

    def _attempts(self, item: pytest.Item, nextitem, index, seconds: float, body_backend: str):
        """Run the test (its body on ``body_backend``), and again while it failed and
        reruns are left and every rank agrees; log this rank's own reports of the last
        attempt. Returns them, with every rank's result of it (None where there was no
        exchange)."""
        attempts, self.attempt = [], 1
        # With reruns, the own reports wait for the exchange: only the last attempt's go
        # into the files, with every attempt's record.
        hold = self.reruns > 0 and index is not None
        while True:
            ledger.follow(body_backend)
            ledger.begin_test()
            own = clipped(runtestprotocol(item, nextitem=nextitem, log=False), TERMINAL_LIMIT)
            self.stop.park_if_stopping()
            if not hold:  # a rank that dies in the exchange leaves its result
                self.records.log_own(item, own, junit=False)
                self.running.own = own
            result = None
            if index is not None and self._aborted is None:
                self.records.reached(item)
                result = self._exchange(item, index, seconds, own, note=not hold)
            everyone = None if result is None else result.everyone
            # A launcher's signal during the exchange (a peer crashed): its watcher
            # reports this test, naming the crash; a second verdict would count it twice.
            self.stop.park_if_stopping()
            # After the exchange every rank has finished the test: none is still
            # connecting to a group this one destroys (see reset_state).
            destroy_subgroups(self.group.kept_groups())
            if not hold:
                # This rank's own reports into its JUnit file, unless a stop (a launcher's
                # signal) records the test there first, naming them.
                with self.stop.verdict_lock:
                    if not self.stop.begun.is_set():
                        self.records.log_own(item, own, results=False)
                        self.running.logged, self.running.own = True, None
                self.stop.park_if_stopping()
                return own, everyone, attempts
            if everyone is not None:
                n = len(everyone)
                attempts.append(attempt_of(self.attempt, everyone, n, self.backend))
            if everyone is None or not self._rerun(item, index, attempts, seconds):
                break
            self.group.renew()  # never the group of a failed attempt: a new one
            self.attempt += 1
        own = with_attempts(item, own, attempts, self.flaky_policy)
        self.records.log_own(item, own, properties(attempts, self.flaky_policy))
        self.running.logged = True
        if result is not None:
            self._note_verdict(item, result)
            if len(attempts) > 1:
                self._note_attempts(item, everyone, own)
        return own, everyone, attempts

    def _rerun(self, item: pytest.Item, index: int, attempts, seconds: float) -> bool:
        """Whether every rank runs the test again: it failed, reruns are left, and each
        rank says through the store that it can (so all ranks rerun, or none)."""
        if attempts[-1].verdict != "failed" or len(attempts) > self.reruns:
            return False
        if world_spec(item) is None:  # a plain test runs once, as in a pool
            return False
        mine = self._aborted is None and not item.session.shouldstop
        try:
            said = self.control.all_gather(
                f"t{index}/rerun{self.attempt}",
                mine,
                timeout=seconds,
                gone=self.stop.ended_here,
                ranks=self.ranks_of(item.nodeid),
            )
        except (RunAborted, TimeoutError) as exc:
            self._stop_gracefully(item, str(exc))
            return False
        except PeerGone as exc:
            self.stop.for_crashed_peers(item, exc.ranks)
        return all(said)

    def _exchange(
        self,
        item: pytest.Item,
        index: int,
        seconds: float,
        own: list[pytest.TestReport],
        *,
        note: bool = True,
    ) -> Judged | None:
        """Every rank's result of this test, judged; a new group where any rank lost its own.
        ``note``: count its failures for the run's end now (else the caller does, for
        the last attempt only)."""
        key, ranks = f"t{self.store_index(item)}/outcome", self.ranks_of(item.nodeid)
        mine = with_ledger(own_result(own, all_output=self._shows_passes), self.group.members)
        mine, self._group_trouble = mine._replace(group_trouble=self._group_trouble), False
        if mine.outcome in BAD:  # now: a peer that dies in the exchange ends this rank there
            self.records.log_ledger(item, mine.ledger)
        try:
            # Each rank's value stays at control.outcome_key(index, rank): _failed_peers reads it.
            gathered = self.control.all_gather(
                key, tuple(mine), timeout=seconds, gone=self.stop.ended_here, ranks=ranks
            )
        except (RunAborted, TimeoutError) as exc:
            self._stop_gracefully(item, str(exc))
            return None
        except PeerGone as exc:
            self.stop.for_crashed_peers(item, exc.ranks)
        result = judged(ranks, gathered, self.launch.rank)
        if mine.outcome not in BAD and result.ledgers_compared:
            self.records.log_ledger(item, mine.ledger)  # merge-junit compares them
        if note:
            self._note_verdict(item, result)
        if result.group_trouble:
            self.stop.park_if_stopping()
            self.group.renew()
        return result

    def _stop_gracefully(self, item: pytest.Item, reason: str) -> None:
        """Another rank stopped the run: finish this session, the rest as not run."""
        reason = self.control.abort(reason)  # a timeout here stops the others too
        self._aborted = reason
        self.problems.append(Problem(item.nodeid, reason))
        item.session.shouldstop = f"rankgate: {reason}"

    # -- reporting --------------------------------------------------------------------

    def pytest_terminal_summary(self, terminalreporter) -> None:
        summary.write_end(terminalreporter, self.config, self.launch, self.problems,
                          self._failed_tests)  # fmt: skip

    @pytest.hookimpl(trylast=True, specname="pytest_sessionfinish")
    def pytest_sessionfinish_last(self, session: pytest.Session) -> None:
        self.records.close_results()  # junitxml has written this rank's file by now
        if (self.problems or self._aborted) and session.exitstatus == pytest.ExitCode.OK:
            session.exitstatus = pytest.ExitCode.TESTS_FAILED

    def pytest_unconfigure(self) -> None:
        import torch.distributed as dist

        self._signals.stop()

        if self._aborted is not None:
            self.control.set(control.exited_key(self.launch.rank), True)
            # A launcher stops every rank once one exits with a failure: the ranks of
            # other sub-worlds first finish the test they are in (stop.py).
            self.stop.wait_for_peers_to_exit()
            return
        if dist.is_initialized():
            dist.destroy_process_group()
        if not self.control.end_together():
            return
        if self.launch.rank == 0:
            self.shared_dirs.remove()
            if self.group.store_path is not None:
                self.group.store_path.unlink(missing_ok=True)
