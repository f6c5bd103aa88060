"""Worker pools: the ranks of one (world, backend), started once and reused.

A pool forks its ranks from the run's fork server, which has torch preloaded
(:mod:`.forkserver`; one for the whole run, every xdist worker's pools included), so a
pool starts in a fraction of a second instead of paying ``import torch`` per rank. Ranks
rendezvous through a FileStore in the pool's own directory (no TCP ports). A
pool that saw a crash or a hang is killed; the registry starts a fresh one for
the next test that needs it.
"""

from __future__ import annotations

import dataclasses
import multiprocessing
import multiprocessing.connection
import os
import signal
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rankgate.errors import RankgateError
from rankgate.harness import divergence, locks
from rankgate.harness.item_settings import collective_timeout
from rankgate.harness.outcome import BAD, OutcomeKind, RankOutcome
from rankgate.harness.output import read_clipped
from rankgate.harness.pool import bells, hungstacks, ledgerdump, messages
from rankgate.harness.pool.forkclient import ForkServerError, RunForkServer
from rankgate.harness.pool.gpus import xdist_slot
from rankgate.harness.pool.readiness import Readiness

# After one rank fails or dies, its peers usually fail fast too (gloo sees the
# closed socket) or wait forever in a collective the failed rank never joined;
# wait this long for them, then dump their stacks and kill the pool.
FAILURE_GRACE_S = 3.0
SHUTDOWN_WAIT_S = 3.0
# One wait on the ranks' pipes at most this long (the loop goes on until the deadline):
# select() and poll() overflow on timeouts of weeks.
WAIT_SLICE_S = 3600.0


