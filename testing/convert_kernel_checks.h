// Test helper for the FP8 and delta kernels' tests (the host emulation's
// in reshard_tests, the GPU's in reshard_gpu_tests): each Expect* runs a
// kernel through a DeviceApi (convert_kernel_runs.h) and expects its
// results bit for bit as the CPU functions give them
// (util/float_convert.h, live/delta_codec.h), on inputs that cover every
// boundary of the arithmetic.
#ifndef RESHARD_TESTING_CONVERT_KERNEL_CHECKS_H_
#define RESHARD_TESTING_CONVERT_KERNEL_CHECKS_H_

#include <gtest/gtest.h>

#include <bit>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "exec_cuda/device_api.h"
#include "live/delta_codec.h"
#include "testing/convert_kernel_runs.h"
#include "testing/must.h"
#include "testing/status_testing.h"
#include "util/float_convert.h"

namespace reshard::testing {

using ::reshard::internal::FloatType;

inline constexpr FloatType kConvertTypes[] = {
    FloatType::kFloat32, FloatType::kBFloat16, FloatType::kFloat16,
    FloatType::kFloat8E4M3};

inline std::vector<uint8_t> CpuCast(FloatType from, FloatType to,
                                    const void* src, size_t n) {
  std::vector<uint8_t> out(n * ::reshard::internal::ElementBytes(to));
  ::reshard::internal::CastElements(from, src, to, out.data(), n);
  return out;
}

inline void ExpectCastsAsTheCpu(cuda::DeviceApi& api, FloatType from,
                                const void* src, size_t n) {
  for (FloatType to : kConvertTypes) {
    EXPECT_EQ(Must(RunCast(api, from, to, src, n)), CpuCast(from, to, src, n))
        << "from " << int(from) << " to " << int(to);
  }
}

// Float32 bit patterns at every boundary of the conversions, then random
// bits.
inline std::vector<uint32_t> Float32Edges() {
  std::vector<uint32_t> v = {
      0x00000000, 0x80000000, 0x7F800000, 0xFF800000, 0x7FC00000, 0xFFC00001,
      0x7F800001, 0x00000001, 0x807FFFFF, 0x7F7FFFFF, 0x43E00000, 0x43E00001,
      0x43DFFFFF, 0x43F00000, 0x3A800000, 0x3A800001, 0x3A7FFFFF, 0x3C800000,
      0x3C7FFFFF, 0x3B000000, 0x3B400000, 0x477FF000, 0x477FEFFF, 0x477FE000,
      0x38800000, 0x387FFFFF, 0x33800000, 0x33000000, 0x33000001, 0x3F808000,
      0x3F818000, 0x3F800001, 0x3F840000, 0x3F8C0000, 0xC3E00000};
  std::mt19937 rng(7);
  while (v.size() < 65536) v.push_back(rng());
  return v;
}

// A block's content, by its kind.
enum class QuantizeTestFill { kZero, kNaN, kTiny, kBits, kEdges, kHuge };

// QuantizeTestElement (r, c) of a test matrix as float32 bits: the kind of its
// block (blocks of 128 x 128 whatever the quantization's block) decides.
inline uint32_t QuantizeTestElement(uint64_t r, uint64_t c, std::mt19937& rng) {
  const auto kind = static_cast<QuantizeTestFill>((r / 128 * 5 + c / 128) % 6);
  const uint32_t edges[] = {0x7F800000, 0xFF800000, 0x7FC00000, 0x00000001,
                            0x7F7FFFFF, 0x43E00000, 0x80000000, 0x477FE000};
  std::uniform_real_distribution<float> unit(-1.0f, 1.0f);
  const float x = unit(rng);
  switch (kind) {
    case QuantizeTestFill::kZero:
      return (r + c) % 2 ? 0x80000000 : 0;
    case QuantizeTestFill::kNaN:
      return (r + c) % 3 ? 0x7FC00000 : 0;
    case QuantizeTestFill::kTiny:
      return std::bit_cast<uint32_t>(x * 1e-6f);
    case QuantizeTestFill::kBits:
      return rng();
    case QuantizeTestFill::kEdges:
      return rng() % 16 == 0 ? edges[rng() % 8] : std::bit_cast<uint32_t>(x);
    case QuantizeTestFill::kHuge:
      return std::bit_cast<uint32_t>(x * 60000.0f);
  }
  return 0;
}

// A rows x cols matrix of `type`, narrowed from float32 by the CPU casts.
inline std::vector<uint8_t> QuantizeTestMatrix(FloatType type, uint64_t rows,
                                               uint64_t cols) {
  std::mt19937 rng(static_cast<uint32_t>(rows * 31 + cols));
  std::vector<uint32_t> f32(rows * cols);
  for (uint64_t r = 0; r < rows; ++r) {
    for (uint64_t c = 0; c < cols; ++c)
      f32[r * cols + c] = QuantizeTestElement(r, c, rng);
  }
  return CpuCast(FloatType::kFloat32, type, f32.data(), f32.size());
}

inline void ExpectQuantizesAsTheCpu(cuda::DeviceApi& api, FloatType from,
                                    uint64_t rows, uint64_t cols, uint64_t br,
                                    uint64_t bc) {
  const std::vector<uint8_t> m = QuantizeTestMatrix(from, rows, cols);
  const uint64_t rb = (rows + br - 1) / br, cb = (cols + bc - 1) / bc;
  std::vector<uint8_t> codes(rows * cols);
  std::vector<float> scales(rb * cb);
  const ::reshard::internal::MatrixView view{static_cast<int64_t>(rows),
                                             static_cast<int64_t>(cols),
                                             static_cast<int64_t>(cols)};
  ::reshard::internal::QuantizeE4m3Blocks(
      from, m.data(), view, br, bc, codes.data(), cols, scales.data(), cb);
  const QuantizedOnDevice q =
      Must(RunQuantize(api, from, m.data(), rows, cols, br, bc));
  const std::string shape = std::to_string(rows) + "x" + std::to_string(cols) +
                            " blocks " + std::to_string(br) + "x" +
                            std::to_string(bc);
  EXPECT_EQ(q.codes, codes) << shape;
  ASSERT_EQ(q.scales.size(), scales.size()) << shape;
  EXPECT_EQ(std::memcmp(q.scales.data(), scales.data(), scales.size() * 4), 0)
      << shape;
  // Dequantized to every type, from the CPU's codes and scales.
  for (FloatType to : kConvertTypes) {
    std::vector<uint8_t> y(rows * cols * ::reshard::internal::ElementBytes(to));
    ::reshard::internal::DequantizeE4m3Blocks(
        codes.data(), view, br, bc, scales.data(), cb, to, y.data(), cols);
    EXPECT_EQ(Must(RunDequantize(api, codes, scales, rows, cols, br, bc, to)),
              y)
        << shape << " to " << int(to);
  }
}

// The CPU codec's encoding of `now` over `base` (a message of one region):
// its form, payload and changed elements; `base` becomes `now`.
struct CpuDelta {
  ::reshard::live_internal::DeltaMode mode;
  std::vector<uint8_t> message, payload;
  uint64_t changed = 0;
};

inline CpuDelta EncodeOnCpu(const std::vector<uint8_t>& now,
                            std::vector<uint8_t>* base, uint32_t item) {
  CpuDelta d;
  ::reshard::live_internal::BeginDeltaMessage(1, 5, &d.message);
  d.mode = ::reshard::live_internal::EncodeDeltaRegion(
      now.data(), base->data(), now.size(), item, &d.message, &d.changed);
  d.payload.assign(d.message.begin() +
                       ::reshard::live_internal::kDeltaMessageHeaderBytes +
                       ::reshard::live_internal::kDeltaRegionHeaderBytes,
                   d.message.end());
  return d;
}

// The map and values of the changed elements a runs or bitmap message
// carries, as the CPU decoder applies them.
inline void DecodedMapAndValues(const CpuDelta& d, uint64_t bytes,
                                uint32_t item, std::vector<uint8_t>* map,
                                std::vector<uint8_t>* values) {
  map->assign((bytes / item + 7) / 8, 0);
  std::vector<::reshard::live_internal::DeltaMode> modes;
  EXPECT_OK(::reshard::live_internal::DecodeDeltaMessage(
      d.message.data(), d.message.size(), 5, {bytes}, {item},
      [&](size_t, uint64_t offset, const uint8_t* p, uint64_t length) {
        for (uint64_t b = 0; b < length; b += item) {
          ::reshard::internal::SetDeltaBit(map->data(), (offset + b) / item);
        }
        values->insert(values->end(), p, p + length);
      },
      &modes));
}

// `base` with each element changed with probability `fraction`.
inline std::vector<uint8_t> DeltaTestChange(const std::vector<uint8_t>& base,
                                            uint32_t item, double fraction,
                                            uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<uint8_t> now = base;
  for (size_t e = 0; e < base.size() / item; ++e) {
    if (std::uniform_real_distribution<double>(0, 1)(rng) >= fraction) {
      continue;
    }
    now[e * item + rng() % item] ^= static_cast<uint8_t>(1 + rng() % 255);
  }
  return now;
}

inline void ExpectDeltaAsTheCpu(cuda::DeviceApi& api, uint64_t elements,
                                uint32_t item, double fraction) {
  std::mt19937 rng(static_cast<uint32_t>(elements * 7 + item));
  std::vector<uint8_t> base(elements * item);
  for (uint8_t& b : base) b = static_cast<uint8_t>(rng());
  const std::vector<uint8_t> now = DeltaTestChange(base, item, fraction, item);
  const std::string what = std::to_string(elements) + " elements of " +
                           std::to_string(item) + " bytes, fraction " +
                           std::to_string(fraction);
  const DeltaOnDevice g = Must(RunDeltaEncode(api, now, base, item));
  std::vector<uint8_t> cpu_base = base;
  const CpuDelta cpu = EncodeOnCpu(now, &cpu_base, item);
  EXPECT_EQ(g.changed, cpu.changed) << what;
  EXPECT_EQ(g.base, now) << what;
  EXPECT_EQ(cpu_base, now) << what;
  if (cpu.mode == ::reshard::live_internal::DeltaMode::kBitmap) {
    std::vector<uint8_t> payload = g.map;
    payload.insert(payload.end(), g.values.begin(), g.values.end());
    EXPECT_EQ(payload, cpu.payload) << what;
  } else if (cpu.mode == ::reshard::live_internal::DeltaMode::kRuns) {
    std::vector<uint8_t> map, values;
    DecodedMapAndValues(cpu, now.size(), item, &map, &values);
    EXPECT_EQ(g.map, map) << what;
    EXPECT_EQ(g.values, values) << what;
  }
  // The device's map and values applied to the old base give `now`.
  EXPECT_EQ(Must(RunDeltaApply(api, g.map, g.values, base, item)), now) << what;
}

}  // namespace reshard::testing

#endif  // RESHARD_TESTING_CONVERT_KERNEL_CHECKS_H_
