"""The ``push`` all-reduce: one synchronisation per call, for the smallest payloads.

torch's one-shot kernel synchronises twice per call: once before reading the peers'
buffers and once more so no rank overwrites its buffer while a peer still reads it.
This kernel needs one:

1. every rank writes (pushes) its payload into its own slot of every peer's buffer,
   over NVLink stores, which do not wait for a reply;
2. then raises one flag per peer, "epoch e is in your buffer" (a release store);
3. waits until every peer's flag for epoch e has arrived in its own buffer;
4. sums its own input and the slots in rank order, so every rank gets the same bits.

The second barrier is replaced by double buffering: epoch e uses half ``e % 2`` of
the slots. A rank reaches epoch e + 2 only after every peer raised its flag for e + 1,
which each did only after finishing its reads of epoch e (calls on one stream run in
order), so a half is never overwritten while it is read. Epoch counters and flags live
in device memory, so the kernel can be captured in a CUDA graph and replayed.

Block b always handles bytes [b * BLOCK_BYTES, (b + 1) * BLOCK_BYTES) of the payload,
with its own flags and epoch counter: the same bytes at every payload size, so a slot
region is only ever written and read by block b of each rank. A peer that never
arrives stops the kernel with a trap after ``timeout_s`` (an error, never a silent
hang); the CUDA context is unusable after that, as after any device fault.

Compiled at first use with NVRTC (``torch.cuda._compile_kernel``); no NVLink
multicast is involved.
"""

from __future__ import annotations

import ctypes
import functools

import torch

MAX_WORLD = 8
MAX_BLOCKS = 32
HEADER_BYTES = 4096
"""Flags (MAX_BLOCKS x MAX_WORLD) then counters (MAX_BLOCKS), uint32, at the buffer's start."""
THREADS = 512
BLOCK_BYTES = 8 << 10
"""Payload bytes per block (the source's BLOCK_BYTES): a 64 KiB all-reduce runs on 8."""
MAX_SLOT_BYTES = BLOCK_BYTES * MAX_BLOCKS
assert THREADS >= MAX_WORLD, "thread t of each block exchanges the flags with rank t"

DTYPE_KERNELS = {torch.float32: "push_all_reduce_f32", torch.bfloat16: "push_all_reduce_bf16"}

