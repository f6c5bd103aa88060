"""Pool mode: world tests run on worker pools that this pytest process owns.

A test marked ``@pytest.mark.world(n)`` has its fixtures set up once in this process
(the controller); its body is sent to the n ranks of a reusable pool and the ranks'
outcomes become one verdict.

Fixture rule: fixtures are created in the controller and pickled into every rank,
so their values must be picklable; ``rank`` and ``device`` are filled in by each
rank, and rank-dependent values belong in the test body.
"""

from __future__ import annotations

import functools
import os
import shlex
import shutil
import signal
import tempfile
from pathlib import Path

import pytest

from rankgate.harness import options
from rankgate.harness.attempts import (
    ATTEMPTS_PROPERTY,
    FLAKY_PROPERTY,
    encode,
    flaky_summary,
    is_flaky,
)
from rankgate.harness.failure_repr import failure_repr
from rankgate.harness.item_settings import (
    EVERY_RANK_WITHOUT_LAUNCHER,
    SPEC_KEY,
    seed_for_test,
    skip_at_test,
    test_timeout,
)
from rankgate.harness.output import JUNIT_LIMIT, clip_text
from rankgate.harness.pool import classstate, stopsignals
from rankgate.harness.pool.adopted_setups import AdoptedSetups
from rankgate.harness.pool.forkclient import RunForkServer
from rankgate.harness.pool.gpulease import GpuHeldTooLong, GpuLease
from rankgate.harness.pool.gpus import gpu_block, visible_gpu_count, xdist_slot
from rankgate.harness.pool.item_to_task import FixtureCrossingError, build_task, is_unittest
from rankgate.harness.pool.pool import (
    Pool,
    PoolKey,
    PoolProtocolError,
    PoolSettings,
    PoolStartError,
)
from rankgate.harness.pool.registry import PoolRegistry
from rankgate.harness.pool.reruns import every_attempt_text, run_attempts
from rankgate.harness.pool.sessionserver import PROCESS_FORK_SERVER
from rankgate.harness.pool.tell_pytest import tell_pytest
from rankgate.harness.pool.worldrun import WorldRun
from rankgate.harness.pool.xdist_ranks import fork_server_of_worker, rank_budget_of_worker
from rankgate.harness.spec import resolve_backend, uses_gpus
from rankgate.harness.verdict import (
    StrayOutcome,
    disagreement_status,
    reproduction_line,
    run_options,
)
from rankgate.harness.verdict_lines import BACKEND_PROPERTY, WORLD_PROPERTY

RUN_KEY = pytest.StashKey["WorldRun"]()
LEASE_KEY = pytest.StashKey[GpuLease]()
LEASE_MARGIN_S = 300.0
"""Past its attempts' pool starts and timeouts, a test may hold its GPUs this much longer
(an adopted class's set-up, stacks of a hung rank, killing its pool, its teardown)
before a test waiting for them calls it stuck."""


def pool_settings(config: pytest.Config) -> PoolSettings:
    """The ini and command-line options every pool of this session starts with."""
    return PoolSettings(
        rendezvous_timeout=options.rendezvous_timeout(config),
        start_timeout=options.start_timeout(config),
        setup_hook=options.worker_setup(config),
    )


