// The gather/scatter kernel's work, as __host__ __device__ code: the CUDA
// build launches it on a GPU (gather_scatter_kernel.cu), the host
// emulation runs the very same functions on the CPU, block by block and
// thread by thread, so its logic is tested without a GPU.
//
// It moves a region that no 2D/3D copy descriptor expresses (more outer
// loops than a 3D copy has, or strides that no pitch and slice height
// describe): rows of `inner_bytes`, enumerated by up to kMaxLoops outer
// loops (outermost first, the last fastest), each side with its own byte
// strides. Block b copies rows b, b + grid, ... ; within a row, thread t
// copies words t, t + threads, ... (8-byte words where both sides and
// the row length allow, else bytes).
#ifndef RESHARD_EXEC_CUDA_GATHER_SCATTER_H_
#define RESHARD_EXEC_CUDA_GATHER_SCATTER_H_

#include <cstdint>

#if defined(__CUDACC__)
#define RESHARD_HOST_DEVICE __host__ __device__
#else
#define RESHARD_HOST_DEVICE
#endif

namespace reshard::cuda {

inline constexpr uint32_t kMaxLoops = 8;

struct GatherScatterArgs {
  const uint8_t* src = nullptr;
  uint8_t* dst = nullptr;
  uint64_t inner_bytes = 0;
  uint32_t loops = 0;
  uint64_t counts[kMaxLoops] = {};
  uint64_t src_strides[kMaxLoops] = {};
  uint64_t dst_strides[kMaxLoops] = {};
  uint64_t rows = 1;  // product of counts
};

// Byte offsets of row `row` on both sides.
RESHARD_HOST_DEVICE inline void GatherScatterRowOffsets(
    const GatherScatterArgs& a, uint64_t row, uint64_t* src, uint64_t* dst) {
  uint64_t s = 0, d = 0;
  for (uint32_t i = a.loops; i-- > 0;) {
    const uint64_t index = row % a.counts[i];
    row /= a.counts[i];
    s += index * a.src_strides[i];
    d += index * a.dst_strides[i];
  }
  *src = s;
  *dst = d;
}

// What thread `thread` of `threads` copies of row `row`.
RESHARD_HOST_DEVICE inline void GatherScatterRowPart(const GatherScatterArgs& a,
                                                     uint64_t row,
                                                     uint32_t thread,
                                                     uint32_t threads) {
  uint64_t s = 0, d = 0;
  GatherScatterRowOffsets(a, row, &s, &d);
  const uint8_t* from = a.src + s;
  uint8_t* to = a.dst + d;
  const bool words = ((reinterpret_cast<uintptr_t>(from) |
                       reinterpret_cast<uintptr_t>(to) | a.inner_bytes) &
                      7) == 0;
  if (words) {
    const uint64_t n = a.inner_bytes / 8;
    const auto* f = reinterpret_cast<const uint64_t*>(from);
    auto* t = reinterpret_cast<uint64_t*>(to);
    for (uint64_t i = thread; i < n; i += threads) t[i] = f[i];
  } else {
    for (uint64_t i = thread; i < a.inner_bytes; i += threads) to[i] = from[i];
  }
}

// What thread `thread` of block `block` copies, of a grid of `blocks`
// blocks of `threads` threads.
RESHARD_HOST_DEVICE inline void GatherScatterThread(const GatherScatterArgs& a,
                                                    uint64_t block,
                                                    uint64_t blocks,
                                                    uint32_t thread,
                                                    uint32_t threads) {
  for (uint64_t row = block; row < a.rows; row += blocks) {
    GatherScatterRowPart(a, row, thread, threads);
  }
}

// The launch shape: one block per row up to kMaxBlocks (rows beyond
// stride), kThreads threads each.
inline constexpr uint32_t kGatherScatterThreads = 256;
inline constexpr uint64_t kMaxGatherScatterBlocks = 65535;
inline uint64_t GatherScatterBlocks(const GatherScatterArgs& a) {
  return a.rows < kMaxGatherScatterBlocks ? (a.rows == 0 ? 1 : a.rows)
                                          : kMaxGatherScatterBlocks;
}

}  // namespace reshard::cuda

#endif  // RESHARD_EXEC_CUDA_GATHER_SCATTER_H_
