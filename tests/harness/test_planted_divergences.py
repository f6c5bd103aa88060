"""Planted divergences: the verdict names the first collective where the ranks' ledgers
part, in the pool (every case: one inner session per planted file, side by side) and in
place under torchrun.

The inner file runs on gloo here and on NCCL where two GPUs are (``nccl`` cases); each
case ends in a check of its values, so a backend that completes a mismatched collective
silently still fails the test, and the ledgers still name the cause. Each outer test
asserts one case's exact verdict (the failure message in the inner JUnit file).
"""

from __future__ import annotations

import os
import subprocess
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from jobs import run_torchrun_pytest

from rankgate.harness import ledger
from rankgate.report.junit import merge_junit
from tests.once import once_per_run
from tests.warmstart import WARM_PYTHON

pytestmark = pytest.mark.dist

UNDECIDED = "the ledgers cannot tell which rank is wrong: "

TIMEOUT = 5
"""Each planted test's timeout (s): a hang costs this, the stacks and a pool respawn. At 2 s
a loaded CI host once stopped rank 0 before it issued its collective (the stacks, not the
ledgers, then named the cause)."""

PLANTED = """\
import time

import pytest
import torch
import torch.distributed as dist

BACKEND = "@BACKEND@"


@pytest.mark.world(2, backend=BACKEND, timeout=@TIMEOUT@)
def test_skipped_sync(rank, device):
    t = torch.ones(4, device=device)
    dist.broadcast(t, src=0)  # skipped_sync:broadcast
    if rank != 1:
        dist.all_reduce(t)  # skipped_sync:all_reduce
    dist.barrier()  # skipped_sync:barrier
    assert t.sum().item() == 8


@pytest.mark.world(2, backend=BACKEND, timeout=@TIMEOUT@)
def test_skipped_async(rank, device):
    t = torch.ones(4, device=device)
    dist.broadcast(t, src=0)
    if rank == 0:
        work = dist.all_reduce(t, async_op=True)  # skipped_async:all_reduce
        time.sleep(0.5)
        work.wait()
    dist.barrier()  # skipped_async:barrier
    assert t.sum().item() == 8


@pytest.mark.world(2, backend=BACKEND, timeout=@TIMEOUT@)
def test_mismatched_ops(rank, device):
    t = torch.ones(4, device=device)
    if rank == 0:
        dist.all_reduce(t)  # mismatched_ops:all_reduce
    else:
        dist.broadcast(t, src=1)  # mismatched_ops:broadcast
    dist.barrier()
    assert t.sum().item() == 8


@pytest.mark.world(2, backend=BACKEND, timeout=@TIMEOUT@)
def test_mismatched_shapes(rank, device):
    t = torch.ones(4 if rank == 0 else 8, device=device)
    dist.all_reduce(t)  # mismatched_shapes:all_reduce
    dist.barrier()
    assert t.sum().item() == 2 * t.numel()


@pytest.mark.world(2, backend=BACKEND, timeout=@TIMEOUT@)
def test_subgroup_only_some_join(rank, device):
    pair = dist.new_group([0, 1])
    t = torch.ones(4, device=device)
    if rank == 0:
        dist.all_reduce(t, group=pair)  # subgroup:all_reduce
    dist.barrier()  # subgroup:barrier
    assert t.sum().item() == 8


@pytest.mark.world(2, backend=BACKEND, timeout=@TIMEOUT@)
def test_only_rank_0_inside_an_if(rank, device):
    t = torch.ones(4, device=device)
    if rank == 0:
        dist.broadcast(t, src=0)  # only_rank_0:broadcast
    dist.all_reduce(t)  # only_rank_0:all_reduce
    assert t.sum().item() == 8


@pytest.mark.world(2, backend=BACKEND, timeout=@TIMEOUT@)
def test_skipped_and_returned(rank, device):
    t = torch.ones(4, device=device)
    dist.broadcast(t, src=0)  # returned:broadcast
    if rank == 0:
        dist.all_reduce(t)  # returned:all_reduce


@pytest.mark.world(2, backend=BACKEND, timeout=@TIMEOUT@)
def test_mismatched_reduce_ops(rank, device):
    t = torch.ones(4, device=device)
    dist.all_reduce(t, op=dist.ReduceOp.SUM if rank == 0 else dist.ReduceOp.MAX)  # reduce_ops
    dist.barrier()
    assert t.sum().item() == 8


@pytest.mark.world(2, backend=BACKEND, timeout=@TIMEOUT@)
def test_correct(rank, device):
    t = torch.ones(4, device=device)
    dist.broadcast(t, src=0)
    dist.all_reduce(t)
    dist.barrier()
    assert t.sum().item() == 8
"""