class PoolSession:
    """Runs world tests on worker pools; one per pytest process."""

    def __init__(self, config: pytest.Config, ignored_launch: str | None = None) -> None:
        self.config = config
        self.ignored_launch = ignored_launch
        """Why launcher variables in the environment did not start in-place mode."""
        self.base_seed = config.getoption("rankgate_seed")
        self.default_timeout = options.default_timeout(config)
        self.reruns = options.reruns(config)
        self.flaky_policy = options.flaky_policy(config)
        self._registry: PoolRegistry | None = None
        self._base_dir: Path | None = None
        self._fork_server: RunForkServer | None = None
        PROCESS_FORK_SERVER.session_opened()
        self._session_open = True
        self._previous_handlers = stopsignals.end_the_session_on_stop_signals()
        self._gpus: tuple[str, ...] | None = None
        self._class_baselines: dict[type, dict] = {}
        self._setups = AdoptedSetups()

    @property
    def registry(self) -> PoolRegistry:
        if self._registry is None:
            settings = pool_settings(self.config)
            budget = rank_budget_of_worker(self.config)
            self._registry = PoolRegistry(self.base_dir, settings, self.fork_server, budget)
        return self._registry

    @property
    def base_dir(self) -> Path:
        """This process's pools' folders (mkdtemp: xdist workers never share them)."""
        if self._base_dir is None:
            self._base_dir = Path(tempfile.mkdtemp(prefix="rankgate-pools-"))
        return self._base_dir

    @property
    def fork_server(self) -> RunForkServer:
        """The fork server of this process's sessions (:mod:`.sessionserver`): under
        xdist the one every worker shares (the controller owns it)."""
        if self._fork_server is None:
            self._fork_server = PROCESS_FORK_SERVER.server(
                functools.partial(fork_server_of_worker, self.config)
            )
        return self._fork_server

    def gpus(self) -> tuple[str, ...]:
        """GPU ids (as CUDA_VISIBLE_DEVICES entries) visible to this process: all of them;
        tests lease theirs while they run."""
        if self._gpus is None:
            total = visible_gpu_count()
            visible = os.environ.get("CUDA_VISIBLE_DEVICES")
            ids = visible.split(",") if visible else [str(i) for i in range(total)]
            self._gpus = tuple(ids[i].strip() for i in range(total))  # indices or GPU UUIDs
        return self._gpus

    @staticmethod
    def pool_gpus(gpus: tuple[str, ...], world: int) -> tuple[str, ...]:
        """The GPUs this process puts a world's ranks on: its xdist worker's block."""
        slot, workers = xdist_slot()
        return tuple(gpus[i] for i in gpu_block(len(gpus), world, slot, workers))

    def pytest_report_header(self) -> str | None:
        if self.ignored_launch is None:
            return None
        return (
            f"rankgate: world tests run on worker pools: {self.ignored_launch} "
            "(--rankgate-mode=inplace runs them in place anyway)"
        )

    def pytest_collection_finish(self, session: pytest.Session) -> None:
        # Each world test class as its module defined it, before any set-up ran: what
        # set-up changes later travels to the ranks (rankgate.harness.pool.classstate).
        for item in session.items:
            cls = getattr(item, "cls", None)
            if cls is not None and SPEC_KEY in item.stash and cls not in self._class_baselines:
                self._class_baselines[cls] = classstate.class_baseline(cls)
        # The fork server's ``import torch`` runs beside collection's end and the plain
        # tests. Under xdist the controller started the run's one server already (this
        # finds its record); a worker learns which tests it runs only as they come.
        runs_tests = not self.config.option.collectonly
        if runs_tests and any(SPEC_KEY in item.stash for item in session.items):
            self.fork_server.start_early()

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_setup(self, item: pytest.Item):
        spec = item.stash.get(SPEC_KEY, None)
        if spec is None and item.get_closest_marker("every_rank") is not None:
            skip_at_test(EVERY_RANK_WITHOUT_LAUNCHER)
        if spec is None:
            return (yield)
        key = self._pool_key(spec)
        if uses_gpus(key.backend) and not key.gpus:
            skip_at_test(
                f"world({spec.size}, backend='nccl') needs {spec.size} GPUs; "
                f"{len(self.gpus())} visible here"
            )
        run = WorldRun(
            world=spec.size,
            backend=key.backend,
            seed=seed_for_test(self.base_seed, item.nodeid),
            base_seed=self.base_seed,
            timeout=test_timeout(item, self.default_timeout),
            key=key,
        )
        item.stash[RUN_KEY] = run
        if run.key.gpus:
            # Held until the test's teardown: another worker's test on these GPUs waits.
            lease = item.stash[LEASE_KEY] = GpuLease(run.key.gpus)
            try:
                lease.acquire(holds_for_s=self._lease_allowance(run), what=item.nodeid)
            except GpuHeldTooLong as exc:  # from None: the error is this line alone
                raise pytest.fail.Exception(f"rankgate: {exc}", pytrace=False) from None
            if lease.waited_s >= 0.1:  # in the JUnit: time spent behind other workers
                item.user_properties.append(("rankgate.gpu_lease_wait_s", round(lease.waited_s, 1)))
        pool = self.registry.acquire(run.key)  # PoolStartError: an error, not a failure
        result = yield  # the controller's fixtures
        baseline = self._class_baselines.get(item.cls, {})  # {} for a test without a class
        if is_unittest(item):
            # unittest calls setUp just before the method, so the task is made then
            item.obj = self._unittest_method_on_the_ranks(item, run, pool, baseline)
            return result
        run.task = build_task(item, run.seed, pool, baseline)  # FixtureCrossingError: setup error
        return result

    def _pool_key(self, spec) -> PoolKey:
        """The pool a world test runs on (no GPUs where it needs more than are visible)."""
        gpus = self.gpus() if spec.backend != "gloo" else ()
        backend = resolve_backend(spec.backend, spec.size, len(gpus))
        on_gpus = uses_gpus(backend) and len(gpus) >= spec.size
        return PoolKey(
            world=spec.size,
            backend=backend,
            gpus=self.pool_gpus(gpus, spec.size) if on_gpus else (),
        )

    def _lease_allowance(self, run: WorldRun) -> float:
        """How long this test may hold its GPUs: every attempt's pool start and timeout."""
        attempt = run.timeout + options.start_timeout(self.config)
        return (self.reruns + 1) * attempt + LEASE_MARGIN_S

    def _unittest_method_on_the_ranks(
        self, item: pytest.Item, run: WorldRun, pool: Pool, baseline: dict
    ):
        """What unittest calls in place of the test method: the method on the ranks.

        pytest runs a TestCase's method through unittest (setUp, the method, tearDown,
        its skip and expectedFailure decorators); only the method itself moves to the
        ranks, as a plain test's body does. The decorators' marks are copied over.
        """
        method = item.obj

        @functools.wraps(method)
        def on_the_ranks(*_args) -> None:
            run.task = build_task(item, run.seed, pool, baseline, method)
            self._run_on_pool(item, run)

        return on_the_ranks

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_teardown(self, item: pytest.Item, nextitem: pytest.Item | None):
        try:
            return (yield)
        finally:
            lease = item.stash.get(LEASE_KEY, None)
            if lease is not None:
                lease.release()
            if RUN_KEY in item.stash and self._registry is not None:
                # Under a rank budget the pool the next test needs is kept; others may go.
                spec = nextitem.stash.get(SPEC_KEY, None) if nextitem is not None else None
                self._registry.release(keep=self._pool_key(spec) if spec else None)

    @pytest.hookimpl(tryfirst=True)
    def pytest_pyfunc_call(self, pyfuncitem: pytest.Function):
        run = pyfuncitem.stash.get(RUN_KEY, None)
        if run is None:
            return None
        self._run_on_pool(pyfuncitem, run)
        return True

    def _run_on_pool(self, item: pytest.Item, run: WorldRun) -> None:
        """The call phase, step by step: the pool, ready once an adopted class's set-up
        ran there; each attempt (``reruns``); pytest told the ranks' verdict."""

        def ready_pool() -> Pool:
            return self._setups.ready(self.registry.acquire(run.key), run, item.nodeid)

        verdict = run_attempts(run, ready_pool(), self.reruns, ready_pool, item.nodeid)
        tell_pytest(item.nodeid, run, verdict, self.flaky_policy)

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_makereport(self, item: pytest.Item, call: pytest.CallInfo):
        report = yield
        run = item.stash.get(RUN_KEY, None)
        if call.excinfo is not None and call.excinfo.errisinstance(
            (PoolStartError, PoolProtocolError, StrayOutcome)
        ):
            text = f"rankgate: infrastructure error: {call.excinfo.value}"
            report.longrepr = failure_repr(item, text)
            return report
        if call.excinfo is not None and call.excinfo.errisinstance(FixtureCrossingError):
            report.longrepr = failure_repr(item, f"rankgate: {call.excinfo.value}")
            return report
        if run is None or call.when != "call" or run.outcomes is None:
            return report
        attach_rank_output(item, report, run)
        attach_attempts(item, report, run, self.flaky_policy)
        flaky_fails = is_flaky(run.attempts) and report.failed
        if flaky_fails:
            text = flaky_summary(run.attempts, "fail") + "\n"
            text += every_attempt_text(run.attempt_verdicts, run.attempts)
            report.longrepr = failure_repr(item, text)
        elif run.verdict.status in ("failed", "disagreement"):
            command = shlex.join(["pytest", *run_options(list(item.config.invocation_params.args))])
            repro = reproduction_line(
                item.nodeid, run.world, run.backend, run.seed, run.base_seed,
                timeout=self.config.getoption("rankgate_timeout"), command=command,
            )  # fmt: skip
            report.longrepr = failure_repr(item, f"{run.verdict.text}\n{repro}")
        return report

    def pytest_report_teststatus(self, report: pytest.TestReport):
        return disagreement_status(report)

    @pytest.hookimpl(tryfirst=True)
    def pytest_sessionfinish(self) -> None:
        # The pools end with the session, before any end-of-run check looks for what
        # the run left behind (their folders among them).
        self._shut_down()

    def pytest_unconfigure(self) -> None:
        self._shut_down()  # a session that never finished (an internal error)

    def shut_down(self) -> None:
        """End the pools now (their ranks exit; coverage_ranks needs their data saved
        before pytest-cov combines it); safe to call again."""
        self._shut_down()

    def _shut_down(self) -> None:
        for signum, handler in self._previous_handlers.items():
            signal.signal(signum, handler)
        self._previous_handlers = {}
        if self._registry is not None:
            self._registry.shutdown_all()
            self._registry = None
        if self._session_open:
            self._session_open = False
            self._fork_server = None
            PROCESS_FORK_SERVER.session_closed()
        if self._base_dir is not None:
            shutil.rmtree(self._base_dir, ignore_errors=True)
            self._base_dir = None


