"""--changed-since: which stages a change runs, and why, against real git repositories."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from rankgate.pipeline import changes, executor, stage_commands, stages
from rankgate.pipeline.options import Options
from rankgate.proc import command as process

pytestmark = [
    pytest.mark.unit,
    # every test here makes a real repository (images built for the suites have no git)
    pytest.mark.skipif(shutil.which("git") is None, reason="git is not installed"),
]

# A small tree with the project's layout: one file under each stage's paths.
_FILES = (
    "README.md",
    "pyproject.toml",
    ".ci/run",
    "noxfile.py",
    "src/rankgate/__init__.py",
    "src/rankgate/pipeline/stages.py",
    "src/rankgate/dispatch/cli.py",
    "src/rankgate/dispatch/job_outcome.py",
    "src/rankgate/harness/pool.py",
    "src/rankgate/workloads/comm/p2p.py",
    "tests/dispatch/test_local_slurm.py",
    "containers/Containerfile",
)
_NO_GIT_ENV = {}  # no GITHUB_* variables: a pull request or a laptop


def git(repo: Path, *args: str) -> str:
    return subprocess.run(
        ["git", "-C", str(repo), *args], capture_output=True, text=True, check=True
    ).stdout


def edit(repo: Path, *paths: str, commit: str = "") -> None:
    for path in paths:
        target = repo / path
        target.parent.mkdir(parents=True, exist_ok=True)
        with target.open("a") as f:
            f.write("# changed\n")
    if commit:
        git(repo, "add", "-A")
        git(repo, "commit", "-q", "-m", commit)


@pytest.fixture
def repo(tmp_path) -> Path:
    """A repository whose main holds _FILES, checked out on a feature branch."""
    root = tmp_path / "repo"
    root.mkdir()
    git(root, "init", "-q", "-b", "main")
    git(root, "config", "user.email", "ci@example.invalid")
    git(root, "config", "user.name", "ci")
    edit(root, *_FILES, commit="base")
    git(root, "checkout", "-q", "-b", "feature")
    return root


@pytest.fixture(autouse=True)
def not_in_github_actions(monkeypatch):
    """These tests are a pull request's view, even when CI runs them on a tag."""
    for name in ("GITHUB_REF", "GITHUB_REF_TYPE", "GITHUB_EVENT_NAME"):
        monkeypatch.delenv(name, raising=False)


def plan(repo: Path, since: str = "main", env=None) -> changes.Plan:
    return changes.plan(since, repo, env=_NO_GIT_ENV if env is None else env)


def test_a_dispatch_only_change_runs_lint_unit_package_and_hpc_and_says_why(repo):
    edit(repo, "src/rankgate/dispatch/cli.py", "tests/dispatch/test_local_slurm.py",
         commit="dispatch: a fix")  # fmt: skip
    result = plan(repo)
    assert result.files == ("src/rankgate/dispatch/cli.py", "tests/dispatch/test_local_slurm.py")
    assert result.to_run == ("lint", "unit", "package", "hpc")  # the wheel is src/rankgate
    reasons = {d.stage: d.reason for d in result.decisions}
    assert reasons["lint"] == "src/rankgate/dispatch/cli.py matches **/*.py (+1 more)"
    assert reasons["unit"] == "src/rankgate/dispatch/cli.py matches src/** (+1 more)"
    assert reasons["hpc"] == "src/rankgate/dispatch/cli.py matches src/rankgate/dispatch/** (+1 more)"
    for skipped in ("dist", "gpu", "bench", "container"):
        assert reasons[skipped] == "not affected: none of the 2 changed files is under its paths"
    assert "hpc        run   src/rankgate/dispatch/cli.py matches" in result.render()
    assert "| dist | no | not affected" in result.markdown()


def test_only_the_branch_counts_not_what_main_did_since(repo):
    edit(repo, "src/rankgate/dispatch/cli.py", commit="dispatch")
    git(repo, "checkout", "-q", "main")
    edit(repo, "src/rankgate/harness/pool.py", commit="harness, on main after the branch")
    git(repo, "checkout", "-q", "feature")
    assert plan(repo).files == ("src/rankgate/dispatch/cli.py",)


def test_uncommitted_and_untracked_files_count(repo):
    edit(repo, "src/rankgate/harness/pool.py")  # modified, not committed
    edit(repo, "src/rankgate/workloads/comm/new_kernel.py")  # untracked
    (repo / ".gitignore").write_text("ignored/\n")
    edit(repo, "ignored/scratch.py")  # ignored: not a change
    result = plan(repo)
    assert result.files == (
        ".gitignore", "src/rankgate/harness/pool.py", "src/rankgate/workloads/comm/new_kernel.py"
    )  # fmt: skip


