"""The report of real runs of planted suites: ``rankgate run`` starts the harness on real
ranks, then ``rankgate report`` writes out/report.html, summary.md and report.json.

Four runs, each checked in the JSON, in summary.md (rendered by a CommonMark renderer)
and in a real headless Chromium: a passing run (with benchmarks against the committed
baseline and the trend since an earlier, failing run), a multi-rank test failing on
one rank, a hang, and tests skipped for want of GPUs. A fifth, a gate killed mid-stage,
must read incomplete everywhere. With RANKGATE_SCREENSHOT_DIR set, each page's
screenshot is copied there (docs/report/ holds the committed ones).
"""

from __future__ import annotations

import json
import os
import platform
import shutil
import subprocess
import sys
from pathlib import Path

import gfm
import pytest
import scenarios
from chromium import Browser, find_chromium

from rankgate.bench import compare, samples
from rankgate.pipeline.executor import Outcome, summary_table
from tests.once import once_per_run

pytestmark = [pytest.mark.dist, pytest.mark.slow]  # the planted runs start real ranks

ROOT = scenarios.ROOT
ZERO = {
    "tests": 0, "passed": 0, "failed": 0, "error": 0, "not run": 0, "skipped": 0, "xfailed": 0,
    "xpassed": 0,
}  # fmt: skip


def _run(tmp_path_factory, name: str, text: str, **env: str) -> Path:
    work = tmp_path_factory.mktemp(name)
    scenarios.plant(work, f"test_{name}.py", text)
    done = scenarios.rankgate_run(work, f"test_{name}.py", **env)
    assert done.returncode in (0, 1), done.stderr[-3000:]
    return work


def _summary(out: Path, *args: str, expect: int, **env: str) -> dict:
    done = scenarios.report(out, "--json", *args, **env)
    assert done.returncode == expect, done.stderr[-3000:]
    assert json.loads(done.stdout) == json.loads((out / "report.json").read_text())
    return json.loads(done.stdout)


