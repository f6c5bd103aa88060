"""The push kernel's CUDA source compiles, and its launcher refuses what it cannot serve.

Compiling needs NVRTC only, not a GPU (the dev extra installs it); running the kernel
is the GPU suite's job (suites/comm/test_comm_p2p.py).
"""

from __future__ import annotations

import ctypes
import pathlib

import pytest
import torch

from rankgate.workloads.comm import push_kernel

pytestmark = pytest.mark.unit


def _nvrtc() -> ctypes.CDLL:
    try:
        import nvidia.cuda_nvrtc as package
    except ImportError:
        pytest.skip("NVRTC is not installed (pip install nvidia-cuda-nvrtc-cu12)")
    libs = sorted(pathlib.Path(next(iter(package.__path__)), "lib").glob("libnvrtc.so*"))
    return ctypes.CDLL(str(libs[0]))


def compile_ptx(source: str, arch: str) -> tuple[int, str, str]:
    """(NVRTC result, compile log, PTX) for ``source`` on virtual architecture ``arch``."""
    lib = _nvrtc()
    prog = ctypes.c_void_p()
    assert (
        lib.nvrtcCreateProgram(ctypes.byref(prog), source.encode(), b"push.cu", 0, None, None) == 0
    )
    options = (ctypes.c_char_p * 1)(f"--gpu-architecture={arch}".encode())
    result = lib.nvrtcCompileProgram(prog, 1, options)
    size = ctypes.c_size_t()
    lib.nvrtcGetProgramLogSize(prog, ctypes.byref(size))
    log = ctypes.create_string_buffer(size.value)
    lib.nvrtcGetProgramLog(prog, log)
    ptx = ""
    if result == 0:
        lib.nvrtcGetPTXSize(prog, ctypes.byref(size))
        text = ctypes.create_string_buffer(size.value)
        lib.nvrtcGetPTX(prog, text)
        ptx = text.value.decode()
    lib.nvrtcDestroyProgram(ctypes.byref(prog))
    return result, log.value.decode(), ptx


@pytest.mark.parametrize("arch", ["compute_80", "compute_90"])
def test_source_compiles_with_its_synchronisation(arch):
    result, log, ptx = compile_ptx(push_kernel.SOURCE, arch)
    assert (result, log.strip()) == (0, "")
    for name in push_kernel.DTYPE_KERNELS.values():
        assert f".entry {name}(" in ptx
    # the flag protocol: a system-scope release store and acquire load per peer
    assert "st.release.sys.global.u32" in ptx
    assert "ld.acquire.sys.global.u32" in ptx
    assert "trap;" in ptx  # a peer that never arrives ends in an error, not a hang


def test_a_broken_source_is_reported_with_the_compiler_log():
    broken = push_kernel.SOURCE.replace("__syncthreads();", "__syncthreads()", 1)
    result, log, _ = compile_ptx(broken, "compute_90")
    assert result != 0
    assert "error" in log


def test_buffer_holds_header_and_two_halves_of_slots():
    assert push_kernel.buffer_bytes(2, 64 << 10) == 4096 + 2 * 2 * (64 << 10)
    assert push_kernel.MAX_SLOT_BYTES == push_kernel.BLOCK_BYTES * push_kernel.MAX_BLOCKS


@pytest.mark.parametrize(
    ("world", "slot", "message"),
    [
        (1, 1024, "push all_reduce serves 2..8 ranks, not 1"),
        (9, 1024, "push all_reduce serves 2..8 ranks, not 9"),
        (2, 1000, "slot_bytes must be a positive multiple of 16, at most 262144"),
        (2, 1 << 20, "slot_bytes must be a positive multiple of 16, at most 262144"),
    ],
)
def test_launcher_refuses_what_the_kernel_cannot_serve(world, slot, message):
    buffer = torch.zeros(push_kernel.HEADER_BYTES, dtype=torch.uint8)
    with pytest.raises(ValueError) as info:
        push_kernel.PushAllReduce(
            buffer=buffer, peer_ptrs=[0] * world, rank=0, slot_bytes=slot, timeout_s=1
        )
    assert str(info.value) == message
