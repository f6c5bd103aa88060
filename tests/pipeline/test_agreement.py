"""One stage list: nox, the Dagger module, the workflows and the pinned versions agree."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from rankgate.pipeline import stages

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[2]
yaml = pytest.importorskip("yaml", reason="pyyaml is in the dev extra: pip install -e '.[dev]'")


def nox_sessions() -> dict[str, str]:
    """``nox -l``: session name -> description, selected or not."""
    out = subprocess.run(
        [sys.executable, "-m", "nox", "-l", "-f", str(ROOT / "noxfile.py")],
        capture_output=True,
        text=True,
        check=True,
        cwd=ROOT,
    ).stdout
    found = re.findall(r"^[*-] (\S+) -> (.*)$", out, flags=re.MULTILINE)
    return dict(found)


def workflow(name: str) -> dict:
    return yaml.safe_load((ROOT / ".github" / "workflows" / name).read_text())


def steps_text(job: dict) -> str:
    """Everything a job runs: run scripts and action arguments."""
    parts = []
    for step in job["steps"]:
        parts.append(step.get("run", ""))
        parts.append(str(step.get("with", {}).get("args", "")))
    return "\n".join(parts)


# nox sessions that are not stages: the documentation site (the unit stage builds it too)
NOT_STAGES = {"docs"}


def test_nox_sessions_are_the_stages_with_their_descriptions():
    sessions = nox_sessions()
    assert set(sessions) >= NOT_STAGES
    stage_sessions = {name: text for name, text in sessions.items() if name not in NOT_STAGES}
    assert stage_sessions == {s.name: s.description for s in stages.all_stages()}


def test_dagger_functions_cover_every_stage(registered):
    functions = {name.replace("_", "-") for name in registered["functions"]}
    assert {s.dagger for s in stages.all_stages()} <= functions
    assert functions - {s.dagger for s in stages.all_stages()} == {stages.PUBLISH_FUNCTION}


NOX_WORKFLOWS = ("ci.yml", "latest.yml")
"""Workflows whose jobs run a stage's nox session on the runner; release.yml's call Dagger."""


@pytest.mark.parametrize("stage", stages.all_stages(), ids=lambda s: s.name)
def test_each_stage_has_its_workflow_job(stage):
    file, job_id = stage.workflow.split(":")
    jobs = workflow(file)["jobs"]
    assert job_id in jobs, f"{file} has no job {job_id!r} for stage {stage.name}"
    text = steps_text(jobs[job_id])
    if file in NOX_WORKFLOWS:
        assert re.search(rf"\bnox -s {stage.name}\b", text), f"{file}:{job_id} runs no nox -s"
    else:
        assert re.search(rf"(call|^){stage.dagger}\b|\b{stage.dagger} ", text, re.M), (
            f"{file}:{job_id} does not call dagger {stage.dagger}"
        )


def test_ci_runs_on_pull_requests_and_release_on_tags():
    ci, release = workflow("ci.yml"), workflow("release.yml")
    assert "pull_request" in ci[True]  # YAML reads the key `on` as True
    assert release[True]["push"]["tags"] == ["v*"]


def test_latest_runs_on_a_schedule_and_installs_without_the_lock():
    latest = workflow("latest.yml")
    assert set(latest[True]) == {"schedule", "workflow_dispatch"}
    assert "dev-lock" not in steps_text(latest["jobs"]["latest"])


def test_every_workflow_is_linted():
    # actionlint (stage lint) reads the files it is given: a new workflow must be one.
    (actionlint,) = [c for c in stages.get("lint").commands if c.argv[0] == "actionlint"]
    files = sorted(str(p.relative_to(ROOT)) for p in (ROOT / ".github/workflows").glob("*.yml"))
    assert sorted(actionlint.argv[1:]) == files


def test_release_publishes_only_after_the_gate():
    jobs = workflow("release.yml")["jobs"]
    gate = jobs["release-gate"]
    assert set(gate["needs"]) == {"test-gpu", "test-hpc", "bench", "dist"}
    text = steps_text(gate)
    assert "call release-gate" in text
    # --override only from the workflow_dispatch input (test_release_workflow.py)
    assert re.findall(r"\S*--override\S*", text) == ["${OVERRIDE:+--override"]
    assert "env://REGISTRY_PASSWORD" in text  # a Dagger secret, not a plain argument
    for job_id, job in jobs.items():
        if job_id != "release-gate":
            calls_publish = re.search(r"(\bcall |^)publish\b", steps_text(job), re.M)
            assert not calls_publish, f"{job_id} publishes outside the gate"
    assert jobs["github-release"]["needs"] == ["release-gate", "pypi-publish"]
    assert jobs["pypi-publish"]["needs"] == ["release-gate", "dist"]


def test_dagger_versions_are_one_version():
    engine = json.loads((ROOT / "dagger.json").read_text())["engineVersion"]
    pyproject = (ROOT / "pyproject.toml").read_text()
    (pin,) = re.findall(r'"dagger-io==([0-9.]+)"', pyproject)
    workflow_version = workflow("release.yml")["env"]["DAGGER_VERSION"]
    assert engine == f"v{pin}" == f"v{workflow_version}"
    sdk = pytest.importorskip("dagger._engine._version")
    assert pin == sdk.CLI_VERSION, (
        "installed dagger-io differs from the pin: pip install -e '.[dev]'"
    )


def test_dagger_json_points_at_the_module():
    manifest = json.loads((ROOT / "dagger.json").read_text())
    assert manifest["source"] == "ci" and manifest["sdk"]["source"] == "python"
    assert manifest["name"] == "rankgate-ci"  # main object RankgateCi
    assert (ROOT / "ci" / "src" / "rankgate_ci" / "main.py").is_file()


def test_the_pipeline_page_tables_match_the_stages():
    from rankgate import docsite

    # the page as the site shows it: the stage table filled from the stage list
    page = docsite.fill((ROOT / "docs" / "pipeline.md").read_text(), ROOT / "docs")
    rows = re.findall(
        r"^\| (\w+) \| [^\n]*\| `nox -s (\w+)` \| `([\w-]+)` \| `([\w.]+:[\w-]+)` \|$", page, re.M
    )
    assert rows == [(s.name, s.name, s.dagger, s.workflow) for s in stages.all_stages()]
    # the table typed by hand, what each stage runs in detail: every stage, in order
    detail = page.split("## Each stage in detail", 1)[1].split("\n\n", 2)[1]
    named = re.findall(r"^\| (\w+) \| ", detail, re.M)
    assert named == ["stage"] + [s.name for s in stages.all_stages()]
