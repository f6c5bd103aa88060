"""``rankgate dispatch`` end to end against the local SLURM, as CI and nox call it."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap

import pytest

pytestmark = pytest.mark.hpc

SUITE = """
import os

import pytest

@pytest.mark.every_rank  # in place, a plain test runs on one rank: this one checks both
def test_here(rank):
    assert os.environ["SLURM_NTASKS"] == "2"
    assert os.environ.get("BREAK_RANK") != str(rank), f"rank {rank} broken on purpose"
"""


def _profile(tmp_path, local_slurm, *lines: str):
    """A profile for the local SLURM's two tasks, results and work in ``tmp_path``;
    ``lines``: more of it (a time limit, an [env] table)."""
    profile = tmp_path / "local.toml"
    profile.write_text(
        "\n".join(
            [
                f'partition = "{local_slurm.partition}"',
                "tasks_per_node = 2",
                f'results_dir = "{tmp_path / "results"}"',
                f'workdir = "{tmp_path}"',
                f'python = "{sys.executable}"',
                *lines,
            ]
        )
        + "\n"
    )
    return profile


def _dispatch(profile, test_file: str, *options: str) -> list[str]:
    """``rankgate dispatch`` of ``test_file``'s hpc stage on ``profile``, as CI calls it."""
    return [
        sys.executable, "-m", "rankgate.cli", "dispatch", "--profile", str(profile),
        "--stage", "hpc", "--markers", "not slow", *options, "--json", "--", test_file,
    ]  # fmt: skip


@pytest.mark.parametrize(("break_rank", "code"), [("", 0), ("1", 1)])
def test_dispatch_command_exit_status_and_json(local_slurm, tmp_path, break_rank, code):
    (tmp_path / "test_here.py").write_text(textwrap.dedent(SUITE))
    profile = _profile(
        tmp_path, local_slurm, 'time_limit = "5"', "[env]", f'BREAK_RANK = "{break_rank}"'
    )
    done = subprocess.run(
        _dispatch(profile, "test_here.py"),
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "RANKGATE_OUT": str(tmp_path / "out")},
    )
    assert done.returncode == code, done.stdout + done.stderr
    summary = json.loads(done.stdout.strip().splitlines()[-1])
    assert summary["passed"] is (code == 0)
    assert summary["world_size"] == 2
    assert (tmp_path / "out" / "junit" / "hpc.xml").is_file()  # the stage's product
    assert "submitted job" in done.stderr and "running" in done.stderr  # progress on stderr
    if break_rank:
        assert summary["tests"][0]["failing_ranks"] == [1]
        assert "rank 1 broken on purpose" in done.stdout


def test_ctrl_c_cancels_the_job(local_slurm, tmp_path):
    """SIGINT to `rankgate dispatch` while the job runs: scancel, outcome interrupted, exit 3."""
    (tmp_path / "test_sleep.py").write_text(
        "import time\n\ndef test_sleep():\n    time.sleep(600)\n"
    )
    profile = _profile(tmp_path, local_slurm)
    proc = subprocess.Popen(
        _dispatch(profile, "test_sleep.py", "--poll", "0.5"),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    seen = []
    for line in proc.stderr:  # progress lines, as they come
        seen.append(line)
        if ": running" in line:
            proc.send_signal(signal.SIGINT)
            break
    out, err = proc.communicate(timeout=120)
    summary = json.loads(out.strip().splitlines()[-1])
    assert proc.returncode == 3, "".join(seen) + err
    assert summary["outcome"] == "interrupted" and summary["state"].startswith("CANCELLED")
    assert "interrupted, cancelling" in err
    queue = subprocess.run(
        ["squeue", "-h", "-j", summary["job_id"]], capture_output=True, text=True
    )
    assert queue.stdout.strip() == ""