def _bench(out: Path, work: Path) -> None:
    """A bench stage's products: a harness run at the committed CPU baseline's best
    figures, compared with that baseline by ``rankgate bench compare`` (with its plot)."""
    bench = out / "bench"
    bench.mkdir()
    baseline = ROOT / "benchmarks/baselines/cpu/harness.json"
    scenarios.write_harness_run_at_best(bench / "harness.json", json.loads(baseline.read_text()))
    done = subprocess.run(
        [sys.executable, "-m", "rankgate.cli", "bench", "compare", str(baseline),
         str(bench / "harness.json"), "--json", str(bench / "compare.json"),
         "--plot", str(bench / "compare.png")],
        env=scenarios.scenario_env(), capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr


def _bench_verdict() -> str:
    """The verdict of :func:`_bench`'s comparison: the run sits at the baseline's best, so
    it reads as the baseline against itself, inconclusive where its own spread exceeds a
    threshold."""
    baseline = samples.load(ROOT / "benchmarks/baselines/cpu/harness.json")
    unsure = sum(r.verdict == "inconclusive" for r in compare.compare(baseline, baseline).rows)
    return f"inconclusive ({unsure} within the baseline's spread)" if unsure else "no regression"


# Each run is made once per run and shared by the xdist workers (tests/once.py): the
# tests only read its folder.
@pytest.fixture(scope="module")
def passing(request, tmp_path_factory) -> tuple[Path, dict]:
    """The passing run, after an earlier run of the same suite in which one test failed."""
    return once_per_run(request, lambda: _passing(tmp_path_factory))


def _passing(tmp_path_factory) -> tuple[Path, dict]:
    work = _run(tmp_path_factory, "passing", scenarios.PASSING, PLANTED_BROKEN="1")
    history = work / "history"
    history.mkdir()
    earlier = _summary(work / "out", expect=1)
    assert earlier["totals"]["failed"] == 1
    shutil.copy(work / "out" / "report.json", history / "earlier.json")
    done = scenarios.rankgate_run(work, "test_passing.py")
    assert done.returncode == 0, done.stderr[-3000:]
    _bench(work / "out", work)
    step_summary = work / "step-summary.md"
    summary = _summary(work / "out", "--history", str(history), expect=0,
                       GITHUB_STEP_SUMMARY=str(step_summary))  # fmt: skip
    return work, summary


def _reported(tmp_path_factory, name: str, text: str, expect: int) -> tuple[Path, dict]:
    """The run of a planted suite and its summary."""
    work = _run(tmp_path_factory, name, text)
    return work, _summary(work / "out", expect=expect)


@pytest.fixture(scope="module")
def failing(request, tmp_path_factory) -> tuple[Path, dict]:
    return once_per_run(
        request, lambda: _reported(tmp_path_factory, "failing", scenarios.FAILING, expect=1)
    )


@pytest.fixture(scope="module")
def hang(request, tmp_path_factory) -> tuple[Path, dict]:
    return once_per_run(
        request, lambda: _reported(tmp_path_factory, "hang", scenarios.HANG, expect=1)
    )


@pytest.fixture(scope="module")
def gpu_skips(request, tmp_path_factory) -> tuple[Path, dict]:
    return once_per_run(
        request, lambda: _reported(tmp_path_factory, "gpu_skips", scenarios.GPU_SKIPS, expect=0)
    )


@pytest.fixture(scope="module")
def interrupted(request, tmp_path_factory) -> tuple[Path, dict]:
    return once_per_run(request, lambda: _interrupted(tmp_path_factory))


def _interrupted(tmp_path_factory) -> tuple[Path, dict]:
    work = tmp_path_factory.mktemp("interrupted")
    release = scenarios.interrupted_gate(work)
    try:
        summary = _summary(work / "out", expect=1)
    finally:
        release.touch()  # the orphaned unit test ends
    return work, summary


@pytest.fixture(scope="module")
def chromium(tmp_path_factory):
    binary = find_chromium()
    if binary is None:
        pytest.skip("no Chromium here (Debian: apt-get install chromium; .ci/run installs it)")

    def open_page(out: Path):
        browser = Browser(binary, tmp_path_factory.mktemp("profile"), height=900)
        browser.__enter__()
        browser.open((out / "report.html").as_uri())
        return browser

    return open_page


def _screenshot(page, name: str, tmp_path: Path) -> None:
    shot = page.screenshot(tmp_path / f"{name}.png")
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    if folder := os.environ.get("RANKGATE_SCREENSHOT_DIR"):
        shutil.copy(shot, Path(folder) / f"{name}.png")


def _texts(page, selector: str) -> list[str]:
    return page.evaluate(f"[...document.querySelectorAll({json.dumps(selector)})].map(e => e.innerText)")


def _rows(page, selector: str) -> list[list[str]]:
    return page.evaluate(
        f"[...document.querySelectorAll({json.dumps(selector)})]"
        ".map(r => [...r.cells].map(c => c.innerText))"
    )


# --------------------------------------------------------------------------- passing run


def test_passing_run_counts_every_outcome_apart(passing):
    _, summary = passing
    want = {**ZERO, "tests": 9, "passed": 7, "xfailed": 1, "xpassed": 1}
    assert summary["verdict"] == "passed" and summary["ok"] is True
    assert summary["totals"] == want
    assert summary["xpassed"] == ["test_passing::test_passes_despite_its_mark"]
    assert summary["xfails"] == [{"reason": "gloo has no bf16 all_to_all here", "count": 1,
                                  "examples": ["test_passing::test_known_gap"]}]  # fmt: skip
    (stage,) = summary["stages"]
    assert (stage["stage"], stage["status"], stage["tests"]) == ("files", "passed", want)
    assert summary["incomplete"] == {"interrupted": [], "never ran": []}


def test_the_header_names_the_machine_commit_and_command(passing):
    work, summary = passing
    run = summary["run"]
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=work, capture_output=True, text=True)
    assert run["commit"] == head.stdout.strip()
    assert run["command"] == "python -m rankgate.cli run --file test_passing.py --out out"
    machine = run["machine"]
    assert machine["hostname"] == platform.node()
    assert machine["python"] == platform.python_version()
    import torch

    assert machine["torch"] == torch.__version__
    assert machine["gpus"] == []  # CUDA_VISIBLE_DEVICES="" in the planted runs


def test_slowest_tests_are_listed_slowest_first(passing):
    _, summary = passing
    slowest = summary["slowest"]
    assert 3 <= len(slowest) <= 15
    assert [t["seconds"] for t in slowest] == sorted((t["seconds"] for t in slowest), reverse=True)
    assert {t["stage"] for t in slowest} == {"files"}
    assert "test_passing::test_slow_setup" in [t["id"] for t in slowest]


def test_the_trend_names_the_fixed_test(passing):
    _, summary = passing
    trend = summary["trend"]
    assert trend["changes"] == {
        "new failures": [], "fixed": ["test_passing::test_flaky_until_fixed"], "newly skipped": [],
    }  # fmt: skip
    assert trend["series"]["tests failed"] == [1, 0]
    assert trend["series"]["tests passed"] == [6, 7]
    assert len(trend["runs"]) == 2


