"""rankgate env-check: the JSON layout, values that match this machine, missing tools."""

from __future__ import annotations

import io
import json
import os
import platform
import re
import subprocess
import sys
import textwrap
import types
from pathlib import Path

import pytest
import torch
import torch.distributed as dist

from rankgate import __version__, envcheck
from tests.warmstart import WARM_PYTHON

pytestmark = pytest.mark.unit

TOOL_KEYS = {"found", "path", "version", "error"}


@pytest.fixture(scope="module")
def info() -> dict:
    return envcheck.collect()


def plain_rows(info: dict) -> dict[str, str]:
    """item -> value of the plain-text table."""
    out = io.StringIO()
    envcheck.write_table(info, out, use_rich=False)
    return dict(re.findall(r"^  (\S.*?)  +(.*)$", out.getvalue(), re.M))


def fake_tool(directory: Path, name: str, script: str) -> Path:
    path = directory / name
    path.write_text("#!/bin/sh\n" + textwrap.dedent(script))
    path.chmod(0o755)
    return path


def test_json_has_every_key(info: dict) -> None:
    assert set(info) == {
        "schema", "rankgate", "python", "platform", "torch", "cuda", "backends", "gpus",
        "peer_access", "launchers", "containers", "environment",
    }
    assert info["schema"] == "rankgate.env-check/1"
    assert set(info["torch"]) == {"version", "cuda_build", "hip_build", "cudnn", "error"}
    assert set(info["cuda"]) == {"available", "device_count", "nccl", "error"}
    assert set(info["backends"]) == {"gloo", "nccl", "mpi", "ucc"}
    assert set(info["launchers"]) == {"torchrun", "srun", "mpirun", "ray"}
    assert set(info["containers"]) == {"podman", "docker", "apptainer", "singularity", "enroot"}
    for tool in [*info["launchers"].values(), *info["containers"].values()]:
        assert set(tool) == TOOL_KEYS
    assert json.loads(json.dumps(info)) == info  # JSON-ready as it is


def test_values_match_this_machine(info: dict) -> None:
    assert info["rankgate"] == __version__
    assert info["python"]["version"] == platform.python_version()
    assert info["python"]["executable"] == sys.executable
    assert info["torch"]["version"] == torch.__version__
    assert info["torch"]["cuda_build"] == torch.version.cuda
    assert info["torch"]["error"] is None
    assert info["cuda"]["available"] == torch.cuda.is_available()
    count = torch.cuda.device_count() if torch.cuda.is_available() else 0
    assert info["cuda"]["device_count"] == count  # 0 on the CPU machines
    assert len(info["gpus"]) == count
    assert info["peer_access"] == [
        [None if i == j else torch.cuda.can_device_access_peer(i, j) for j in range(count)]
        for i in range(count)
    ]
    assert info["backends"]["gloo"] == dist.is_gloo_available()
    assert info["backends"]["nccl"] == dist.is_nccl_available()
    assert info["backends"]["mpi"] == dist.is_mpi_available()
    if count == 0:
        assert info["cuda"]["nccl"] is None


@pytest.mark.parametrize("section", ["launchers", "containers"])
def test_tools_match_path(info: dict, section: str) -> None:
    import shutil

    for name, tool in info[section].items():
        assert tool["path"] == shutil.which(name)
        assert tool["found"] == (shutil.which(name) is not None)


def test_tools_missing_from_path_are_reported_absent(tmp_path: Path) -> None:
    got = envcheck.collect(path=str(tmp_path))  # an empty directory: no tool at all
    for tool in [*got["launchers"].values(), *got["containers"].values()]:
        assert tool == {"found": False, "path": None, "version": None, "error": None}


def test_tool_versions_and_failures(tmp_path: Path) -> None:
    fake_tool(tmp_path, "mpirun", 'echo "mpirun (Open MPI) 4.1.4"\necho\necho "Report bugs"\n')
    fake_tool(tmp_path, "docker", 'echo "Docker version 28.2.2, build e6534b4"\n')
    fake_tool(tmp_path, "srun", 'echo "srun: fatal: no configuration" >&2\nexit 1\n')
    fake_tool(tmp_path, "podman", "sleep 30\n")  # hangs: reported, not waited for
    fake_tool(tmp_path, "enroot", 'echo "3.4.1"\n')
    (tmp_path / "apptainer").write_text("not executable")  # not a tool
    got = envcheck.collect(path=str(tmp_path), timeout=1.0)
    launchers, containers = got["launchers"], got["containers"]
    assert launchers["mpirun"] == {
        "found": True, "path": str(tmp_path / "mpirun"), "version": "4.1.4", "error": None,
    }
    assert containers["docker"]["version"] == "28.2.2"
    assert containers["enroot"]["version"] == "3.4.1"
    assert launchers["srun"]["found"] is True
    assert launchers["srun"]["version"] is None
    assert launchers["srun"]["error"] == "exit 1: srun: fatal: no configuration"
    assert containers["podman"]["found"] is True
    assert containers["podman"]["error"] == (
        f"'{tmp_path / 'podman'} --version' timed out after 1 s"
    )
    assert containers["apptainer"]["found"] is False
    assert launchers["torchrun"]["found"] is False


