"""``rankgate dispatch`` argument handling: bad input exits 2 with the reason; --dry-run."""

from __future__ import annotations

import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from rankgate.cli import main

pytestmark = pytest.mark.unit


def _write(tmp_path, text: str, name: str = "site.toml"):
    path = tmp_path / name
    path.write_text(text)
    return str(path)


def test_unknown_key_exits_2_naming_it(tmp_path, capsys):
    profile = _write(tmp_path, "nodes = 1\ngpu_per_node = 4\n")
    assert main(["dispatch", "--profile", profile, "--stage", "hpc"]) == 2
    assert "unknown key(s) ['gpu_per_node']" in capsys.readouterr().err


def test_gpu_stage_on_a_cpu_profile_exits_2(tmp_path, capsys):
    profile = _write(tmp_path, "results_dir = '/scratch'\n", "cpu.toml")
    assert main(["dispatch", "--profile", profile, "--stage", "gpu"]) == 2
    assert (
        "stage 'gpu' needs GPUs but profile 'cpu' has gpus_per_node = 0" in capsys.readouterr().err
    )


def test_unknown_stage_exits_2(tmp_path, capsys):
    profile = _write(tmp_path, "")
    assert main(["dispatch", "--profile", profile, "--stage", "nope"]) == 2
    assert "unknown stage 'nope'" in capsys.readouterr().err


def test_profile_by_name_from_rankgate_profiles(tmp_path, capsys, monkeypatch):
    _write(
        tmp_path,
        "gpus_per_node = 4\nresults_dir = '/scratch'\npartition = 'booster'\n",
        "juwels.toml",
    )
    monkeypatch.setenv("RANKGATE_PROFILES", str(tmp_path))
    code = main(["dispatch", "--profile", "juwels", "--stage", "gpu", "--dry-run", "--", "-x"])
    out = capsys.readouterr().out
    assert code == 0
    assert "#SBATCH --gres=gpu:4\n" in out and "#SBATCH --partition=booster\n" in out
    assert "-m gpu -x --junitxml=" in out


def test_hpc_stage_dispatches_multi_rank_tests_not_the_local_slurm_ones(tmp_path, capsys):
    # The hpc tests start their own SLURM; every rank of a cluster job doing so would
    # fight over one port. The cluster gets the genuine multi-rank (world) tests.
    profile = _write(tmp_path, "tasks_per_node = 2\nresults_dir = '/scratch'\n")
    assert main(["dispatch", "--profile", profile, "--stage", "hpc", "--dry-run"]) == 0
    (srun,) = [line for line in capsys.readouterr().out.splitlines() if line.startswith("srun")]
    rank_words = shlex.split(shlex.split(srun)[-1])
    after_m = [rank_words[i + 1] for i, word in enumerate(rank_words) if word == "-m"]
    assert after_m == ["pytest", "world and not gpu and not hpc and not container"]


def test_hpc_remote_selection_holds_no_test_that_spawns_its_own_run():
    # Collect what the cluster's ranks would run: world tests only, none of the
    # local-SLURM (suites/dispatch) or pytester/torchrun-spawning (suites/harness) ones.
    from rankgate.pipeline import stages

    root = Path(__file__).resolve().parents[2]
    markers = stages.get("hpc").dispatch_markers
    collect = [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider"]
    done = subprocess.run(
        [*collect, "-m", markers, "suites"],
        cwd=root,
        capture_output=True,
        text=True,
        timeout=300,
    )
    files = {line.split("::")[0] for line in done.stdout.splitlines() if "::" in line}
    assert done.returncode == 0, done.stdout + done.stderr
    assert "suites/pipeline/test_dist_smoke.py" in files
    spawning = {f for f in files if f.startswith(("suites/dispatch/", "suites/harness/"))}
    assert spawning <= {"suites/harness/test_cpu_tensors.py"}  # world tests only: they belong there
