// Runs the push all-reduce kernel's CUDA source on the CPU: every GPU thread is a host
// thread, every block has a barrier for __syncthreads, and every rank issues its calls
// in order on its own "stream" thread, so one rank's call k + 1 overlaps a slower
// peer's call k as on GPUs. The test (test_comm_push_emulated.py) swaps the source's
// inline PTX for the equivalent C++ atomics and includes it here as "kernel.inc".
//
// usage: push_emulator WORLD THREADS DTYPE(f32|bf16) ROUNDS INPUT OUTPUT NWORDS...
// Each round runs one all-reduce per NWORDS on every rank, on the inputs read from
// INPUT, and writes every rank's result to OUTPUT. Needs C++20's <barrier> (g++ >= 11).
#include <algorithm>
#include <atomic>
#include <barrier>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

struct Dim3 { int x = 0; };
struct uint4 { unsigned x, y, z, w; };
inline uint4 make_uint4(unsigned x, unsigned y, unsigned z, unsigned w) { return {x, y, z, w}; }
inline float __uint_as_float(unsigned u) { float f; std::memcpy(&f, &u, 4); return f; }
inline unsigned __float_as_uint(float f) { unsigned u; std::memcpy(&u, &f, 4); return u; }
template <class T> inline T __ldcg(const T* p) { return *p; }
using std::min;

struct Block {
  std::barrier<> sync;
  unsigned shared_epoch = 0;
  explicit Block(int threads) : sync(threads) {}
};
thread_local Dim3 blockIdx, threadIdx, blockDim, gridDim;
thread_local Block* current_block = nullptr;

inline void __syncthreads() { current_block->sync.arrive_and_wait(); }
inline void __threadfence_system() { std::atomic_thread_fence(std::memory_order_seq_cst); }
inline unsigned& block_shared_epoch() { return current_block->shared_epoch; }
inline unsigned long long host_now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch()).count();
}
[[noreturn]] inline void __trap() { std::fprintf(stderr, "trap\n"); std::abort(); }

#define __device__
#define __global__
#define __forceinline__ inline
#include "kernel.inc"

using Kernel = void (*)(const unsigned*, unsigned*, const unsigned long long*, int, int, int,
                        int, int);

// INPUT holds, call after call, every rank's payload in rank order (nwords 32-bit words
// each); OUTPUT receives what every rank's kernel wrote, in the same layout. The caller
// checks the results (the sum's reference rounding, the same bits on every rank).
int main(int argc, char** argv) {
  if (argc < 8) {
    std::fprintf(stderr, "usage: WORLD THREADS DTYPE ROUNDS INPUT OUTPUT NWORDS...\n");
    return 2;
  }
  const int world = std::atoi(argv[1]), threads = std::atoi(argv[2]);
  const bool bf = std::string(argv[3]) == "bf16";
  const int rounds = std::atoi(argv[4]);
  const char *input_path = argv[5], *output_path = argv[6];
  std::vector<int> sizes;
  for (int i = 7; i < argc; ++i) sizes.push_back(std::atoi(argv[i]));
  const int most = *std::max_element(sizes.begin(), sizes.end());
  const int slot_bytes = ((most * 4 + 15) / 16) * 16;
  const size_t buffer_bytes = HEADER_BYTES + 2 * size_t(world) * slot_bytes;
  Kernel kernel = bf ? push_all_reduce_bf16 : push_all_reduce_f32;

  const int calls = rounds * int(sizes.size());
  std::vector<size_t> offset(calls + 1, 0);  // word offset of each call's block of ranks
  for (int call = 0; call < calls; ++call)
    offset[call + 1] = offset[call] + size_t(world) * sizes[call % sizes.size()];
  std::vector<unsigned> input(offset[calls]), output(offset[calls], 0);
  FILE* in_file = std::fopen(input_path, "rb");
  if (!in_file || std::fread(input.data(), 4, input.size(), in_file) != input.size()) {
    std::fprintf(stderr, "cannot read %zu words from %s\n", input.size(), input_path);
    return 2;
  }
  std::fclose(in_file);

  std::vector<std::unique_ptr<unsigned[]>> buffers;
  std::vector<unsigned long long> ptrs;
  for (int r = 0; r < world; ++r) {
    buffers.emplace_back(new unsigned[buffer_bytes / 4]());  // zeroed, as reset() does
    ptrs.push_back(reinterpret_cast<unsigned long long>(buffers.back().get()));
  }

  auto stream = [&](int rank) {
    for (int call = 0; call < calls; ++call) {
      const int nwords = sizes[call % sizes.size()];
      const unsigned* mine = input.data() + offset[call] + size_t(rank) * nwords;
      std::vector<unsigned> in(mine, mine + nwords), out(nwords, 0);
      in.resize(nwords + 4);  // 16-byte slack: the kernel reads whole vectors
      out.resize(nwords + 4);
      const int blocks = std::max(1, (nwords * 4 + BLOCK_BYTES - 1) / BLOCK_BYTES);
      std::vector<std::unique_ptr<Block>> block_state;
      for (int b = 0; b < blocks; ++b) block_state.emplace_back(new Block(threads));
      std::vector<std::thread> gpu;
      for (int b = 0; b < blocks; ++b)
        for (int t = 0; t < threads; ++t)
          gpu.emplace_back([&, b, t] {
            blockIdx.x = b; threadIdx.x = t; blockDim.x = threads; gridDim.x = blocks;
            current_block = block_state[b].get();
            kernel(in.data(), out.data(), ptrs.data(), rank, world, nwords, slot_bytes, 10000);
          });
      for (auto& th : gpu) th.join();
      std::copy(out.begin(), out.begin() + nwords,
                output.begin() + offset[call] + size_t(rank) * nwords);
    }
  };
  std::vector<std::thread> ranks;
  for (int r = 0; r < world; ++r) ranks.emplace_back(stream, r);
  for (auto& th : ranks) th.join();

  FILE* out_file = std::fopen(output_path, "wb");
  if (!out_file || std::fwrite(output.data(), 4, output.size(), out_file) != output.size()) {
    std::fprintf(stderr, "cannot write %s\n", output_path);
    return 2;
  }
  std::fclose(out_file);
  std::printf("done\n");
  return 0;
}
