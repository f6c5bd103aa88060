"""The push kernel's own source, run on the CPU: partitioning, flags, double buffering, rounding.

push_emulator.cpp runs every GPU thread as a host thread and every rank's calls on a
stream thread of its own, so calls of different sizes and block counts overlap across
ranks as on GPUs. The only edits to the source are its three inline PTX statements,
swapped for the C++ atomics with the same ordering, and its one ``__shared__`` value.

Inputs are random floats (``spread_normal``) in float32 and bfloat16; every rank's
result must equal ``rank_order_sum`` (float32 additions in rank order, one rounding to
nearest even) and be the same bits on every rank. The controls at the end check that
these tests fail on a kernel that drops words, truncates instead of rounding, or adds
in an order that depends on the rank.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import torch

from rankgate.workloads.comm import push_kernel
from rankgate.workloads.comm.reference import rank_order_sum, spread_normal

pytestmark = pytest.mark.unit

HARNESS = Path(__file__).with_name("push_emulator.cpp")
MIN_GXX = 11  # <barrier> (C++20) arrived in libstdc++ 11
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
DTYPES = {"f32": torch.float32, "bf16": torch.bfloat16}


def host_source(source: str = push_kernel.SOURCE) -> str:
    for ptx, cpp in PTX_TO_CPP.items():
        assert source.count(ptx) == 1, f"the kernel source changed: {ptx!r} is gone"
        source = source.replace(ptx, cpp)
    assert "asm" not in source and "__shared__" not in source
    return source


def mutate(source: str, old: str, new: str, count: int = 1) -> str:
    """``source`` with ``old`` replaced by ``new``; fails if ``old`` is not there ``count`` times."""
    assert source.count(old) == count, f"the kernel source changed: {old!r}"
    return source.replace(old, new)


def gxx_problem(gxx: str | None = None) -> str | None:
    """Why the emulator cannot be built with ``gxx`` (default: g++ on PATH), or None."""
    gxx = gxx or shutil.which("g++")
    if gxx is None:
        return "needs g++ >= 11 (apt-get install g++)"
    try:
        version = subprocess.run(
            [gxx, "-dumpversion"], capture_output=True, text=True, timeout=30, check=True
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError) as exc:
        return f"needs g++ >= 11; `{gxx} -dumpversion` failed: {exc}"
    major = re.match(r"\d+", version)
    if major is None or int(major.group()) < MIN_GXX:
        return f"needs g++ >= 11 for C++20 <barrier>; {gxx} is {version or 'of unknown version'}"
    return None


def need_gxx() -> None:
    why = gxx_problem()
    if why is not None:
        if os.environ.get("CI"):
            pytest.fail(why)  # CI installs it (.ci/run): its absence there is a fault
        pytest.skip(why)


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


@pytest.fixture(scope="module")
def emulator(tmp_path_factory) -> Path:
    need_gxx()
    return build(tmp_path_factory.mktemp("push"), host_source())


def words(t: torch.Tensor) -> torch.Tensor:
    """A float32 or bfloat16 tensor's bits as 32-bit words (two bfloat16 to a word)."""
    return t.contiguous().view(torch.int32)