PLANTED3 = """\
import time

import pytest
import torch
import torch.distributed as dist


@pytest.mark.world(3, backend="gloo", timeout=@TIMEOUT@)
def test_barrier_where_the_others_all_reduce(rank):
    t = torch.ones(4)
    if rank == 2:
        dist.barrier()  # barrier_vs:barrier
    else:
        dist.all_reduce(t)  # barrier_vs:all_reduce


@pytest.mark.world(3, backend="gloo", timeout=@TIMEOUT@)
def test_subgroup_of_three_only_some_join(rank):
    pair = dist.new_group([0, 1])
    t = torch.ones(4)
    if rank == 0:
        dist.all_reduce(t, group=pair)  # subgroup3:all_reduce
    dist.barrier()  # subgroup3:barrier


@pytest.mark.world(3, backend="gloo", timeout=@TIMEOUT@)
def test_mismatched_dtypes_three(rank):
    t = torch.ones(4, dtype=torch.float64 if rank == 1 else torch.float32)
    dist.all_reduce(t)  # dtypes3:all_reduce


@pytest.mark.world(3, backend="gloo", timeout=@TIMEOUT@)
def test_a_rank_waits_in_a_subgroup_its_peer_never_joins(rank):
    pair = dist.new_group([1, 2])
    t = torch.ones(4)
    if rank == 0:
        dist.all_reduce(t)  # waits:world
    elif rank == 1:
        dist.all_reduce(t, group=pair)  # waits:pair
    else:
        time.sleep(3 * @TIMEOUT@)  # waits:sleep


@pytest.mark.world(3, backend="gloo", timeout=@TIMEOUT@)
def test_correct_three(rank):
    t = torch.ones(4)
    dist.all_reduce(t)
    dist.barrier()
    assert t.sum().item() == 12
"""
"""World 3, gloo only (a lent kind with 3 GPUs runs no suite here)."""


def at(tag: str, source: str = PLANTED, name: str = "test_planted.py") -> str:
    """'test_planted.py:12': where the line marked ``# tag`` is."""
    (line,) = [n for n, text in enumerate(source.splitlines(), 1) if text.endswith(f"# {tag}")]
    return f"{name}:{line}"


def at3(tag: str) -> str:
    return at(tag, PLANTED3, "test_planted3.py")


def _two_gpus() -> bool:
    import torch

    return torch.cuda.is_available() and torch.cuda.device_count() >= 2


BACKENDS = [
    "gloo",
    pytest.param(
        "nccl",
        marks=[
            pytest.mark.gpu,
            pytest.mark.skipif(not _two_gpus(), reason="needs 2 CUDA devices"),
        ],
    ),
]


def _write(folder: Path, backend: str) -> None:
    source = PLANTED.replace("@BACKEND@", backend).replace("@TIMEOUT@", str(TIMEOUT))
    (folder / "test_planted.py").write_text(source)
    if backend == "gloo":
        (folder / "test_planted3.py").write_text(PLANTED3.replace("@TIMEOUT@", str(TIMEOUT)))
    (folder / "pytest.ini").write_text("[pytest]\n")


@pytest.fixture(scope="module", params=BACKENDS)
def pool_verdicts(request, tmp_path_factory) -> dict[str, str]:
    """Every planted case in the pool, once per run: test name -> its failure message."""
    backend = request.param

    def verdicts() -> dict[str, str]:
        folder = tmp_path_factory.mktemp(f"planted-{backend}")
        _write(folder, backend)
        return {**pool_session_verdicts(folder, timeout=300), "backend": backend}

    return once_per_run(request, verdicts)


def unasked_env() -> dict[str, str]:
    """The environment with nothing set: the ledger's default (records on NCCL too) is
    what runs, whatever RANKGATE_LEDGER the caller has."""
    return {k: v for k, v in os.environ.items() if k != ledger.ENV}


