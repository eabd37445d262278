// The conversion kernels against an independent reference written here
// straight from docs/conversion.md: the nearest FP8 value by search over
// all 256 codes, bfloat16 by comparing both neighbours in double, float16
// by binary search over its finite codes (decoded in double; not every
// compiler offers _Float16), and block quantization element by element
// with no shared code.

#include "util/float_convert.h"

#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

namespace reshard::internal {
namespace {

// The value of an e4m3fn code by the format's definition.
double RefE4m3Value(int code) {
  const int e = (code >> 3) & 15;
  const int m = code & 7;
  const double v = e == 0 ? std::ldexp(m, -9) : std::ldexp(8 + m, e - 10);
  return (code & 0x80) ? -v : v;
}

// Nearest finite code (0x00..0x7E) to |f| by search, ties to the even
// code; saturating at 448; NaN 0x7F; the sign copied.
uint8_t RefE4m3(float f) {
  const uint8_t sign = std::signbit(f) ? 0x80 : 0;
  if (std::isnan(f)) return sign | 0x7F;
  const double a = std::fabs(static_cast<double>(f));
  int best = 0;
  for (int c = 1; c <= 0x7E; ++c) {
    const double d = std::fabs(RefE4m3Value(c) - a);
    const double b = std::fabs(RefE4m3Value(best) - a);
    if (d < b || (d == b && (c & 1) == 0)) best = c;
  }
  return sign | static_cast<uint8_t>(best);
}

uint16_t RefBFloat16(float f) {
  const uint32_t x = std::bit_cast<uint32_t>(f);
  if (std::isnan(f)) return static_cast<uint16_t>((x >> 16) & 0x8000) | 0x7FC0;
  if (std::isinf(f)) return static_cast<uint16_t>(x >> 16);
  const uint32_t lo = x & 0xFFFF0000u;
  const uint32_t hi = lo + 0x10000u;
  const double dlo = std::fabs(double{std::bit_cast<float>(lo)} - f);
  const double dhi =
      std::isinf(std::bit_cast<float>(hi)) && !std::isinf(f)
          ? std::fabs(std::ldexp(1.0, 128) * (f < 0 ? -1 : 1) - f)
          : std::fabs(double{std::bit_cast<float>(hi)} - f);
  if (dlo < dhi || (dlo == dhi && ((lo >> 16) & 1) == 0)) return lo >> 16;
  return static_cast<uint16_t>(hi >> 16);
}

// IEEE binary16 decoded in double (exact).
double RefHalfValue(uint16_t v) {
  const int exp = (v >> 10) & 0x1F;
  const int mant = v & 0x3FF;
  const double sign = (v & 0x8000) ? -1.0 : 1.0;
  if (exp == 31) {
    return mant != 0 ? std::copysign(std::nan(""), sign) : sign * HUGE_VAL;
  }
  if (exp == 0) return sign * std::ldexp(mant, -24);
  return sign * std::ldexp(1024 + mant, exp - 25);
}

// The nearest binary16 (ties to the even code), infinity past the largest
// finite value's halfway point.
uint16_t RefFloat16(float f) {
  if (std::isnan(f)) return (std::signbit(f) ? 0x8000 : 0) | 0x7E00;
  const uint16_t sign = std::signbit(f) ? 0x8000 : 0;
  const double a = std::fabs(static_cast<double>(f));
  if (a >= 65520.0) return sign | 0x7C00;
  uint16_t lo = 0, hi = 0x7BFF;  // largest code with value <= a
  while (lo < hi) {
    const auto mid = static_cast<uint16_t>((lo + hi + 1) / 2);
    if (RefHalfValue(mid) <= a) {
      lo = mid;
    } else {
      hi = static_cast<uint16_t>(mid - 1);
    }
  }
  if (lo == 0x7BFF) return sign | lo;  // a < 65520: nearer to 65504
  const double below = a - RefHalfValue(lo);
  const double above = RefHalfValue(lo + 1) - a;
  if (below < above || (below == above && (lo & 1) == 0)) return sign | lo;
  return sign | static_cast<uint16_t>(lo + 1);
}

float RefHalfToFloat(uint16_t v) { return static_cast<float>(RefHalfValue(v)); }

std::vector<float> Specials() {
  const float inf = std::numeric_limits<float>::infinity();
  return {
      0.0f,           -0.0f,         1.0f,      -1.0f,         448.0f,
      -448.0f,        464.0f,        463.9f,    447.9f,        480.0f,
      1e30f,          inf,           -inf,      std::nanf(""), -std::nanf(""),
      0x1p-6f,        0x1p-9f,       0x1p-10f,  -0x1p-10f,     0x1.0001p-10f,
      -0x1.0001p-10f, 0x1.8p-9f,     0x1.4p-9f, 1e-40f,        -1e-40f,
      65504.0f,       65519.0f,      65520.0f,  0x1p-24f,      0x1p-25f,
      0x1.8p-24f,     3.0e38f,       -3.4e38f,  0x1p-14f,      0x1.ffep-15f,
      1.0009765625f,  1.00048828125f};
}

std::vector<float> RandomFloats(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<float> out;
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::uniform_int_distribution<uint32_t> bits;
  for (size_t i = 0; i < n; ++i) {
    out.push_back(i % 2 ? normal(rng) * std::ldexp(1.0f, int(i % 40) - 20)
                        : std::bit_cast<float>(bits(rng)));
  }
  return out;
}

TEST(FloatConvertTest, ScalarCastsMatchTheReference) {
  std::vector<float> values = Specials();
  const auto random = RandomFloats(200000, 1);
  values.insert(values.end(), random.begin(), random.end());
  for (float f : values) {
    SCOPED_TRACE(testing::Message() << std::hexfloat << f);
    EXPECT_EQ(FloatToBFloat16(f), RefBFloat16(f));
    EXPECT_EQ(FloatToFloat16(f), RefFloat16(f));
  }
  for (float f : Specials()) {
    SCOPED_TRACE(testing::Message() << std::hexfloat << f);
    EXPECT_EQ(FloatToE4m3(f), RefE4m3(f));
  }
  for (size_t i = 0; i < 20000; ++i) {
    const float f = random[i];
    ASSERT_EQ(FloatToE4m3(f), RefE4m3(f)) << std::hexfloat << f;
  }
}

TEST(FloatConvertTest, FP8EdgesAreAsDocumented) {
  EXPECT_EQ(FloatToE4m3(448.0f), 0x7E);
  EXPECT_EQ(FloatToE4m3(1e9f), 0x7E);
  EXPECT_EQ(FloatToE4m3(-std::numeric_limits<float>::infinity()), 0xFE);
  EXPECT_EQ(FloatToE4m3(-1e-30f), 0x80);   // a tiny negative keeps its sign
  EXPECT_EQ(FloatToE4m3(0x1p-10f), 0x00);  // the tie rounds to even 0
  EXPECT_EQ(FloatToE4m3(0x1.0001p-10f), 0x01);
  EXPECT_EQ(FloatToE4m3(-std::nanf("")), 0xFF);
  EXPECT_EQ(FloatToBFloat16(-std::nanf("")), 0xFFC0);
  for (int c = 0; c < 256; ++c) {
    if ((c & 0x7F) == 0x7F) {
      EXPECT_TRUE(std::isnan(E4m3ToFloat(static_cast<uint8_t>(c))));
      continue;
    }
    EXPECT_EQ(double{E4m3ToFloat(static_cast<uint8_t>(c))}, RefE4m3Value(c));
    EXPECT_EQ(FloatToE4m3(E4m3ToFloat(static_cast<uint8_t>(c))), c);
  }
}

TEST(FloatConvertTest, SixteenBitWideningIsExact) {
  for (uint32_t h = 0; h < 65536; ++h) {
    const auto v = static_cast<uint16_t>(h);
    const float half = RefHalfToFloat(v);
    const float got = Float16ToFloat(v);
    if (std::isnan(half)) {
      EXPECT_TRUE(std::isnan(got));
    } else {
      ASSERT_EQ(std::bit_cast<uint32_t>(got), std::bit_cast<uint32_t>(half));
    }
    ASSERT_EQ(std::bit_cast<uint32_t>(BFloat16ToFloat(v)), h << 16);
  }
}

TEST(FloatConvertTest, CastElementsGoesThroughFloat32) {
  const auto values = RandomFloats(5000, 2);
  std::vector<uint16_t> bf(values.size()), half(values.size());
  CastElements(FloatType::kFloat32, values.data(), FloatType::kBFloat16,
               bf.data(), values.size());
  CastElements(FloatType::kBFloat16, bf.data(), FloatType::kFloat16,
               half.data(), bf.size());
  for (size_t i = 0; i < values.size(); ++i) {
    ASSERT_EQ(bf[i], RefBFloat16(values[i]));
    ASSERT_EQ(half[i], RefFloat16(BFloat16ToFloat(bf[i])));
  }
}

// Block quantization straight from the reference: per block, amax over
// the block's non-NaN |x|, clamp, one division, one multiplication each.
struct RefQuantized {
  std::vector<uint8_t> q;
  std::vector<float> scales;
};

RefQuantized RefQuantize(const std::vector<float>& x, int64_t rows,
                         int64_t cols, int64_t bn, int64_t bk) {
  const int64_t sr = (rows + bn - 1) / bn, sc = (cols + bk - 1) / bk;
  RefQuantized out{std::vector<uint8_t>(x.size()), std::vector<float>(sr * sc)};
  for (int64_t br = 0; br < sr; ++br) {
    for (int64_t bc = 0; bc < sc; ++bc) {
      float amax = 0;
      for (int64_t r = br * bn; r < std::min(rows, (br + 1) * bn); ++r) {
        for (int64_t c = bc * bk; c < std::min(cols, (bc + 1) * bk); ++c) {
          const float a = std::fabs(x[r * cols + c]);
          if (!std::isnan(a) && a > amax) amax = a;
        }
      }
      if (amax < 1e-4f) amax = 1e-4f;
      const float factor = 448.0f / amax;
      out.scales[br * sc + bc] = amax / 448.0f;
      for (int64_t r = br * bn; r < std::min(rows, (br + 1) * bn); ++r) {
        for (int64_t c = bc * bk; c < std::min(cols, (bc + 1) * bk); ++c) {
          out.q[r * cols + c] = RefE4m3(x[r * cols + c] * factor);
        }
      }
    }
  }
  return out;
}

// Quantizes `src` (`from` values; `exact` their float32 values) with the
// kernel and expects the reference's codes and scales; returns the
// kernel's.
RefQuantized QuantizeLikeTheReference(FloatType from,
                                      const std::vector<char>& src,
                                      const std::vector<float>& exact,
                                      int64_t rows, int64_t cols, int64_t bn,
                                      int64_t bk) {
  const RefQuantized ref = RefQuantize(exact, rows, cols, bn, bk);
  RefQuantized got{std::vector<uint8_t>(exact.size()),
                   std::vector<float>(ref.scales.size())};
  QuantizeE4m3Blocks(from, src.data(), {rows, cols, cols}, bn, bk, got.q.data(),
                     cols, got.scales.data(), (cols + bk - 1) / bk);
  EXPECT_EQ(got.q, ref.q);
  for (size_t i = 0; i < ref.scales.size(); ++i) {
    EXPECT_EQ(std::bit_cast<uint32_t>(got.scales[i]),
              std::bit_cast<uint32_t>(ref.scales[i]))
        << "block " << i;
  }
  return got;
}

TEST(FloatConvertTest, QuantizeMatchesTheReferenceWithEdgeBlocks) {
  const int64_t rows = 37, cols = 45, bn = 16, bk = 8;
  std::vector<float> x = RandomFloats(rows * cols, 3);
  for (auto& v : x) {
    if (!std::isfinite(v) || std::fabs(v) > 1e6f) v = 0.5f;
  }
  // Block (0, 0) all zero: the 1e-4 clamp.
  for (int64_t r = 0; r < bn; ++r) {
    for (int64_t c = 0; c < bk; ++c) x[r * cols + c] = 0.0f;
  }
  for (int64_t r = 0; r < bn; ++r) {
    for (int64_t c = bk; c < 2 * bk; ++c) x[r * cols + c] = 0.25f;
  }
  // Block (0, 1): a value at amax (448 exactly), one just under it, tiny
  // negatives and a NaN.
  x[0 * cols + 8] = -3.0f;
  x[1 * cols + 9] = 2.9999f;
  x[2 * cols + 10] = -1e-9f;
  x[3 * cols + 11] = std::nanf("");
  x[4 * cols + 12] = -std::nanf("");
  for (FloatType from :
       {FloatType::kFloat32, FloatType::kBFloat16, FloatType::kFloat16}) {
    std::vector<char> src(x.size() * SizeOf(from));
    CastElements(FloatType::kFloat32, x.data(), from, src.data(), x.size());
    std::vector<float> exact(x.size());
    for (size_t i = 0; i < x.size(); ++i) {
      exact[i] = from == FloatType::kFloat32 ? x[i]
                 : from == FloatType::kBFloat16
                     ? BFloat16ToFloat(RefBFloat16(x[i]))
                     : RefHalfToFloat(RefFloat16(x[i]));
    }
    const auto [q, scales] =
        QuantizeLikeTheReference(from, src, exact, rows, cols, bn, bk);
    EXPECT_EQ(scales[0], 1e-4f / 448.0f);
    EXPECT_EQ(q[0 * cols + 8], 0xFE);  // -amax gives -448
    EXPECT_EQ(q[2 * cols + 10], 0x80);
    EXPECT_EQ(q[3 * cols + 11], 0x7F);
    EXPECT_EQ(q[4 * cols + 12], 0xFF);
  }
}

// The row kernels (vectorized, AVX-512 where the CPU has it) against the
// element conversions: every 16-bit code widened as a row, and rows long
// enough for full vectors with the special values at every lane position.
TEST(FloatConvertTest, RowsConvertLikeSingleElements) {
  std::vector<uint16_t> codes(65536 + 13);
  for (size_t i = 0; i < codes.size(); ++i) {
    codes[i] = static_cast<uint16_t>(i * 40503u);  // odd: every code once
  }
  std::vector<float> wide(codes.size());
  CastElements(FloatType::kFloat16, codes.data(), FloatType::kFloat32,
               wide.data(), codes.size());
  for (size_t i = 0; i < codes.size(); ++i) {
    ASSERT_EQ(std::bit_cast<uint32_t>(wide[i]),
              std::bit_cast<uint32_t>(Float16ToFloat(codes[i])))
        << std::hex << codes[i];
  }
  CastElements(FloatType::kBFloat16, codes.data(), FloatType::kFloat32,
               wide.data(), codes.size());
  for (size_t i = 0; i < codes.size(); ++i) {
    ASSERT_EQ(std::bit_cast<uint32_t>(wide[i]), uint32_t{codes[i]} << 16);
  }
  std::vector<float> x = RandomFloats(4099, 7);
  const std::vector<float> specials = Specials();
  for (size_t i = 0; i < x.size(); i += 3) {
    x[i] = specials[(i / 3) % specials.size()];
  }
  std::vector<uint16_t> bf(x.size()), half(x.size());
  std::vector<uint8_t> fp8(x.size());
  CastElements(FloatType::kFloat32, x.data(), FloatType::kBFloat16, bf.data(),
               x.size());
  CastElements(FloatType::kFloat32, x.data(), FloatType::kFloat16, half.data(),
               x.size());
  CastElements(FloatType::kFloat32, x.data(), FloatType::kFloat8E4M3,
               fp8.data(), x.size());
  for (size_t i = 0; i < x.size(); ++i) {
    ASSERT_EQ(bf[i], RefBFloat16(x[i])) << x[i];
    ASSERT_EQ(half[i], RefFloat16(x[i])) << x[i];
    ASSERT_EQ(fp8[i], RefE4m3(x[i])) << x[i];
  }
}

// 128x128 blocks (the engines' block size) over a matrix whose edge blocks
// are partial and whose rows end in a partial vector; NaN, infinities and
// the largest magnitudes at varying lane positions of the maximum's scan.
TEST(FloatConvertTest, QuantizeFullSizeBlocksMatchesTheReference) {
  const int64_t rows = 261, cols = 300, bn = 128, bk = 128;
  std::vector<float> x = RandomFloats(rows * cols, 11);
  for (auto& v : x) {
    if (!std::isfinite(v) || std::fabs(v) > 1e6f) v = 0.5f;
  }
  const float inf = std::numeric_limits<float>::infinity();
  for (int64_t r = 0; r < rows; r += 7) {
    x[r * cols + (r * 5) % cols] = (r % 2) ? std::nanf("") : -std::nanf("");
  }
  x[3 * cols + 140] = inf;     // block (0, 1): amax is infinity
  x[200 * cols + 29] = -3e7f;  // block (1, 0): the largest magnitude
  x[130 * cols + 299] = 1e7f;  // block (1, 2), the last column
  x[260 * cols + 257] = -inf;  // block (2, 2), the last row
  for (FloatType from :
       {FloatType::kFloat32, FloatType::kBFloat16, FloatType::kFloat16}) {
    std::vector<char> src(x.size() * SizeOf(from));
    CastElements(FloatType::kFloat32, x.data(), from, src.data(), x.size());
    std::vector<float> exact(x.size());
    CastElements(from, src.data(), FloatType::kFloat32, exact.data(), x.size());
    QuantizeLikeTheReference(from, src, exact, rows, cols, bn, bk);
  }
}

TEST(FloatConvertTest, DequantizeMatchesTheReference) {
  const int64_t rows = 19, cols = 23, bn = 8, bk = 16;
  std::mt19937 rng(4);
  std::vector<uint8_t> q(rows * cols);
  for (auto& v : q) v = static_cast<uint8_t>(rng());
  const int64_t sc = 2;
  std::vector<float> scales = {0.5f, 1e-7f, 3.0e-3f, 1.0f, 2.5f, 7.0f};
  for (FloatType to :
       {FloatType::kFloat32, FloatType::kBFloat16, FloatType::kFloat16}) {
    std::vector<char> out(q.size() * SizeOf(to));
    DequantizeE4m3Blocks(q.data(), {rows, cols, cols}, bn, bk, scales.data(),
                         sc, to, out.data(), cols);
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t c = 0; c < cols; ++c) {
        const size_t i = r * cols + c;
        const float y = static_cast<float>(RefE4m3Value(q[i])) *
                        scales[(r / bn) * sc + c / bk];
        const float v = (q[i] & 0x7F) == 0x7F ? std::nanf("") : y;
        const float yv = (q[i] & 0x80) && std::isnan(v) ? -v : v;
        if (to == FloatType::kFloat32) {
          float got;
          std::memcpy(&got, out.data() + 4 * i, 4);
          if (std::isnan(yv)) {
            ASSERT_TRUE(std::isnan(got));
          } else {
            ASSERT_EQ(got, yv);
          }
          continue;
        }
        uint16_t got;
        std::memcpy(&got, out.data() + 2 * i, 2);
        ASSERT_EQ(got,
                  to == FloatType::kBFloat16 ? RefBFloat16(yv) : RefFloat16(yv))
            << r << "," << c;
      }
    }
  }
}

}  // namespace
}  // namespace reshard::internal
