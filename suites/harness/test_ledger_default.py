"""The collective ledger's default: unasked, ranks record on gloo and not on NCCL;
RANKGATE_LEDGER=1 records everywhere, 0 nowhere, anything else is a usage error.

The NCCL case runs a world of one, so one GPU shows it; without a GPU it is skipped.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest
import torch

from rankgate.harness import ledger

pytestmark = pytest.mark.dist

POOL = """
import pytest
from rankgate.harness import ledger

@pytest.mark.world(2, backend="gloo")
def test_gloo(rank):
    assert ledger.installed() is {gloo}

@pytest.mark.world(1, backend="nccl")
def test_nccl(rank):
    assert ledger.installed() is {nccl}
"""


@pytest.mark.parametrize(
    ("setting", "gloo", "nccl"),
    [(None, True, False), ("1", True, True), ("0", False, False)],
    ids=["unasked", "asked", "turned-off"],
)
def test_pool_ranks_record_as_the_setting_and_their_backend_say(
    inner, monkeypatch, setting, gloo, nccl
):
    if setting is None:
        monkeypatch.delenv(ledger.ENV, raising=False)
    else:
        monkeypatch.setenv(ledger.ENV, setting)
    result = inner(POOL.format(gloo=gloo, nccl=nccl))
    if torch.cuda.is_available():
        result.assert_outcomes(passed=2)
    else:
        result.assert_outcomes(passed=1, skipped=1)


def test_in_place_each_test_gets_what_a_pool_of_its_backend_would(tmp_path, monkeypatch):
    """In place one process runs every test. Where each rank has a GPU its group is
    "cpu:gloo,cuda:nccl" (no ledger unasked), while a gloo-marked test's body gets a gloo
    group (a ledger), as a gloo pool would: the ledger is put on and off test by test."""
    monkeypatch.delenv(ledger.ENV, raising=False)
    (tmp_path / "test_suite.py").write_text(
        textwrap.dedent(
            """
            import pytest
            import torch
            from rankgate.harness import ledger
            from rankgate.harness.pool.gpus import visible_gpu_count
            from rankgate.harness.spec import resolve_backend, uses_gpus

            # the harness's auto rule for world(2): a GPU for every rank, or gloo
            EVERY_RANK_HAS_A_GPU = uses_gpus(resolve_backend("auto", 2, visible_gpu_count()))

            @pytest.mark.world(2)
            def test_a_default(rank):
                assert ledger.installed() is not EVERY_RANK_HAS_A_GPU

            @pytest.mark.world(2, backend="gloo")
            def test_b_gloo(rank):
                assert ledger.installed()

            @pytest.mark.world(2)
            def test_c_default_again(rank):
                assert ledger.installed() is not EVERY_RANK_HAS_A_GPU
            """
        )
    )
    (tmp_path / "pytest.ini").write_text("[pytest]\n")
    cmd = [
        *(sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2"),
        *("-m", "pytest", "-p", "no:cacheprovider", "-p", "no:randomly", "-q", "test_suite.py"),
    ]
    done = subprocess.run(cmd, cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "3 passed" in done.stdout


def test_a_setting_other_than_0_or_1_is_a_usage_error(inner, monkeypatch):
    monkeypatch.setenv(ledger.ENV, "yes")
    result = inner("def test_x():\n    pass\n")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(
        ["ERROR: RANKGATE_LEDGER='yes': set 1 to record collectives on every backend, 0 on none"]
    )
