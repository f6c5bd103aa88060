"""Merging per-rank JUnit files of a job, the outcome vocabulary, and the report."""

from __future__ import annotations

import pytest

from rankgate.dispatch.job_outcome import JobOutcome, Phase, slurm_never_starts, slurm_state
from rankgate.dispatch.job_result import DispatchResult, merge_job_dir, render_report

pytestmark = pytest.mark.unit


def _junit(cases: dict[str, str]) -> str:
    body = []
    for name, outcome in cases.items():
        inner = {
            "passed": "",
            "failed": '<failure message="assert 1 == 2">trace</failure>',
            "error": '<error message="fixture broke">trace</error>',
            "skipped": '<skipped message="no gpu"/>',
        }[outcome]
        body.append(f'<testcase classname="test_x" name="{name}" time="0.1">{inner}</testcase>')
    return f'<testsuites><testsuite name="pytest">{"".join(body)}</testsuite></testsuites>'


def _job(tmp_path, ranks: dict[int, dict[str, str]]):
    for rank, cases in ranks.items():
        (tmp_path / f"junit.rank{rank}.xml").write_text(_junit(cases))
    return tmp_path


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("PENDING", Phase.QUEUED),
        ("RUNNING", Phase.RUNNING),
        ("COMPLETING", Phase.RUNNING),
        ("COMPLETED", JobOutcome.COMPLETED),
        ("FAILED", JobOutcome.FAILED),
        ("TIMEOUT", JobOutcome.TIMEOUT),
        ("CANCELLED by 0", JobOutcome.CANCELLED),
        ("CANCELLED+", JobOutcome.CANCELLED),
        ("NODE_FAIL", JobOutcome.NODE_FAIL),
        ("OUT_OF_MEMORY", JobOutcome.OUT_OF_MEMORY),
        ("PREEMPTED", JobOutcome.PREEMPTED),
        ("SPECIAL_EXIT", JobOutcome.OTHER),
    ],
)
def test_slurm_states_map_to_distinct_outcomes(raw, expected):
    assert slurm_state(raw) is expected


@pytest.mark.parametrize(
    ("reason", "never"),
    [
        ("PartitionConfig", True),  # more CPUs than the partition has (seen for real)
        ("PartitionNodeLimit", True),  # more nodes than the partition has (seen for real)
        ("DependencyNeverSatisfied", True),  # seen for real
        ("QOSMaxWallDurationPerJobLimit", True),
        ("AssocMaxCpuPerJobLimit", True),
        ("QOSMinGRES", True),
        ("Resources", False),
        ("Priority", False),
        ("JobHeldUser", False),
        ("QOSMaxCpuPerUserLimit", False),  # clears when the user's other jobs end
        ("ReqNodeNotAvail, UnavailableNodes:n1", False),
        ("None", False),
    ],
)
def test_pending_reasons_that_mean_never(reason, never):
    assert slurm_never_starts(reason) is never


def test_terminal_slurm_states_are_all_distinct():
    words = [
        "COMPLETED",
        "FAILED",
        "TIMEOUT",
        "CANCELLED",
        "NODE_FAIL",
        "OUT_OF_MEMORY",
        "PREEMPTED",
    ]
    assert len({slurm_state(w) for w in words}) == len(words)


def test_all_ranks_pass(tmp_path):
    merged = merge_job_dir(_job(tmp_path, {0: {"a": "passed"}, 1: {"a": "passed"}}), 2)
    assert merged.passed and merged.count("passed") == 1 and merged.failing_ranks == []
    assert (tmp_path / "junit.merged.xml").is_file()


def test_one_failing_rank_fails_the_test(tmp_path):
    merged = merge_job_dir(_job(tmp_path, {0: {"a": "passed"}, 1: {"a": "failed"}}), 2)
    (test,) = merged.tests
    assert (test.verdict, test.failing_ranks) == ("failed", (1,))
    assert "assert 1 == 2" in test.details
    assert not merged.passed


def test_skip_on_one_rank_pass_on_another_is_an_error(tmp_path):
    merged = merge_job_dir(_job(tmp_path, {0: {"a": "passed"}, 1: {"a": "skipped"}}), 2)
    assert merged.tests[0].verdict == "error"


def test_a_rank_without_results_is_missing(tmp_path):
    merged = merge_job_dir(_job(tmp_path, {0: {"a": "passed"}}), 2)
    assert merged.missing_ranks == [1] and merged.failing_ranks == [1] and not merged.passed


def test_a_cut_short_junit_file_counts_as_missing(tmp_path):
    _job(tmp_path, {0: {"a": "passed"}})
    (tmp_path / "junit.rank1.xml").write_text("<testsuites><testsuite")
    merged = merge_job_dir(tmp_path, 2)
    assert merged.missing_ranks == [1] and merged.unreadable and not merged.passed


def test_all_skipped_is_not_a_pass(tmp_path):
    merged = merge_job_dir(_job(tmp_path, {0: {"a": "skipped"}, 1: {"a": "skipped"}}), 2)
    assert merged.report.ok and not merged.passed


def test_report_shows_the_failing_ranks_logs(tmp_path):
    _job(tmp_path, {0: {"a": "passed"}, 1: {"a": "failed"}})
    (tmp_path / "rank1.log").write_text("stderr of rank one\n")
    (tmp_path / "pytest.rank1.log").write_text("terminal of rank one\n")
    (tmp_path / "rank0.log").write_text("rank zero is fine\n")
    result = DispatchResult(
        profile="p",
        target="slurm",
        job_id="7",
        outcome=JobOutcome.FAILED,
        state="FAILED",
        exit_code="1:0",
        job_dir=tmp_path,
        merged=merge_job_dir(tmp_path, 2),
    )
    report = render_report(result)
    assert "FAILED test_x::a: rank 1 failed; rank 0 passed" in report
    assert "terminal of rank one" in report and "stderr of rank one" in report
    assert "rank zero is fine" not in report
    assert result.exit_status == 1


def test_infrastructure_outcomes_exit_3(tmp_path):
    result = DispatchResult(
        profile="p",
        target="slurm",
        job_id="",
        outcome=JobOutcome.SUBMIT_ERROR,
        message="sbatch: error: invalid partition specified: nope",
    )
    assert result.exit_status == 3
    assert "sbatch: error: invalid partition specified: nope" in render_report(result)
