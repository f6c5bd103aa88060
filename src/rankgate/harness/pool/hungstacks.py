"""The stacks of a pool's hung ranks: each prints every thread's Python stack on a
signal (faulthandler, set up by the worker), and the test's frames are kept."""

from __future__ import annotations

import time
from collections.abc import Iterable
from pathlib import Path

from rankgate.harness import ledger
from rankgate.harness.outcome import OutcomeKind, RankOutcome
from rankgate.harness.output import read_clipped
from rankgate.harness.pool import messages

STACK_DUMP_WAIT_S = 0.5
"""Time for faulthandler to write every rank's stacks after the stack signal."""


def dump(hung: Iterable, why: str, test_id: str) -> dict[int, RankOutcome]:
    """Signal each hung rank (a pool's ``_Rank``) to print its stacks; a hung outcome for
    each, with its stack. Each rank's ``stderr_end`` marks where the test's own stderr
    ends and the dump begins."""
    hung = list(hung)
    before = {r.rank: _size(r.stderr) for r in hung}
    for r in hung:
        r.stderr_end = before[r.rank]
    for r in hung:
        r.process.signal(messages.STACK_SIGNAL)  # not one that ended meanwhile
    time.sleep(STACK_DUMP_WAIT_S)
    return {
        r.rank: RankOutcome(
            rank=r.rank,
            test_id=test_id,
            outcome=OutcomeKind.HUNG,
            detail=why,
            stack=trim_harness_frames(read_clipped(r.stderr, before[r.rank])),
        )
        for r in hung
    }


# The worker's file as a stack names it (".../rankgate/harness/pool/worker.py"), from
# where this module is, so a move of either keeps the frames found.
_WORKER_FILE = "/".join(Path(__file__).with_name("worker.py").parts[-4:])
_LEDGER_FILE = "/".join(Path(__file__).with_name("ledgerdump.py").parts[-4:])


def trim_harness_frames(stack: str) -> str:
    """Drop the worker's and multiprocessing's frames under the test's own frames, and the
    ledger's wrapper between torch's collective and the test."""
    kept, skipping = [], False
    for line in ledger.without_wrapper_frames(stack.splitlines()):
        if not line.startswith('  File "'):
            skipping = False
        elif skipping:
            continue
        elif _WORKER_FILE in line or _LEDGER_FILE in line:
            skipping = True
            kept.append("  (rankgate worker frames omitted)")
            continue
        kept.append(line)
    return "\n".join(kept) + "\n"


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except FileNotFoundError:
        return 0
