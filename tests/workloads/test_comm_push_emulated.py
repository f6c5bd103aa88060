"""The push kernel's own source, run on the CPU: its partitioning, flags and double buffering.

push_emulator.cpp runs every GPU thread as a host thread and every rank's calls on a
stream thread of its own, so calls of different sizes and block counts overlap across
ranks as on GPUs. The only edits to the source are its three inline PTX statements,
swapped for the C++ atomics with the same ordering, and its one ``__shared__`` value.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from rankgate.workloads.comm import push_kernel

pytestmark = pytest.mark.unit

HARNESS = Path(__file__).with_name("push_emulator.cpp")
PTX_TO_CPP = {
    'asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));': "t = host_now_ns();",
    'asm volatile("st.release.sys.global.u32 [%0], %1;" :: "l"(flag), "r"(e) : "memory");': (
        "__atomic_store_n(flag, e, __ATOMIC_RELEASE);"
    ),
    'asm volatile("ld.acquire.sys.global.u32 %0, [%1];" : "=r"(seen) : "l"(flags + t) : "memory");': (
        "std::this_thread::yield(); seen = __atomic_load_n(flags + t, __ATOMIC_ACQUIRE);"
    ),
    "__shared__ unsigned epoch_s;": "unsigned& epoch_s = block_shared_epoch();",
}


def host_source(source: str = push_kernel.SOURCE) -> str:
    for ptx, cpp in PTX_TO_CPP.items():
        assert source.count(ptx) == 1, f"the kernel source changed: {ptx!r} is gone"
        source = source.replace(ptx, cpp)
    assert "asm" not in source and "__shared__" not in source
    return source


def build(folder: Path, source: str) -> Path:
    (folder / "kernel.inc").write_text(source)
    binary = folder / "push_emulator"
    subprocess.run(
        ["g++", "-std=c++20", "-O1", "-pthread", f"-I{folder}", str(HARNESS), "-o", str(binary)],
        check=True,
        capture_output=True,
        text=True,
    )
    return binary


def need_gxx() -> None:
    if shutil.which("g++") is None:
        why = "needs g++ (apt-get install g++)"
        if os.environ.get("CI"):
            pytest.fail(why)  # CI installs it (.ci/run): its absence there is a fault
        pytest.skip(why)


@pytest.fixture(scope="module")
def emulator(tmp_path_factory) -> Path:
    need_gxx()
    return build(tmp_path_factory.mktemp("push"), host_source())


def run(binary: Path, world: int, dtype: str, rounds: int, *nwords: int) -> str:
    proc = subprocess.run(
        # threads per block: few, to keep the host busy, but one per rank at least, as
        # the kernel's flag exchange assumes (THREADS >= MAX_WORLD on GPUs)
        [str(binary), str(world), str(max(4, world)), dtype, str(rounds), *map(str, nwords)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    return (proc.stdout + proc.stderr).strip()


# Words of 4 bytes: one block serves 2048. Odd sizes leave 1-3 tail words; 25603 words
# take 13 blocks; mixing them makes one call's blocks overlap another call's.
MIXED = (3072, 4096, 1025, 25603, 2048, 3, 1)


def test_mixed_sizes_and_block_counts_are_exact_fp32(emulator):
    assert run(emulator, 2, "f32", 30, *MIXED) == "ok"


def test_mixed_sizes_are_exact_bf16(emulator):
    assert run(emulator, 2, "bf16", 20, 1, 7, 2049, 4096, 6000) == "ok"


@pytest.mark.parametrize("world", [3, 4, 8])
def test_more_ranks(emulator, world):
    assert run(emulator, world, "f32", 5, 1, 2050, 5000) == "ok"


def test_the_check_catches_a_kernel_that_drops_its_tail(tmp_path):
    """A control: the same run on a kernel that never pushes the tail words fails."""
    need_gxx()
    tail_push = "for (int w = tail0 + t; w < w1; w += nt) ((unsigned*)slot)[w] = in[w];"
    broken = host_source().replace(tail_push, "")
    assert broken != host_source()
    out = run(build(tmp_path, broken), 2, "f32", 1, 3)
    assert out.startswith("wrong: rank 0 call 0 (3 words) word 0:"), out
