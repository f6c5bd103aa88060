"""The release workflow cannot publish past a refused gate.

The gate step's script is run for real under the shell GitHub would use for it, with
a fake ``dagger`` (and ``curl``) that refuses or publishes: a refused gate must fail
the step and leave no image output, and github-release must need that image.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[2]
WORKFLOWS = sorted((ROOT / ".github" / "workflows").glob("*.yml"))
yaml = pytest.importorskip("yaml", reason="pyyaml is in the dev extra: pip install -e '.[dev]'")
DIGEST = "ghcr.io/org/rankgate@sha256:" + "ab" * 32

# The command GitHub runs a `run:` script with on Linux, by the step's `shell:`
# (docs: "Workflow syntax", jobs.<job_id>.steps[*].shell). No shell: bash without pipefail.
SHELLS = {
    None: ["bash", "-e"],
    "bash": ["bash", "--noprofile", "--norc", "-eo", "pipefail"],
}


def load(path: Path) -> dict:
    return yaml.safe_load(path.read_text())


def run_steps():
    for path in WORKFLOWS:
        workflow = load(path)
        default = workflow.get("defaults", {}).get("run", {}).get("shell")
        for job_id, job in workflow["jobs"].items():
            job_default = job.get("defaults", {}).get("run", {}).get("shell", default)
            for index, step in enumerate(job.get("steps", [])):
                if "run" in step:
                    shell = step.get("shell", job_default)
                    yield f"{path.name}:{job_id}[{index}]", shell, step


def has_pipe(script: str) -> bool:
    """A shell pipe: a `|` that is not part of `||`."""
    return bool(re.search(r"(?<![|])\|(?![|])", script))


@pytest.mark.parametrize(
    ("where", "shell", "step"), [pytest.param(*step, id=step[0]) for step in run_steps()]
)
def test_every_step_that_pipes_has_pipefail(where, shell, step):
    if not has_pipe(step["run"]):
        return
    pipefail = shell == "bash" or re.search(r"^\s*set -\w*o pipefail", step["run"], re.M)
    assert pipefail, (
        f"{where} pipes without pipefail: GitHub's default shell is `bash -e`, so the "
        "pipe's last command decides the step. Set `shell: bash` (bash -eo pipefail)."
    )


def gate_step() -> dict:
    jobs = load(ROOT / ".github" / "workflows" / "release.yml")["jobs"]
    (step,) = [s for s in jobs["release-gate"]["steps"] if s.get("id") == "gate"]
    return step


def release_job() -> dict:
    return load(ROOT / ".github" / "workflows" / "release.yml")["jobs"]["github-release"]


def release_step() -> dict:
    (step,) = [s for s in release_job()["steps"] if "run" in s]
    return step


def jobs() -> dict:
    return load(ROOT / ".github" / "workflows" / "release.yml")["jobs"]


FAKE_DAGGER = """#!/usr/bin/env bash
printf '%s\\n' "$@" > "$RUNNER_TEMP/dagger-args"
echo "release gate:"
echo "lint      passed"
if [ "$FAKE_GATE" = refuse ]; then
    echo "test-gpu  SKIPPED  no GPU engine"
    echo "release refused, nothing published" >&2
    exit 1
