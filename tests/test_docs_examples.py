"""The documentation's runnable examples run, and print what the pages show.

Each folder under docs/examples is one example: its files, ``example.toml`` (the
command, its exit code, and the folder its output was recorded in) and its outputs,
recorded from real runs; the pages show them through ``<!-- rankgate:example ... -->``
(rankgate.docsite). Here each runs in a copy of its folder, as a reader would run it,
once per install its outputs were recorded with, and its output must equal the recorded
one but for the wall time, the folder and a log line's clock:

- ``output.txt``: a new virtual environment with torch, numpy and rankgate (the getting
  started page's install): no pytest plugin but rankgate's;
- ``output-dev.txt``: the README's install (the lock and the dev extra), whose plugins
  load as they are: pytest-randomly shuffles the order and loads DeepSpeed's seeder
  (DeepSpeed logs which accelerator it found as it is imported), xdist, timeout, cov,
  rerunfailures, hypothesis and anyio add nothing to the output unless asked.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from rankgate import docsite

pytestmark = [pytest.mark.dist, pytest.mark.launches]

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "docs" / docsite.EXAMPLES
NAMES = sorted(p.name for p in EXAMPLES.iterdir() if (p / "example.toml").is_file())


INSTALLS = {"alone": "output.txt", "dev": "output-dev.txt"}
"""Each install an example's output can be recorded with, and the file that holds it."""
CASES = [(name, install) for name in NAMES for install, file in INSTALLS.items()
         if (EXAMPLES / name / file).is_file()]  # fmt: skip


def normalised(output: str, folder: str) -> str:
    """The output less what differs between two runs: the folder, the wall time and the
    clock of a log line (DeepSpeed's, in the dev install)."""
    output = output.replace(folder, "FOLDER")
    output = re.sub(r"^\[\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}\]", "[CLOCK]", output, flags=re.M)
    return re.sub(r"\bin \d+(\.\d+)?s\b", "in Ts", output)


def as_on_the_cpu(output: str) -> str:
    """The output with each world's auto backend as a machine without GPUs resolves it
    (gloo), as the pages' outputs were recorded: on a GPU host a world test's auto backend
    is ``cpu:gloo,cuda:nccl``, and its failure and reproduction lines say so."""
    from rankgate.harness.pool.gpus import visible_gpu_count
    from rankgate.harness.spec import resolve_backend

    gpus = visible_gpu_count()
    for world in range(1, 9):
        here, cpu = resolve_backend("auto", world, gpus), resolve_backend("auto", world, 0)
        output = output.replace(f"(world {world}, backend {here})", f"(world {world}, backend {cpu})")
        output = output.replace(f"world={world} backend={here} ", f"world={world} backend={cpu} ")
    return output


def test_every_example_folder_is_runnable():
    assert "first" in NAMES
    for path in EXAMPLES.iterdir():
        assert (path / "example.toml").is_file(), f"{path}: no example.toml"
        assert (path / "output.txt").is_file(), f"{path}: no output.txt (record a real run)"


def test_every_example_placeholder_names_an_example():
    pages = "\n".join(p.read_text() for p in (ROOT / "docs").rglob("*.md"))
    shown = set(re.findall(r"<!-- rankgate:example ([\w-]+)/", pages))
    assert shown == set(NAMES), "an example no page shows, or a page showing none"


@pytest.mark.parametrize(("name", "install"), CASES)
def test_the_example_prints_what_its_page_shows(name, install, tmp_path):
    settings = docsite.example_settings(EXAMPLES / name)
    folder = tmp_path / name
    shutil.copytree(EXAMPLES / name, folder)
    argv = shlex.split(settings["command"])
    if argv[0] == "pytest":  # this environment's pytest, whatever PATH holds
        argv = [sys.executable, "-m", "pytest", *argv[1:]]
    # Nothing of this project's own runs: its PYTEST_ADDOPTS blocks pytest-randomly, and
    # its terminal is none: pytest draws its rules 80 wide, whatever COLUMNS says. Nor is
    # it a CI job: pytest leaves a CI's short summary lines uncut (CI, BUILD_NUMBER).
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("PYTEST_", "RANKGATE_"))
           and k not in ("COLUMNS", "LINES", "CI", "BUILD_NUMBER")}  # fmt: skip
    if install == "alone":
        # no plugin but rankgate's; PYTEST_PLUGINS loads it without a word on the command
        # line (the reproduction line repeats the command line)
        env |= {"PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1", "PYTEST_PLUGINS": "rankgate.pytest_plugin"}
    else:
        # the README's install: every plugin it brings loads, as in a reader's project
        pytest.importorskip("pytest_randomly", reason="not the README's install (dev extra)")
    done = subprocess.run(argv, cwd=folder, env=env, capture_output=True, text=True, timeout=300)
    output = as_on_the_cpu(done.stdout + done.stderr)
    expected = (folder / INSTALLS[install]).read_text()
    assert normalised(output, str(folder)) == normalised(expected, settings["recorded_in"]), output
    assert done.returncode == settings["exit_code"], output
