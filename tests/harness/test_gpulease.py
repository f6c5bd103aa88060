"""GPU leases across processes, on the CPU: GPU ids are only names to the lease."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

from rankgate.harness.pool.gpulease import GpuLease, GpuLeaseTimeout

pytestmark = pytest.mark.unit

HOLDER = """
import sys, time
from pathlib import Path
from rankgate.harness.pool.gpulease import GpuLease
lease = GpuLease(sys.argv[2].split(","), Path(sys.argv[1]))
lease.acquire()
print("held", flush=True)
time.sleep(float(sys.argv[3]))
releasing = time.time()  # before: the waiter may get the GPU before a later clock read
lease.release()
print("released", releasing, flush=True)
"""


def _holder(directory: Path, gpus: str, hold_s: float) -> subprocess.Popen:
    proc = subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(directory), gpus, str(hold_s)],
        stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    assert proc.stdout.readline() == "held\n"
    return proc


def test_a_test_waits_for_a_gpu_another_process_holds_then_gets_it(tmp_path):
    holder = _holder(tmp_path, "0,1", hold_s=1.0)
    lease = GpuLease(["1"], tmp_path)
    lease.acquire()
    got_at = time.time()
    released_at = float(holder.communicate(timeout=30)[0].split()[1])
    lease.release()
    assert got_at >= released_at
    assert lease.waited_s > 0.5


def test_disjoint_gpus_do_not_wait(tmp_path):
    holder = _holder(tmp_path, "0,1", hold_s=30)
    try:
        lease = GpuLease(["2", "3"], tmp_path)
        lease.acquire()
        assert lease.held and lease.waited_s < 0.5
        lease.release()
        assert not lease.held
    finally:
        holder.kill()
        holder.wait()


def test_a_killed_holder_frees_its_gpus(tmp_path):
    holder = _holder(tmp_path, "GPU-aaaa,GPU-bbbb", hold_s=300)
    holder.kill()
    holder.wait()
    lease = GpuLease(["GPU-bbbb"], tmp_path)
    lease.acquire()
    assert lease.waited_s < 5
    lease.release()


def test_overlapping_leases_lock_in_one_order(tmp_path):
    assert GpuLease(["3", "1", "2", "1"], tmp_path).gpus == ("1", "2", "3")


def test_a_lease_is_not_taken_twice_by_one_holder(tmp_path):
    lease = GpuLease(["0"], tmp_path)
    lease.acquire()
    with pytest.raises(RuntimeError, match="GPUs 0 are already leased here"):
        lease.acquire()
    lease.release()


def test_a_bounded_wait_ends_naming_the_process_that_holds_the_gpu(tmp_path):
    holder = _holder(tmp_path, "0,1", hold_s=300)
    try:
        lease = GpuLease(["1"], tmp_path)
        started = time.monotonic()
        with pytest.raises(GpuLeaseTimeout) as caught:
            lease.acquire(timeout_s=0.5)
        assert 0.5 <= time.monotonic() - started < 5
        assert not lease.held
        waited, _, rest = str(caught.value).removeprefix("waited ").partition(" s for GPU 1 ")
        assert 0.5 <= float(waited) < 5, caught.value
        assert rest.startswith(
            f"(lease {tmp_path / 'gpu-1'}), the test's timeout: held by pid {holder.pid} "
            f"({sys.executable} -c import sys, time from pathlib import Path"
        ), caught.value
    finally:
        holder.kill()
        holder.wait()
    lease.acquire(timeout_s=5)  # the holder died: the GPU is free at once
    assert lease.held and lease.waited_s < 1
    lease.release()