def attach_attempts(
    item: pytest.Item, report: pytest.TestReport, run: WorldRun, policy: str
) -> None:
    """A test run more than once: every attempt in a JUnit property, the failed ones'
    texts in report sections (shown with the test's output), and flaky when it passed."""
    if not run.attempts:
        return
    props: list[tuple[str, object]] = [(ATTEMPTS_PROPERTY, encode(run.attempts))]
    if is_flaky(run.attempts):
        props.append((FLAKY_PROPERTY, policy))
    if is_flaky(run.attempts) and policy == "pass":  # a failure's own text has them all
        for verdict, attempt in zip(run.attempt_verdicts, run.attempts, strict=True):
            if attempt.verdict != "passed":
                report.sections.append((f"rankgate {attempt.line()}", verdict.text))
    item.user_properties.extend(props)
    report.user_properties.extend(props)


def attach_rank_output(item: pytest.Item, report: pytest.TestReport, run: WorldRun) -> None:
    """Every rank's output in the terminal report sections and in JUnit properties.

    JUnit takes properties from the teardown report, which copies
    ``item.user_properties``; the call report gets them too for status hooks.
    """
    props: list[tuple[str, object]] = [
        (WORLD_PROPERTY, run.world),
        (BACKEND_PROPERTY, run.backend),
        ("rankgate.seed", run.seed),
        ("rankgate.verdict", run.verdict.status),
    ]
    if run.verdict.failing_ranks:
        props.append(("rankgate.failing_ranks", ",".join(map(str, run.verdict.failing_ranks))))
    for o in run.outcomes:
        word = str(o.outcome)  # xdist sends plain str
        if word == "passed" and o.rank in run.verdict.failing_ranks:
            word = "diverged"  # its body returned, but the ledgers single it out
        props.append((f"rankgate.rank{o.rank}.outcome", word))
        for stream, text in (("stdout", o.stdout), ("stderr", o.stderr)):
            if text:
                report.sections.append((f"Captured {stream} call (rank {o.rank})", text))
                props.append((f"rankgate.rank{o.rank}.{stream}", clip_text(text, JUNIT_LIMIT)))
    item.user_properties.extend(props)
    report.user_properties.extend(props)
