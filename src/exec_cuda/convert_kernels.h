// The FP8 and delta kernels' work, as __host__ __device__ code: the CUDA
// build launches it on a GPU (convert_kernels.cu), the host emulation runs
// the very same functions on the CPU, block by block and thread by thread.
// The arithmetic per element and per block is util/float_math.h's and the
// bitmap's util/delta_bits.h's, which the CPU paths (util/float_convert.cc,
// live/delta_codec.cc) call too, so the kernels' results are the CPU's bit
// for bit.
//
// Every kernel is a sequence of phases; a phase is a grid-stride loop over
// its items (item i runs on thread i % (blocks * threads) of the grid), and
// the threads of a phase share nothing (no shared memory, no barriers, no
// atomics), so a phase runs the same in any thread order. The phases of a
// launch run in order on its stream, one kernel launch each.
#ifndef RESHARD_EXEC_CUDA_CONVERT_KERNELS_H_
#define RESHARD_EXEC_CUDA_CONVERT_KERNELS_H_

#include <cstdint>

#include "util/delta_bits.h"
#include "util/float_math.h"

namespace reshard::cuda {

using internal::FloatType;

inline constexpr uint32_t kConvertThreads = 256;
inline constexpr uint64_t kMaxConvertBlocks = 65535;

// Blocks of kConvertThreads for `items` items (at least one block).
RESHARD_HOST_DEVICE inline uint64_t ConvertBlocks(uint64_t items) {
  const uint64_t blocks = (items + kConvertThreads - 1) / kConvertThreads;
  return blocks == 0
             ? 1
             : (blocks < kMaxConvertBlocks ? blocks : kMaxConvertBlocks);
}

// Float casts among float32, bfloat16, float16 and float8_e4m3fn
// (util/float_convert.h's CastElements): `elements` elements of `from` at
// `src` to `to` at `dst`, through float32; the same type both sides is a
// copy. One phase, an item per element.
struct CastArgs {
  const void* src = nullptr;
  FloatType from = FloatType::kFloat32;
  void* dst = nullptr;
  FloatType to = FloatType::kFloat32;
  uint64_t elements = 0;
};

RESHARD_HOST_DEVICE inline void CastItem(const CastArgs& a, uint64_t i) {
  if (a.from == a.to) {
    const uint32_t n = internal::ElementBytes(a.from);
    for (uint32_t b = 0; b < n; ++b) {
      static_cast<uint8_t*>(a.dst)[i * n + b] =
          static_cast<const uint8_t*>(a.src)[i * n + b];
    }
    return;
  }
  internal::NarrowElement(internal::WidenElement(a.from, a.src, i), a.to, a.dst,
                          i);
}

// Block quantization to float8_e4m3fn (QuantizeE4m3Blocks): a `rows` x
// `cols` matrix of `from` (float32, bfloat16, float16), rows
// `src_row_stride` elements apart, in blocks of `block_rows` x
// `block_cols` anchored at (0, 0). `workspace`: QuantizeWorkspaceWords()
// 32-bit words of device memory the kernel uses between its phases.
struct QuantizeArgs {
  const void* src = nullptr;
  FloatType from = FloatType::kBFloat16;
  uint64_t rows = 0, cols = 0, src_row_stride = 0;
  uint64_t block_rows = 128, block_cols = 128;
  uint8_t* dst = nullptr;
  uint64_t dst_row_stride = 0;
  float* scales = nullptr;  // ceil(rows / block_rows) x col_blocks
  uint64_t scale_row_stride = 0;
  uint32_t* workspace = nullptr;
};

RESHARD_HOST_DEVICE inline uint64_t QuantizeColBlocks(const QuantizeArgs& a) {
  return (a.cols + a.block_cols - 1) / a.block_cols;
}
RESHARD_HOST_DEVICE inline uint64_t QuantizeRowBlocks(const QuantizeArgs& a) {
  return (a.rows + a.block_rows - 1) / a.block_rows;
}
// One word per row and column block.
RESHARD_HOST_DEVICE inline uint64_t QuantizeWorkspaceWords(
    const QuantizeArgs& a) {
  return a.rows * QuantizeColBlocks(a);
}

inline constexpr int kQuantizePhases = 3;

// Items of phase 0 (a row's part of a block), 1 (a block) and 2 (an
// element).
RESHARD_HOST_DEVICE inline uint64_t QuantizeItems(const QuantizeArgs& a,
                                                  int phase) {
  if (phase == 0) return a.rows * QuantizeColBlocks(a);
  if (phase == 1) return QuantizeRowBlocks(a) * QuantizeColBlocks(a);
  return a.rows * a.cols;
}

// Phase 0, item (r, b): the amax bits of row r's part of column block b,
// into workspace[r * col_blocks + b].
RESHARD_HOST_DEVICE inline void QuantizeRowAmax(const QuantizeArgs& a,
                                                uint64_t i) {
  const uint64_t col_blocks = QuantizeColBlocks(a);
  const uint64_t r = i / col_blocks, b = i % col_blocks;
  const uint64_t c0 = b * a.block_cols;
  const uint64_t c1 = c0 + a.block_cols < a.cols ? c0 + a.block_cols : a.cols;
  uint32_t m = 0;
  for (uint64_t c = c0; c < c1; ++c) {
    const uint32_t x = internal::MagnitudeBits(
        internal::WidenElement(a.from, a.src, r * a.src_row_stride + c));
    m = x > m ? x : m;
  }
  a.workspace[i] = m;
}

// Phase 1, block (rb, b): the amax of its rows' parts, clamped; writes the
// block's scale, and its factor (bits) into the workspace word of its
// first row.
RESHARD_HOST_DEVICE inline void QuantizeBlockScale(const QuantizeArgs& a,
                                                   uint64_t i) {
  const uint64_t col_blocks = QuantizeColBlocks(a);
  const uint64_t rb = i / col_blocks, b = i % col_blocks;
  const uint64_t r0 = rb * a.block_rows;
  const uint64_t r1 = r0 + a.block_rows < a.rows ? r0 + a.block_rows : a.rows;
  uint32_t m = 0;
  for (uint64_t r = r0; r < r1; ++r) {
    const uint32_t x = a.workspace[r * col_blocks + b];
    m = x > m ? x : m;
  }
  const float amax = internal::ClampedAmax(m);
  a.scales[rb * a.scale_row_stride + b] = internal::QuantizeScale(amax);
  a.workspace[r0 * col_blocks + b] =
      internal::FloatBits(internal::QuantizeFactor(amax));
}

// Phase 2, element (r, c): its code, scaled by its block's factor.
RESHARD_HOST_DEVICE inline void QuantizeCode(const QuantizeArgs& a,
                                             uint64_t i) {
  const uint64_t r = i / a.cols, c = i % a.cols;
  const uint64_t first_row = r - r % a.block_rows;
  const float factor = internal::BitsFloat(
      a.workspace[first_row * QuantizeColBlocks(a) + c / a.block_cols]);
  a.dst[r * a.dst_row_stride + c] = internal::QuantizeElement(
      internal::WidenElement(a.from, a.src, r * a.src_row_stride + c), factor);
}

RESHARD_HOST_DEVICE inline void QuantizeItem(const QuantizeArgs& a, int phase,
                                             uint64_t i) {
  if (phase == 0) {
    QuantizeRowAmax(a, i);
  } else if (phase == 1) {
    QuantizeBlockScale(a, i);
  } else {
    QuantizeCode(a, i);
  }
}

// Dequantization (DequantizeE4m3Blocks): y = float(q) * scale of q's
// block, rounded to `to`. One phase, an item per element.
struct DequantizeArgs {
  const uint8_t* src = nullptr;
  uint64_t rows = 0, cols = 0, src_row_stride = 0;
  uint64_t block_rows = 128, block_cols = 128;
  const float* scales = nullptr;
  uint64_t scale_row_stride = 0;
  FloatType to = FloatType::kBFloat16;
  void* dst = nullptr;
  uint64_t dst_row_stride = 0;
};

RESHARD_HOST_DEVICE inline void DequantizeItem(const DequantizeArgs& a,
                                               uint64_t i) {
  const uint64_t r = i / a.cols, c = i % a.cols;
  const float s =
      a.scales[(r / a.block_rows) * a.scale_row_stride + c / a.block_cols];
  const float y = internal::DequantizeElement(
      internal::E4m3ToF32(a.src[r * a.src_row_stride + c]), s);
  internal::NarrowElement(y, a.to, a.dst, r * a.dst_row_stride + c);
}

// Delta kernels (live/delta_codec.h, form kBitmap) over a region of
// `elements` elements of `item` bytes, in tiles of kDeltaTileMapBytes map
// bytes (8 elements each). `tile_counts`: DeltaWorkspaceWords() 64-bit
// words of device memory; after phase 1 word t is the changed elements
// before tile t and word `tiles` their total.
inline constexpr uint64_t kDeltaTileMapBytes = 256;
inline constexpr int kDeltaPhases = 3;

// Encode: compares `now` with `base`, writes the map (ceil(elements / 8)
// bytes) and the changed elements of `now` in order into `values` (the
// kBitmap payload, map then values, when `values` follows the map), and
// copies each changed element into `base` (which then equals `now`).
// Apply: copies the changed elements, `values` in order, to their places
// in `dst` as the map says; values past `value_bytes` (a map with more bits
// set than values) are not read, and their elements are left as they were.
struct DeltaArgs {
  const uint8_t* now = nullptr;  // encode
  uint8_t* base = nullptr;       // encode
  uint8_t* map = nullptr;        // encode writes it, apply reads it
  uint8_t* values = nullptr;     // encode writes them, apply reads them
  uint64_t value_bytes = 0;      // at `values`; encode: elements * item
  uint8_t* dst = nullptr;        // apply
  uint64_t elements = 0;
  uint32_t item = 1;
  uint64_t* tile_counts = nullptr;
};

RESHARD_HOST_DEVICE inline uint64_t DeltaMapBytes(const DeltaArgs& a) {
  return (a.elements + 7) / 8;
}
RESHARD_HOST_DEVICE inline uint64_t DeltaTiles(const DeltaArgs& a) {
  return (DeltaMapBytes(a) + kDeltaTileMapBytes - 1) / kDeltaTileMapBytes;
}
RESHARD_HOST_DEVICE inline uint64_t DeltaWorkspaceWords(const DeltaArgs& a) {
  return DeltaTiles(a) + 1;
}
// Phase 0 and 2: an item per tile; phase 1: one item (the scan).
RESHARD_HOST_DEVICE inline uint64_t DeltaItems(const DeltaArgs& a, int phase) {
  return phase == 1 ? 1 : DeltaTiles(a);
}

// Map bytes [*first, *end) of tile t.
RESHARD_HOST_DEVICE inline void DeltaTileBytes(const DeltaArgs& a, uint64_t t,
                                               uint64_t* first, uint64_t* end) {
  const uint64_t map_bytes = DeltaMapBytes(a);
  *first = t * kDeltaTileMapBytes;
  *end = *first + kDeltaTileMapBytes < map_bytes ? *first + kDeltaTileMapBytes
                                                 : map_bytes;
}

// Phase 1: the exclusive prefix sums of the tiles' counts, in place.
RESHARD_HOST_DEVICE inline void DeltaScan(const DeltaArgs& a) {
  const uint64_t tiles = DeltaTiles(a);
  uint64_t total = 0;
  for (uint64_t t = 0; t < tiles; ++t) {
    const uint64_t count = a.tile_counts[t];
    a.tile_counts[t] = total;
    total += count;
  }
  a.tile_counts[tiles] = total;
}

RESHARD_HOST_DEVICE inline void DeltaEncodeItem(const DeltaArgs& a, int phase,
                                                uint64_t i) {
  if (phase == 1) return DeltaScan(a);
  uint64_t first = 0, end = 0;
  DeltaTileBytes(a, i, &first, &end);
  if (phase == 0) {
    for (uint64_t k = first; k < end; ++k) {
      a.map[k] = internal::DeltaMapByte(a.now, a.base, a.elements, a.item, k);
    }
    a.tile_counts[i] = internal::DeltaBitsSet(a.map, first, end);
    return;
  }
  uint64_t out = a.tile_counts[i];
  for (uint64_t j = first * 8; j < end * 8 && j < a.elements; ++j) {
    if (!internal::DeltaBit(a.map, j)) continue;
    internal::DeltaCopyElement(a.now, j, a.values, out++, a.item);
    internal::DeltaCopyElement(a.now, j, a.base, j, a.item);
  }
}

RESHARD_HOST_DEVICE inline void DeltaApplyItem(const DeltaArgs& a, int phase,
                                               uint64_t i) {
  if (phase == 1) return DeltaScan(a);
  uint64_t first = 0, end = 0;
  DeltaTileBytes(a, i, &first, &end);
  if (phase == 0) {
    a.tile_counts[i] = internal::DeltaBitsSet(a.map, first, end);
    return;
  }
  uint64_t in = a.tile_counts[i];
  for (uint64_t j = first * 8; j < end * 8 && j < a.elements; ++j) {
    if (!internal::DeltaBit(a.map, j)) continue;
    if ((in + 1) * a.item > a.value_bytes) return;
    internal::DeltaCopyElement(a.values, in++, a.dst, j, a.item);
  }
}

// What thread `thread` of block `block` (a grid of `blocks` blocks of
// `threads`) runs of `items` items: item(i) for each of its items.
template <typename Item>
RESHARD_HOST_DEVICE inline void ConvertGridStride(
    uint64_t items, uint64_t block, uint64_t blocks, uint32_t thread,
    uint32_t threads, const Item& item) {
  for (uint64_t i = block * threads + thread; i < items;
       i += blocks * threads) {
    item(i);
  }
}

}  // namespace reshard::cuda

#endif  // RESHARD_EXEC_CUDA_CONVERT_KERNELS_H_
