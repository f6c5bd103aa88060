"""Stage latest: a fresh environment, every dependency upgraded but torch, unit and dist in it."""

from __future__ import annotations

import subprocess
import sysconfig
from importlib import metadata
from pathlib import Path

import pytest

from rankgate.pipeline import latest
from rankgate.proc import command as process

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[2]


def test_torch_is_held_at_the_installed_version():
    assert latest.torch_pin() == f"torch=={metadata.version('torch')}"


def test_without_torch_it_says_what_to_install(monkeypatch):
    def absent(name):
        raise metadata.PackageNotFoundError(name)

    monkeypatch.setattr(latest.metadata, "version", absent)
    with pytest.raises(SystemExit, match="torch is not installed here; install the one to test"):
        latest.torch_pin()


def test_outside_a_checkout_it_says_where_to_run_it(monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit, match="run it from the rankgate checkout"):
        latest.main([])


@pytest.fixture(scope="module")
def new_environment(tmp_path_factory) -> Path:
    """One environment for the tests that only read it (ensurepip makes each: 5 CPU-s)."""
    return latest.make_environment(tmp_path_factory.mktemp("latest") / "venv")


def test_the_new_environment_sees_this_ones_packages_after_its_own(new_environment):
    bin_dir = new_environment
    shown = subprocess.run(
        [bin_dir / "python", "-c",
         "import importlib.util, sys, sysconfig; print(importlib.util.find_spec('torch').origin);"
         "print(sysconfig.get_paths()['purelib']); print('\\n'.join(sys.path))"],
        capture_output=True, text=True, check=True,
    ).stdout.splitlines()  # fmt: skip
    torch_file, own, *path = shown
    here = sysconfig.get_paths()["purelib"]
    assert torch_file.startswith(here)  # the torch this machine has
    assert own.startswith(str(bin_dir.parent)) and path.index(own) < path.index(here)


def test_every_command_of_this_environment_runs_on_the_new_ones_python(new_environment):
    # The stages start pytest, torchrun, rankgate ... by name. A package the upgrade
    # leaves alone (already the newest) has its command only here, whose python sees the
    # old versions of every package the upgrade did change: the run would test those.
    bin_dir = new_environment
    commands = {
        entry.name
        for dist in metadata.distributions()
        for entry in dist.entry_points
        if entry.group == "console_scripts"
    }
    assert {"pytest", "torchrun", "nox", "rankgate"} <= commands
    missing = sorted(name for name in commands if not (bin_dir / name).is_file())
    assert not missing, f"not in the new environment: {missing}"
    foreign = sorted(
        name
        for name in commands
        if not (bin_dir / name).read_text().startswith(f"#!{bin_dir / 'python'}")
    )
    assert not foreign, f"run on another python: {foreign}"
    shown = subprocess.run(
        [bin_dir / "pytest", "--version"], capture_output=True, text=True, check=True
    )
    assert shown.stdout.startswith(f"pytest {metadata.version('pytest')}")


def test_it_upgrades_all_but_torch_then_runs_unit_and_dist_inside(monkeypatch, tmp_path):
    ran = []

    def record(argv, *, env=None, stdout_path=None, **kwargs):
        ran.append((argv, env))
        return 0

    monkeypatch.chdir(ROOT)
    monkeypatch.setenv("RANKGATE_OUT", str(tmp_path / "out"))
    monkeypatch.setattr(latest, "make_environment", lambda where: where / "bin")
    monkeypatch.setattr(process, "run", record)
    assert latest.main(["-k", "world"]) == 0
    out = tmp_path / "out" / "latest"
    python = str(out / "venv" / "bin" / "python")
    (install, _), (freeze, _), (gate, env) = ran
    assert install == [
        python, "-m", "pip", "install", "--upgrade", "--upgrade-strategy", "eager",
        "--constraint", str(out / "torch.txt"), "--editable", ".[dev]",
    ]  # fmt: skip
    assert (out / "torch.txt").read_text() == f"torch=={metadata.version('torch')}\n"
    assert freeze == [python, "-m", "pip", "list", "--format=freeze"]
    assert gate == [
        python, "-m", "nox", "-s", "gate", "--", "--full", "--only", "unit,dist",
        "--out", str(out), "-k", "world",
    ]  # fmt: skip
    assert env["PATH"].startswith(str(out / "venv" / "bin"))
    assert env["VIRTUAL_ENV"] == str(out / "venv")


def test_a_failed_step_fails_the_stage_naming_it(monkeypatch, tmp_path, capsys):
    def fail(argv, **kwargs):
        raise process.CommandFailed(list(argv), 1)

    monkeypatch.chdir(ROOT)
    monkeypatch.setenv("RANKGATE_OUT", str(tmp_path / "out"))
    monkeypatch.setattr(latest, "make_environment", lambda where: where / "bin")
    monkeypatch.setattr(process, "run", fail)
    assert latest.main([]) == 1
    err = capsys.readouterr().err
    assert "rankgate: latest: " in err and "-m pip install --upgrade" in err
    assert err.rstrip().endswith("--editable '.[dev]': exit code 1")
