"""interLink end to end: torchrun runs 2 in-place ranks in a 'pod' of the fake interLink API.

The results come back only through the pod's logs (the archive between markers),
and the bearer token appears in no output.
"""

from __future__ import annotations

import json
import textwrap

import pytest
from fake_interlink import TOKEN

from rankgate.dispatch.job_outcome import JobOutcome
from rankgate.dispatch.job_result import render_report
from rankgate.dispatch.profile import profile_from_dict
from rankgate.dispatch.run import run_stage

pytestmark = [pytest.mark.dist, pytest.mark.slow]


SUITE = """
import os
import torch
import torch.distributed as dist
import pytest

@pytest.mark.world(2)
def test_all_reduce(rank):
    t = torch.ones(1) * (rank + 1)
    dist.all_reduce(t)
    assert t.item() == 3

@pytest.mark.every_rank  # in place, a plain test runs on one rank: this one checks both
def test_rank_one(rank):
    print("secret-free output of rank", rank)
    assert os.environ.get("BREAK_RANK") != str(rank), f"rank {rank} broken on purpose"
"""


@pytest.mark.parametrize("break_rank", ["", "1"])
def test_stage_end_to_end_results_come_back_through_the_logs(
    interlink, interlink_profile, tmp_path, capsys, break_rank
):
    """torchrun runs 2 in-place ranks in the 'pod'; the archive in its logs is merged here."""
    (tmp_path / "suite" / "test_remote.py").write_text(textwrap.dedent(SUITE))
    profile = profile_from_dict(
        {**interlink_profile, "env": {"BREAK_RANK": break_rank}}, name="site"
    )
    lines: list[str] = []
    result = run_stage(
        profile,
        stage="hpc",
        pytest_args=["test_remote.py"],
        progress=lines.append,
        local_dir=tmp_path / "back",
    )
    report = render_report(result)
    assert result.passed is (not break_rank), report
    assert result.outcome is (JobOutcome.FAILED if break_rank else JobOutcome.COMPLETED)
    assert result.merged.world_size == 2 and result.merged.missing_ranks == []
    if break_rank:
        bad = [t for t in result.merged.tests if t.verdict == "failed"]
        assert [(t.name, t.failing_ranks) for t in bad] == [("test_rank_one", (1,))]
        assert "rank 1 broken on purpose" in report
    assert any("running" in line for line in lines)
    assert interlink.violations == [] and not interlink.pods
    # The token is in no output: progress, report, summary, files, terminal.
    captured = capsys.readouterr()
    texts = [report, json.dumps(result.to_json()), *lines, captured.out, captured.err]
    texts += [p.read_text(errors="replace") for p in (tmp_path / "back").rglob("*") if p.is_file()]
    assert not [t for t in texts if TOKEN in t]


def test_two_shards_through_interlink_merge_into_one_verdict(
    interlink, interlink_profile, tmp_path
):
    """shards = 2 on interLink: two pods, one shard each, split by a durations file read in
    the pod's working folder, merged into one verdict."""
    from rankgate.dispatch.run import run_sharded_stage
    from rankgate.dispatch.sharded_run import render_sharded

    suite = tmp_path / "suite"
    (suite / "test_remote.py").write_text(textwrap.dedent(SUITE))
    (suite / "durations.json").write_text(
        json.dumps({"test_remote.py::test_all_reduce": 2.0, "test_remote.py::test_rank_one": 1.0})
    )
    profile = profile_from_dict(
        {**interlink_profile, "shards": 2, "durations": "durations.json"}, name="site"
    )
    lines: list[str] = []
    result = run_sharded_stage(
        profile, stage="hpc", pytest_args=["test_remote.py"], progress=lines.append,
        local_dir=tmp_path / "back",
    )  # fmt: skip
    report = render_sharded(result)
    assert result.passed and result.exit_status == 0, report
    assert [s.outcome for s in result.shards] == [JobOutcome.COMPLETED] * 2, report
    assert [r.expected for r in result.runs] == [
        ("test_remote.py::test_all_reduce",),
        ("test_remote.py::test_rank_one",),
    ]
    shard_of = {t.name: dict(t.labels)["shard"] for t in result.merged.tests}
    assert shard_of == {"test_all_reduce": "1/2", "test_rank_one": "2/2"}
    assert (tmp_path / "back" / "junit.merged.xml").is_file()
    assert interlink.violations == [] and not interlink.pods