def threads_per_rank(world: int, cores: int | None = None, workers: int | None = None) -> int:
    """torch's intra-op threads for one rank: this process's share of the cores, split
    over the world.

    Every xdist worker runs its own pools at once, so each gets ``cores // workers``.
    Given the whole host each, two workers' world(2) pools ran twice as many threads as
    cores, and a test's multi-threaded CPU work (the comm suites' reference sums) slowed
    several times over: torch's threads wait for each other at every parallel region.
    """
    if cores is None:
        cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    if workers is None:
        workers = xdist_slot()[1]
    return max(1, (cores or 1) // max(1, workers) // world)


WORKER_MAIN = "rankgate.harness.pool.worker:worker_main"
"""What each rank runs (in the fork server's child; the controller never imports it)."""


class PoolStartError(RankgateError, RuntimeError):
    """The ranks could not be started or could not rendezvous."""


class PoolProtocolError(RankgateError, RuntimeError):
    """A rank answered for another test than the one it was sent (a harness bug)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class PoolKey:
    world: int
    backend: str
    gpus: tuple[str, ...]
    """CUDA_VISIBLE_DEVICES entries handed to the ranks; empty for CPU pools."""


@dataclass(slots=True)
class _Rank:
    rank: int
    process: Any
    conn: Any
    stdout: Path
    stderr: Path
    offsets: tuple[int, int] = (0, 0)
    stderr_end: int | None = None
    """Where the rank's stderr for the current test ends (its stack dump follows)."""


RANK_VARIABLES = frozenset(
    (
        "RANK",
        "LOCAL_RANK",
        "WORLD_SIZE",
        "LOCAL_WORLD_SIZE",
        "RANKGATE_POOL_DIR",
        "CUDA_VISIBLE_DEVICES",
    )
)
"""What the pool sets for each rank: the controller's values never replace them."""

NOT_SENT = RANK_VARIABLES | {"PYTEST_CURRENT_TEST"}
"""Variables a test's set-up never carries to the ranks: the pool's own, and pytest's note
of the test and phase (the controller's says "(setup)" by then)."""


def raw_environ_to_send() -> dict[bytes, bytes] | None:
    """The bytes mapping under ``os.environ`` less :data:`NOT_SENT` (None where there is
    none): two of them compare as one C-level dict, where the str view decodes every name
    and value (about 50 us a test in the controller with a hundred variables)."""
    raw = getattr(os.environ, "_data", None)
    encodekey = getattr(os.environ, "encodekey", None)
    if not isinstance(raw, dict) or encodekey is None:
        return None
    raw = raw.copy()
    for name in NOT_SENT:
        raw.pop(encodekey(name), None)
    return raw


@dataclass(frozen=True, slots=True, kw_only=True)
class PoolSettings:
    rendezvous_timeout: float
    """Seconds the ranks wait for each other while joining the process group."""
    start_timeout: float
    setup_hook: str | None = None
    env: dict[str, str] = field(default_factory=dict)


class Pool:
    """The ranks of one world; ``run`` sends one test to every rank."""

    def __init__(
        self, key: PoolKey, directory: Path, settings: PoolSettings, fork_server: RunForkServer
    ) -> None:
        self.key = key
        self.fork_server = fork_server
        self.directory = directory
        self.settings = settings
        self.ranks: list[_Rank] = []
        self.alive = False
        self.tests_run = 0
        self.environ: dict[str, str] = {}
        """The controller's environment when the ranks started: theirs, but for
        :data:`RANK_VARIABLES`. What a test's set-up changes since goes with the test."""
        self.environ_raw: dict[bytes, bytes] | None = None
        """``environ`` as :func:`raw_environ_to_send` saw it: no change when equal."""
        self.cwd = ""
        """The controller's working directory when the ranks started: theirs too."""
        self._sentinels: Readiness | None = None
        self._belfry: bells.Belfry | None = None
        self._killed = False

    # -- lifecycle -----------------------------------------------------------------

    def start(self) -> None:
        self.directory.mkdir(parents=True, exist_ok=True)
        bells.make(self.directory)
        self._belfry = bells.Belfry(self.directory)
        try:  # from here on what failed leaves nothing open or running: no bell, no rank
            self._fork_ranks()
            self.alive = True
            self._await_ready()
        except BaseException:
            self.kill()
            raise

    def _fork_ranks(self) -> None:
        store_path = self.directory / "store"
        store_path.unlink(missing_ok=True)
        threads = threads_per_rank(self.key.world)
        self.environ, self.cwd = dict(os.environ), os.getcwd()
        self.environ_raw = raw_environ_to_send()
        env = {**self.environ, **self.settings.env}
        env["WORLD_SIZE"] = env["LOCAL_WORLD_SIZE"] = str(self.key.world)
        env["RANKGATE_POOL_DIR"] = str(self.directory)
        if self.key.gpus:
            env["CUDA_VISIBLE_DEVICES"] = ",".join(self.key.gpus)
        for rank in range(self.key.world):
            ledgerdump.make_pipe(self.directory, rank)
            paths = (self.directory / f"rank{rank}.out", self.directory / f"rank{rank}.err")
            config = messages.RankConfig(
                rank=rank,
                world=self.key.world,
                backend=self.key.backend,
                store_path=str(store_path),
                rendezvous_timeout=self.settings.rendezvous_timeout,
                setup_hook=self.settings.setup_hook,
                threads=threads,
                sys_path=tuple(sys.path),
                controller_pid=os.getpid(),
                stdout=str(paths[0]),
                stderr=str(paths[1]),
                env={**env, "RANK": str(rank), "LOCAL_RANK": str(rank)},
            )
            parent_conn, child_conn = multiprocessing.Pipe()
            try:
                process = self.fork_server.fork(
                    WORKER_MAIN, (config,), child_conn.fileno(), self.cwd
                )
            except BaseException as exc:
                parent_conn.close()  # the ranks forked before it are start's to kill
                if isinstance(exc, ForkServerError):
                    raise PoolStartError(self._start_error(str(exc))) from None
                raise
            finally:
                child_conn.close()
            self.ranks.append(_Rank(rank, process, parent_conn, *paths))

    def _await_ready(self) -> None:
        deadline = time.monotonic() + self.settings.start_timeout
        waiting = {r.rank: r for r in self.ranks}
        failures: list[str] = []
        while waiting and not failures:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                break
            ready = multiprocessing.connection.wait(
                [r.conn for r in waiting.values()] + [r.process.sentinel for r in waiting.values()],
                timeout=min(remaining, WAIT_SLICE_S),
            )
            for r in list(waiting.values()):
                if r.conn in ready:
                    try:
                        name, kwargs = messages.decode_for_controller(r.conn.recv_bytes())
                    except EOFError:
                        name, kwargs = None, {}
                    if name == messages.READY:
                        del waiting[r.rank]
                        continue
                    if name == messages.START_FAILED:
                        failures.append(f"rank {r.rank} failed to start:\n{kwargs['error']}")
                        continue
                if r.process.sentinel in ready and not r.process.is_alive():
                    failures.append(
                        f"rank {r.rank} died while starting: {describe_exit(r.process)}"
                    )
        if failures:
            raise PoolStartError(self._start_error("\n".join(failures)))
        if waiting:
            raise PoolStartError(
                self._start_error(
                    f"ranks {sorted(waiting)} did not finish rendezvous within "
                    f"{self.settings.start_timeout:g} s (rankgate_start_timeout)"
                )
            )

    def _start_error(self, cause: str) -> str:
        logs = "".join(
            f"\n--- rank {r.rank} stderr ---\n{read_clipped(r.stderr, 0)}" for r in self.ranks
        )
        return (
            f"could not start a pool of world {self.key.world} with backend "
            f"{self.key.backend}: {cause}{logs}"
        )

    def shutdown(self) -> None:
        """Ask ranks to leave the process group and exit; kill what does not."""
        self.ask_to_leave()
        self.finish_leaving(time.monotonic() + SHUTDOWN_WAIT_S)

    def ask_to_leave(self) -> None:
        """Tell every rank to leave the process group and exit (not waited for: several
        pools leave side by side, each rank tearing its group down at once)."""
        if not self.alive:
            return
        for r in self.ranks:
            try:
                r.conn.send_bytes(messages.encode(messages.SHUTDOWN))
            except OSError:
                pass
        self._belfry.ring()

    def finish_leaving(self, deadline: float) -> None:
        """Wait until ``deadline`` for the ranks asked to leave; kill what is left."""
        if not self.alive:
            return
        for r in self.ranks:
            r.process.join(max(0.0, deadline - time.monotonic()))
        self.kill()

    def kill(self) -> None:
        """SIGKILL every running rank's process group; a second call does nothing.

        The fork server reaps the ranks once they end, and their pids can name other
        processes after that: a rank the server has reported ended is not signalled (its
        group was killed as it was reaped), nor is any rank at a second call (the
        registry drops a pool that ``run`` had killed at the next test)."""
        if self._killed:
            return
        self._killed = True
        for r in self.ranks:
            r.process.signal(signal.SIGKILL, group=True)
        for r in self.ranks:
            r.process.join(5)
            r.conn.close()
            r.process.close()
        if self._belfry is not None:
            self._belfry.close()
            self._belfry = None
        self.alive = False

    def healthy(self) -> bool:
        """Started, not killed, and every rank still running (none died while idle).

        One poll of every rank's sentinel, which a dead process makes readable: asked
        twice a test, ``is_alive`` per rank polled each rank's sentinel on its own."""
        if not self.alive:
            return False
        if self._sentinels is None:  # registered once: the ranks' sentinels stay theirs
            self._sentinels = Readiness(r.process.sentinel for r in self.ranks)
        return not self._sentinels.wait(0)

    # -- running one test ----------------------------------------------------------

    def run(
        self, task: messages.TestTask, timeout: float, what: str = "the test's timeout"
    ) -> list[RankOutcome]:
        """Run one test on every rank; kill the pool if it cannot run another one.

        Interrupted (pytest-timeout, Ctrl-C), the pool is killed before the exception
        goes on: its ranks are still inside this test and would answer the next one
        with this one's results.
        """
        try:
            return self._run(task, timeout, what)
        except BaseException:
            self.kill()
            raise

    def _run(self, task: messages.TestTask, timeout: float, what: str) -> list[RankOutcome]:
        task = dataclasses.replace(task, collective_timeout=collective_timeout(timeout))
        self._send(task)
        outcomes, pending, why_stopped = self._await_outcomes(task.test_id, timeout, what)
        if not pending:  # a rank still running: the pool is killed below
            self._belfry.answered()
        self._look_into_failures(outcomes, pending, why_stopped, task.test_id)
        for r in self.ranks:
            outcome = outcomes[r.rank]
            outcome.stdout = read_clipped(r.stdout, r.offsets[0])
            # The stack dump follows the test's own stderr; it is shown once, as the stack.
            outcome.stderr = read_clipped(r.stderr, r.offsets[1], r.stderr_end)
        return [outcomes[r.rank] for r in self.ranks]

    def _send(self, task: messages.TestTask) -> None:
        payload = messages.encode(messages.RUN, task=task)
        for r in self.ranks:
            r.offsets = (_size(r.stdout), _size(r.stderr))
            r.stderr_end = None
        for r in self.ranks:  # wakes no rank: they wait on the bell
            r.conn.send_bytes(payload)
        self._belfry.ring()  # every rank at once
        self.tests_run += 1

    def _await_outcomes(
        self, test_id: str, timeout: float, what: str
    ) -> tuple[dict[int, RankOutcome], dict[int, _Rank], str]:
        """Each rank's outcome as it comes, until all came or the deadline (cut short to
        a grace period after a rank failed or crashed): (outcomes, the ranks still
        running, why they were stopped)."""
        outcomes: dict[int, RankOutcome] = {}
        deadline = time.monotonic() + timeout
        why_stopped = f"did not finish within {what} of {timeout:g} s"
        pending = {r.rank: r for r in self.ranks}
        waiting = Readiness(obj for r in self.ranks for obj in (r.conn, r.process.sentinel))
        while pending:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                break
            ready = waiting.wait(min(remaining, WAIT_SLICE_S))
            for r in list(pending.values()):
                outcome = self._collect(r, ready, test_id)
                if outcome is None:
                    continue
                outcomes[r.rank] = outcome
                del pending[r.rank]
                # its answer is in: its pipe and sentinel are waited on no more
                waiting.remove(r.conn)
                waiting.remove(r.process.sentinel)
                grace_end = time.monotonic() + FAILURE_GRACE_S
                if outcome.outcome in ("crashed", "failed") and grace_end < deadline:
                    deadline = grace_end
                    why_stopped = (
                        f"still running {FAILURE_GRACE_S:g} s after rank {r.rank} "
                        f"{outcome.outcome}; stopped"
                    )
        return outcomes, pending, why_stopped

    def _look_into_failures(
        self,
        outcomes: dict[int, RankOutcome],
        pending: dict[int, _Rank],
        why_stopped: str,
        test_id: str,
    ) -> None:
        """After a bad or diverging test: the ranks' ledgers, the hung ranks' stacks and
        the locks they held; the pool is killed when it cannot run another test."""
        held, hung_pids = [], [r.process.pid for r in pending.values()]
        bad = bool(pending) or any(o.outcome in BAD for o in outcomes.values())
        # Ranks that passed but issued different collectives (their digests differ) fail.
        parted = not bad and divergence.digests_differ({r: o.digest for r, o in outcomes.items()})
        ledgers: dict[int, list] = {}
        if bad or parted:  # the ledgers name where the ranks' collectives diverged, if they did
            alive = [r.rank for r in self.ranks if r.process.is_alive()]
            ledgerdump.ask(self.directory, alive)
            # Answered before the stack signal: faulthandler's handler reads every thread's
            # frames without the GIL, and a rank's ledger thread still encoding its JSON
            # then crashed the rank mid-dump (a CI run: rank 1's stack cut off).
            ledgers = ledgerdump.collect(self.directory, alive)
        if pending:
            held = locks.survey(hung_pids)  # before the kill: what the hung ranks hold
            outcomes.update(hungstacks.dump(pending.values(), why_stopped, test_id))
        for rank, entries in ledgers.items():
            if entries is not None:  # None: that rank keeps no ledger
                outcomes[rank].ledger = entries
        unusable = any(o.outcome in ("crashed", "hung") or o.broke_group for o in outcomes.values())
        if unusable:
            self.kill()  # the registry starts a fresh pool for the next test
        note = locks.release(held, hung_pids)
        for outcome in outcomes.values():
            if note and outcome.outcome == OutcomeKind.HUNG:
                outcome.detail = f"{outcome.detail}\n{note}"

    def _collect(self, r: _Rank, ready: list, test_id: str) -> RankOutcome | None:
        if r.conn in ready:
            try:
                name, kwargs = messages.decode_for_controller(r.conn.recv_bytes())
            except (EOFError, OSError):
                pass  # the pipe closed: the process is gone, reported below
            else:
                if name != messages.RESULT:
                    raise messages.UnknownMessage(f"rank {r.rank} sent {name!r} during a test")
                if kwargs["test_id"] != test_id:
                    raise PoolProtocolError(
                        f"rank {r.rank} answered for {kwargs['test_id']!r} while running "
                        f"{test_id!r}; the pool was killed"
                    )
                return RankOutcome(
                    rank=r.rank,
                    test_id=test_id,
                    outcome=kwargs["outcome"],
                    detail=kwargs["detail"],
                    duration=kwargs["duration"],
                    broke_group=kwargs["broke_group"],
                    returned=kwargs.get("returned", ""),
                    warnings=kwargs.get("warnings", []),
                    digest=kwargs.get("digest"),
                )
        # The sentinel was waited on with the pipe: a rank that died before the wait
        # returned is in ``ready``, and one that dies later ends the next wait at once. A
        # pipe closed (EOF) before the sentinel shows is the one case to ask the process.
        if r.process.sentinel in ready or (r.conn in ready and not r.process.is_alive()):
            r.process.join(1)
            if not r.process.is_alive():
                return RankOutcome(
                    rank=r.rank,
                    test_id=test_id,
                    outcome=OutcomeKind.CRASHED,
                    detail=describe_exit(r.process),
                )
        return None


def describe_exit(process) -> str:
    if getattr(process, "lost", False):
        return "its fork server ended first (exit code unknown)"
    code = process.exitcode
    if code is None:
        return "still running"
    if code < 0:
        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = f"signal {-code}"
        return f"killed by {name} (exit code {code})"
    return f"exited with code {code}"


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except FileNotFoundError:
        return 0