fi
[ "$FAKE_GATE" = silent ] || echo "published $FAKE_DIGEST"
"""


def run_script(
    step: dict, tmp_path: Path, cwd: Path | None = None, **env: str
) -> tuple[int, str, dict[str, str]]:
    """Run a step's script as GitHub would (in ``cwd``, the checkout by default); return
    (exit code, output, $GITHUB_OUTPUT)."""
    assert "${{" not in step["run"], "expressions belong in env:, not in the script"
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    for name, text in {"curl": "#!/bin/sh\n", "gh": '#!/bin/sh\necho gh "$@"\n'}.items():
        (bin_dir / name).write_text(text)
        (bin_dir / name).chmod(0o755)
    (tmp_path / "dagger").write_text(FAKE_DAGGER)
    (tmp_path / "dagger").chmod(0o755)
    script = tmp_path / "step.sh"
    script.write_text(step["run"])
    output = tmp_path / "github-output"
    output.write_text("")
    full_env = {
        "PATH": f"{bin_dir}:{os.environ['PATH']}",
        "RUNNER_TEMP": str(tmp_path),
        "GITHUB_OUTPUT": str(output),
        "GITHUB_REF_TYPE": "tag",
        "GITHUB_REPOSITORY": "org/rankgate",
        "DAGGER_VERSION": "0.21.11",
        "IMAGE": "ghcr.io/Org/Rankgate:v1.0",
        "USER_NAME": "ci",
        "TAG": "v1.0",
        "OVERRIDE": "",
        "FAKE_DIGEST": DIGEST,
        **env,
    }
    argv = [*SHELLS[step.get("shell")], str(script)]
    done = subprocess.run(
        argv, env=full_env, capture_output=True, text=True, timeout=60, cwd=cwd or ROOT
    )
    outputs = dict(line.split("=", 1) for line in output.read_text().splitlines() if "=" in line)
    return done.returncode, done.stdout + done.stderr, outputs


needs_bash = pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash")


@needs_bash
def test_a_refused_gate_fails_the_step_and_names_no_image(tmp_path):
    code, out, outputs = run_script(gate_step(), tmp_path, FAKE_GATE="refuse")
    assert code != 0, out
    assert "image" not in outputs


@needs_bash
def test_a_gate_that_publishes_nothing_fails_the_step(tmp_path):
    code, out, outputs = run_script(gate_step(), tmp_path, FAKE_GATE="silent")
    assert code != 0 and "published no image by digest" in out
    assert "image" not in outputs


@needs_bash
def test_a_passed_gate_outputs_the_image_by_digest(tmp_path):
    code, out, outputs = run_script(gate_step(), tmp_path, FAKE_GATE="pass")
    assert code == 0, out
    assert outputs == {"image": DIGEST}
    args = (tmp_path / "dagger-args").read_text().splitlines()
    assert args[:4] == ["call", "release-gate", "--address", "ghcr.io/org/rankgate:v1.0"]
    assert "--override" not in args  # publishing past a gate is never the default


@needs_bash
def test_the_override_input_reaches_the_gate_and_is_printed(tmp_path):
    reason = "cluster down; tested by hand"
    code, out, _ = run_script(gate_step(), tmp_path, FAKE_GATE="pass", OVERRIDE=reason)
    assert code == 0, out
    args = (tmp_path / "dagger-args").read_text().splitlines()
    assert args[-2:] == ["--override", reason]
    assert f"Reason given: {reason}" in out


@needs_bash
def test_the_gate_runs_only_on_a_tag(tmp_path):
    code, out, _ = run_script(gate_step(), tmp_path, FAKE_GATE="pass", GITHUB_REF_TYPE="branch")
    assert code != 0 and "runs on a tag" in out
    assert not (tmp_path / "dagger-args").exists()


def test_override_comes_only_from_the_dispatch_input():
    workflow = load(ROOT / ".github" / "workflows" / "release.yml")
    override = workflow[True]["workflow_dispatch"]["inputs"]["override"]  # YAML: on -> True
    assert override["default"] == ""
    assert gate_step()["env"]["OVERRIDE"] == "${{ inputs.override }}"
    # With an override the gate runs although an earlier job failed; it still decides.
    gate_if = workflow["jobs"]["release-gate"]["if"]
    assert "!cancelled()" in gate_if and "inputs.override != ''" in gate_if


def test_github_release_needs_the_gate_its_image_and_the_package_on_pypi():
    job = release_job()
    assert job["needs"] == ["release-gate", "pypi-publish"]
    assert "needs.release-gate.result == 'success'" in job["if"]
    assert "needs.pypi-publish.result == 'success'" in job["if"]
    assert "!cancelled()" in job["if"]  # not success(): that counts jobs before the gate
    assert "needs.release-gate.outputs.image" in job["if"]
    assert release_step()["env"]["IMAGE"] == "${{ needs.release-gate.outputs.image }}"


def release_files(tmp_path: Path, notes: str = "### Added\n\n- the plugin") -> None:
    """What github-release downloads: the notes and the dist artifacts."""
    (tmp_path / "notes").mkdir()
    (tmp_path / "notes" / "notes.md").write_text(notes)
    (tmp_path / "dist").mkdir()
    for name in ("rankgate-1.0.tar.gz", "rankgate-1.0-py3-none-any.whl"):
        (tmp_path / "dist" / name).write_text("")


@needs_bash
@pytest.mark.parametrize("image", ["", "ghcr.io/org/rankgate:v1.0"])
def test_github_release_refuses_an_image_without_digest(tmp_path, image):
    release_files(tmp_path)
    code, out, _ = run_script(release_step(), tmp_path, IMAGE=image)
    assert code != 0 and "gh release" not in out


@needs_bash
def test_github_release_notes_are_the_changelog_section_then_the_image(tmp_path):
    release_files(tmp_path)
    code, out, _ = run_script(release_step(), tmp_path, IMAGE=DIGEST)
    assert code == 0, out
    assert "gh release create v1.0 --repo org/rankgate --title v1.0 --notes ### Added" in out
    assert f"- the plugin\n\nImage, published by the release gate: {DIGEST}" in out
    assert "Python package: https://pypi.org/project/rankgate/1.0/" in out
    assert out.rstrip().endswith(
        f"{tmp_path}/dist/rankgate-1.0-py3-none-any.whl {tmp_path}/dist/rankgate-1.0.tar.gz"
    )  # the sdist and the wheel are the release's assets


@needs_bash
def test_github_release_refuses_empty_notes(tmp_path):
    release_files(tmp_path, notes="")
    code, out, _ = run_script(release_step(), tmp_path, IMAGE=DIGEST)
    assert code != 0 and "no release notes" in out and "gh release" not in out


# --- the Python package: built and checked before the gate, published after it --------


def test_the_gate_needs_the_checked_package_even_with_an_override():
    gate = jobs()["release-gate"]
    assert "dist" in gate["needs"]
    assert "needs.dist.result == 'success'" in gate["if"]
    assert gate["if"].index("needs.dist.result") < gate["if"].index("inputs.override")


def test_dist_builds_checks_and_tries_the_wheel_then_uploads_it():
    steps = jobs()["dist"]["steps"]
    runs = [s.get("run", "") for s in steps]
    order = ["rankgate.pipeline.changelog", "rankgate.pipeline.distfiles",
             "rankgate.pipeline.wheel_trial"]  # fmt: skip
    at = [next(i for i, run in enumerate(runs) if module in run) for module in order]
    assert at == sorted(at)
    uploads = {s["with"]["name"]: s["with"]["path"] for s in steps
               if s.get("uses", "").startswith("actions/upload-artifact")}  # fmt: skip
    assert uploads["dist"] == "out/dist/" and uploads["release-notes"] == "out/notes/notes.md"
    assert "${{" not in "".join(runs)  # expressions go through env:


def test_pypi_publish_only_after_the_gate_by_trusted_publishing():
    job = jobs()["pypi-publish"]
    assert job["needs"] == ["release-gate", "dist"]
    for condition in (
        "!cancelled()",
        "needs.release-gate.result == 'success'",
        "needs.dist.result == 'success'",
        "needs.release-gate.outputs.image",
    ):
        assert condition in job["if"]  # fmt: skip
    assert "success()" not in job["if"].replace("!cancelled()", "")
    # Trusted publishing: an OpenID Connect token, no other permission, no stored token.
    assert job["permissions"] == {"id-token": "write"}
    assert job["environment"]["name"] == "pypi"
    (publish,) = [s for s in job["steps"] if s.get("uses", "").startswith("pypa/")]
    assert publish["uses"] == "pypa/gh-action-pypi-publish@release/v1"
    assert "with" not in publish  # no password, no repository-url: PyPI, by its OIDC token
    assert "secrets." not in (ROOT / ".github/workflows/release.yml").read_text().split(
        "pypi-publish:", 1)[1].split("github-release:", 1)[0]  # fmt: skip


def test_only_pypi_publish_uploads_to_pypi():
    text = {name: str(job) for name, job in jobs().items()}
    assert [name for name, job in text.items() if "pypi-publish@" in job] == ["pypi-publish"]
    assert not [name for name, job in text.items() if "twine upload" in job]


@needs_bash
def test_pypi_publish_logs_the_override(tmp_path):
    (step,) = [s for s in jobs()["pypi-publish"]["steps"] if "run" in s]
    assert step["env"]["OVERRIDE"] == "${{ inputs.override }}"
    code, out, _ = run_script(step, tmp_path, OVERRIDE="cluster down; tested by hand")
    assert code == 0
    assert (
        "::warning::publishing to PyPI after a release gate override. Reason given: "
        "cluster down; tested by hand" in out
    )
    code, out, _ = run_script(step, tmp_path)
    assert (code, out) == (0, "")


def notes_step() -> dict:
    (step,) = [
        s for s in jobs()["dist"]["steps"] if "rankgate.pipeline.changelog" in s.get("run", "")
    ]
    return step


def release_checkout(tmp_path: Path, changelog: str) -> Path:
    """A checkout with this one's code and the given CHANGELOG.md."""
    root = tmp_path / "checkout"
    root.mkdir()
    (root / "src").symlink_to(ROOT / "src")
    (root / "CHANGELOG.md").write_text(changelog)
    return root


