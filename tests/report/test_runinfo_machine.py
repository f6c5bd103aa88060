"""What a run records about its machine (run.json's ``machine``)."""

from __future__ import annotations

import json
import platform
import subprocess
import sys

import pytest
import torch

pytestmark = pytest.mark.unit

DESCRIBE = """
import json, sys
from rankgate.report import runinfo
machine = runinfo.describe_machine()
print(json.dumps({"torch_imported": "torch" in sys.modules, **machine}))
"""


def test_the_machine_is_described_and_torch_imported_only_where_it_could_see_a_gpu():
    """Each `nox -s STAGE` and `rankgate run` describes the machine before its pytest
    starts: a CPU-only torch is read from its version.py (importing it took 1.9 s on 2
    cores), a CUDA or ROCm build is imported to list the GPUs."""
    done = subprocess.run(
        [sys.executable, "-c", DESCRIBE], capture_output=True, text=True, timeout=120, check=True
    )  # a fresh interpreter: this one has torch imported
    machine = json.loads(done.stdout)
    could_see_gpus = bool(torch.version.cuda or getattr(torch.version, "hip", None))
    assert machine["torch_imported"] is could_see_gpus
    assert machine["torch"] == torch.__version__
    assert machine["cuda"] == torch.version.cuda
    assert len(machine["gpus"]) == (torch.cuda.device_count() if could_see_gpus else 0)
    assert machine["cpus"] >= 1 and machine["python"] == platform.python_version()