def test_github_step_summary_receives_summary_md(passing):
    work, _ = passing
    assert (work / "step-summary.md").read_text() == (work / "out" / "summary.md").read_text()


def test_passing_summary_md_is_valid_gfm_with_its_sections(passing):
    work, summary = passing
    tokens = gfm.parse((work / "out" / "summary.md").read_text())
    assert gfm.headings(tokens, 2) == ["rankgate: passed"]
    assert gfm.headings(tokens, 3) == [
        # This run's benchmark comes first, after the stages.
        "Stages",
        "Benchmark: harness: out/bench/harness.json against "
        f"benchmarks/baselines/cpu/harness.json: {_bench_verdict()}",
        "Expected failures (xfailed) (1)", "Passed unexpectedly (xpassed)",
        f"Slowest tests ({len(summary['slowest'])})",
        "Trend over 2 runs",
    ]  # fmt: skip
    machine, stages, *_ = gfm.tables(tokens)
    assert machine[0] == ["machine", ""]
    assert dict(machine[1:])["GPUs"] == "none"
    assert stages[1][:3] == ["files", "passed", "7 passed, 1 xfailed, 1 xpassed"]


def test_passing_page(passing, chromium, tmp_path):
    work, summary = passing
    page = chromium(work / "out")
    try:
        html = (work / "out" / "report.html").read_text()
        assert "<script" not in html and "<link" not in html and "http" not in html.split("<body>")[1]
        assert page.evaluate("performance.getEntriesByType('resource').length") == 0
        assert page.evaluate("document.querySelector('#verdict h1').innerText") == "rankgate: passed"
        tiles = page.evaluate(
            "[...document.querySelectorAll('#outcomes .tile')].map(t => [t.dataset.outcome, t.querySelector('b').innerText])"
        )
        assert tiles == [["passed", "7"], ["failed", "0"], ["error", "0"], ["not run", "0"], ["skipped", "0"],
                         ["xfailed", "1"], ["xpassed", "1"]]  # fmt: skip
        machine = dict(_rows(page, "#machine tr"))
        assert machine["commit"] == summary["run"]["commit"]
        assert machine["GPUs"] == "none"
        assert page.evaluate("document.querySelectorAll('#time svg.bars rect').length") == 1
        assert len(_rows(page, "#slowest tr")) == 1 + len(summary["slowest"])
        assert _texts(page, "#bench > p.passed") == [_bench_verdict()]
        assert page.evaluate("document.querySelector('#bench img').alt") == "bench/compare.png"
        assert page.evaluate("document.querySelector('#bench img').naturalWidth") > 100
        assert _texts(page, "#trend [data-change='fixed'] li") == ["test_passing::test_flaky_until_fixed"]
        followed = [k for k, v in summary["trend"]["series"].items() if None not in v]
        assert "tests failed" in followed and "stage files (s)" in followed
        shown = page.evaluate(
            "[...document.querySelectorAll('#trend svg.trend')].map(s => s.getAttribute('aria-label'))"
        )
        assert shown == followed  # benchmark figures new in this run have no line yet
        _screenshot(page, "passing", tmp_path)
    finally:
        page.__exit__()


# --------------------------------------------------------------------------- failing run


def test_a_failing_rank_is_named_in_the_json(failing):
    _, summary = failing
    assert summary["verdict"] == "failed"
    assert summary["totals"] == {**ZERO, "tests": 3, "passed": 1, "failed": 2}
    by_id = {f["id"]: f for f in summary["failing"]}
    assert by_id["test_failing::test_shards_agree"] == {
        "id": "test_failing::test_shards_agree", "outcome": "failed",
        "source": by_id["test_failing::test_shards_agree"]["source"],
        "failing_ranks": [2], "ranks": {"0": "passed", "1": "passed", "2": "failed"},
        "message": "rank 2 failed; ranks 0, 1 passed (world 3, backend gloo)",
    }  # fmt: skip
    assert by_id["test_failing::test_plain_failure"]["failing_ranks"] is None


def test_a_failed_stage_names_each_failed_test_and_its_cause(failing):
    """The gate's table is the last thing a long log shows: under a failed stage it names
    the tests that failed, on which rank, and why, without scrolling back."""
    work, _ = failing
    saved = json.loads((work / "out" / "stages" / "files.json").read_text())
    assert saved["failing"] == [
        "test_failing::test_shards_agree — rank 2 failed; ranks 0, 1 passed (world 3, "
        "backend gloo): AssertionError: rank 2 holds a stale shard: [2.0, 2.0]",
        "test_failing::test_plain_failure — AssertionError: one is not two",
    ]
    table = summary_table([Outcome(**saved)]).splitlines()
    assert table[-3:-1] == [f"       ✗ {line}" for line in saved["failing"]]


