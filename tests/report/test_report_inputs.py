"""Bad input to ``rankgate report`` is one line naming the file and the problem, exit 2;
and the pieces that need no run: reasons folded by number, the GPU topology line,
folds that hold backticks."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import gfm
import pytest

from rankgate import cli
from rankgate.report.collect import ReportData
from rankgate.report.failures import FailedTest, RankDetail
from rankgate.report.markdown import render_markdown
from rankgate.report.results import TestResult
from rankgate.report.runinfo import summarize_topology
from rankgate.report.skips import group_reasons

pytestmark = pytest.mark.unit

GOOD_STAGE = {"stage": "unit", "status": "passed", "seconds": 1.5}


def _report(out: Path, *args: str) -> list[str]:
    return ["report", "--out", str(out), *args]


@pytest.fixture
def run_report(monkeypatch, capsys):
    monkeypatch.setattr(sys, "argv", ["rankgate"])  # cli.main rewrites sys.argv
    monkeypatch.delenv("GITHUB_STEP_SUMMARY", raising=False)

    def run(out: Path, *args: str) -> tuple[int, str]:
        code = cli.main(_report(out, *args))
        out, err = capsys.readouterr()
        return code, err or out  # an error, else the verdict line

    return run


@pytest.mark.parametrize(
    ("name", "text", "error"),
    [
        ("stages/unit.json", "{bad", "stages/unit.json: not JSON (Expecting property name"),
        ("stages/unit.json", "[]", "stages/unit.json: not a stage outcome (an object with 'stage'"),
        ("stages/unit.json", '{"stage": "unit", "status": "weird"}',
         "stages/unit.json: stage 'unit' has status 'weird'; known: passed, failed, incomplete"),
        ("stages/unit.json", '{"stage": "unit", "status": "passed", "seconds": "fast"}',
         "stages/unit.json: stage 'unit' has seconds 'fast'"),
        ("gate.json", '{"garbage": 1}', "gate.json: not the gate's table (a JSON list of stage"),
        ("gate.json", "[1, 2]", "gate.json: not a stage outcome"),
        ("run.json", '{"planned": []}', "run.json: not a run description (format 'rankgate.run/1')"),
        ("bench/comm.json", "[1, 2, 3]", "bench/comm.json: not a benchmark result (expected"),
        ("bench/comm.json", '{"results": 3}', "bench/comm.json: not a benchmark result"),
        ("bench/comm.json", "warming up\n", "bench/comm.json: not JSON, nor any line of it"),
    ],
)  # fmt: skip
def test_a_corrupt_input_is_one_line_and_exit_2(tmp_path, run_report, name, text, error):
    out = tmp_path / "out"
    (out / "stages").mkdir(parents=True)
    if name != "stages/unit.json":
        (out / "stages" / "unit.json").write_text(json.dumps(GOOD_STAGE))
    (out / name).parent.mkdir(parents=True, exist_ok=True)
    (out / name).write_text(text)
    code, err = run_report(out)
    assert code == 2
    assert err.startswith(f"rankgate report: error: {out / error}"), err
    assert err.count("\n") == 1 and "Traceback" not in err
    assert not (out / "report.html").exists()


def test_bench_given_by_hand_is_checked_too(tmp_path, run_report):
    out = tmp_path / "out"
    (out / "stages").mkdir(parents=True)
    (out / "stages" / "unit.json").write_text(json.dumps(GOOD_STAGE))
    numbers = tmp_path / "numbers.json"
    numbers.write_text("[1, 2, 3]")
    code, err = run_report(out, "--bench", str(numbers))
    assert (code, err.split(" (")[0]) == (
        2, f"rankgate report: error: {numbers}: not a benchmark result",
    )  # fmt: skip


@pytest.mark.parametrize(
    ("content", "error"),
    [
        (None, "not a folder of earlier report.json files"),
        ('{"format": "something else"}', "old.json: not a report JSON (format 'rankgate.report/1'"),
        ("{", "old.json: not JSON"),
    ],
)  # fmt: skip
def test_bad_history_is_one_line_and_exit_2(tmp_path, run_report, content, error):
    out = tmp_path / "out"
    (out / "stages").mkdir(parents=True)
    (out / "stages" / "unit.json").write_text(json.dumps(GOOD_STAGE))
    history = tmp_path / "history"
    if content is not None:
        history.mkdir()
        (history / "old.json").write_text(content)
    code, err = run_report(out, "--history", str(history))
    assert code == 2 and err.count("\n") == 1 and error in err, err


def test_an_unfinished_stage_alone_reads_incomplete(tmp_path, run_report):
    out = tmp_path / "out"
    (out / "stages").mkdir(parents=True)
    (out / "stages" / "unit.json").write_text('{"stage": "unit", "status": "running"}')
    code, err = run_report(out)
    assert code == 1 and err.startswith("rankgate report: INCOMPLETE: 0 tests"), err
    assert (out / "summary.md").read_text().startswith("## rankgate: INCOMPLETE\n")


def _skipped(test_id: str, reason: str) -> TestResult:
    return TestResult(id=test_id, outcome="skipped", source="junit/gpu.xml", reason=reason)


def test_reasons_that_differ_in_numbers_fold_into_one():
    results = [
        _skipped("a", "world(4, backend='nccl') needs 4 GPUs; 2 visible to this process"),
        _skipped("b", "needs DeepSpeed"),
        _skipped("c", "world(8, backend='nccl') needs 8 GPUs; 2 visible to this process"),
        _skipped("d", "world(4, backend='nccl') needs 4 GPUs; 2 visible to this process"),
        TestResult(id="e", outcome="passed", source="junit/gpu.xml"),
    ]
    got = [g.to_json() for g in group_reasons(results)]
    assert got == [
        {"reason": "world(4/8, backend='nccl') needs 4/8 GPUs; 2 visible to this process",
         "count": 3, "examples": ["a", "c", "d"]},
        {"reason": "needs DeepSpeed", "count": 1, "examples": ["b"]},
    ]  # fmt: skip


TOPO_NV = """\
\tGPU0\tGPU1\tGPU2\tGPU3\tCPU Affinity\tNUMA Affinity\tGPU NUMA ID
GPU0\t X \tNV18\tNV18\tNV18\t0-47\t0\t\tN/A
GPU1\tNV18\t X \tNV18\tNV18\t0-47\t0\t\tN/A
GPU2\tNV18\tNV18\t X \tNV18\t48-95\t1\t\tN/A
GPU3\tNV18\tNV18\tNV18\t X \t48-95\t1\t\tN/A

