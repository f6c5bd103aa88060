"""``rankgate dispatch`` argument handling: bad input exits 2 with the reason; --dry-run."""

from __future__ import annotations

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
