"""What an in-place rank does before its first test, and the parts of its run it makes.

Set-up, in order: the rank's files (its JUnit path, its terminal's log), the ini option
``rankgate_worker_setup``, the store and the process group, the launch's run id, then
one object per job of the run (``Parts``): the plan (``schedule``), the records, the
tally, the stop and its last record, the test's body, each test's round, the end.
Each is handed the others it works with, or a narrow callback; none is handed the
session.
"""

from __future__ import annotations

import functools
import os
import traceback
from dataclasses import dataclass
from pathlib import Path

import pytest

from rankgate.harness import ledger, options, vector_math
from rankgate.harness.inplace import collection, control, reproduce, run_id, tempdirs
from rankgate.harness.inplace.body import TestBody
from rankgate.harness.inplace.ending import RunEnd
from rankgate.harness.inplace.group import InPlaceGroup
from rankgate.harness.inplace.hangwatch import HangWatch
from rankgate.harness.inplace.lastrecord import LastRecord
from rankgate.harness.inplace.peers import Peers
from rankgate.harness.inplace.records import RankRecords, per_rank_files
from rankgate.harness.inplace.round import RoundKit
from rankgate.harness.inplace.running import RunningTest, StopGate
from rankgate.harness.inplace.schedule import Schedule
from rankgate.harness.inplace.signalwatch import SignalWatch
from rankgate.harness.inplace.stop import RunStop
from rankgate.harness.inplace.summary import RunNotes
from rankgate.harness.inplace.tally import TALLY_PLUGIN, RunTally
from rankgate.harness.rankstate import WorkerSetupError, call_worker_setup
from rankgate.launch.env import LaunchEnv


@dataclass(frozen=True, kw_only=True, slots=True)
class Parts:
    """One rank's in-place run, one object per job (see the module doc)."""

    launch: LaunchEnv
    group: InPlaceGroup
    run_id: str
    log_dir: Path
    """Where this rank's JUnit file and (rank > 0) its terminal's log go."""
    plan: Schedule
    peers: Peers
    records: RankRecords
    body: TestBody
    kit: RoundKit
    end: RunEnd
    shared_dirs: tempdirs.SharedDirs
    signals: SignalWatch


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


def start(config: pytest.Config, launch: LaunchEnv) -> Parts:
    """Set this rank up and make the parts of its run (see the module doc)."""
    # The real stderr, before pytest's capture swaps fd 2 during tests: hang stacks
    # written to the capture file would vanish with the process.
    hang_watch = HangWatch(launch.rank, os.fdopen(os.dup(2), "w"))
    log_dir = per_rank_files(config, launch.rank)
    vector_math.pick_kernels()  # before the rank's own code computes
    _call_worker_setup(config, launch.rank)
    group = InPlaceGroup(
        launch, options.rendezvous_timeout(config), options.subworld_local_rank(config)
    )
    parts = _parts(config, launch, group, _agree_on_run_id(group.control), hang_watch, log_dir)
    tempdirs.warn_if_split(config, group.control)
    tempdirs.own_pytest_temp_root(config, launch.rank)
    return parts


def _parts(
    config: pytest.Config,
    launch: LaunchEnv,
    group: InPlaceGroup,
    the_run_id: str,
    hang_watch: HangWatch,
    log_dir: Path,
) -> Parts:
    channel, rank = group.control, launch.rank
    plan = Schedule(rank, launch.world_size, options.one_world_per_rank(config))
    known_skip = functools.partial(
        collection.skip_reason, launch=launch, has_gpus=group.has_gpus, backend=group.backend
    )

    def skip_reason(item: pytest.Item) -> str | None:
        return known_skip(item) or plan.left_out_reason(item.nodeid)

    records = RankRecords(config, launch, skip_reason, the_run_id)
    tally = RunTally(config, rank, channel, plan=plan)
    config.pluginmanager.register(tally, TALLY_PLUGIN)  # next to the session's
    ledger.install(group.backend)
    running, gate, notes = RunningTest(), StopGate(), RunNotes()
    peers = Peers(channel, rank, launch.world_size)
    base_seed = config.getoption("rankgate_seed")
    reproduce_line = functools.partial(
        reproduce.line, config=config, launch=launch, backend=group.backend, base_seed=base_seed
    )
    last = LastRecord(
        config, channel, records=records, running=running, tally=tally, peers=peers,
        say=hang_watch.write, reproduce=reproduce_line, finish_s=lambda: plan.longest_timeout,
        store_path=group.store_path, reruns=options.reruns(config),
    )  # fmt: skip
    stop = RunStop(
        channel, gate=gate, running=running, schedule=plan, peers=peers, records=records,
        last=last, members=lambda: group.members, on_problem=notes.add,
    )  # fmt: skip
    body = TestBody(
        channel, group, hang_watch, running=running, plan=plan, on_timeout=stop.on_timeout,
        reproduce=reproduce_line, skip_reason=skip_reason,
        default_timeout=options.default_timeout(config), base_seed=base_seed,
    )  # fmt: skip
    kit = RoundKit(
        channel=channel, group=group, plan=plan, records=records, running=running, gate=gate,
        stop=stop, peers=peers, notes=notes, timeout_of=body.timeout_of,
        reruns=options.reruns(config), flaky_policy=options.flaky_policy(config),
        shows_passes=bool({"A", "P"} & set(config.getoption("reportchars") or "")),
    )  # fmt: skip
    end = RunEnd(
        config, launch, channel, plan=plan, records=records, tally=tally, stop=stop,
        peers=peers, notes=notes,
    )  # fmt: skip
    shared_root = Path(os.environ.get("RANKGATE_SHARED_TMP", log_dir))
    return Parts(
        launch=launch, group=group, run_id=the_run_id, log_dir=log_dir, plan=plan,
        peers=peers, records=records, body=body, kit=kit, end=end,
        shared_dirs=tempdirs.SharedDirs(shared_root, rank, channel, the_run_id),
        signals=SignalWatch(stop.on_signal),
    )  # fmt: skip
