"""``rankgate report``: out/report.html as a real headless Chromium renders it, and out/summary.md.

The inputs are real: a pytest run through the harness (a world(2) test failing on rank
1, a passing one, an ordinary failing test), stage outcomes written by the executor, a
saved harness benchmark run, and a comparison by ``rankgate bench compare`` against a
copy of the committed CPU baseline with a planted regression (with its PNG plot).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import gfm
import pytest
import scenarios
from chromium import Browser, find_chromium

from rankgate import cli
from rankgate.pipeline import executor
from rankgate.pipeline.executor import Options, Outcome
from tests.once import once_per_run

pytestmark = [pytest.mark.dist, pytest.mark.slow]  # the inner run starts real ranks

ROOT = Path(__file__).resolve().parents[2]

FAILING_SUITE = textwrap.dedent(
    """
    import sys
    import pytest

    @pytest.mark.world(2)
    def test_rank1_fails(rank):
        print(f"hello from rank {rank}")
        print(f"warning on rank {rank}", file=sys.stderr)
        assert rank == 0, f"rank {rank} disagrees"

    @pytest.mark.world(2)
    def test_all_ranks_pass(rank):
        pass

    def test_plain_failure():
        assert 1 == 2, "one is not two"
    """
)


@pytest.fixture(scope="module")
def out_dir(request, tmp_path_factory) -> Path:
    """An output folder as a failed dist stage and a bench stage leave it, made once per run
    and shared by the xdist workers (tests/once.py)."""
    return once_per_run(request, lambda: _out_dir(tmp_path_factory))


def _out_dir(tmp_path_factory) -> Path:
    work = tmp_path_factory.mktemp("report")
    out = work / "out"
    (work / "test_failing.py").write_text(FAILING_SUITE)
    (work / "pytest.ini").write_text("[pytest]\n")
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
         f"--junitxml={out / 'junit' / 'dist.xml'}", "test_failing.py"],
        cwd=work, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 1, done.stdout[-3000:] + done.stderr[-3000:]
    options = Options(out_dir=out)
    executor.record(Outcome(stage="lint", status="passed", seconds=3.2), options)
    executor.record(
        Outcome(stage="dist", status="failed", seconds=14.0,
                reason="pytest: exit code 1 (pytest -m 'dist and not gpu')"),
        options,
    )  # fmt: skip
    executor.record(
        Outcome(stage="hpc", status="skipped", not_affected=True,
                reason="not affected: none of the 2 changed files is under its paths"),
        options,
    )  # fmt: skip
    # A bench stage's products: a harness run, and its comparison with a baseline in
    # which a 200% regression (past its 150% thresholds) was planted.
    bench = out / "bench"
    bench.mkdir()
    committed = json.loads((ROOT / "benchmarks/baselines/cpu/harness.json").read_text())
    scenarios.write_harness_run_at_best(bench / "harness.json", committed)
    committed["samples"] = {m: {s: [v / 3 for v in vals] for s, vals in sizes.items()}
                            for m, sizes in committed["samples"].items()}  # fmt: skip
    planted = work / "planted.json"
    planted.write_text(json.dumps(committed))
    done = subprocess.run(
        [sys.executable, "-m", "rankgate.cli", "bench", "compare", str(planted),
         str(bench / "harness.json"), "--json", str(bench / "compare.json"),
         "--plot", str(bench / "compare.png")],
        capture_output=True, text=True,
    )  # fmt: skip
    assert done.returncode == 1, done.stderr
    return out


@pytest.fixture(scope="module")
def written(request, out_dir) -> Path:
    # Once per run too: two workers writing one report at once would read each other's halves.
    return once_per_run(request, lambda: _write_report(out_dir))


def _write_report(out_dir: Path) -> Path:
    saved_argv = sys.argv[:]
    try:
        assert cli.main(["report", "--out", str(out_dir)]) == 1  # failures: exit 1
    finally:
        sys.argv[:] = saved_argv
    return out_dir


@pytest.fixture(scope="module")
def page(written, tmp_path_factory):
    binary = find_chromium()
    if binary is None:
        pytest.skip("no Chromium here (Debian: apt-get install chromium; .ci/run installs it)")
    with Browser(binary, tmp_path_factory.mktemp("profile")) as browser:
        browser.open((written / "report.html").as_uri())
        yield browser


def test_the_page_is_one_self_contained_file(written, page):
    html = (written / "report.html").read_text()
    assert "<script" not in html and "<link" not in html
    assert page.evaluate("performance.getEntriesByType('resource').length") == 0
    assert page.evaluate("document.title") == "rankgate report — FAILED"
    assert page.evaluate("document.querySelector('#verdict h1').innerText") == "rankgate: FAILED"


def test_stages_show_their_result_and_reason(page):
    rows = page.evaluate(
        "[...document.querySelectorAll('#stages tr[data-stage]')]"
        ".map(r => [...r.cells].map(c => c.innerText))"
    )
    assert [(r[0], r[1], r[4]) for r in rows] == [
        ("lint", "passed", ""),
        ("dist", "failed", "pytest: exit code 1 (pytest -m 'dist and not gpu')"),
        ("hpc", "skipped", "not affected: none of the 2 changed files is under its paths"),
    ]


def test_each_failed_test_shows_its_failing_ranks_message_and_reproduction_line(page):
    tests = page.evaluate(
        "[...document.querySelectorAll('#failures article')].map(a => a.dataset.test)"
    )
    assert tests == ["test_failing::test_rank1_fails", "test_failing::test_plain_failure"]
    art = "document.querySelector('article[data-test=\"test_failing::test_rank1_fails\"]')"
    assert page.evaluate(f"{art}.querySelector('.ranks').innerText").startswith("failing ranks: 1")
    badges = page.evaluate(f"[...{art}.querySelectorAll('.rank')].map(b => b.innerText)")
    assert badges == ["rank 1: failed", "rank 0: passed"]  # the root cause first
    assert page.evaluate(f"{art}.querySelector('.message').innerText") == (
        "rank 1 failed; rank 0 passed (world 2, backend gloo)"
    )
    repro = page.evaluate(f"{art}.querySelector('pre.reproduce').innerText")
    assert repro.startswith("reproduce: pytest -p no:cacheprovider 'test_failing.py::test_rank1_fails' --rankgate-seed=")
    assert page.evaluate(f"{art}.querySelector('pre.reproduce').checkVisibility()") is True


def test_tracebacks_and_logs_are_folded_until_opened(page):
    art = "document.querySelector('article[data-test=\"test_failing::test_rank1_fails\"]')"
    folded = page.evaluate(f"[...{art}.querySelectorAll('details')].map(d => [d.dataset.rank, d.open])")
    assert folded == [["1", False], ["0", False]]
    body = "document.body.innerText"
    assert page.evaluate(f"{body}.includes('AssertionError: rank 1 disagrees')") is False
    assert page.evaluate(f"{art}.querySelector('details[data-rank=\"1\"] pre').checkVisibility()") is False
    page.evaluate(f"{art}.querySelector('details[data-rank=\"1\"] summary').click()")
    opened = page.evaluate(f"{art}.querySelector('details[data-rank=\"1\"]').innerText")
    assert "AssertionError: rank 1 disagrees" in opened
    assert "hello from rank 1" in opened and "warning on rank 1" in opened
    assert "hello from rank 0" not in opened  # rank 0's log is in its own fold
    page.evaluate(f"{art}.querySelector('details[data-rank=\"1\"] summary').click()")  # fold again


def test_benchmark_tables_mark_the_regression_and_the_plot_is_an_embedded_png(page, tmp_path):
    regressed = page.evaluate(
        "[...document.querySelectorAll('#bench tr.regressed')].map(r => r.cells[0].innerText + ' ' + r.cells[1].innerText)"
    )
    assert regressed == ["pool_over_plain world 2 gloo", "pool_over_plain world 4 gloo"]
    images = page.evaluate(
        "[...document.images].map(i => [i.alt, i.src.slice(0, 22), i.complete, i.naturalWidth])"
    )
    assert ["bench/compare.png", "data:image/png;base64,", True] in [i[:3] for i in images]
    assert all(width > 100 for *_, width in images)
    shot = page.screenshot(tmp_path / "report.png")
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    if folder := os.environ.get("RANKGATE_SCREENSHOT_DIR"):  # to look at it by eye
        shutil.copy(shot, Path(folder) / "report.png")


def test_summary_md_for_the_job_summary(written):
    md = (written / "summary.md").read_text()
    gfm.parse(md)  # renders as meant: folds, fences and tables where they belong
    assert md.startswith(
        "## rankgate: FAILED\n\n3 tests: 1 passed, 2 failed, 0 error, 0 not run, 0 skipped, 0 xfailed, "
        "0 xpassed\n"
    )
    assert (
        "| dist | **FAILED** | 1 passed, 2 failed | 14.0 s | pytest: exit code 1 "
        "(pytest -m 'dist and not gpu') |" in md
    )
    assert "#### `test_failing::test_rank1_fails` rank 1 failed; rank 0 passed\n" in md
    assert "\n`reproduce: pytest -p no:cacheprovider 'test_failing.py::test_rank1_fails' --rankgate-seed=" in md
    assert "<details><summary>rank 1 failed</summary>" in md
    assert "- pool_over_plain at world 2 gloo: 200% worse (" in md