def pool_session_verdicts(folder: Path, timeout: float) -> dict[str, str]:
    """Each planted file in ``folder`` in a pool session of its own with nothing set, all
    at once (their hangs wait side by side: one session took about a minute of timeouts
    and was the quick gate's last minute), each of which fails: test name -> its failure
    message ("" for a pass)."""
    sessions = []
    try:
        for planted in sorted(folder.glob("test_*.py")):
            cmd = [WARM_PYTHON.executable(), "-m", "pytest", "-p", "no:cacheprovider", "-q",
                   f"--junitxml=j-{planted.stem}.xml", planted.name]  # fmt: skip
            # The terminal's verdicts go to a file kept beside the JUnit file (for a run
            # kept with --basetemp): a pipe read only after the first session ended could
            # fill and stall the others.
            with open(folder / f"output-{planted.stem}.txt", "w") as output:
                sessions.append((planted.stem, subprocess.Popen(
                    cmd, cwd=folder, env=unasked_env(), stdout=output, stderr=subprocess.STDOUT,
                )))  # fmt: skip
        for _, session in sessions:
            session.wait(timeout=timeout)
    finally:
        for _, session in sessions:  # nothing for one that ended; every one past its time
            session.kill()
            session.wait()
    verdicts = {}
    for stem, session in sessions:
        assert session.returncode == 1, (folder / f"output-{stem}.txt").read_text()
        for case in ET.parse(folder / f"j-{stem}.xml").getroot().iter("testcase"):
            failure = case.find("failure")
            verdicts[case.get("name")] = "" if failure is None else failure.get("message", "")
    return verdicts


def _assert_cause(
    verdicts: dict[str, str], test: str, cause: str, outcomes: str = "ranks 0, 1 hung"
) -> None:
    """gloo: the ranks end as ``outcomes`` says, exactly so. NCCL returns from a collective
    at once: which rank ends where is the GPU's to say, and only the ledgers' cause is
    asserted. ``cause``: 'likely cause: ...', or what the ledgers cannot tell."""
    backend = verdicts["backend"]
    if backend == "gloo":
        assert verdicts[test] == f"{outcomes}; {cause} (world 2, backend gloo)"
    else:
        # A rank stuck outside collectives gets "(now ...)" after the cause.
        assert f"; {cause.split('; rank 0 waits')[0]}" in verdicts[test], verdicts[test]
        assert verdicts[test].endswith(f" (world 2, backend {backend})")


def test_a_skipped_sync_collective(pool_verdicts):
    _assert_cause(
        pool_verdicts,
        "test_skipped_sync",
        f"likely cause: rank 1 never issued all_reduce #2 (float32[4]) that rank 0 issued at "
        f"{at('skipped_sync:all_reduce')}; rank 1 issued barrier #2 at "
        f"{at('skipped_sync:barrier')} instead",
    )


def test_a_skipped_async_collective(pool_verdicts):
    # The issue's case: the stacks blamed rank 0, waiting on its work at the line after.
    _assert_cause(
        pool_verdicts,
        "test_skipped_async",
        f"likely cause: rank 1 never issued all_reduce #2 (float32[4]) that rank 0 issued at "
        f"{at('skipped_async:all_reduce')}; rank 1 issued barrier #2 at "
        f"{at('skipped_async:barrier')} instead",
    )


def test_mismatched_ops(pool_verdicts):
    all_reduce, broadcast = at("mismatched_ops:all_reduce"), at("mismatched_ops:broadcast")
    _assert_cause(
        pool_verdicts,
        "test_mismatched_ops",
        # Two ranks, two calls: neither is the odd one out, and the verdict says so.
        f"{UNDECIDED}ranks disagree at #1: rank 0 issued all_reduce float32[4] at {all_reduce}, "
        f"rank 1 issued broadcast float32[4] at {broadcast}; rank 0 waits in all_reduce #1 "
        f"(float32[4]) issued at {all_reduce}; rank 1 waits in broadcast #1 (float32[4]) "
        f"issued at {broadcast}",
    )


def test_mismatched_shapes(pool_verdicts):
    backend = pool_verdicts["backend"]
    site = at("mismatched_shapes:all_reduce")
    if backend == "gloo":
        # gloo aborts the process that receives more bytes than it expects: its ledger
        # dies with it, and the verdict says where it was and what its peer was in.
        expected = (
            "rank 0 crashed (killed by SIGABRT (exit code -6)); rank 1 failed; likely cause: "
            f"rank 0 crashed in all_reduce at {site}; rank 1 was in all_reduce #1 "
            f"(float32[8]) issued at {site} (world 2, backend gloo)"
        )
        assert pool_verdicts["test_mismatched_shapes"] == expected
    else:
        # NCCL pairs the two calls: which rank hangs and which finishes is NCCL's; the
        # ledgers' cause is the same either way.
        _assert_cause(
            pool_verdicts,
            "test_mismatched_shapes",
            f"{UNDECIDED}ranks disagree at #1: rank 0 issued float32[4], rank 1 issued "
            f"float32[8] (all_reduce #1 at {site})",
        )


def test_a_subgroup_collective_only_some_ranks_join(pool_verdicts):
    _assert_cause(
        pool_verdicts,
        "test_subgroup_only_some_join",
        f"likely cause: rank 1 never issued all_reduce #1 on ranks [0, 1] (float32[4]) that rank 0 issued "
        f"at {at('subgroup:all_reduce')}; rank 1's last: barrier #1 at {at('subgroup:barrier')}",
    )


