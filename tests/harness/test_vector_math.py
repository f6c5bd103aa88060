"""torch's vector-math kernels picked before a rank computes (rankgate.harness.vector_math)."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest
import torch

from rankgate.harness.vector_math import VECTOR_MATH_OPS
from tests.warmstart import WARM_PYTHON

pytestmark = pytest.mark.unit


def test_the_ops_are_those_torch_hands_to_onemkl():
    header = Path(torch.__file__).parent / "include" / "ATen" / "cpu" / "vml.h"
    if not header.exists():
        pytest.skip(f"torch {torch.__version__} ships no {header}")
    ops = re.findall(r"^IMPLEMENT_VML_MKL\((\w+),", header.read_text(), re.MULTILINE)
    assert sorted(ops) == sorted(VECTOR_MATH_OPS)


PICK_THEN_FORK = """
import os
import torch
from rankgate.harness.vector_math import pick_kernels

before = len(os.listdir("/proc/self/task"))
pick_kernels()
after = len(os.listdir("/proc/self/task"))
pid = os.fork()
if pid == 0:
    torch.set_num_threads(2)
    torch.exp(torch.rand(1 << 16)).sum()
    os._exit(0)
_, status = os.waitpid(pid, 0)
print(before, after, os.waitstatus_to_exitcode(status))
"""


def test_picking_starts_no_thread_and_a_process_forked_after_computes():
    # A parallel region would start OpenMP's threads, which a fork does not carry: the
    # fork server's first rank would hang in its first parallel op.
    done = subprocess.run(
        [WARM_PYTHON.executable(), "-c", PICK_THEN_FORK],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    before, after, code = done.stdout.split()
    assert (after, code) == (before, "0"), done.stderr