def test_a_harness_change_runs_every_stage_that_loads_the_plugin(repo):
    edit(repo, "src/rankgate/harness/pool.py", commit="harness")
    assert plan(repo).to_run == (
        "lint", "unit", "dist", "package", "gpu", "hpc", "bench", "container"
    )  # fmt: skip


def test_a_workload_change_skips_dispatch_and_says_so(repo):
    edit(repo, "src/rankgate/workloads/comm/p2p.py", commit="comm")
    result = plan(repo)
    assert result.to_run == ("lint", "unit", "dist", "package", "gpu", "bench", "container")
    assert result.decision("hpc").reason == (
        "not affected: none of the 1 changed file is under its paths"
    )


@pytest.mark.parametrize(
    "path",
    ["pyproject.toml", "requirements/dev-lock.txt", ".ci/run", "src/rankgate/pipeline/stages.py"],
)
def test_the_stage_list_pyproject_and_ci_run_everything(repo, path):
    edit(repo, "src/rankgate/dispatch/cli.py", path, commit="mixed")
    result = plan(repo)
    # every stage a change can start: not the gate, not the scheduled latest
    assert result.to_run == tuple(
        s.name for s in stages.all_stages() if not s.includes and not s.scheduled
    )
    assert {d.reason for d in result.decisions} == {f"{path} changed: it runs every stage"}


EVERY_STAGE = 8
"""lint, unit, dist, package, gpu, hpc, bench, container: not the gate, not latest."""


def test_a_file_no_stage_claims_runs_everything_and_names_the_fix(repo):
    edit(repo, "NOTICE", "src/rankgate/dispatch/cli.py", commit="notice")
    result = plan(repo)
    assert len(result.to_run) == EVERY_STAGE
    assert result.decisions[0].reason == (
        "NOTICE is under no stage's paths, so every stage runs "
        "(add it to a stage's paths in src/rankgate/pipeline/stages.py)"
    )


def test_a_tagged_head_runs_everything(repo):
    edit(repo, "src/rankgate/dispatch/cli.py", commit="release fix")
    git(repo, "tag", "v1.0")
    result = plan(repo)
    assert len(result.to_run) == EVERY_STAGE
    assert result.decisions[0].reason == "HEAD is tagged v1.0: a tag runs every stage"


@pytest.mark.parametrize(
    ("env", "reason"),
    [
        ({"GITHUB_REF_TYPE": "tag", "GITHUB_REF": "refs/tags/v2.1"}, "tag v2.1: a tag runs every stage"),
        ({"GITHUB_REF": "refs/tags/v2.1"}, "tag v2.1: a tag runs every stage"),
        ({"GITHUB_EVENT_NAME": "release"}, "a release runs every stage"),
    ],
)
def test_a_tag_or_release_in_ci_runs_everything(repo, env, reason):
    edit(repo, "src/rankgate/dispatch/cli.py", commit="dispatch")
    result = plan(repo, env=env)
    assert len(result.to_run) == EVERY_STAGE and {d.reason for d in result.decisions} == {reason}


def test_no_change_runs_nothing(repo):
    result = plan(repo)
    assert result.to_run == ()
    assert result.decision("unit").reason == "nothing changed since main"


def test_an_unknown_ref_says_how_to_fetch_it(repo):
    with pytest.raises(changes.ChangesError, match=r"cannot compare with 'origin/main': git merge-base") as err:
        plan(repo, since="origin/main")
    assert "Fetch it first (git fetch origin main); in GitHub Actions check out with fetch-depth: 0" in str(err.value)


@pytest.mark.parametrize(
    ("pattern", "path", "hit"),
    [
        ("**/*.py", "noxfile.py", True),
        ("**/*.py", "src/a/b.py", True),
        ("**/*.py", "src/a/b.pyc", False),
        ("src/**", "src/x", True),
        ("src/**", "srcx/y", False),
        ("src/rankgate/report/tracing*.py", "src/rankgate/report/tracing_plugin.py", True),
        ("src/rankgate/report/tracing*.py", "src/rankgate/report/sub/tracing.py", False),
        ("suites/dispatch/**", "suites/dispatch_old/x.py", False),
    ],
)
def test_globs(pattern, path, hit):
    assert bool(changes.first_match(path, (pattern,))) is hit


# ------------------------------------------------------------- the gate and nox


class FakeMachine:
    """Every need met (SLURM, GPUs, an engine): only the change decides what runs."""

    def missing(self, need: str) -> str | None:
        return None


@pytest.fixture
def ran(monkeypatch):
    """The commands the gate starts (recorded, not run: the plan is what is tested)."""
    recorded: list[list[str]] = []

    def record(argv, **kwargs):
        recorded.append(list(argv))
        return 0

    monkeypatch.setattr(process, "run", record)
    monkeypatch.setattr(stage_commands, "module_missing", lambda name: None)
    return recorded