def test_a_collective_only_rank_0_issues(pool_verdicts):
    _assert_cause(
        pool_verdicts,
        "test_only_rank_0_inside_an_if",
        f"likely cause: rank 1 never issued broadcast #1 (float32[4]) that rank 0 issued at "
        f"{at('only_rank_0:broadcast')}; rank 1 issued all_reduce #1 at "
        f"{at('only_rank_0:all_reduce')} instead",
    )


def test_a_rank_that_skipped_a_collective_and_returned_is_never_passed(pool_verdicts):
    # The issue's NCCL case, on gloo: the culprit's body returned; it "diverged".
    _assert_cause(
        pool_verdicts,
        "test_skipped_and_returned",
        f"likely cause: rank 1 never issued all_reduce #2 (float32[4]) that rank 0 issued at "
        f"{at('returned:all_reduce')}; rank 1's last: broadcast #1 at {at('returned:broadcast')}",
        outcomes="rank 1 diverged; rank 0 hung",
    )


def test_mismatched_reduce_ops(pool_verdicts):
    _assert_cause(
        pool_verdicts,
        "test_mismatched_reduce_ops",
        f"{UNDECIDED}ranks disagree at #1: rank 0 issued ReduceOp.SUM, rank 1 issued "
        f"ReduceOp.MAX (all_reduce #1 at {at('reduce_ops')})",
        outcomes="ranks 0, 1 failed",
    )


def test_a_correct_test_blames_no_one(pool_verdicts):
    assert pool_verdicts["test_correct"] == ""


def _world3(pool_verdicts, test: str) -> str:
    if pool_verdicts["backend"] != "gloo":
        pytest.skip("world 3 runs on gloo only")
    return pool_verdicts[test].removesuffix(" (world 3, backend gloo)")


def test_a_rank_that_calls_barrier_where_the_others_all_reduce_is_the_odd_one_out(
    pool_verdicts,
):
    assert _world3(pool_verdicts, "test_barrier_where_the_others_all_reduce") == (
        "ranks 0, 1, 2 hung; likely cause: ranks disagree at #1: rank 2 issued barrier at "
        f"{at3('barrier_vs:barrier')} where ranks 0, 1 issued all_reduce float32[4] at "
        f"{at3('barrier_vs:all_reduce')}"
    )


def test_a_subgroup_of_three_only_some_join(pool_verdicts):
    # Rank 2 is in no [0, 1] call: it waits in the barrier, and is never named.
    assert _world3(pool_verdicts, "test_subgroup_of_three_only_some_join") == (
        "ranks 0, 1, 2 hung; likely cause: rank 1 never issued all_reduce #1 on ranks [0, 1] "
        f"(float32[4]) that rank 0 issued at {at3('subgroup3:all_reduce')}; rank 1's last: "
        f"barrier #1 at {at3('subgroup3:barrier')}"
    )


def test_a_rank_that_only_waits_in_another_groups_collective_is_not_the_cause(pool_verdicts):
    # Ranks 1 and 2 never issued rank 0's world all_reduce, but rank 1 waits in one of
    # ranks [1, 2] that rank 2 never joins: rank 2 alone is named.
    assert _world3(pool_verdicts, "test_a_rank_waits_in_a_subgroup_its_peer_never_joins") == (
        "ranks 0, 1, 2 hung; likely cause: rank 2 never issued all_reduce #1 on ranks [1, 2] "
        f"(float32[4]) that rank 1 issued at {at3('waits:pair')}; rank 2 issued no collective "
        f"(now in user code at {at3('waits:sleep')})"
    )


def test_a_dtype_mismatch_whose_rank_died_says_the_ledgers_cannot_tell(pool_verdicts):
    # gloo aborts the rank that receives more bytes than it expects: its ledger dies with
    # it, and the two left differ (1 against 1): neither is blamed; where each was is said.
    # A survivor blocked on a read from rank 0 fails on the closed socket; one blocked on
    # the other survivor (alive, past its own failure) waits out the grace and is hung.
    # Which read each was in is gloo's timing (a loaded CI machine gave 'rank 1 hung').
    site = at3("dtypes3:all_reduce")
    verdict = _world3(pool_verdicts, "test_mismatched_dtypes_three")
    # Each outcome, and how ranks 1 and 2 are then said to be where they were: a failed
    # rank's collective raised ("was in"), a hung one's is still in flight ("waits in").
    survivors = {
        "ranks 1, 2 failed; ": ("was", "was"),
        "rank 2 failed; rank 1 hung; ": ("waits", "was"),
        "rank 1 failed; rank 2 hung; ": ("was", "waits"),
    }
    crashed = "rank 0 crashed (killed by SIGABRT (exit code -6)); "
    outcomes = [o for o in survivors if verdict.startswith(crashed + o)]
    assert len(outcomes) == 1, verdict
    one, two = survivors[outcomes[0]]
    assert verdict == (
        f"{crashed}{outcomes[0]}{UNDECIDED}ranks disagree at #1: rank 1 issued float64[4], "
        f"rank 2 issued float32[4] (all_reduce #1 at {site}); rank 1 {one} in all_reduce #1 "
        f"(float64[4]) issued at {site}; rank 2 {two} in all_reduce #1 (float32[4]) issued at "
        f"{site}"
    )