def test_torch_not_importable(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setitem(sys.modules, "torch", None)  # `import torch` raises ImportError
    got = envcheck.collect(path=str(tmp_path))
    assert got["torch"]["version"] is None
    assert got["torch"]["error"].startswith("ModuleNotFoundError: import of torch halted")
    assert got["cuda"] == {"available": False, "device_count": 0, "nccl": None, "error": None}
    assert got["backends"] == {"gloo": False, "nccl": False, "mpi": False, "ucc": False}
    assert plain_rows(got)["torch"].startswith("not importable (ModuleNotFoundError")


def test_two_fake_gpus(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """The GPU rows and the peer matrix, on a machine without GPUs."""
    props = types.SimpleNamespace(
        name="NVIDIA H200", total_memory=150 * 2**30, major=9, minor=0, multi_processor_count=132
    )
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda i: props)
    monkeypatch.setattr(torch.cuda, "can_device_access_peer", lambda i, j: (i, j) == (0, 1))
    monkeypatch.setattr(torch.cuda.nccl, "version", lambda: (2, 28, 9))
    got = envcheck.collect(path=str(tmp_path))
    assert got["cuda"] == {"available": True, "device_count": 2, "nccl": "2.28.9", "error": None}
    assert got["gpus"][1] == {
        "index": 1, "name": "NVIDIA H200", "memory_bytes": 150 * 2**30, "capability": "9.0",
        "multiprocessors": 132,
    }
    assert got["peer_access"] == [[None, True], [False, None]]
    table = plain_rows(got)
    assert table["GPU 1"] == "NVIDIA H200, 150.0 GiB, compute capability 9.0"
    assert table["peer access 0->"] == "0:- 1:yes"
    assert table["peer access 1->"] == "0:no 1:-"
    assert table["CUDA available"] == "yes (2 GPUs)"
    assert table["NCCL"] == "2.28.9"


def test_plain_table_has_every_row(info: dict) -> None:
    table = plain_rows(info)
    for label in ("python", "platform", "CUDA build", "cuDNN", "backends"):
        assert label in table
    assert table["torch"] == torch.__version__
    count = torch.cuda.device_count() if torch.cuda.is_available() else 0
    assert table["CUDA available"] == (  # one GPU reads "yes (1 GPU)"
        "no (0 GPUs)" if count == 0 else f"yes ({count} GPU{'s' if count > 1 else ''})"
    )
    assert "gloo yes" in table["backends"]
    for section in ("launchers", "containers"):
        for name, tool in info[section].items():
            assert (table[name] == "not found") == (not tool["found"])


def test_rich_table_has_every_row(info: dict) -> None:
    pytest.importorskip("rich")
    out = io.StringIO()
    envcheck.write_table(info, out, use_rich=True)
    text = out.getvalue()
    for label in ("python", "torch", "NCCL", "backends", *info["launchers"], *info["containers"]):
        assert f"│ {label} " in text
    assert torch.__version__ in text


def test_without_rich_falls_back_to_plain(info: dict, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "rich", None)
    monkeypatch.setitem(sys.modules, "rich.console", None)
    out = io.StringIO()
    envcheck.write_table(info, out)  # no use_rich: rich if importable
    assert out.getvalue().startswith("system\n  python ")


def test_command_json_with_a_bare_path(tmp_path: Path) -> None:
    """The real command, with a PATH that holds one fake launcher and nothing else."""
    fake_tool(tmp_path, "mpirun", 'echo "mpirun (Open MPI) 5.0.3"\n')
    env = {**os.environ, "PATH": str(tmp_path)}
    proc = subprocess.run(
        [WARM_PYTHON.executable(), "-m", "rankgate.cli", "env-check", "--json"],
        env=env, capture_output=True, text=True, timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    got = json.loads(proc.stdout)
    assert got["torch"]["version"] == torch.__version__
    assert got["launchers"]["mpirun"]["version"] == "5.0.3"
    assert not got["launchers"]["torchrun"]["found"]
    assert not any(tool["found"] for tool in got["containers"].values())


def test_torch_build_says_what_the_imported_torch_says() -> None:
    assert envcheck.torch_build() == {
        "version": torch.__version__,
        "cuda_build": torch.version.cuda,
        "hip_build": getattr(torch.version, "hip", None),
    }


def test_torch_build_reads_version_py_and_runs_nothing(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """A CUDA build's version.py, beside an __init__ that would fail if it ran."""
    package = tmp_path / "torch"
    package.mkdir()
    (package / "__init__.py").write_text("raise SystemExit('torch was imported')\n")
    (package / "version.py").write_text(textwrap.dedent("""\
        from typing import Optional
        __version__ = '2.11.0+cu128'
        debug = False
        cuda: Optional[str] = '12.8'
        hip: Optional[str] = None
    """))
    monkeypatch.delitem(sys.modules, "torch")
    monkeypatch.syspath_prepend(str(tmp_path))
    assert envcheck.torch_build() == {
        "version": "2.11.0+cu128", "cuda_build": "12.8", "hip_build": None,
    }  # fmt: skip
    (package / "version.py").write_text("cuda = None\n")  # no version: it does not say
    assert envcheck.torch_build() is None
    monkeypatch.setitem(sys.modules, "torch", None)  # torch not installed
    assert envcheck.torch_build() is None