def test_the_gate_runs_only_the_touched_stages_and_its_table_says_why(repo, ran, tmp_path, capsys):
    edit(repo, "src/rankgate/dispatch/cli.py", commit="dispatch")
    options = Options(out_dir=tmp_path / "out", changed_since="main", repo=repo)
    outcomes = executor.run_gate(options, FakeMachine())
    markers = [argv[argv.index("-m") + 1] for argv in ran if argv[0] == "pytest"]
    assert sorted(markers) == ["hpc", "unit"]  # hpc in the background, unit meanwhile
    assert ["rankgate", "env-check"] in ran and ["ruff", "check", "."] in ran
    assert not [argv for argv in ran if "bench" in argv or "rankgate.pipeline.container" in argv]
    status = {o.stage: (o.status, o.not_affected) for o in outcomes}
    assert status == {
        "env-check": ("passed", False), "lint": ("passed", False), "unit": ("passed", False),
        "dist": ("skipped", True), "package": ("passed", False), "gpu": ("skipped", True),
        "hpc": ("passed", False), "bench": ("skipped", True), "container": ("skipped", True),
    }  # fmt: skip
    # A stage the change does not touch never blocks, not even under --strict.
    assert executor.verdict(outcomes, allow_skipped=False) == []
    selected = {row["stage"]: row["selected"] for row in json.loads((options.out_dir / "gate.json").read_text())}
    assert selected["dist"] == "not affected: none of the 1 changed file is under its paths"
    assert selected["hpc"] == "src/rankgate/dispatch/cli.py matches src/rankgate/dispatch/**"
    captured = capsys.readouterr()
    assert "rankgate: 1 files changed since main" in captured.err
    assert "dist       SKIPPED     0.0s  not affected: none of the 1 changed file" in captured.out
    assert "ran: src/rankgate/dispatch/cli.py matches src/rankgate/dispatch/**" in captured.out


def test_a_single_stage_the_change_misses_is_skipped_not_failed(repo, ran, tmp_path):
    edit(repo, "src/rankgate/dispatch/cli.py", commit="dispatch")
    options = Options(out_dir=tmp_path / "out", changed_since="main", repo=repo, strict=True)
    outcome = executor.run_stage(stages.get("dist"), options, FakeMachine())
    assert (outcome.status, outcome.not_affected, ran) == ("skipped", True, [])


def test_changed_since_from_nox_posargs():
    options = Options.from_args(["--changed-since", "origin/main", "--strict", "-x"])
    assert (options.changed_since, options.strict, options.pytest_args) == (
        "origin/main", True, ("-x",)
    )


def test_the_ci_command_writes_the_stages_for_github(repo, tmp_path):
    edit(repo, "src/rankgate/dispatch/cli.py", commit="dispatch")
    output, summary = tmp_path / "output", tmp_path / "summary.md"
    env = {"PATH": "/usr/bin:/bin", "GITHUB_OUTPUT": str(output), "GITHUB_STEP_SUMMARY": str(summary),
           "PYTHONPATH": str(Path(changes.__file__).parents[2])}  # fmt: skip
    done = subprocess.run(
        [sys.executable, "-m", "rankgate.pipeline.changes", "--since", "main", "--github"],
        cwd=repo, env=env, capture_output=True, text=True,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert output.read_text() == 'stages=["lint", "unit", "package", "hpc"]\n'
    assert "| hpc | yes | src/rankgate/dispatch/cli.py matches src/rankgate/dispatch/** |" in summary.read_text()


def test_ci_runs_each_stage_job_only_when_the_change_plan_names_it():
    yaml = pytest.importorskip("yaml", reason="pyyaml is in the dev extra")
    root = Path(__file__).resolve().parents[2]
    jobs = yaml.safe_load((root / ".github/workflows/ci.yml").read_text())["jobs"]
    plan_job = jobs["changes"]
    assert plan_job["steps"][0]["with"]["fetch-depth"] == 0  # the base branch's history
    (run,) = [step["run"] for step in plan_job["steps"] if "run" in step]
    assert "python3 -m rankgate.pipeline.changes ${BASE:+--since \"$BASE\"} --github" in run
    assert "pull_request" in plan_job["steps"][1]["env"]["BASE"]  # pushes: BASE empty, all run
    ci_stages = [s.name for s in stages.all_stages() if s.workflow.startswith("ci.yml:")]
    assert ci_stages == ["lint", "unit", "dist", "package", "container"]
    for name in ci_stages:
        assert jobs[name]["needs"] == "changes"
        assert jobs[name]["if"] == f"contains(fromJSON(needs.changes.outputs.stages), '{name}')"