Legend:
  X    = Self
"""


def test_the_topology_line():
    assert summarize_topology(TOPO_NV) == "NV18 between every pair of 4 GPUs"
    mixed = TOPO_NV.replace("GPU0\t X \tNV18\tNV18", "GPU0\t X \tNV18\tSYS")
    assert summarize_topology(mixed) == (
        "NV18: GPU0-GPU1, GPU0-GPU3, GPU1-GPU2, GPU1-GPU3, GPU2-GPU3; SYS: GPU0-GPU2"
    )
    one = "\tGPU0\tCPU Affinity\nGPU0\t X \t0-47\n"
    assert summarize_topology(one) == "one GPU"
    assert summarize_topology("") is None


def test_a_traceback_with_backticks_stays_inside_its_fold():
    text = "Traceback:\n  ```\n  code in a docstring ```` here\nAssertionError: `x` != `y`"
    test = FailedTest(
        id="t::weird`id", outcome="failed", source="junit/dist.xml", message="a | b <c>",
        ranks=(RankDetail(rank=0, outcome="passed"), RankDetail(rank=1, outcome="failed",
                                                                 traceback=text)),
    )  # fmt: skip
    data = ReportData(summary={"totals": {}, "failing": [{"id": test.id}]}, failures=[test])
    tokens = gfm.parse(render_markdown(data))
    (fence,) = [t for t in tokens if t.type == "fence"]
    assert fence.content == text + "\n"
    assert gfm.headings(tokens, 4) == ["``t::weird`id`` rank 1 failed; rank 0 passed"]
