"""The collective ledger's default: unasked, ranks record on every backend, NCCL
included; RANKGATE_LEDGER=1 records everywhere, 0 nowhere, anything else is a usage error.

The NCCL case runs a world of one, so one GPU shows it; without a GPU it is skipped.
"""

from __future__ import annotations

import os
import textwrap

import pytest
import torch
from jobs import run_torchrun_pytest

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
    [(None, True, True), ("1", True, True), ("0", False, False)],
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
    "cpu:gloo,cuda:nccl", while a gloo-marked test's body gets a gloo group: both record
    unasked, as a pool of either backend would, and RANKGATE_LEDGER=0 turns both off."""
    monkeypatch.delenv(ledger.ENV, raising=False)
    (tmp_path / "test_suite.py").write_text(
        textwrap.dedent(
            """
            import os

            import pytest
            from rankgate.harness import ledger

            RECORDS = os.environ.get("RANKGATE_LEDGER") != "0"

            @pytest.mark.world(2)
            def test_a_default(rank):
                assert ledger.installed() is RECORDS

            @pytest.mark.world(2, backend="gloo")
            def test_b_gloo(rank):
                assert ledger.installed() is RECORDS

            @pytest.mark.world(2)
            def test_c_default_again(rank):
                assert ledger.installed() is RECORDS
            """
        )
    )
    (tmp_path / "pytest.ini").write_text("[pytest]\n")
    for setting in (None, "0"):
        env = {k: v for k, v in os.environ.items() if k != ledger.ENV}
        if setting is not None:
            env[ledger.ENV] = setting
        done = run_torchrun_pytest(
            tmp_path, "-p", "no:randomly", "-q", "test_suite.py", env=env, timeout=120
        )
        assert done.returncode == 0, f"{ledger.ENV}={setting}: " + done.stdout + done.stderr
        assert "3 passed" in done.stdout


def test_a_setting_other_than_0_or_1_is_a_usage_error(inner, monkeypatch):
    monkeypatch.setenv(ledger.ENV, "yes")
    result = inner("def test_x():\n    pass\n")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(
        ["ERROR: RANKGATE_LEDGER='yes': set 1 to record collectives on every backend, 0 on none"]
    )