def test_failing_summary_md(failing):
    work, _ = failing
    md = (work / "out" / "summary.md").read_text()
    tokens = gfm.parse(md)
    assert gfm.headings(tokens, 2) == ["rankgate: FAILED"]
    assert gfm.headings(tokens, 4) == [
        "`test_failing::test_shards_agree` rank 2 failed; ranks 0, 1 passed",
        "`test_failing::test_plain_failure` failed",
    ]
    fences = [t.content for t in tokens if t.type == "fence"]
    assert "AssertionError: rank 2 holds a stale shard: [2.0, 2.0]" in fences[0]
    assert "AssertionError: one is not two" in fences[1]
    assert "Root cause (likely): **rank 2** (failed)." in md
    assert "`reproduce: pytest 'test_failing.py::test_shards_agree' --rankgate-seed=" in md


def test_failing_page(failing, chromium, tmp_path):
    work, _ = failing
    page = chromium(work / "out")
    art = "document.querySelector('article[data-test=\"test_failing::test_shards_agree\"]')"
    try:
        assert page.evaluate("document.title") == "rankgate report — FAILED"
        badges = page.evaluate(f"[...{art}.querySelectorAll('.rank')].map(b => [b.innerText, b.classList.contains('root')])")
        assert badges == [["rank 2: failed", True], ["rank 0: passed", False], ["rank 1: passed", False]]
        assert page.evaluate(f"{art}.querySelector('.root-cause').innerText").startswith(
            "root cause (likely): rank 2 (failed)"
        )
        repro = page.evaluate(f"{art}.querySelector('pre.reproduce').innerText")
        assert repro.startswith("reproduce: pytest 'test_failing.py::test_shards_agree' --rankgate-seed=")
        folds = page.evaluate(f"[...{art}.querySelectorAll('details')].map(d => [d.dataset.rank, d.open])")
        assert folds == [["2", False], ["0", False], ["1", False]]
        assert "stale shard" not in page.evaluate("document.body.innerText")
        page.evaluate(f"{art}.querySelector('details[data-rank=\"2\"]').open = true")
        opened = page.evaluate(f"{art}.querySelector('details[data-rank=\"2\"]').innerText")
        assert "AssertionError: rank 2 holds a stale shard" in opened
        assert "rank 2: shard ready" in opened and "rank 2: checking" in opened
        assert "rank 0: shard ready" not in opened
        _screenshot(page, "failing-multi-rank", tmp_path)
    finally:
        page.__exit__()


# --------------------------------------------------------------------------- hang


def test_a_hang_names_the_rank_that_never_joined_and_keeps_every_stack(hang):
    work, summary = hang
    assert summary["totals"] == {**ZERO, "tests": 2, "passed": 1, "failed": 1}
    (bad,) = summary["failing"]
    assert bad["ranks"] == {"0": "hung", "1": "hung"} and bad["failing_ranks"] == [0, 1]
    tokens = gfm.parse((work / "out" / "summary.md").read_text())
    folds = [t.content for t in tokens if t.type == "html_block" and "<summary>" in t.content]
    assert folds[:2] == ["<details><summary>rank 1 hung (Python stacks)</summary>\n",
                         "<details><summary>rank 0 hung (Python stacks)</summary>\n"]  # fmt: skip


def test_hang_page(hang, chromium, tmp_path):
    work, _ = hang
    page = chromium(work / "out")
    art = "document.querySelector('article[data-test=\"test_hang::test_rank1_never_joins\"]')"
    try:
        assert page.evaluate(f"{art}.querySelector('.root-cause').innerText").startswith(
            "root cause (likely): rank 1 (hung)"
        )
        assert page.evaluate(f"{art}.querySelector('.hang').innerText").startswith(
            "hang: ranks 1, 0 did not finish"
        )
        page.evaluate(f"{art}.querySelectorAll('details').forEach(d => d.open = true)")
        stacks = page.evaluate(f"[...{art}.querySelectorAll('details')].map(d => d.innerText)")
        assert stacks[0].startswith("rank 1: hung — Python stacks and log")
        assert "test_hang.py\", line 15 in test_rank1_never_joins" in stacks[0]
        assert "in all_reduce" not in stacks[0]
        assert stacks[1].startswith("rank 0: hung — Python stacks and log")
        assert "in all_reduce" in stacks[1]
        _screenshot(page, "hang", tmp_path)
    finally:
        page.__exit__()


# --------------------------------------------------------------------------- GPU skips