_DEFINES = "".join(
    f"#define {name} {value}\n"
    for name, value in (("HEADER_BYTES", HEADER_BYTES), ("MAX_WORLD", MAX_WORLD),
                        ("MAX_BLOCKS", MAX_BLOCKS), ("BLOCK_BYTES", BLOCK_BYTES))
)  # fmt: skip
SOURCE = _DEFINES + r"""

__device__ __forceinline__ unsigned long long now_ns() {
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

__device__ __forceinline__ float bf16_lo(unsigned w) { return __uint_as_float(w << 16); }
__device__ __forceinline__ float bf16_hi(unsigned w) { return __uint_as_float(w & 0xFFFF0000u); }
__device__ __forceinline__ unsigned to_bf16(float f) {   // round to nearest even, as torch
  unsigned u = __float_as_uint(f);
  if ((u & 0x7FFFFFFFu) > 0x7F800000u) return 0x7FC0u;
  u += 0x7FFFu + ((u >> 16) & 1u);
  return u >> 16;
}

// One 32-bit word holds one float or two bfloat16; acc holds them as floats.
template <bool BF> __device__ __forceinline__ void add_word(float* acc, unsigned w, bool first) {
  if (BF) {
    float lo = bf16_lo(w), hi = bf16_hi(w);
    acc[0] = first ? lo : acc[0] + lo;
    acc[1] = first ? hi : acc[1] + hi;
  } else {
    float x = __uint_as_float(w);
    acc[0] = first ? x : acc[0] + x;
  }
}
template <bool BF> __device__ __forceinline__ unsigned word_of(const float* acc) {
  return BF ? (to_bf16(acc[0]) | (to_bf16(acc[1]) << 16)) : __float_as_uint(acc[0]);
}

template <bool BF>
__device__ void push_all_reduce(const unsigned* in, unsigned* out,
                                const unsigned long long* bufs, int rank, int world,
                                int nwords, int slot_bytes, int timeout_ms) {
  const int b = blockIdx.x, t = threadIdx.x, nt = blockDim.x;
  char* mine = (char*)bufs[rank];
  unsigned* flags = (unsigned*)mine + b * MAX_WORLD;   // flags[src] of this block
  unsigned* counter = (unsigned*)mine + MAX_BLOCKS * MAX_WORLD + b;
  __shared__ unsigned epoch_s;
  if (t == 0) epoch_s = *counter + 1;
  __syncthreads();
  const unsigned e = epoch_s;
  const size_t half = e & 1u;

  // This block's share is always bytes [b * BLOCK_BYTES, (b + 1) * BLOCK_BYTES) of the
  // payload, whatever its size, so a slot region is only ever touched by block b of
  // each rank (the double-buffering argument above holds per block): 16-byte vectors
  // [v0, v1), then the 0-3 words after the last whole vector (last block only).
  const int w0 = b * (BLOCK_BYTES / 4), w1 = min(w0 + BLOCK_BYTES / 4, nwords);
  const int v0 = w0 >> 2, v1 = w1 >> 2;
  const int tail0 = v1 * 4;  // == w1 except in the last block
  const uint4* in_v = (const uint4*)in;

  // 1. push into my slot of every peer's buffer
  for (int p = 0; p < world; ++p) {
    if (p == rank) continue;
    char* slot = (char*)bufs[p] + HEADER_BYTES + (half * world + rank) * (size_t)slot_bytes;
    for (int v = v0 + t; v < v1; v += nt) ((uint4*)slot)[v] = in_v[v];
    for (int w = tail0 + t; w < w1; w += nt) ((unsigned*)slot)[w] = in[w];
  }
  __syncthreads();
  // 2. one flag per peer, released after the whole block's stores
  if (t < world && t != rank) {
    unsigned* flag = (unsigned*)bufs[t] + b * MAX_WORLD + rank;
    __threadfence_system();
    asm volatile("st.release.sys.global.u32 [%0], %1;" :: "l"(flag), "r"(e) : "memory");
  }
  // 3. wait for every peer's flag of this epoch (a later one also means this one arrived)
  if (t < world && t != rank) {
    const unsigned long long start = now_ns();
    unsigned seen;
    while (true) {
      asm volatile("ld.acquire.sys.global.u32 %0, [%1];" : "=r"(seen) : "l"(flags + t) : "memory");
      if ((int)(seen - e) >= 0) break;
      if (now_ns() - start > (unsigned long long)timeout_ms * 1000000ull) {
        printf("rankgate push all_reduce: rank %d block %d waited %d ms for rank %d "
               "(epoch %u, seen %u)\n", rank, b, timeout_ms, t, e, seen);
        __trap();
      }
    }
  }
  __syncthreads();
  // 4. sum in rank order: the same additions, so the same bits, on every rank
  const char* slots = mine + HEADER_BYTES + half * world * (size_t)slot_bytes;
  for (int v = v0 + t; v < v1; v += nt) {
    float acc[4][2];
    for (int s = 0; s < world; ++s) {
      uint4 x = s == rank ? in_v[v] : __ldcg((const uint4*)(slots + s * (size_t)slot_bytes) + v);
      add_word<BF>(acc[0], x.x, s == 0);
      add_word<BF>(acc[1], x.y, s == 0);
      add_word<BF>(acc[2], x.z, s == 0);
      add_word<BF>(acc[3], x.w, s == 0);
    }
    ((uint4*)out)[v] = make_uint4(word_of<BF>(acc[0]), word_of<BF>(acc[1]),
                                  word_of<BF>(acc[2]), word_of<BF>(acc[3]));
  }
  for (int w = tail0 + t; w < w1; w += nt) {
    float acc[2];
    for (int s = 0; s < world; ++s) {
      const unsigned* slot = (const unsigned*)(slots + s * (size_t)slot_bytes);
      unsigned x = s == rank ? in[w] : __ldcg(slot + w);
      add_word<BF>(acc, x, s == 0);
    }
    out[w] = word_of<BF>(acc);
  }
  __syncthreads();
  if (t == 0) *counter = e;
}

extern "C" __global__ void push_all_reduce_f32(const unsigned* in, unsigned* out,
    const unsigned long long* bufs, int rank, int world, int nwords, int slot_bytes,
    int timeout_ms) {
  push_all_reduce<false>(in, out, bufs, rank, world, nwords, slot_bytes, timeout_ms);
}
extern "C" __global__ void push_all_reduce_bf16(const unsigned* in, unsigned* out,
    const unsigned long long* bufs, int rank, int world, int nwords, int slot_bytes,
    int timeout_ms) {
  push_all_reduce<true>(in, out, bufs, rank, world, nwords, slot_bytes, timeout_ms);
}
"""


@functools.cache
def _kernel(name: str, device_index: int):
    with torch.cuda.device(device_index):
        return torch.cuda._compile_kernel(SOURCE, name)


def compile_all(device: torch.device) -> None:
    """Compile (or fetch) the kernel for every dtype; raises where NVRTC cannot."""
    for name in DTYPE_KERNELS.values():
        _kernel(name, device.index)


