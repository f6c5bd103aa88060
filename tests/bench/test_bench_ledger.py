"""``rankgate bench ledger``: the collective ledger's cost, host and in situ."""

from __future__ import annotations

import json
import os
import subprocess

import pytest

from tests.warmstart import WARM_PYTHON

pytestmark = pytest.mark.perf


def _bench_ledger(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    cmd = [WARM_PYTHON.executable(), "-m", "rankgate.cli", "bench", "ledger", *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=300, check=False, env=env)


def test_bench_ledger_reports_host_and_gloo_figures_for_every_call():
    done = _bench_ledger("--calls", "200", "--repeat-inner", "2", "--json")
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert set(result) == {
        "calls", "rounds", "host_us_per_call", "host_us_per_call_with_group",
        "digest_us_8_calls", "digest_us_512_calls",
        "gloo_us_per_all_reduce_off", "gloo_us_per_all_reduce_on",
        "gloo_us_per_pg_allreduce_off", "gloo_us_per_pg_allreduce_on",
    }  # fmt: skip
    assert 0 < result["digest_us_8_calls"] < result["digest_us_512_calls"]
    assert (result["calls"], result["rounds"]) == (200, 2)
    # a real all_reduce takes time either way; the host figure is a difference (may be ~0)
    assert result["gloo_us_per_all_reduce_off"] > 0
    assert result["gloo_us_per_all_reduce_on"] > 0
    assert result["gloo_us_per_pg_allreduce_off"] > 0
    assert result["gloo_us_per_pg_allreduce_on"] > 0
    assert "gloo all_reduce of 4 floats, world 1:" in done.stdout


def test_torchs_fake_group_gives_the_python_path_alone():
    done = _bench_ledger("--calls", "200", "--repeat-inner", "2", "--backends", "fake", "--json")
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    figures = {k: v for k, v in result.items() if k.startswith("fake_")}
    assert sorted(figures) == [
        "fake_us_per_all_reduce_off", "fake_us_per_all_reduce_on",
        "fake_us_per_pg_allreduce_off", "fake_us_per_pg_allreduce_on",
    ]  # fmt: skip
    assert all(v > 0 for v in figures.values()), figures
    assert not any(k.startswith("gloo_") for k in result)  # only the backends asked for
    assert "fake all_reduce of 4 floats, world 1:" in done.stdout


def test_an_unknown_backend_is_refused_by_name():
    done = _bench_ledger("--backends", "gloo,mpi")
    assert done.returncode == 2
    assert "'gloo,mpi': expected a comma-separated list of gloo, nccl, fake" in done.stderr


def test_nccl_without_a_gpu_says_so():
    hidden = {**os.environ, "CUDA_VISIBLE_DEVICES": ""}  # a GPU host too: none visible
    done = _bench_ledger("--calls", "100", "--repeat-inner", "1", "--backends", "nccl", env=hidden)
    assert done.returncode == 2  # a usage error, before any rank starts
    assert "--backends nccl needs a CUDA GPU; none is visible" in done.stderr
