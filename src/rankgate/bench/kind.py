"""The machine kind results and baselines are filed under (benchmarks/<results|baselines>/<kind>/).

``cpu`` without CUDA GPUs; ``nvidia-<model>-x<count>`` with them (``nvidia-h200-x2`` for
two H200s), the names the project's GPU results already use. ``RANKGATE_MACHINE_KIND``
overrides the detection (a site's own name for its nodes).
"""

from __future__ import annotations

import os
import platform
import re

from rankgate.harness.pool.gpus import gpu_driver_present


def machine_kind() -> str:
    """This machine's kind (see the module docstring)."""
    if kind := os.environ.get("RANKGATE_MACHINE_KIND"):
        return kind
    gpu, count = _gpus()
    if not count:
        return "cpu"
    model = re.sub(r"^nvidia\s+", "", gpu.lower()).split()[0] if gpu.strip() else "gpu"
    return f"nvidia-{re.sub(r'[^a-z0-9]+', '-', model)}-x{count}"


def machine_description() -> dict:
    """What a baseline records about the machine: kind, CPUs, CPU model, GPUs."""
    gpu, count = _gpus()
    described = {"kind": machine_kind(), "cpus": os.cpu_count(), "cpu": _cpu_model()}
    if count:
        described.update(gpu=gpu, gpus=count)
    return described


def _gpus() -> tuple[str, int]:
    # Without a GPU driver torch sees none: no import of torch (1.4 CPU-s) to learn it.
    if not gpu_driver_present():
        return "", 0
    try:
        import torch
    except ImportError:
        return "", 0
    if not torch.cuda.is_available():
        return "", 0
    return torch.cuda.get_device_name(0), torch.cuda.device_count()


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()
