"""``rankgate bench compare``: ratios, verdicts and the committed baselines.

Results are written in the benchmarks' own formats (a saved ``bench harness --json``
run with its contention probes; ``bench comm`` JSON) from the committed baselines and
results, so a planted regression is an exact, known change.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from rankgate.bench import compare, samples
from rankgate.bench.kind import machine_description

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[2]
BASELINES = ROOT / "benchmarks" / "baselines"
H200_RUNS = ROOT / "benchmarks" / "results" / "nvidia-h200-x2"
QUIET = {"seconds": 12.0, "cpus": 2, "own_share": 0.6, "others_share": 0.03}
BUSY = {"seconds": 19.0, "cpus": 2, "own_share": 0.4, "others_share": 0.55}


def harness_run(rows: dict[int, dict[str, float]], probes=(QUIET,)) -> str:
    """What ``rankgate bench --repeat 1 harness --json`` prints: a table, a JSON line, probes."""
    doc = [{"world": w, "backend": "gloo", "k_pool": 20, "k_spawn": 1, "plain_median_ms": 1.0, **m}
           for w, m in rows.items()]  # fmt: skip
    return "world backend ...\n" + json.dumps(doc) + "\n" + json.dumps({"rankgate_contention": list(probes)}) + "\n"


def best_of_baseline(path: Path) -> dict[int, dict[str, float]]:
    """The baseline's own statistic per world: a run that exactly matches it."""
    base = samples.load(path)
    rows: dict[int, dict[str, float]] = {}
    for (metric, size), values in base.values.items():
        world = int(size.split()[1])
        rows.setdefault(world, {})[metric] = base.metrics[metric].summarize(values)
    for row in rows.values():  # the plain test that gives the baseline's best ratio
        row["plain_median_ms"] = row["pool_median_ms"] / row.pop(samples.POOL_OVER_PLAIN)
    return rows


def planted(path: Path, out: Path, factor: float) -> Path:
    """A copy of a baseline whose every value is multiplied by ``factor``, recorded here."""
    doc = json.loads(path.read_text())
    doc["samples"] = {m: {s: [v * factor for v in vals] for s, vals in sizes.items()}
                      for m, sizes in doc["samples"].items()}  # fmt: skip
    here = machine_description()  # recorded "here", so --kind compares it on any machine
    doc["machine"].update(cpus=here["cpus"], cpu=here["cpu"])
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(doc))
    return out


def run_compare(*args: str, env: dict | None = None, cwd: Path = ROOT) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "rankgate.cli", "bench", "compare", *args],
        capture_output=True, text=True, cwd=cwd, env={**os.environ, **(env or {})},
    )  # fmt: skip


# ---------------------------------------------------------------- the CPU baseline


def test_the_cpu_baseline_is_committed_with_its_thresholds_and_machine():
    base = json.loads((BASELINES / "cpu" / "harness.json").read_text())
    assert base["format"] == samples.BASELINE_FORMAT and base["benchmark"] == "harness"
    assert base["machine"]["kind"] == "cpu" and base["machine"]["cpus"] >= 1
    gated = {m: s["threshold"] for m, s in base["metrics"].items() if s["threshold"] is not None}
    assert set(gated) == {samples.POOL_OVER_PLAIN}  # milliseconds are reported
    for size in ("world 2 gloo", "world 4 gloo"):
        assert len(base["samples"][samples.POOL_OVER_PLAIN][size]) >= 10  # repetitions


