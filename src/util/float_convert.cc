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

// Rounds 0 <= t < 2^22 to the nearest integer, ties to even: adding 2^23
// leaves no fraction bits, so the float32 addition itself rounds (IEEE
// round-to-nearest-even, the default mode; no fast-math in this build).
inline float RoundHalfEvenSmall(float t) {
  constexpr float kMagic = 8388608.0f;  // 2^23
  return (t + kMagic) - kMagic;
}

constexpr float E4m3Value(uint8_t q) {
  const int exponent = (q >> 3) & 0xF;
  const int mantissa = q & 0x7;
  float magnitude = 0;
  if (exponent == 0) {
    magnitude = static_cast<float>(mantissa) / 512.0f;  // m * 2^-9
  } else if (exponent == 15 && mantissa == 7) {
    magnitude = std::bit_cast<float>(uint32_t{0x7FC00000});
  } else {
    magnitude = 1.0f + static_cast<float>(mantissa) / 8.0f;
    for (int e = exponent - 7; e > 0; --e) magnitude *= 2.0f;
    for (int e = exponent - 7; e < 0; ++e) magnitude /= 2.0f;
  }
  return (q & 0x80) ? -magnitude : magnitude;
}

constexpr std::array<float, 256> MakeE4m3Table() {
  std::array<float, 256> table{};
  for (int q = 0; q < 256; ++q) table[q] = E4m3Value(static_cast<uint8_t>(q));
  return table;
}

constexpr std::array<float, 256> kE4m3Table = MakeE4m3Table();

// The element conversions, inline here so that the row loops below do not
// call out per element (an exported function of a shared library is
// interposable and would not be inlined).
inline float Bf16ToF32(uint16_t h) {
  return std::bit_cast<float>(static_cast<uint32_t>(h) << 16);
}

// Both paths computed and one selected (no branch), so that row loops
// vectorize; integer-to-float conversions are signed ones, which every
// vector unit has.
inline float F16ToF32(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000) << 16;
  const uint32_t exponent = (h >> 10) & 0x1F;
  const uint32_t mantissa = h & 0x3FF;
  // Zero or subnormal: m * 2^-24, exact in float32.
  const float m = static_cast<float>(static_cast<int32_t>(mantissa)) *
                  5.9604644775390625e-08f;
  const uint32_t subnormal = std::bit_cast<uint32_t>(m) | sign;
  // Exponent 31 (infinity, NaN) becomes 0xFF: 31 + 112 = 0x8F, ORed.
  const uint32_t e32 = (exponent + 112) | ((0u - (exponent == 31)) & 0xFF);
  const uint32_t normal = sign | (e32 << 23) | (mantissa << 13);
  const uint32_t is_subnormal = 0u - (exponent == 0);
  return std::bit_cast<float>((subnormal & is_subnormal) |
                              (normal & ~is_subnormal));
}

inline uint16_t F32ToBf16(float f) {
  const uint32_t x = std::bit_cast<uint32_t>(f);
  const auto sign = static_cast<uint16_t>((x >> 16) & 0x8000);
  if ((x & 0x7FFFFFFF) > 0x7F800000) return sign | 0x7FC0;
  const uint32_t rounded = x + 0x7FFF + ((x >> 16) & 1);
  return static_cast<uint16_t>(rounded >> 16);
}

inline uint16_t F32ToF16(float f) {
  const uint32_t x = std::bit_cast<uint32_t>(f);
  const auto sign = static_cast<uint16_t>((x >> 16) & 0x8000);
  const uint32_t a = x & 0x7FFFFFFF;
  if (a > 0x7F800000) return sign | 0x7E00;
  if (a >= 0x477FF000) return sign | 0x7C00;  // >= 65520 rounds up to inf
  if (a >= 0x38800000) {                      // >= 2^-14: normal
    uint32_t v = a - (112u << 23);            // exponent bias 127 -> 15
    v += 0xFFF + ((v >> 13) & 1);
    return sign | static_cast<uint16_t>(v >> 13);
  }
  // Subnormal (or zero): m * 2^-24 with m = round(|f| * 2^24) < 2^10; the
  // scaling by a power of two is exact. m = 1024 is the smallest normal.
  const float t = std::bit_cast<float>(a) * 16777216.0f;
  return sign | static_cast<uint16_t>(RoundHalfEvenSmall(t));
}

// Branch-free (every path computed, one selected) so that row loops
// vectorize; the subnormal path only ever sees magnitudes below 2^-6.
inline uint8_t F32ToE4m3(float f) {
  const uint32_t x = std::bit_cast<uint32_t>(f);
  const uint32_t sign = (x >> 24) & 0x80;
  const uint32_t a = x & 0x7FFFFFFF;
  // >= 2^-6: normal; exponent bias 127 -> 7, round to nearest even.
  uint32_t v = a - (120u << 23);
  v += 0x7FFFF + ((v >> 20) & 1);
  const uint32_t normal = (v >> 20) & 0x7F;
  // Subnormal: m * 2^-9 with m = round(|f| * 512) <= 8 (8 is 2^-6, code
  // 0x08); |f| <= 2^-10 rounds to m = 0.
  const uint32_t clamped = a < 0x3C800000u ? a : 0x3C800000u;
  const float small = std::bit_cast<float>(clamped);
  const auto sub = static_cast<uint32_t>(
      static_cast<int32_t>(RoundHalfEvenSmall(small * 512.0f)));
  uint32_t q = a >= 0x3C800000 ? normal : sub;
  q = a >= 0x43E00000 ? 0x7Eu : q;  // >= 448, infinity: saturate
  q = a > 0x7F800000 ? 0x7Fu : q;   // NaN
  return static_cast<uint8_t>(sign | q);
}

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
// elements leave the maximum as it was. Compared as bit patterns: for
// magnitudes (sign cleared) that are not NaN, the integer order is the
// float order, and an integer maximum vectorizes (a float one that must
// skip NaN does not).
inline uint32_t Magnitude(float x) {
  const uint32_t a = std::bit_cast<uint32_t>(x) & 0x7FFFFFFF;
  return a > 0x7F800000 ? 0 : a;  // NaN: no magnitude
}

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
      for (; c < c1; ++c) lanes[0] = std::max(lanes[0], Magnitude(row[c]));
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
      const float m = std::max(amax[b], 1e-4f);
      factor[b] = 448.0f / m;
      scale_row[b] = m / 448.0f;
    }
    for (int64_t r = r0; r < r1; ++r) {
      const float* row = band.data() + (r - r0) * shape.cols;
      uint8_t* out = dst + r * dst_row_stride;
      for (int64_t b = 0; b < col_blocks; ++b) {
        const int64_t c0 = b * block_cols;
        const int64_t c1 = std::min(shape.cols, c0 + block_cols);
        const float k = factor[b];
        for (int64_t c = c0; c < c1; ++c) out[c] = F32ToE4m3(row[c] * k);
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
      for (int64_t c = c0; c < c1; ++c) row[c] = kE4m3Table[in[c]] * s;
    }
    char* out = static_cast<char*>(dst) +
                static_cast<size_t>(r * dst_row_stride) * SizeOf(to);
    Narrow(row.data(), to, out, static_cast<size_t>(shape.cols));
  }
}

}  // namespace reshard::internal
