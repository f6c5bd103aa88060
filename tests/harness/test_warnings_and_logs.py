"""What pytest catches around a plain test's body, caught on every rank of a world test:
warnings (the ini's ``filterwarnings``, ``-W`` and a test's ``filterwarnings`` marks judge
the body on every rank, and what the ranks warned is in the warnings summary; the same
verdicts in place) and log records (at pytest's log level, in its format, in each rank's
captured output)."""

from __future__ import annotations

import re
import textwrap

import pytest
from jobs import run_torchrun_pytest

pytestmark = [pytest.mark.dist, pytest.mark.torch_dist]

SOURCE = """
import warnings

import pytest
import torch.distributed as dist


@pytest.mark.world(2, backend="gloo")
def test_future_warning_on_rank_1_is_an_error_by_the_ini(rank):
    dist.barrier()
    if rank == 1:
        warnings.warn("old argument", FutureWarning)


@pytest.mark.world(2, backend="gloo")
@pytest.mark.filterwarnings("error")
def test_a_mark_makes_every_warning_an_error(rank):
    warnings.warn(f"loose end on rank {rank}", UserWarning)


@pytest.mark.world(2, backend="gloo")
@pytest.mark.filterwarnings("ignore:noise")
def test_an_ignored_warning_is_not_shown(rank):
    warnings.warn("noise from every rank", UserWarning)


@pytest.mark.world(2, backend="gloo")
def test_the_same_warning_on_both_ranks_is_shown_once(rank):
    warnings.warn("shared concern", UserWarning)


@pytest.mark.world(2, backend="gloo")
def test_a_deprecation_on_rank_1_is_shown(rank):
    if rank == 1:
        warnings.warn("rank one's api is deprecated", DeprecationWarning)


@pytest.mark.world(2, backend="gloo")
def test_pytest_warns_in_the_body(rank):
    with pytest.warns(UserWarning, match="expected"):
        warnings.warn("expected", UserWarning)
"""

INI = "filterwarnings =\n    error::FutureWarning\n"
COUNTS = {"passed": 4, "failed": 2}


def test_the_filters_judge_every_rank_and_the_summary_shows_what_they_warned(inner):
    # Before: the ranks ran under Python's own filters: both failing tests passed, and
    # no warning reached the summary (the DeprecationWarning was not even printed).
    result = inner(SOURCE, ini=INI)
    result.assert_outcomes(**COUNTS)
    result.stdout.fnmatch_lines_random(
        [
            "rank 1 failed; rank 0 passed (world 2, backend gloo)",
            "FutureWarning: old argument",
            "ranks 0, 1 failed (world 2, backend gloo)",
            "UserWarning: loose end on rank 1",
            "*test_inner.py:*: UserWarning: shared concern",
            "*test_inner.py:*: DeprecationWarning: rank one's api is deprecated",
            "* 2 failed, 4 passed, 2 warnings in *",
        ]
    )
    assert "noise" not in result.stdout.str()
    assert result.stdout.str().count("UserWarning: shared concern") == 1


def test_a_command_line_filter_reaches_the_ranks(inner):
    result = inner(SOURCE, "-W", "error::DeprecationWarning", "-k", "deprecation")
    result.stdout.fnmatch_lines(["*rank 1 failed; rank 0 passed*", "DeprecationWarning: *"])
    result.assert_outcomes(failed=1)


@pytest.mark.slow  # torchrun runs of its own
def test_in_place_each_rank_has_the_same_verdicts(tmp_path):
    (tmp_path / "pytest.ini").write_text(f"[pytest]\n{INI}")
    (tmp_path / "test_warnings.py").write_text(textwrap.dedent(SOURCE))
    proc = run_torchrun_pytest(tmp_path, "-q", "test_warnings.py", timeout=120)
    last = proc.stdout.strip().splitlines()[-1]
    counts = {word: int(n) for n, word in re.findall(r"(\d+) (passed|failed)", last)}
    assert counts == COUNTS, proc.stdout + proc.stderr


LOGS = """
import logging

import pytest

log = logging.getLogger("project.train")


@pytest.mark.world(2)
def test_logs_then_fails_on_rank_1(rank):
    log.debug("too fine to show")
    log.info("step %d on rank %d", 1, rank)
    assert rank == 0


@pytest.mark.world(2)
def test_the_last_tests_handler_is_gone(rank):
    assert len(logging.getLogger().handlers) <= 1  # this test's own, if any
"""


def test_log_records_at_pytests_level_and_format_are_in_each_ranks_output(inner):
    # Before: the ranks had no handler: INFO records were lost at any log_level, and a
    # warning came out bare, without pytest's format.
    result = inner(LOGS, ini="log_level = INFO")
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines(
        [
            "*Captured stderr call (rank 0)*",
            "INFO     project.train:test_inner.py:* step 1 on rank 0",
            "*Captured stderr call (rank 1)*",
            "INFO     project.train:test_inner.py:* step 1 on rank 1",
        ]
    )
    assert "too fine to show" not in result.stdout.str()


def test_without_pytests_logging_plugin_the_ranks_keep_pythons_own_handling(inner):
    result = inner(LOGS, "-p", "no:logging", ini="log_level = INFO")
    result.assert_outcomes(passed=1, failed=1)
    assert "step 1" not in result.stdout.str()
