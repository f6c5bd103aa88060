"""The wheel trial's judgement of each step, and the environment it runs the steps in.

The trial itself runs in stage package (``nox -s package``): a new environment, the
wheel, torch and the outside project.
"""

from __future__ import annotations

import tempfile

import pytest

from rankgate.pipeline import wheel_trial
from rankgate.pipeline.wheel_trial import EXPECTED, Trial, TrialFailed

pytestmark = pytest.mark.unit

PASSING, PLANTED = EXPECTED


def summary(planted_ranks: list[int], planted: str = "failed") -> dict:
    """What ``rankgate report --json`` says, in the part the trial reads."""
    return {
        "tests": {PASSING: "passed", PLANTED: planted},
        "failing": [{"id": PLANTED, "failing_ranks": planted_ranks}] if planted_ranks else [],
    }


def test_a_report_naming_rank_1_alone_is_what_is_expected():
    verdicts = wheel_trial.report_verdicts(summary([1]))
    assert verdicts == EXPECTED
    assert wheel_trial.compare("rankgate report", verdicts) == (
        "rankgate report: 1 passed, 1 failed (test_planted_failure_on_rank_1, rank 1 only)"
    )


@pytest.mark.parametrize(
    "report", [summary([0, 1]), summary([0]), summary([], planted="passed"), summary([1], "error")]
)
def test_any_other_verdict_fails_the_step_saying_what_it_got(report):
    with pytest.raises(TrialFailed, match=r"^torchrun \+ merge-junit: verdicts .*, expected "):
        wheel_trial.compare("torchrun + merge-junit", wheel_trial.report_verdicts(report))


def test_the_outside_project_fails_on_rank_1_only():
    assert "@pytest.mark.world(2)" in wheel_trial.PROJECT_TEST
    assert 'assert rank != 1, "planted: rank 1 fails"' in wheel_trial.PROJECT_TEST
    names = {test_id.split("::")[1] for test_id in EXPECTED}
    assert all(f"def {name}(" in wheel_trial.PROJECT_TEST for name in names)


def test_the_steps_see_nothing_of_the_checkout_or_the_stage(tmp_path, monkeypatch):
    monkeypatch.setenv("PYTHONPATH", "/checkout/src")
    monkeypatch.setenv("RANKGATE_OUT", "/checkout/out")
    monkeypatch.setenv("COV_CORE_SOURCE", "rankgate")
    monkeypatch.setenv("PYTEST_ADDOPTS", "-x")
    monkeypatch.setenv("PIP_EXTRA_INDEX_URL", "https://example.invalid/cpu")
    trial = Trial(venv=tmp_path / "venv", project=tmp_path / "project", out=tmp_path / "out")
    env = trial.env()
    assert not {"PYTHONPATH", "RANKGATE_OUT", "COV_CORE_SOURCE", "PYTEST_ADDOPTS"} & set(env)
    assert env["PATH"].split(":")[0] == str(tmp_path / "venv" / "bin")
    assert env["VIRTUAL_ENV"] == str(tmp_path / "venv")
    assert env["PIP_EXTRA_INDEX_URL"] == "https://example.invalid/cpu"  # where torch is found


def test_a_step_with_another_exit_code_names_it_and_its_log(tmp_path):
    (tmp_path / "project").mkdir()
    (tmp_path / "out").mkdir()
    trial = Trial(venv=tmp_path / "venv", project=tmp_path / "project", out=tmp_path / "out")
    with pytest.raises(TrialFailed) as failed:
        trial.step("probe", ["sh", "-c", "echo said; exit 3"], (0,))
    log = tmp_path / "out" / "probe.log"
    assert str(failed.value) == f"probe: exit code 3, expected 0 ({log}):\n    said"
    assert log.read_text() == "$ sh -c echo said; exit 3\nsaid\n"


@pytest.mark.parametrize("count", [0, 2])
def test_without_exactly_one_wheel_it_says_how_to_build_one(tmp_path, count):
    for i in range(count):
        (tmp_path / f"rankgate-0.{i}-py3-none-any.whl").write_text("")
    with pytest.raises(SystemExit, match=f"{count} rankgate wheels in .*python -m rankgate"):
        wheel_trial.the_wheel(tmp_path)


def test_a_temp_folder_inside_the_checkout_is_refused(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("RANKGATE_OUT", str(tmp_path / "out"))
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "tmp"))
    (tmp_path / "tmp").mkdir()
    with pytest.raises(SystemExit, match="is inside the checkout; set TMPDIR"):
        wheel_trial.main(["--wheel", str(tmp_path / "rankgate-1.0-py3-none-any.whl")])


def test_a_command_that_gives_no_json_verdict_fails_its_step_with_its_output(tmp_path):
    (tmp_path / "project").mkdir()
    (tmp_path / "out").mkdir()
    trial = Trial(venv=tmp_path / "venv", project=tmp_path / "project", out=tmp_path / "out")
    said = "echo 'ModuleNotFoundError: No module named rankgate.report.merge_command' >&2; exit 1"
    with pytest.raises(TrialFailed) as failed:
        trial.step_json("merge-junit", ["sh", "-c", said], (1,))
    assert str(failed.value) == (
        f"merge-junit: exit code 1 and no JSON verdict ({tmp_path / 'out' / 'merge-junit.log'}):\n"
        "    ModuleNotFoundError: No module named rankgate.report.merge_command"
    )
