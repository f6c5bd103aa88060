"""The one wording of ranks, and where a hung rank's stack says it waits."""

from __future__ import annotations

import pytest

from rankgate.harness import verdict_lines
from rankgate.harness.stacks import Frame, Where, where

pytestmark = pytest.mark.unit

TORCH = "/venv/lib/python3.11/site-packages/torch/distributed"
WAITING = f'''Thread 0x00007f00000001 (most recent call first):
  File "/usr/lib/python3.11/threading.py", line 331 in wait
  File "/venv/lib/python3.11/site-packages/torch/utils/data/_utils/pin.py", line 9 in loop

Thread 0x00007f00000002 (most recent call first):
  File "{TORCH}/distributed_c10d.py", line 3111 in all_gather
  File "{TORCH}/c10d_logger.py", line 81 in wrapper
  File "{TORCH}/distributed_c10d.py", line 3020 in all_gather_object
  File "{TORCH}/c10d_logger.py", line 81 in wrapper
  File "/repo/src/pkg/utils.py", line 419 in gather_all
  File "/repo/src/test/ckpt_test.py", line 40 in run_save
  (rankgate worker frames omitted)
'''
SLEEPING = """Current thread 0x00007f00000002 (most recent call first):
  File "/repo/src/pkg/utils.py", line 418 in gather_all
  File "/repo/src/test/ckpt_test.py", line 40 in run_save
"""


def test_ranks_and_outcomes_line():
    assert verdict_lines.ranks([2]) == "rank 2"
    assert verdict_lines.ranks([2, 0]) == "ranks 0, 2"
    line = verdict_lines.outcomes_line({0: "passed", 1: "failed", 2: "passed", 3: "skipped"})
    assert line == "rank 1 failed; rank 3 skipped; ranks 0, 2 passed"


def test_crash_note_and_first_failure_are_in_brackets():
    line = verdict_lines.outcomes_line(
        {0: "failed", 1: "failed", 2: "passed"},
        first=1,
        notes={"crashed": "killed by SIGSEGV (exit code -11)"},
    )
    assert line == "ranks 0, 1 failed (rank 1 first); rank 2 passed"
    line = verdict_lines.outcomes_line(
        {0: "failed", 1: "failed", 2: "crashed"},
        notes={"crashed": "killed by SIGSEGV (exit code -11)"},
    )
    assert line == "rank 2 crashed (killed by SIGSEGV (exit code -11)); ranks 0, 1 failed"


@pytest.mark.parametrize(
    ("came_first", "expected"),
    [("crashed", "rank 0 crashed; ranks 1, 2 failed"), ("hung", "ranks 1, 2 failed; rank 0 hung")],
)
def test_no_failure_is_first_after_a_rank_crashed_or_hung(came_first, expected):
    # The peers' failures follow from it, in an order their timing alone decides (a
    # planted dtype crash read "ranks 1, 2 failed (rank 2 first)" in one CI run).
    line = verdict_lines.outcomes_line({0: came_first, 1: "failed", 2: "failed"}, first=2)
    assert line == expected


@pytest.mark.parametrize(
    ("durations", "first"),
    [
        ({0: 2.0, 1: 0.3}, 1),
        ({0: 0.30, 1: 0.31}, None),
        ({0: 0.30, 1: 0.45}, None),  # a rank scheduled late on a busy machine is not first
        ({1: 0.4}, None),
        ({}, None),
    ],
)
def test_first_failed_only_when_clearly_first(durations, first):
    assert verdict_lines.first_failed(durations) == first


def test_where_a_rank_waits_in_a_collective_names_the_outermost_call_and_its_caller():
    assert where(WAITING, "src/test/ckpt_test.py") == Where(
        "all_gather_object", Frame("/repo/src/pkg/utils.py", 419, "gather_all")
    )
    assert str(where(WAITING)) == "waiting in all_gather_object at utils.py:419"


def test_a_rank_outside_every_collective_is_in_user_code():
    assert str(where(SLEEPING, "ckpt_test.py")) == "in user code at utils.py:418"
    assert where("no frames at all") is None


def test_hang_cause_names_the_ranks_outside_collectives_first():
    cause = verdict_lines.hang_cause({0: where(WAITING), 1: where(SLEEPING), 2: None})
    assert cause == (
        "likely cause: rank 1 in user code at utils.py:418; "
        "rank 0 waiting in all_gather_object at utils.py:419"
    )
    both = verdict_lines.hang_cause({0: where(WAITING), 1: where(WAITING)})
    assert both.startswith("every hung rank waits in a collective: rank 0 waiting in all_gather")
    assert verdict_lines.hang_cause({0: None}) == ""


def test_processes_left_running_are_named_with_their_rank():
    assert verdict_lines.left_running_cause({0: "", 1: "pid 12 (sleep 1000)"}) == (
        "rank 1 left processes running: pid 12 (sleep 1000)"
    )
    assert verdict_lines.left_running_cause({0: ""}) == ""
