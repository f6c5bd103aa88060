"""``rankgate run``: the seed runner's options mapped onto stages and markers."""

from __future__ import annotations

import argparse
import json

import pytest

from rankgate.pipeline import executor
from rankgate.pipeline import run_stages as runner
from rankgate.pipeline.executor import Outcome

pytestmark = pytest.mark.unit


def parse(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="rankgate run")
    runner.add_arguments(parser)
    return parser.parse_args(argv)


def planned(*argv: str) -> list[tuple[str, str, tuple[str, ...]]] | None:
    stages = runner.plan(parse(*argv))
    if stages is None:
        return None
    return [(s.name, s.markers, tuple(a for c in s.commands for a in c.argv)) for s in stages]


def test_no_option_means_the_gate():
    assert planned() is None
    assert planned("--stage", "gate") is None


@pytest.mark.parametrize(
    ("flag", "name", "markers"),
    [
        ("--unit", "unit", "unit"),
        ("--integration", "dist", "dist and not gpu"),
        ("--performance", "performance", "perf"),
        ("--error", "error", runner._CPU_TIERS),
        ("--auto", "auto", runner._CPU_TIERS),
    ],
)
def test_seed_flags_map_to_stages_and_markers(flag, name, markers):
    ((got_name, got_markers, argv),) = planned(flag)
    assert (got_name, got_markers) == (name, markers)
    assert argv[0] == "pytest"  # test selections run tests only


def test_error_and_auto_name_their_suites():
    assert planned("--error")[0][2] == ("pytest", "tests/harness")
    assert planned("--auto")[0][2] == ("pytest", "suites/comm", "-k", "auto or select")


def test_benchmark_is_the_whole_bench_stage():
    ((name, markers, argv),) = planned("--benchmark")
    assert (name, markers) == ("bench", "perf")
    assert "harness" in argv and "--json" in argv


def test_flags_combine_in_order_without_repeats():
    names = [
        n for n, _, _ in planned("--integration", "--unit", "--stage", "unit", "--stage", "lint")
    ]
    assert names == ["unit", "lint", "dist"]


@pytest.mark.parametrize(
    ("text", "expression"),
    [
        ("p2p,unit", "p2p and unit"),
        (" unit , dist ", "unit and dist"),
        ("unit or dist", "unit or dist"),
        ("not gpu", "not gpu"),
        ("", ""),
    ],
)
def test_seed_marker_lists_mean_and(text, expression):
    assert runner.normalise_markers(text) == expression


def test_markers_narrow_the_chosen_stages():
    assert planned("--integration", "--markers", "slow") == [
        ("dist", "(dist and not gpu) and (slow)", ("pytest", "-n", "3"))
    ]


def test_markers_alone_and_files_alone_run_those_tests():
    assert planned("--markers", "world") == [("markers", "world", ("pytest",))]
    assert planned("--file", "tests/x.py") == [("files", "", ("pytest",))]


def test_files_narrow_chosen_stages_instead_of_replacing_them():
    assert planned("--stage", "gpu", "--file", "suites") == [("gpu", "gpu", ("pytest",))]


def test_files_parallel_and_coverage_become_pytest_args(monkeypatch):
    monkeypatch.setattr(runner, "_require", lambda *a: None)
    args = parse("--file", "a.py", "--file", "b.py", "--parallel", "--coverage")
    assert runner.pytest_args(args) == [
        "a.py",
        "b.py",
        "-n",
        "auto",
        "--cov=rankgate",
        "--cov-report=term-missing",
    ]
    assert runner.pytest_args(parse("--parallel", "3")) == ["-n", "3"]


def test_coverage_without_pytest_cov_names_the_fix(monkeypatch):
    monkeypatch.setattr("importlib.util.find_spec", lambda name: None)
    with pytest.raises(SystemExit, match="--coverage needs pytest-cov: pip install pytest-cov"):
        runner.pytest_args(parse("--coverage"))


def test_list_prints_every_stage(capsys):
    assert runner.run(parse("--list")) == 0
    assert [line.split()[0] for line in capsys.readouterr().out.splitlines()] == [
        "lint",
        "unit",
        "dist",
        "package",
        "gpu",
        "hpc",
        "bench",
        "container",
        "gate",
        "latest",
    ]


@pytest.fixture
def fake_stages(monkeypatch):
    """Stages 'run' without running anything: unit passes, everything else is skipped."""
    ran: list[str] = []

    def run_stage(stage, options, machine=None):
        ran.append(stage.name)
        status = "passed" if stage.name == "unit" else "skipped"
        return Outcome(stage=stage.name, status=status, reason="" if status == "passed" else "why")

    monkeypatch.setattr(executor, "run_stage", run_stage)
    monkeypatch.setattr(
        executor, "gate_checks", lambda options: [Outcome(stage="env-check", status="passed")]
    )
    return ran


def test_json_is_the_last_line_and_skips_pass_unless_strict(fake_stages, capsys, tmp_path):
    out = str(tmp_path)
    assert runner.run(parse("--unit", "--benchmark", "--json", "--out", out)) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert [o["stage"] for o in json.loads(lines[-1])] == ["unit", "bench"]
    assert "bench  SKIPPED" in "\n".join(lines)
    assert runner.run(parse("--unit", "--benchmark", "--strict", "--out", out)) == 1


def test_env_check_alone_runs_only_env_check(fake_stages, capsys):
    assert runner.run(parse("--env-check", "--json")) == 0
    assert fake_stages == []
    assert json.loads(capsys.readouterr().out.strip().splitlines()[-1])[0]["stage"] == "env-check"


def test_env_check_runs_before_chosen_stages(fake_stages, capsys):
    runner.run(parse("--env-check", "--unit", "--json"))
    stages = [o["stage"] for o in json.loads(capsys.readouterr().out.strip().splitlines()[-1])]
    assert stages == ["env-check", "unit"]


@pytest.mark.parametrize(
    ("argv", "conflict"),
    [
        (("--stage", "gate", "--unit"), "--unit"),
        (("--stage", "gate", "--stage", "lint"), "--stage lint"),
        (("--stage", "gate", "--markers", "slow"), "--markers"),
    ],
)
def test_gate_with_a_narrower_selection_is_an_error_naming_it(argv, conflict):
    with pytest.raises(SystemExit, match=f"does not combine with {conflict}\\. Drop --stage gate"):
        runner.plan(parse(*argv))


def test_gate_takes_files_and_env_check():
    assert planned("--stage", "gate", "--file", "suites", "--env-check") is None


def test_quick_reaches_every_stage_it_runs(monkeypatch, tmp_path):
    seen = []

    def run_stage(stage, options, machine=None):
        seen.append((stage.name, options.quick))
        return Outcome(stage=stage.name, status="passed")

    monkeypatch.setattr(executor, "run_stage", run_stage)
    assert runner.run(parse("--unit", "--integration", "--quick", "--out", str(tmp_path))) == 0
    assert runner.run(parse("--unit", "--out", str(tmp_path))) == 0
    assert seen == [("unit", True), ("dist", True), ("unit", False)]
