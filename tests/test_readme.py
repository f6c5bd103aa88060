"""The README opens with the two set-up commands, and CI runs the second one."""

import re
from pathlib import Path

import pytest

from rankgate.pipeline.lock import LOCK

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[1]


def readme_commands() -> list[str]:
    first_block = re.search(r"```bash\n(.*?)```", (ROOT / "README.md").read_text(), re.S).group(1)
    return [line for line in first_block.splitlines() if line and not line.startswith("#")]


# The lock first (every dependency at the version CI tested, hashes checked), then
# rankgate itself and the CPU torch, which the lock leaves to the machine.
INSTALL = f"pip install --no-deps -r {LOCK} && pip install torch==2.13.0 -e '.[dev]'"


def test_readme_opens_with_main_job_and_test_commands():
    main_job, tests = readme_commands()
    assert main_job == f"{INSTALL} && nox -s gate"
    assert tests.startswith(f"{INSTALL} && nox -s ")


def test_ci_runs_the_readme_test_command():
    ci_lines = (ROOT / ".ci" / "run").read_text().splitlines()
    assert readme_commands()[1] in ci_lines


def test_test_command_runs_every_stage_ci_can_run_here():
    # Through the gate, which runs hpc and container in the background beside the others.
    # In full: the quick gate (nox -s gate alone) leaves out the tests and stages marked slow.
    assert readme_commands()[1].endswith(
        "nox -s gate -- --full --only lint,unit,dist,hpc,container"
    )
