"""GPU leases across processes, on the CPU: GPU ids are only names to the lease."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from rankgate.harness.pool.gpulease import GpuHeldTooLong, GpuLease

pytestmark = pytest.mark.unit

HOLDER = """
import sys, time
from pathlib import Path
from rankgate.harness.pool.gpulease import GpuLease
lease = GpuLease(sys.argv[2].split(","), Path(sys.argv[1]))
allowed = float(sys.argv[4]) if len(sys.argv) > 4 else None
lease.acquire(holds_for_s=allowed, what="test_holder.py::test_holds")
print("held", flush=True)
time.sleep(float(sys.argv[3]))
releasing = time.time()  # before: the waiter may get the GPU before a later clock read
lease.release()
print("released", releasing, flush=True)
"""


def _holder(
    directory: Path, gpus: str, hold_s: float, allowed_s: float | None = None
) -> subprocess.Popen:
    allowed = [] if allowed_s is None else [str(allowed_s)]
    proc = subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(directory), gpus, str(hold_s), *allowed],
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


def test_a_holder_within_its_time_is_waited_for_however_long(tmp_path):
    holder = _holder(tmp_path, "0", hold_s=1.5, allowed_s=60)
    lease = GpuLease(["0"], tmp_path)
    lease.acquire(holds_for_s=60, what="the waiter")
    holder.communicate(timeout=30)
    assert lease.waited_s > 1
    note = json.loads((tmp_path / "gpu-0.holder").read_text())
    assert note["pid"] == os.getpid() and note["what"] == "the waiter"
    lease.release()
    assert not (tmp_path / "gpu-0.holder").exists()  # the note goes with the lock


def test_a_holder_past_its_time_ends_the_wait_in_an_error_naming_it(tmp_path):
    holder = _holder(tmp_path, "0,1", hold_s=300, allowed_s=0.5)
    try:
        lease = GpuLease(["1"], tmp_path)
        started = time.monotonic()
        with pytest.raises(GpuHeldTooLong) as caught:
            lease.acquire(holds_for_s=60)
        assert time.monotonic() - started < 5
        assert not lease.held
        message = str(caught.value)
        assert message.startswith(
            f"GPU 1 is held by pid {holder.pid} ({sys.executable} -c import sys, time "
        ), message
        assert ", which took it for test_holder.py::test_holds and is " in message
        assert message.endswith(
            " s past the 0 s it was given: it is stuck, or a stopped run left it behind; end "
            f"it to free the GPU (lease {tmp_path / 'gpu-1'})"
        ), message
    finally:
        holder.kill()
        holder.wait()
    lease.acquire(holds_for_s=60)  # the holder died: the GPU is free at once
    assert lease.waited_s < 1
    lease.release()


def test_a_note_left_by_a_dead_holder_stops_no_one(tmp_path):
    holder = _holder(tmp_path, "0", hold_s=300, allowed_s=0.1)
    holder.kill()  # its note stays, past its time
    holder.wait()
    assert (tmp_path / "gpu-0.holder").exists()
    other = GpuLease(["0"], tmp_path)
    other.acquire()  # a holder without a note (no limit), which the old note does not name
    try:
        waiting = subprocess.Popen(
            [sys.executable, "-c", HOLDER, str(tmp_path), "0", "0", "60"],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )  # fmt: skip
        time.sleep(1.0)
        assert waiting.poll() is None, waiting.communicate()  # waits, not stopped by the note
    finally:
        other.release()
    out, err = waiting.communicate(timeout=30)
    assert out.startswith("held\n") and waiting.returncode == 0, err


def test_the_holders_note_sits_beside_each_lock_while_held_and_goes_with_it(tmp_path):
    lease = GpuLease(["GPU-aa:bb", "0"], tmp_path)
    lease.acquire(holds_for_s=60, what="test_x.py::test_y[3]")
    notes = {p.name: json.loads(p.read_text()) for p in tmp_path.glob("*.holder")}
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "gpu-0", "gpu-0.holder", "gpu-GPU-aa_bb", "gpu-GPU-aa_bb.holder",
    ]  # fmt: skip
    for note in notes.values():
        assert (note["pid"], note["what"], note["allowed_s"]) == (
            os.getpid(), "test_x.py::test_y[3]", 60,
        )  # fmt: skip
        assert 0 < note["until"] - time.time() <= 60
    lease.release()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["gpu-0", "gpu-GPU-aa_bb"]
    lease.acquire()  # again, in the same directory: no note without an allowance
    assert not list(tmp_path.glob("*.holder"))
    lease.release()
