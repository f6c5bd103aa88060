"""Machine probes: each missing need comes with a reason that names the fix."""

from __future__ import annotations

import pytest

from rankgate.pipeline import probe

pytestmark = pytest.mark.unit


def test_slurm_absent_names_the_tools_and_the_package(monkeypatch):
    monkeypatch.setattr("shutil.which", lambda name: None if name == "sbatch" else name)
    assert probe.Machine().missing("slurm") == (
        "needs SLURM: sbatch not on PATH (apt-get install slurm-wlm for a local cluster)"
    )


def test_container_engine_is_the_first_that_answers(monkeypatch):
    answers = {"podman": (127, "podman not found on PATH"), "docker": (0, "ok")}
    monkeypatch.setattr(probe.command, "capture", lambda argv, timeout: answers[argv[0]])
    monkeypatch.delenv("RANKGATE_CONTAINER_ENGINE", raising=False)
    machine = probe.Machine()
    assert machine.missing("container-engine") is None
    assert machine.container_engine == ("docker", "")


def test_no_engine_reason_quotes_each_engine(monkeypatch):
    answers = {
        "podman": (127, "podman not found on PATH"),
        "docker": (1, "Client: ...\nCannot connect to the Docker daemon"),
    }
    monkeypatch.setattr(probe.command, "capture", lambda argv, timeout: answers[argv[0]])
    monkeypatch.delenv("RANKGATE_CONTAINER_ENGINE", raising=False)
    assert probe.Machine().missing("container-engine") == (
        "needs a container engine: podman not on PATH; "
        "docker: Cannot connect to the Docker daemon (apt-get install podman runc)"
    )


def test_engine_can_be_chosen(monkeypatch):
    seen = []
    monkeypatch.setattr(
        probe.command, "capture", lambda argv, timeout: seen.append(argv) or (0, "")
    )
    monkeypatch.setenv("RANKGATE_CONTAINER_ENGINE", "docker")
    assert probe.Machine().container_engine == ("docker", "")
    assert seen == [["docker", "info"]]


def test_gpus_on_a_cpu_build_say_so():
    count, why = probe.Machine().gpus
    try:
        import torch
    except ImportError:
        pytest.skip("torch is not installed")
    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    assert count == 0 and "sees no CUDA device" in why


def test_unknown_need_is_an_error():
    with pytest.raises(ValueError, match="unknown need 'tpu'"):
        probe.Machine().missing("tpu")


def test_module_missing():
    assert probe.module_missing("rankgate.pipeline.stages") is None
    assert probe.module_missing("rankgate.no_such_module") == (
        "rankgate.no_such_module is not in this rankgate (module missing)"
    )