def test_a_correct_world_3_test_blames_no_one(pool_verdicts):
    assert _world3(pool_verdicts, "test_correct_three") == ""


def _in_place_cases():
    async_cause = (
        f"likely cause: rank 1 never issued all_reduce #2 (float32[4]) that rank 0 issued at "
        f"{at('skipped_async:all_reduce')}; rank 1 issued barrier #2 at "
        f"{at('skipped_async:barrier')} instead"
    )
    returned_cause = (
        f"likely cause: rank 1 never issued all_reduce #2 (float32[4]) that rank 0 issued at "
        f"{at('returned:all_reduce')}; rank 1's last: broadcast #1 at {at('returned:broadcast')}"
    )
    barrier_cause = (
        "likely cause: ranks disagree at #1: rank 2 issued barrier at "
        f"{at3('barrier_vs:barrier')} where ranks 0, 1 issued all_reduce float32[4] at "
        f"{at3('barrier_vs:all_reduce')}"
    )
    site = at3("dtypes3:all_reduce")
    # Rank 0 dies: its peers' ledgers, logged as the launcher stops them, say the rest. A
    # survivor whose all_reduce already raised "was" in it; one the launcher stopped while
    # its read still blocked "waits" in it. Which is gloo's timing (a loaded CI machine gave
    # 'rank 1 waits'), so each of the four wordings is right.
    dtype_causes = tuple(
        f"{UNDECIDED}ranks disagree at #1: rank 1 issued float64[4], rank 2 issued float32[4] "
        f"(all_reduce #1 at {site}); rank 1 {one} in all_reduce #1 (float64[4]) issued at "
        f"{site}; rank 2 {two} in all_reduce #1 (float32[4]) issued at {site}"
        for one in ("was", "waits")
        for two in ("was", "waits")
    )
    # (launched ranks, test, merge-junit's outcomes, the causes rank 0's terminal may show)
    return [
        (2, "test_planted.py::test_skipped_async", "ranks 0, 1 hung", (async_cause,)),
        (2, "test_planted.py::test_skipped_and_returned", "rank 1 diverged; rank 0 hung",
         (returned_cause,)),
        (3, "test_planted3.py::test_barrier_where_the_others_all_reduce", "ranks 0, 1, 2 hung",
         (barrier_cause,)),
        (3, "test_planted3.py::test_mismatched_dtypes_three", "rank 0 crashed; ranks 1, 2 failed",
         dtype_causes),
    ]  # fmt: skip


@pytest.mark.torch_dist
@pytest.mark.slow  # starts torchrun and pytest on every rank
@pytest.mark.parametrize(
    ("n", "test", "outcomes", "causes"),
    _in_place_cases(),
    ids=["skipped-async", "skipped-and-returned", "barrier-vs-all-reduce", "dtype-crash"],
)
def test_in_place_the_cause_is_named_everywhere(tmp_path, monkeypatch, n, test, outcomes, causes):
    monkeypatch.delenv(ledger.ENV, raising=False)  # the default, on a GPU node's NCCL too
    _write(tmp_path, "gloo")
    done = run_torchrun_pytest(tmp_path, "--junitxml=out/junit.xml", test, ranks=n, timeout=180)
    assert done.returncode != 0
    if "crashed" not in outcomes:  # a dead rank 0 shows nothing: merge-junit says it
        (cause,) = causes
        assert cause in done.stdout, done.stdout + done.stderr  # rank 0's terminal
        assert done.stdout.count(outcomes.split("; ")[0]) >= 1
    # The folder, as `rankgate merge-junit out` reads it: a dead rank's results file too.
    merged = merge_junit([tmp_path / "out"])
    (case,) = [t for t in merged.tests if t.name == test.split("::")[1]]
    assert case.message in [f"{outcomes}; {cause}" for cause in causes], case.message