def run(binary: Path, world: int, dtype: str, rounds: int, *nwords: int, seed: int = 0) -> str:
    """Run the emulator on random inputs; "ok", or what is wrong with the first bad call."""
    tdt = DTYPES[dtype]
    per_word = 4 // tdt.itemsize
    calls = [nwords[i % len(nwords)] for i in range(rounds * len(nwords))]
    inputs = [
        [
            spread_normal(n * per_word, tdt, seed=seed * 1_000_003 + call * 64 + r)
            for r in range(world)
        ]
        for call, n in enumerate(calls)
    ]
    folder = binary.parent
    (folder / "in.bin").write_bytes(
        torch.cat([words(t) for ranks in inputs for t in ranks]).numpy().tobytes()
    )
    proc = subprocess.run(
        # threads per block: few, to keep the host busy, but one per rank at least, as
        # the kernel's flag exchange assumes (THREADS >= MAX_WORLD on GPUs)
        [str(binary), str(world), str(max(4, world)), dtype, str(rounds),
         str(folder / "in.bin"), str(folder / "out.bin"), *map(str, nwords)],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    if proc.returncode != 0 or proc.stdout.strip() != "done":
        return f"emulator failed ({proc.returncode}): {(proc.stdout + proc.stderr).strip()}"
    out = torch.frombuffer(bytearray((folder / "out.bin").read_bytes()), dtype=torch.int32)
    at = 0
    for call, (n, ranks) in enumerate(zip(calls, inputs)):
        got = [out[at + r * n : at + (r + 1) * n] for r in range(world)]
        at += world * n
        problem = check_call(got, ranks, call, n)
        if problem:
            return problem
    return "ok"


def check_call(got: list[torch.Tensor], inputs: list[torch.Tensor], call: int, n: int) -> str:
    """Same bits on every rank first, then the reference's bits; "" when both hold."""
    for r in range(1, len(got)):
        if not torch.equal(got[r], got[0]):
            w = int((got[r] != got[0]).nonzero()[0])
            return (f"ranks differ: call {call} ({n} words) word {w}: rank {r} "
                    f"{int(got[r][w]) & 0xFFFFFFFF:08x}, rank 0 {int(got[0][w]) & 0xFFFFFFFF:08x}")  # fmt: skip
    want = words(rank_order_sum(inputs))
    if not torch.equal(got[0], want):
        bad = (got[0] != want).nonzero()
        w = int(bad[0])
        return (f"wrong: call {call} ({n} words) word {w}: {int(got[0][w]) & 0xFFFFFFFF:08x}, "
                f"want {int(want[w]) & 0xFFFFFFFF:08x} ({len(bad)} of {n} words wrong)")  # fmt: skip
    return ""


# Words of 4 bytes: one block serves 2048. Odd sizes leave 1-3 tail words; 25603 words
# take 13 blocks; mixing them makes one call's blocks overlap another call's.
MIXED = (3072, 4096, 1025, 25603, 2048, 3, 1)


def test_random_floats_mixed_sizes_and_block_counts_fp32(emulator):
    assert run(emulator, 2, "f32", 20, *MIXED) == "ok"


def test_random_floats_mixed_sizes_bf16(emulator):
    assert run(emulator, 2, "bf16", 20, 1, 7, 2049, 4096, 6000) == "ok"


@pytest.mark.parametrize("dtype", ["f32", "bf16"])
@pytest.mark.parametrize("world", [3, 4, 8])
def test_more_ranks_same_bits_everywhere(emulator, world, dtype):
    assert run(emulator, world, dtype, 3, 1, 2050, 5000, seed=world) == "ok"


# --- controls: kernels with a planted fault fail the checks above, as they must -------


def test_the_check_catches_a_kernel_that_drops_its_tail(tmp_path):
    need_gxx()
    tail_push = "for (int w = tail0 + t; w < w1; w += nt) ((unsigned*)slot)[w] = in[w];"
    broken = mutate(host_source(), tail_push, "")
    out = run(build(tmp_path, broken), 2, "f32", 1, 3)
    # each rank adds the empty slot to its own input: no two ranks agree
    assert out.startswith("ranks differ: call 0 (3 words) word 0: rank 1 "), out


def test_the_check_catches_truncation_to_bf16(tmp_path):
    """to_bf16 without its rounding increment keeps the upper 16 bits, as truncation does."""
    need_gxx()
    broken = mutate(host_source(), "u += 0x7FFFu + ((u >> 16) & 1u);", "")
    out = run(build(tmp_path, broken), 2, "bf16", 1, 4096)
    assert out.startswith("wrong: call 0 (4096 words) word "), out


@pytest.fixture(scope="module")
def rank_order_emulator(tmp_path_factory) -> Path:
    """Each rank adds starting from its own input: a correct sum, but not the same bits."""
    need_gxx()
    source = mutate(host_source(), "for (int s = 0; s < world; ++s) {",
                    "for (int i = 0, s = rank; i < world; ++i, s = (s + 1) % world) {", count=2)  # fmt: skip
    source = mutate(source, ", s == 0);", ", i == 0);", count=5)
    return build(tmp_path_factory.mktemp("push-rank-order"), source)


@pytest.mark.parametrize("dtype", ["f32", "bf16"])
def test_the_check_catches_a_rank_dependent_summation_order(rank_order_emulator, dtype):
    out = run(rank_order_emulator, 3, dtype, 1, 4096)
    assert out.startswith("ranks differ: call 0 (4096 words) word "), out


@pytest.mark.parametrize("gxx", ["old", "missing"])
def test_old_or_missing_gxx_is_a_skip_with_the_reason(tmp_path, monkeypatch, gxx):
    """g++ 10 (no <barrier>) or no g++ on PATH: the emulated tests skip, naming the need."""
    if gxx == "old":
        fake = tmp_path / "g++"
        fake.write_text("#!/bin/sh\necho 10.2.1\n")  # what g++ 10 answers to -dumpversion
        fake.chmod(0o755)
        reason = f"needs g++ >= 11 for C++20 <barrier>; {fake} is 10.2.1"
    else:
        reason = "needs g++ >= 11 (apt-get install g++)"
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.delenv("CI", raising=False)
    with pytest.raises(pytest.skip.Exception) as skipped:
        need_gxx()  # what the emulator fixtures call before compiling
    assert str(skipped.value) == reason
    monkeypatch.setenv("CI", "true")  # CI installs g++ >= 11: there the same is a failure
    with pytest.raises(pytest.fail.Exception) as failed:
        need_gxx()
    assert str(failed.value) == reason
