"""The dispatch tests without the [dev] extra: the interLink ones skip, collection works.

kubernetes and openapi_schema_validator are hidden by modules of those names that
raise ModuleNotFoundError, as an absent package does, placed first on the path of a
child pytest run.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.unit

HIDDEN = ("kubernetes", "openapi_schema_validator")


def test_collection_works_without_the_dev_extras(tmp_path):
    for name in HIDDEN:
        (tmp_path / f"{name}.py").write_text(
            f"raise ModuleNotFoundError('{name} hidden by the test')\n"
        )
    root = Path(__file__).resolve().parents[2]
    pytest_run = [sys.executable, "-m", "pytest", "-q", "-rs", "-p", "no:cacheprovider"]
    done = subprocess.run(
        [*pytest_run, "tests/dispatch", "-k", "interlink or kube"],
        cwd=root,
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), *sys.path])},
    )
    said = done.stdout + done.stderr
    assert done.returncode == 0, said  # all of tests/dispatch collected, nothing errored
    skipped = [line for line in said.splitlines() if line.startswith("SKIPPED")]
    assert [line.split(":")[0] for line in skipped] == [
        "SKIPPED [1] tests/dispatch/test_dispatch_interlink.py",  # the whole module
        "SKIPPED [2] tests/dispatch/test_dispatch_interlink_e2e.py",  # through its fixture
        "SKIPPED [1] tests/dispatch/test_dispatch_interlink_e2e.py",  # its sharded test
    ]
    assert all(line.endswith("needs the [dev] extra") for line in skipped)


def test_a_shell_command_without_an_answer_is_a_command_failed_naming_the_wait():
    from rankgate.dispatch.shell import Shell
    from rankgate.proc.command import CommandFailed

    with pytest.raises(CommandFailed, match="no answer within 1 s") as info:
        Shell(timeout=1).run([sys.executable, "-c", "import time; time.sleep(30)"])
    assert info.value.returncode == 124


def test_a_shell_command_that_fails_carries_its_own_words():
    from rankgate.dispatch.shell import Shell
    from rankgate.proc.command import CommandFailed

    script = "import sys; print('sbatch: error: invalid partition', file=sys.stderr); sys.exit(1)"
    with pytest.raises(CommandFailed, match="sbatch: error: invalid partition") as info:
        Shell().run([sys.executable, "-c", script])
    assert info.value.returncode == 1
    assert Shell().run([sys.executable, "-c", script], check=False).returncode == 1