@needs_bash
def test_the_notes_step_writes_the_tags_section(tmp_path):
    from rankgate import __version__

    root = release_checkout(
        tmp_path, f"# Changelog\n\n## Unreleased\n\n## {__version__} - 2026-12-01\n\n- first\n"
    )
    code, out, _ = run_script(notes_step(), tmp_path, cwd=root, TAG=f"v{__version__}")
    assert code == 0, out
    assert (root / "out" / "notes" / "notes.md").read_text() == "- first\n"


@needs_bash
@pytest.mark.parametrize(
    ("tag", "changelog", "said"),
    [
        ("v9.9.9", "## Unreleased\n\n- a\n", "tag v9.9.9 is not v{v}"),
        ("v{v}", "## Unreleased\n\n- a\n", "CHANGELOG.md has no '## {v} - YYYY-MM-DD' section"),
        ("v{v}", "## {v}\n\n- a\n", "CHANGELOG.md: '## {v}' has no date"),
    ],
)
def test_the_notes_step_refuses_a_tag_that_is_not_a_release(tmp_path, tag, changelog, said):
    from rankgate import __version__ as v

    root = release_checkout(tmp_path, changelog.format(v=v))
    code, out, _ = run_script(notes_step(), tmp_path, cwd=root, TAG=tag.format(v=v))
    assert code != 0 and f"rankgate: changelog: {said.format(v=v)}" in out, out


@needs_bash
def test_the_notes_step_runs_only_on_a_tag(tmp_path):
    code, out, _ = run_script(notes_step(), tmp_path, GITHUB_REF_TYPE="branch")
    assert code != 0 and "a release is made from a tag" in out


def test_every_ssh_key_comes_with_known_hosts():
    """The Dagger module refuses --ssh-key without --known-hosts (host keys are checked)."""
    jobs = load(ROOT / ".github" / "workflows" / "release.yml")["jobs"]
    for job_id, job in jobs.items():
        for step in job["steps"]:
            text = step.get("run", "") + str(step.get("with", {}).get("args", ""))
            if "--ssh-key" in text:
                assert "--known-hosts env://HPC_KNOWN_HOSTS" in text, job_id
                assert step["env"]["HPC_KNOWN_HOSTS"] == "${{ vars.RANKGATE_HPC_KNOWN_HOSTS }}"