@functools.cache
def _libcuda():
    utils = torch.cuda._utils  # the loader torch's own compiled kernels launch through
    loader = getattr(utils, "_get_gpu_runtime_library", None) or utils._get_cuda_library
    return loader()


def buffer_bytes(world: int, slot_bytes: int) -> int:
    """Symmetric buffer size for ``world`` ranks and payloads up to ``slot_bytes``."""
    return HEADER_BYTES + 2 * world * slot_bytes


class PushAllReduce:
    """Launches the push kernel over one symmetric buffer mapped by every rank.

    ``buffer`` is this rank's symmetric buffer of ``buffer_bytes(world, slot_bytes)``
    and ``peer_ptrs`` every rank's address of it, in rank order. ``reset`` must run
    on every rank, followed by a barrier, before the first call.
    """

    def __init__(self, *, buffer: torch.Tensor, peer_ptrs: list[int], rank: int,
                 slot_bytes: int, timeout_s: float) -> None:  # fmt: skip
        world = len(peer_ptrs)
        if not 2 <= world <= MAX_WORLD:
            raise ValueError(f"push all_reduce serves 2..{MAX_WORLD} ranks, not {world}")
        if slot_bytes <= 0 or slot_bytes % 16 or slot_bytes > MAX_SLOT_BYTES:
            raise ValueError(
                f"slot_bytes must be a positive multiple of 16, at most {MAX_SLOT_BYTES}"
            )
        self.buffer, self.rank, self.world, self.slot_bytes = buffer, rank, world, slot_bytes
        self.timeout_ms = max(1, int(timeout_s * 1000))
        self._ptrs = torch.tensor(peer_ptrs, dtype=torch.int64, device=buffer.device)
        self._launches: dict[tuple, tuple] = {}

    def reset(self) -> None:
        """Zero this rank's flags and counters (the buffer may come from an earlier backend)."""
        self.buffer[:HEADER_BYTES].zero_()

    def __call__(self, tensor: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
        """Sum ``tensor`` over all ranks into ``out`` (16-byte aligned, contiguous, same size)."""
        key = (tensor.data_ptr(), out.data_ptr(), tensor.nbytes, tensor.dtype)
        launch = self._launches.get(key)
        if launch is None:
            launch = self._prepare(tensor, out, key)
        func, blocks, args, _values = launch
        stream = ctypes.c_void_p(_current_raw_stream(tensor.get_device()))
        result = _libcuda().cuLaunchKernel(func, blocks, 1, 1, THREADS, 1, 1, 0, stream, args, None)
        if result != 0:
            raise RuntimeError(f"push all_reduce: cuLaunchKernel failed with CUDA error {result}")
        return out

    def _prepare(self, tensor: torch.Tensor, out: torch.Tensor, key: tuple) -> tuple:
        """(kernel, blocks, argument array, its C values) for these pointers and size."""
        nbytes = tensor.nbytes
        if nbytes > self.slot_bytes:
            raise ValueError(f"push all_reduce: {nbytes} bytes over the slot of {self.slot_bytes}")
        kernel = _kernel(DTYPE_KERNELS[tensor.dtype], tensor.device.index)
        blocks = max(1, -(-nbytes // BLOCK_BYTES))  # <= MAX_BLOCKS: nbytes <= MAX_SLOT_BYTES
        if len(self._launches) > 256:
            self._launches.clear()
        array, values = self._pack(tensor, out, nbytes)  # values: what the array points at
        self._launches[key] = launch = (kernel.func, blocks, array, values)
        return launch

    def _pack(self, tensor: torch.Tensor, out: torch.Tensor, nbytes: int) -> tuple:
        """The kernel's argument array, kept so each call does no ctypes work but the launch."""
        values = [
            ctypes.c_void_p(tensor.data_ptr()),
            ctypes.c_void_p(out.data_ptr()),
            ctypes.c_void_p(self._ptrs.data_ptr()),
            ctypes.c_int(self.rank),
            ctypes.c_int(self.world),
            ctypes.c_int(nbytes // 4),
            ctypes.c_int(self.slot_bytes),
            ctypes.c_int(self.timeout_ms),
        ]
        array = (ctypes.c_void_p * len(values))(
            *[ctypes.cast(ctypes.byref(v), ctypes.c_void_p) for v in values]
        )
        return array, values  # values keep the referenced C objects alive


_RAW_STREAM = getattr(torch._C, "_cuda_getCurrentRawStream", None)  # CUDA builds only


def _current_raw_stream(device_index: int) -> int:
    """The current CUDA stream's handle, without building a ``torch.cuda.Stream`` object."""
    if _RAW_STREAM is not None:
        return _RAW_STREAM(device_index)
    return torch.cuda.current_stream(device_index).cuda_stream