GPU_REASON = "world(4/8, backend='nccl') needs 4/8 GPUs; 0 visible here"


def test_skips_are_grouped_by_reason(gpu_skips):
    _, summary = gpu_skips
    assert summary["verdict"] == "passed"
    assert summary["totals"] == {**ZERO, "tests": 6, "passed": 1, "skipped": 4, "xfailed": 1}
    assert summary["skips"] == [
        {"reason": GPU_REASON, "count": 3, "examples": [
            "test_gpu_skips::test_all_reduce_4", "test_gpu_skips::test_all_gather_4",
            "test_gpu_skips::test_all_reduce_8"]},
        {"reason": "needs DeepSpeed", "count": 1, "examples": ["test_gpu_skips::test_needs_deepspeed"]},
    ]  # fmt: skip
    assert [x["reason"] for x in summary["xfails"]] == ["NCCL 2.19 hangs on this topology"]


def test_gpu_skips_summary_md(gpu_skips):
    work, _ = gpu_skips
    tokens = gfm.parse((work / "out" / "summary.md").read_text())
    skips = next(t for t in gfm.tables(tokens) if t[0] == ["tests", "reason", "example"])
    assert skips[1:] == [["3", GPU_REASON, "`test_gpu_skips::test_all_reduce_4`"],
                         ["1", "needs DeepSpeed", "`test_gpu_skips::test_needs_deepspeed`"]]  # fmt: skip


def test_gpu_skips_page(gpu_skips, chromium, tmp_path):
    work, _ = gpu_skips
    page = chromium(work / "out")
    try:
        assert _rows(page, "#skips tr")[1:] == [
            ["3", GPU_REASON, "test_gpu_skips::test_all_reduce_4 (+2 more)"],
            ["1", "needs DeepSpeed", "test_gpu_skips::test_needs_deepspeed"],
        ]
        assert _rows(page, "#xfails tr")[1][:2] == ["1", "NCCL 2.19 hangs on this topology"]
        _screenshot(page, "skipped-for-gpus", tmp_path)
    finally:
        page.__exit__()


# --------------------------------------------------------------------------- interrupted


def test_an_interrupted_gate_never_reads_passed(interrupted, chromium, tmp_path):
    work, summary = interrupted
    out = work / "out"
    assert summary["verdict"] == "incomplete" and summary["ok"] is False
    # The unit stage's own JUnit says how pytest stopped and which test its xdist worker
    # was running.
    stopped = "out/junit/unit.xml: received SIGTERM while test_long.py::test_runs_until_released ran"
    # The gate itself, on its way out, recorded the stage it was running.
    unit = (
        "unit: stopped by SIGTERM while it ran: no test ended; "
        "test_long::test_runs_until_released was running"
    )
    assert summary["incomplete"] == {
        "interrupted": [], "stages": [unit], "never ran": ["bench"], "stopped": [stopped],
    }  # fmt: skip
    assert summary["run"]["planned"] == ["env-check", "lint", "unit", "bench"]
    gate = json.loads((out / "gate.json").read_text())
    assert [(s["stage"], s["status"]) for s in gate] == [
        ("env-check", "passed"), ("lint", "passed"), ("unit", "incomplete"),
    ]  # fmt: skip
    assert [(s["stage"], s["status"]) for s in summary["stages"]] == [
        ("env-check", "passed"), ("lint", "passed"), ("unit", "incomplete"),
    ]
    md = (out / "summary.md").read_text()
    tokens = gfm.parse(md)
    assert gfm.headings(tokens, 2) == ["rankgate: INCOMPLETE"]
    assert (
        f"**Incomplete run**: incomplete stages: {unit}; never ran: bench; stopped: {stopped}."
        in md
    )
    stages = next(t for t in gfm.tables(tokens) if t[0][0] == "stage")
    assert [row[:2] for row in stages[1:]] == [
        ["env-check", "passed"], ["lint", "passed"], ["unit", "**INCOMPLETE**"],
        ["bench", "**NEVER RAN**"],
    ]  # fmt: skip
    page = chromium(out)
    try:
        assert page.evaluate("document.title") == "rankgate report — INCOMPLETE"
        assert page.evaluate("document.querySelector('#incomplete').innerText").startswith(
            f"Incomplete run: incomplete stages: {unit}; never ran: bench; stopped: {stopped}."
        )
        assert [r[:2] for r in _rows(page, "#stages tr[data-stage]")] == [
            ["env-check", "passed"], ["lint", "passed"], ["unit", "incomplete"],
            ["bench", "never ran"],
        ]  # fmt: skip
        _screenshot(page, "interrupted", tmp_path)
    finally:
        page.__exit__()
