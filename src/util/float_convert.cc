#include "util/float_convert.h"

#include <algorithm>
#include <array>
#include <bit>
#include <cmath>
#include <cstring>
#include <vector>

// With GCC, the entry points below are compiled twice, for x86-64-v4
// (AVX-512) and for the baseline, and the loader picks one by CPU: their
// row loops are written to vectorize, and the wide registers widen, round
// and narrow four to eight times as many elements per instruction.
// `flatten` inlines the helpers into each copy, so they are vectorized for
// its target too. Results are identical: the same IEEE operations in the
// same order (no contraction into fused multiply-adds: -ffp-contract=off,
// CMakeLists.txt). Clang cannot combine the two attributes; its builds
// (the sanitizer passes) run the baseline code.
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define RESHARD_KERNEL \
  __attribute__((target_clones("arch=x86-64-v4", "default"), flatten))
#else
#define RESHARD_KERNEL
#endif

namespace reshard::internal {
namespace {

// float8_e4m3fn values by code: a load per element instead of the bit
// construction (the CPU's row loops do not vectorize that one better).
constexpr std::array<float, 256> MakeE4m3Table() {
  std::array<float, 256> table{};
  for (int q = 0; q < 256; ++q) table[q] = E4m3ToF32(static_cast<uint8_t>(q));
  return table;
}

constexpr std::array<float, 256> kE4m3Table = MakeE4m3Table();

// One row of `n` elements of `from` widened to float32 (exact).
void Widen(FloatType from, const void* src, float* out, size_t n) {
  switch (from) {
    case FloatType::kFloat32:
      std::memcpy(out, src, n * sizeof(float));
      return;
    case FloatType::kBFloat16: {
      const auto* in = static_cast<const uint16_t*>(src);
      for (size_t i = 0; i < n; ++i) out[i] = Bf16ToF32(in[i]);
      return;
    }
    case FloatType::kFloat16: {
      const auto* in = static_cast<const uint16_t*>(src);
      for (size_t i = 0; i < n; ++i) out[i] = F16ToF32(in[i]);
      return;
    }
    case FloatType::kFloat8E4M3: {
      const auto* in = static_cast<const uint8_t*>(src);
      for (size_t i = 0; i < n; ++i) out[i] = kE4m3Table[in[i]];
      return;
    }
  }
}

// One row of float32 rounded to `to` (a float type other than FP8).
void Narrow(const float* in, FloatType to, void* dst, size_t n) {
  switch (to) {
    case FloatType::kFloat32:
      std::memcpy(dst, in, n * sizeof(float));
      return;
    case FloatType::kBFloat16: {
      auto* out = static_cast<uint16_t*>(dst);
      for (size_t i = 0; i < n; ++i) out[i] = F32ToBf16(in[i]);
      return;
    }
    case FloatType::kFloat16: {
      auto* out = static_cast<uint16_t*>(dst);
      for (size_t i = 0; i < n; ++i) out[i] = F32ToF16(in[i]);
      return;
    }
    case FloatType::kFloat8E4M3: {
      auto* out = static_cast<uint8_t*>(dst);
      for (size_t i = 0; i < n; ++i) out[i] = F32ToE4m3(in[i]);
      return;
    }
  }
}

const char* RowAt(const void* base, FloatType type, int64_t row,
                  int64_t stride) {
  return static_cast<const char*>(base) +
         static_cast<size_t>(row * stride) * SizeOf(type);
}

// The largest |x| of each column block of the `rows` rows of `band`
// (float32, `cols` a row): `amax` holds one value per column block; NaN
// elements leave the maximum as it was. Compared as bit patterns
// (MagnitudeBits): an integer maximum vectorizes (a float one that must
// skip NaN does not). The sixteen-lane loop applies MagnitudeBits' rule to
// a vector of lanes at once (a function of one float cannot take a vector).

void BandAmax(const float* band, int64_t rows, int64_t cols, int64_t block_cols,
              std::vector<float>* amax) {
  std::fill(amax->begin(), amax->end(), 0.0f);
  for (int64_t r = 0; r < rows; ++r) {
    const float* row = band + r * cols;
    for (size_t b = 0; b < amax->size(); ++b) {
      const int64_t c0 = static_cast<int64_t>(b) * block_cols;
      const int64_t c1 = std::min(cols, c0 + block_cols);
      // Sixteen running maxima in one vector (GCC/Clang vector extension:
      // one AVX-512 register, or four SSE ones), then the largest.
      using Lanes = uint32_t __attribute__((vector_size(64)));
      constexpr int64_t kLanes = sizeof(Lanes) / sizeof(uint32_t);
      Lanes lanes = {std::bit_cast<uint32_t>((*amax)[b])};
      int64_t c = c0;
      for (; c + kLanes <= c1; c += kLanes) {
        Lanes a;
        std::memcpy(&a, row + c, sizeof a);
        a &= 0x7FFFFFFF;
        a &= ~(a > 0x7F800000);  // NaN: no magnitude
        lanes = lanes > a ? lanes : a;
      }
      for (; c < c1; ++c) lanes[0] = std::max(lanes[0], MagnitudeBits(row[c]));
      uint32_t m = 0;
      for (int64_t j = 0; j < kLanes; ++j) m = std::max(m, lanes[j]);
      (*amax)[b] = std::bit_cast<float>(m);
    }
  }
}

}  // namespace

std::optional<FloatType> FloatTypeOf(std::string_view dtype) {
  if (dtype == "float32") return FloatType::kFloat32;
  if (dtype == "bfloat16") return FloatType::kBFloat16;
  if (dtype == "float16") return FloatType::kFloat16;
  if (dtype == "float8_e4m3fn") return FloatType::kFloat8E4M3;
  return std::nullopt;
}

size_t SizeOf(FloatType type) {
  switch (type) {
    case FloatType::kFloat32:
      return 4;
    case FloatType::kBFloat16:
    case FloatType::kFloat16:
      return 2;
    case FloatType::kFloat8E4M3:
      return 1;
  }
  return 0;
}

float BFloat16ToFloat(uint16_t h) { return Bf16ToF32(h); }

float Float16ToFloat(uint16_t h) { return F16ToF32(h); }

float E4m3ToFloat(uint8_t q) { return kE4m3Table[q]; }

uint16_t FloatToBFloat16(float f) { return F32ToBf16(f); }

uint16_t FloatToFloat16(float f) { return F32ToF16(f); }

uint8_t FloatToE4m3(float f) { return F32ToE4m3(f); }

RESHARD_KERNEL void CastElements(FloatType from, const void* src, FloatType to,
                                 void* dst, size_t n) {
  if (from == to) {
    std::memcpy(dst, src, n * SizeOf(from));
    return;
  }
  // Through a float32 window small enough for the L1 cache.
  constexpr size_t kWindow = 2048;
  float window[kWindow];
  const auto* in = static_cast<const char*>(src);
  auto* out = static_cast<char*>(dst);
  for (size_t i = 0; i < n; i += kWindow) {
    const size_t m = std::min(kWindow, n - i);
    Widen(from, in + i * SizeOf(from), window, m);
    Narrow(window, to, out + i * SizeOf(to), m);
  }
}

RESHARD_KERNEL void QuantizeE4m3Blocks(FloatType from, const void* src,
                                       const MatrixView& shape,
                                       int64_t block_rows, int64_t block_cols,
                                       uint8_t* dst, int64_t dst_row_stride,
                                       float* scales,
                                       int64_t scale_row_stride) {
  const int64_t col_blocks = (shape.cols + block_cols - 1) / block_cols;
  // One band of block rows, widened once (read for the maxima, then for
  // the codes).
  std::vector<float> band(
      static_cast<size_t>(std::min(block_rows, shape.rows) * shape.cols));
  std::vector<float> amax(static_cast<size_t>(col_blocks));
  std::vector<float> factor(static_cast<size_t>(col_blocks));
  for (int64_t r0 = 0; r0 < shape.rows; r0 += block_rows) {
    const int64_t r1 = std::min(shape.rows, r0 + block_rows);
    for (int64_t r = r0; r < r1; ++r) {
      Widen(from, RowAt(src, from, r, shape.row_stride),
            band.data() + (r - r0) * shape.cols,
            static_cast<size_t>(shape.cols));
    }
    BandAmax(band.data(), r1 - r0, shape.cols, block_cols, &amax);
    float* scale_row = scales + (r0 / block_rows) * scale_row_stride;
    for (int64_t b = 0; b < col_blocks; ++b) {
      const float m = ClampedAmax(std::bit_cast<uint32_t>(amax[b]));
      factor[b] = QuantizeFactor(m);
      scale_row[b] = QuantizeScale(m);
    }
    for (int64_t r = r0; r < r1; ++r) {
      const float* row = band.data() + (r - r0) * shape.cols;
      uint8_t* out = dst + r * dst_row_stride;
      for (int64_t b = 0; b < col_blocks; ++b) {
        const int64_t c0 = b * block_cols;
        const int64_t c1 = std::min(shape.cols, c0 + block_cols);
        const float k = factor[b];
        for (int64_t c = c0; c < c1; ++c) out[c] = QuantizeElement(row[c], k);
      }
    }
  }
}

RESHARD_KERNEL void DequantizeE4m3Blocks(const uint8_t* src,
                                         const MatrixView& shape,
                                         int64_t block_rows, int64_t block_cols,
                                         const float* scales,
                                         int64_t scale_row_stride, FloatType to,
                                         void* dst, int64_t dst_row_stride) {
  std::vector<float> row(static_cast<size_t>(shape.cols));
  for (int64_t r = 0; r < shape.rows; ++r) {
    const uint8_t* in = src + r * shape.row_stride;
    const float* scale_row = scales + (r / block_rows) * scale_row_stride;
    for (int64_t c0 = 0; c0 < shape.cols; c0 += block_cols) {
      const int64_t c1 = std::min(shape.cols, c0 + block_cols);
      const float s = scale_row[c0 / block_cols];
      for (int64_t c = c0; c < c1; ++c) {
        row[c] = DequantizeElement(kE4m3Table[in[c]], s);
      }
    }
    char* out = static_cast<char*>(dst) +
                static_cast<size_t>(r * dst_row_stride) * SizeOf(to);
    Narrow(row.data(), to, out, static_cast<size_t>(shape.cols));
  }
}

}  // namespace reshard::internal