def test_a_planted_regression_past_the_cpu_threshold_fails_the_bench_stage_compare(tmp_path):
    """The bench stage's own command, on a run exactly as fast as the committed baseline,
    against a copy of that baseline made 3x faster (past its 150% thresholds)."""
    out = tmp_path / "out"
    (out / "bench").mkdir(parents=True)
    (out / "bench" / "harness.json").write_text(harness_run(best_of_baseline(BASELINES / "cpu" / "harness.json")))
    baselines = tmp_path / "baselines"
    planted(BASELINES / "cpu" / "harness.json", baselines / "cpu" / "harness.json", 1 / 3)
    done = run_compare("--kind", "cpu", "--baselines", str(baselines), env={"RANKGATE_OUT": str(out)})
    assert done.returncode == 1, done.stdout + done.stderr
    regressions = [line for line in done.stderr.splitlines() if "REGRESSION" in line]
    assert len(regressions) == 2  # the gated metric x 2 worlds
    assert any(line.startswith("rankgate bench compare: REGRESSION pool_over_plain at world 2 gloo: 200% worse (")
               and line.endswith("plain tests; threshold 150%)") for line in regressions), regressions  # fmt: skip
    written = json.loads((out / "bench" / "compare.json").read_text())
    assert written["ok"] is False and len(written["comparisons"][0]["regressions"]) == 2
    assert (out / "bench" / "compare.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_a_regression_within_the_cpu_threshold_passes(tmp_path):
    base_path = planted(BASELINES / "cpu" / "harness.json", tmp_path / "base.json", 1 / 1.2)
    new = tmp_path / "harness.json"
    new.write_text(harness_run(best_of_baseline(BASELINES / "cpu" / "harness.json")))
    rows = compare.compare(samples.load(base_path), samples.load(new)).rows
    gated = {round(r.change, 3) for r in rows if r.threshold is not None}
    assert gated == {0.2}
    # Within the threshold: same, or inconclusive where the baseline's own spread exceeds it.
    assert [r.verdict for r in rows if r.threshold] == [
        "inconclusive" if r.noise and r.noise > r.threshold else "same" for r in rows if r.threshold
    ]


def committed_copy(tmp_path: Path, factor: float, size: str = "") -> Path:
    """benchmarks/ as committed, the comm baseline's graph_us (of one size) times ``factor``."""
    root = tmp_path / "repo"
    base = json.loads((BASELINES / "nvidia-h200-x2" / "comm.json").read_text())
    for s, values in base["samples"]["graph_us"].items():
        if not size or s == size:
            base["samples"]["graph_us"][s] = [v * factor for v in values]
    for source in base["sources"]:
        (root / source).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(ROOT / source, root / source)
    (root / "benchmarks/baselines/nvidia-h200-x2").mkdir(parents=True)
    (root / "benchmarks/baselines/nvidia-h200-x2/comm.json").write_text(json.dumps(base))
    return root


def test_committed_baselines_agree_with_their_runs(tmp_path):
    done = run_compare("--committed", env={"RANKGATE_OUT": str(tmp_path)}, cwd=ROOT)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr
    assert "no regression past a threshold in 2 comparisons" in done.stderr
    assert (tmp_path / "bench" / "compare-committed.json").is_file()


def test_a_planted_20_percent_regression_in_a_committed_baseline_fails_the_committed_check(tmp_path):
    root = committed_copy(tmp_path, 1 / 1.2, size="all_reduce nccl fp32 65536")
    out = tmp_path / "out"
    done = run_compare("--committed", "--baselines", str(root / "benchmarks/baselines"),
                       env={"RANKGATE_OUT": str(out)})  # fmt: skip
    assert done.returncode == 1, done.stdout[-2000:] + done.stderr
    (line,) = [line for line in done.stderr.splitlines() if "REGRESSION" in line]
    assert line.startswith("rankgate bench compare: REGRESSION graph_us at all_reduce nccl fp32 65536: 20% slower (")
    written = json.loads((out / "bench" / "compare-committed.json").read_text())
    assert written["ok"] is False


def test_the_same_run_against_the_real_baseline_passes(tmp_path):
    out = tmp_path / "out"
    (out / "bench").mkdir(parents=True)
    (out / "bench" / "harness.json").write_text(harness_run(best_of_baseline(BASELINES / "cpu" / "harness.json")))
    baselines = tmp_path / "baselines"
    planted(BASELINES / "cpu" / "harness.json", baselines / "cpu" / "harness.json", 1.0)
    done = run_compare("--kind", "cpu", "--baselines", str(baselines), env={"RANKGATE_OUT": str(out)})
    assert done.returncode == 0, done.stdout + done.stderr
    # At the baseline's best: the baseline against itself, inconclusive only where its own
    # spread exceeds a threshold.
    base = samples.load(BASELINES / "cpu" / "harness.json")
    unsure = sum(r.verdict == "inconclusive" for r in compare.compare(base, base).rows)
    verdict = (
        f"inconclusive: no regression past a threshold in 1 comparisons, but {unsure} row(s) "
        "lie within a baseline spread wider than their threshold"
        if unsure
        else "no regression in 1 comparisons"
    )
    assert done.stderr == f"rankgate bench compare: {verdict}\n"


def test_a_slow_run_on_a_contended_machine_is_noisy_not_a_regression(tmp_path):
    base_path = planted(BASELINES / "cpu" / "harness.json", tmp_path / "base.json", 1.0)
    slow = {w: {m: v * (1 if m == "plain_median_ms" else 3) for m, v in row.items()}
            for w, row in best_of_baseline(base_path).items()}  # the pool 3x slower, not pytest
    new = tmp_path / "harness.json"
    new.write_text(harness_run(slow, probes=(BUSY,)) + harness_run(slow))
    comparison = compare.compare(samples.load(base_path), samples.load(new))
    verdicts = {(r.metric, r.size): r.verdict for r in comparison.rows}
    assert verdicts[(samples.POOL_OVER_PLAIN, "world 2 gloo")] == "noisy"
    assert comparison.regressions == ()
    assert comparison.notes[0].startswith(
        f"{new} was measured on a contended machine (other work took up to 55% of the CPUs "
        "during a run)"
    )
    new.write_text(harness_run(slow))  # the same numbers on a quiet machine: regressions
    assert len(compare.compare(samples.load(base_path), samples.load(new)).regressions) == 2


def test_best_of_repetitions_ignores_a_slowed_run(tmp_path):
    base_path = planted(BASELINES / "cpu" / "harness.json", tmp_path / "base.json", 1.0)
    best = best_of_baseline(base_path)
    slowed = {w: {m: v * 3 for m, v in row.items()} for w, row in best.items()}
    new = tmp_path / "harness.json"
    new.write_text(harness_run(slowed) + harness_run(best) + harness_run(slowed))
    comparison = compare.compare(samples.load(base_path), samples.load(new))
    gated = [r for r in comparison.rows if r.threshold is not None]
    assert {r.new_n for r in gated} == {3}
    assert [r.verdict for r in gated] == [
        "inconclusive" if r.noise and r.noise > r.threshold else "same" for r in gated
    ]


@pytest.mark.parametrize(
    ("base", "new", "verdict"),
    [
        ([1.0, 1.02, 1.01], [1.05], "same"),
        # the baseline's own spread is 670%, its threshold 150%: no verdict either way
        ([1.0, 7.7, 3.0], [1.05], "inconclusive"),
        ([1.0, 7.7, 3.0], [3.0], "regressed"),  # past the threshold is still a regression
    ],
    ids=["quiet-baseline", "spread-past-threshold", "regression"],
)
def test_a_change_within_a_baseline_spread_wider_than_the_threshold_is_inconclusive(
    base, new, verdict
):
    metric = samples.Metric(name="pool_ms", unit="ms", threshold=1.5, statistic="min")
    row = compare._row(metric, "world 2", base, new, busy="")
    assert row.verdict == verdict
    line = compare.no_regression_line([compare.Comparison("harness", "b", "n", (row,))])
    if verdict == "inconclusive":
        assert line == (
            "inconclusive: no regression past a threshold in 1 comparisons, but 1 row(s) lie "
            "within a baseline spread wider than their threshold"
        )


# ---------------------------------------------------------------- 2xH200 comm


def test_the_h200_comm_baseline_holds_the_committed_runs():
    base = samples.load(BASELINES / "nvidia-h200-x2" / "comm.json")
    assert base.machine["kind"] == "nvidia-h200-x2" and base.machine["gpu"] == "NVIDIA H200"
    assert len(base.values[("graph_us", "all_reduce nccl fp32 1024")]) == 3  # run 8's rounds
    assert base.metrics["busbw"].better == "higher" and base.metrics["eager_us"].threshold is None


def test_a_committed_h200_run_passes_and_a_20_percent_slower_one_fails(tmp_path):
    base = samples.load(BASELINES / "nvidia-h200-x2" / "comm.json")
    run = json.loads((H200_RUNS / "run8-calibrated" / "bench_dense" / "comm.json").read_text())
    same = tmp_path / "same.json"
    same.write_text(json.dumps(run))
    assert compare.compare(base, samples.load(same)).regressions == ()
    for row in run["results"]:
        if row["collective"] == "all_reduce" and row["backend"] == "nccl" and row["bytes"] == 4096:
            row["graph_rounds_us"] = [t * 1.2 for t in row["graph_rounds_us"]]
    slower = tmp_path / "slower.json"
    slower.write_text(json.dumps(run))
    (regression,) = compare.compare(base, samples.load(slower)).regressions
    assert regression.describe().startswith("graph_us at all_reduce nccl fp32 4096: 20% slower (")


def test_less_bandwidth_is_worse(tmp_path):
    base = samples.load(BASELINES / "nvidia-h200-x2" / "comm.json")
    run = json.loads((H200_RUNS / "run8-calibrated" / "bench_dense" / "comm.json").read_text())
    for row in run["results"]:
        if row["backend"] == "nccl" and row["bytes"] == 1 << 30:
            row["eager_rounds_us"] = [t * 1.25 for t in row["eager_rounds_us"]]
    slower = tmp_path / "slower.json"
    slower.write_text(json.dumps(run))
    (regression,) = compare.compare(base, samples.load(slower)).regressions
    assert regression.metric == "busbw" and regression.size == "all_reduce nccl fp32 1073741824"
    assert round(regression.change, 3) == 0.25 and round(regression.ratio, 3) == 0.8


# ---------------------------------------------------------------- the command


def test_no_baseline_for_this_kind_is_a_note_not_a_failure(tmp_path):
    new = tmp_path / "harness.json"
    new.write_text(harness_run(best_of_baseline(BASELINES / "cpu" / "harness.json")))
    done = run_compare("--kind", "nvidia-b200-x8", str(new))
    assert done.returncode == 0
    assert (f"{new}: no harness baseline for kind nvidia-b200-x8 "
            f"(benchmarks/baselines/nvidia-b200-x8/harness.json); record one with --write-baseline") in done.stderr


def test_a_cpu_baseline_from_another_core_count_is_not_compared(tmp_path):
    baselines = tmp_path / "baselines"
    path = planted(BASELINES / "cpu" / "harness.json", baselines / "cpu" / "harness.json", 1 / 2)
    doc = json.loads(path.read_text())
    doc["machine"]["cpus"] = (os.cpu_count() or 1) + 6
    path.write_text(json.dumps(doc))
    new = tmp_path / "harness.json"
    new.write_text(harness_run(best_of_baseline(BASELINES / "cpu" / "harness.json")))
    done = run_compare("--kind", "cpu", "--baselines", str(baselines), str(new))
    assert done.returncode == 0
    here = machine_description()
    assert (f"recorded on {(os.cpu_count() or 1) + 6} CPUs ({here['cpu']}), this machine has "
            f"{here['cpus']} ({here['cpu']}): not comparable, not compared") in done.stderr  # fmt: skip


def test_write_baseline_records_every_run_and_the_thresholds(tmp_path):
    runs = []
    for i, ms in enumerate((2.0, 2.4, 2.2)):
        run = tmp_path / f"run{i}.json"
        run.write_text(harness_run({2: {"pool_median_ms": ms, "pool_ms_per_test": ms}}))
        runs.append(str(run))
    out = tmp_path / "base" / "harness.json"
    done = run_compare("--write-baseline", str(out), "--threshold", "pool_median_ms=0.3", *runs)
    assert done.returncode == 0, done.stderr
    base = samples.load(out)
    assert base.values[("pool_median_ms", "world 2 gloo")] == [2.0, 2.4, 2.2]
    assert base.metrics["pool_median_ms"].threshold == 0.3
    assert base.metrics["pool_ms_per_test"].threshold is None  # the default: reported
    assert base.metrics[samples.POOL_OVER_PLAIN].threshold == 1.5  # the default: judged
    assert len(base.probes) == 3 and base.machine["cpus"] == os.cpu_count()
    assert json.loads(out.read_text())["command"] == shlex.join(  # it records the file again
        ["rankgate", "bench", "compare", "--write-baseline", str(out),
         "--threshold", "pool_median_ms=0.3", *runs])  # fmt: skip
    bad = run_compare("--write-baseline", str(out), "--threshold", "pool_p99=0.3", *runs)
    assert bad.returncode == 2
    assert "--threshold pool_p99=0.3: harness has no metric 'pool_p99' (it has pool_median_ms," in bad.stderr
    bad = run_compare("--write-baseline", str(out), "--threshold", "pool_median_ms=15", *runs)
    assert bad.returncode == 2 and bad.stderr.endswith(
        "error: argument --threshold: 'pool_median_ms=15': expected METRIC=FRACTION, the "
        "fraction above 0 and below 10 (e.g. pool_median_ms=0.15)\n"
    ), bad.stderr


def test_bad_input_names_the_file_and_what_it_should_be(tmp_path):
    junk = tmp_path / "junk.json"
    junk.write_text('{"hello": 1}\n')
    done = run_compare(str(junk), str(junk))
    assert done.returncode == 2
    assert done.stderr.startswith(f"rankgate bench compare: error: {junk}: not a result rankgate bench compare knows")
    comm = H200_RUNS / "run8-calibrated" / "bench_dense" / "comm.json"
    done = run_compare(str(BASELINES / "cpu" / "harness.json"), str(comm))
    assert done.returncode == 2 and "holds harness results but" in done.stderr
    assert run_compare(str(junk)).stderr.endswith("give BASE and NEW, or --kind KIND and the NEW files\n")
