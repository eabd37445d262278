// The FP8 and delta kernels through HostDeviceApi's launches, bit for bit
// against the CPU functions they share their arithmetic with
// (util/float_convert.h, live/delta_codec.h): every bfloat16 and float16
// value, every float8_e4m3fn code, float32 edge values and random bits,
// quantized blocks with NaN, infinities, subnormals, the largest
// magnitudes, zero blocks and partial edge blocks; delta regions of every
// change fraction; and each launch's refusals with their exact messages.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <memory>
#include <random>
#include <vector>

#include "exec_cuda/host_device_api.h"
#include "live/delta_codec.h"
#include "testing/convert_kernel_checks.h"
#include "testing/convert_kernel_runs.h"
#include "testing/must.h"
#include "testing/status_testing.h"
#include "util/float_convert.h"

namespace reshard::cuda {
namespace {

using ::reshard::testing::ExpectCastsAsTheCpu;
using ::reshard::testing::ExpectDeltaAsTheCpu;
using ::reshard::testing::ExpectQuantizesAsTheCpu;
using ::reshard::testing::Must;
using ::reshard::testing::StatusIs;

std::unique_ptr<HostDeviceApi> Api() { return HostDeviceApi::Make({}); }

TEST(ConvertKernelsTest, CastsEvery16BitValueAsTheCpu) {
  std::vector<uint16_t> all(65536);
  for (uint32_t i = 0; i < all.size(); ++i) all[i] = static_cast<uint16_t>(i);
  ExpectCastsAsTheCpu(*Api(), FloatType::kBFloat16, all.data(), all.size());
  ExpectCastsAsTheCpu(*Api(), FloatType::kFloat16, all.data(), all.size());
}

TEST(ConvertKernelsTest, CastsEveryE4m3CodeAsTheCpu) {
  std::vector<uint8_t> all(256);
  for (uint32_t i = 0; i < all.size(); ++i) all[i] = static_cast<uint8_t>(i);
  ExpectCastsAsTheCpu(*Api(), FloatType::kFloat8E4M3, all.data(), all.size());
  // Spot checks of the shared arithmetic itself: 448, 2^-6, 2^-9, NaN.
  auto api = Api();
  const uint8_t codes[] = {0x7E, 0x08, 0x01, 0xFF};
  const auto f32 = Must(testing::RunCast(*api, FloatType::kFloat8E4M3,
                                         FloatType::kFloat32, codes, 4));
  uint32_t bits[4];
  std::memcpy(bits, f32.data(), 16);
  EXPECT_EQ(bits[0], 0x43E00000u);
  EXPECT_EQ(bits[1], 0x3C800000u);
  EXPECT_EQ(bits[2], 0x3B000000u);
  EXPECT_EQ(bits[3], 0xFFC00000u);
}

TEST(ConvertKernelsTest, CastsFloat32EdgesAndRandomBitsAsTheCpu) {
  const std::vector<uint32_t> v = testing::Float32Edges();
  ExpectCastsAsTheCpu(*Api(), FloatType::kFloat32, v.data(), v.size());
}

TEST(ConvertKernelsTest, QuantizesAndDequantizesBlocksAsTheCpu) {
  for (FloatType from :
       {FloatType::kFloat32, FloatType::kBFloat16, FloatType::kFloat16}) {
    ExpectQuantizesAsTheCpu(*Api(), from, 300, 700, 128, 128);  // partial edges
    ExpectQuantizesAsTheCpu(*Api(), from, 7, 130, 3, 5);
    ExpectQuantizesAsTheCpu(*Api(), from, 1, 1, 128, 128);
  }
}

TEST(ConvertKernelsTest, QuantizesKnownBlocks) {
  // A zero block's scale is 1e-4 / 448; 448 in a block of its own keeps
  // its code; infinity makes the factor 0, so the block's finite elements
  // are zeros and the infinity the default NaN of inf * 0, negative as on
  // x86 (0xFF; a GPU's own would be positive, MulX86 rewrites it).
  const float x[] = {0.0f, -0.0f, 448.0f, 1.0f, INFINITY, 2.0f};
  auto api = Api();
  const testing::QuantizedOnDevice q =
      Must(testing::RunQuantize(*api, FloatType::kFloat32, x, 3, 2, 1, 2));
  EXPECT_EQ(q.codes,
            (std::vector<uint8_t>{0x00, 0x80, 0x7E, 0x38, 0xFF, 0x00}));
  EXPECT_EQ(q.scales[0], 1e-4f / 448.0f);
  EXPECT_EQ(q.scales[1], 1.0f);
  EXPECT_EQ(q.scales[2], INFINITY);
}

TEST(ConvertKernelsTest, NanProductsAreX86s) {
  // X86NanProduct (what the GPU applies to its products) agrees with this
  // CPU's multiplication bit for bit wherever one operand is NaN or the
  // result is (NaN payloads and signs, infinity times zero); with both
  // operands NaN the CPU's pick depends on the compiler's operand order,
  // and only NaN is promised.
  const uint32_t values[] = {0x7FC00000, 0xFFC00000, 0x7F800001, 0xFF812345,
                             0x7FFFFFFF, 0x7F800000, 0xFF800000, 0x00000000,
                             0x80000000, 0x3F800000, 0xC3E00000, 0x00000001};
  for (uint32_t a : values) {
    for (uint32_t b : values) {
      const float fa = std::bit_cast<float>(a), fb = std::bit_cast<float>(b);
      volatile float p = fa * fb;  // this CPU's product
      if (std::isnan(fa) && std::isnan(fb)) {
        EXPECT_TRUE(std::isnan(internal::X86NanProduct(fa, fb, p)));
        continue;
      }
      EXPECT_EQ(std::bit_cast<uint32_t>(internal::X86NanProduct(fa, fb, p)),
                std::bit_cast<uint32_t>(static_cast<float>(p)))
          << std::hex << a << " * " << b;
      // A GPU's NaN result, rewritten, is this CPU's too.
      const float gpu = (std::bit_cast<uint32_t>(static_cast<float>(p)) &
                         0x7FFFFFFF) > 0x7F800000
                            ? std::bit_cast<float>(0x7FFFFFFFu)
                            : static_cast<float>(p);
      EXPECT_EQ(std::bit_cast<uint32_t>(internal::X86NanProduct(fa, fb, gpu)),
                std::bit_cast<uint32_t>(static_cast<float>(p)))
          << std::hex << a << " * " << b;
    }
  }
}

TEST(ConvertKernelsTest, DeltaEncodeAndApplyMatchTheCpuCodec) {
  for (uint32_t item : {1u, 2u, 3u, 4u, 8u}) {
    for (double fraction : {0.0, 0.001, 0.05, 0.3, 1.0}) {
      ExpectDeltaAsTheCpu(*Api(), 5000, item, fraction);  // three tiles
    }
    ExpectDeltaAsTheCpu(*Api(), 1, item, 1.0);
    ExpectDeltaAsTheCpu(*Api(), 2048 * 2, item, 0.1);  // whole tiles
  }
  ExpectDeltaAsTheCpu(*Api(), 0, 2, 0.0);
}

TEST(ConvertKernelsTest, DeltaApplyReadsTheCpuBitmapPayload) {
  // A bitmap payload of the CPU codec, applied by the kernel, and with
  // fewer values than bits: the elements past the values stay.
  std::vector<uint8_t> base(3000 * 2, 0x11);
  const std::vector<uint8_t> now = testing::DeltaTestChange(base, 2, 0.2, 3);
  std::vector<uint8_t> cpu_base = base;
  const testing::CpuDelta cpu = testing::EncodeOnCpu(now, &cpu_base, 2);
  ASSERT_EQ(cpu.mode, live_internal::DeltaMode::kBitmap);
  const size_t map_bytes = (3000 + 7) / 8;
  const std::vector<uint8_t> map(cpu.payload.begin(),
                                 cpu.payload.begin() + map_bytes);
  std::vector<uint8_t> values(cpu.payload.begin() + map_bytes,
                              cpu.payload.end());
  auto api = Api();
  EXPECT_EQ(Must(testing::RunDeltaApply(*api, map, values, base, 2)), now);
  values.resize(4);  // the first two changed elements only
  std::vector<uint8_t> two = base;
  uint64_t applied = 0;
  for (uint64_t e = 0; e < 3000 && applied < 2; ++e) {
    if (!internal::DeltaBit(map.data(), e)) continue;
    std::memcpy(&two[e * 2], &values[applied * 2], 2);
    ++applied;
  }
  EXPECT_EQ(Must(testing::RunDeltaApply(*api, map, values, base, 2)), two);
}

TEST(ConvertKernelsTest, LaunchesRunOnTheStreamsDeferredQueue) {
  // Queued at the launch, run when the stream is synchronised: device
  // memory keeps Malloc's 0xDB until then.
  auto api = Api();
  const StreamHandle s = Must(api->CreateStream(0));
  const uint16_t in[4] = {0x3F80, 0xBF80, 0x7F80, 0x0001};  // bfloat16
  auto* out = static_cast<uint8_t*>(Must(api->Malloc(0, 4)));
  CastArgs c;
  c.src = in;
  c.from = FloatType::kBFloat16;
  c.dst = out;
  c.to = FloatType::kFloat8E4M3;
  c.elements = 4;
  ASSERT_OK(api->LaunchCast(c, s));
  EXPECT_EQ(std::vector<uint8_t>(out, out + 4),
            (std::vector<uint8_t>{0xDB, 0xDB, 0xDB, 0xDB}));
  EXPECT_EQ(api->counters().kernels_run, 0u);
  ASSERT_OK(api->SynchronizeStream(s));
  // 1, -1, infinity saturated to 448, a subnormal bfloat16 to zero.
  EXPECT_EQ(std::vector<uint8_t>(out, out + 4),
            (std::vector<uint8_t>{0x38, 0xB8, 0x7E, 0x00}));
  EXPECT_EQ(api->counters().kernels_run, 1u);
  EXPECT_EQ(api->calls()[2], "LaunchCast stream=1 elements=4");
  ASSERT_OK(api->Free(out));
}

constexpr StatusCode kInvalid = StatusCode::kInvalidArgument;

TEST(ConvertKernelsTest, QuantizeAndCastLaunchesRefuseBadArguments) {
  auto api = Api();
  const StreamHandle s = Must(api->CreateStream(0));
  void* dev = Must(api->Malloc(0, 64));
  uint8_t host[64] = {};
  QuantizeArgs q;
  q.src = host;
  q.from = FloatType::kFloat8E4M3;
  q.rows = 2;
  q.cols = 4;
  q.src_row_stride = q.dst_row_stride = 4;
  q.dst = host;
  q.scales = reinterpret_cast<float*>(host);
  q.scale_row_stride = 1;
  q.workspace = reinterpret_cast<uint32_t*>(host);
  EXPECT_THAT(api->LaunchQuantizeE4m3(q, s),
              StatusIs(kInvalid,
                       "cudaErrorInvalidValue: the quantized source is "
                       "float8_e4m3fn, not float32, bfloat16 or float16"));
  q.from = FloatType::kBFloat16;
  q.block_rows = 0;
  EXPECT_THAT(
      api->LaunchQuantizeE4m3(q, s),
      StatusIs(kInvalid, "cudaErrorInvalidValue: block 0 x 128 is empty"));
  q.block_rows = 128;
  q.src_row_stride = 3;
  EXPECT_THAT(api->LaunchQuantizeE4m3(q, s),
              StatusIs(kInvalid,
                       "cudaErrorInvalidValue: src row stride 3 is "
                       "below the 4 columns"));
  q.src_row_stride = 4;
  q.workspace = nullptr;
  EXPECT_THAT(api->LaunchQuantizeE4m3(q, s),
              StatusIs(kInvalid, "cudaErrorInvalidValue: workspace is null"));
  CastArgs c;
  c.src = host;
  c.from = FloatType::kFloat16;
  c.dst = dev;
  c.to = FloatType::kFloat32;
  c.elements = 20;
  EXPECT_THAT(api->LaunchCast(c, s),
              StatusIs(kInvalid,
                       "cudaErrorInvalidValue: the cast kernel reaches 80 "
                       "bytes past dst, beyond the end of its allocation on "
                       "device 0 (64 bytes past dst)"));
  c.elements = uint64_t{1} << 63;
  EXPECT_THAT(api->LaunchCast(c, s),
              StatusIs(kInvalid,
                       "cudaErrorInvalidValue: src's bytes overflows uint64"));
  c.elements = 1;
  EXPECT_THAT(api->LaunchCast(c, 99),
              StatusIs(kInvalid,
                       "cudaErrorInvalidResourceHandle: stream 99 is not a "
                       "live stream of this HostDeviceApi (never created, or "
                       "destroyed)"));
  // Nothing ran; each call is logged, refusals with their error.
  ASSERT_OK(api->SynchronizeStream(s));
  EXPECT_EQ(api->counters().kernels_run, 0u);
  const std::vector<std::string> calls = api->calls();
  ASSERT_EQ(calls.size(), 10u);
  EXPECT_EQ(calls[2],
            "LaunchQuantizeE4m3 stream=1 rows=2 cols=4 refused: "
            "cudaErrorInvalidValue");
  EXPECT_EQ(calls[7],
            "LaunchCast stream=1 elements=9223372036854775808 refused: "
            "cudaErrorInvalidValue");
  EXPECT_EQ(calls[8],
            "LaunchCast stream=99 elements=1 refused: "
            "cudaErrorInvalidResourceHandle");
  ASSERT_OK(api->Free(dev));
}

TEST(ConvertKernelsTest, DequantizeAndDeltaLaunchesRefuseBadArguments) {
  HostDeviceApiOptions options;
  options.devices = 2;
  auto api = HostDeviceApi::Make(options);
  const StreamHandle s = Must(api->CreateStream(0));
  void* other = Must(api->Malloc(1, 64));
  uint8_t host[64] = {};
  DequantizeArgs d;
  d.src = static_cast<uint8_t*>(other);
  d.rows = d.cols = d.src_row_stride = d.dst_row_stride = 2;
  d.scales = reinterpret_cast<float*>(host);
  d.scale_row_stride = 1;
  d.dst = host;
  EXPECT_THAT(api->LaunchDequantizeE4m3(d, s),
              StatusIs(StatusCode::kFailedPrecondition,
                       "cudaErrorPeerAccessNotEnabled: stream 1 of device 0 "
                       "runs the dequantize kernel on src, memory of device "
                       "1, without peer access from device 0 to device 1"));
  ASSERT_OK(api->EnablePeerAccess(0, 1));
  EXPECT_OK(api->LaunchDequantizeE4m3(d, s));
  DeltaArgs a;
  a.now = a.base = a.map = a.values = a.dst = host;
  a.tile_counts = reinterpret_cast<uint64_t*>(host + 32);
  a.elements = 4;
  a.item = 0;
  EXPECT_THAT(api->LaunchDeltaEncode(a, s),
              StatusIs(kInvalid, "cudaErrorInvalidValue: item is 0 bytes"));
  a.item = 2;
  a.value_bytes = 3;
  EXPECT_THAT(api->LaunchDeltaEncode(a, s),
              StatusIs(kInvalid,
                       "cudaErrorInvalidValue: value_bytes 3 is below the "
                       "region's 8 bytes (every element may have changed)"));
  a.map = nullptr;
  EXPECT_THAT(api->LaunchDeltaApply(a, s),
              StatusIs(kInvalid, "cudaErrorInvalidValue: map is null"));
  ASSERT_OK(api->SynchronizeStream(s));
  EXPECT_EQ(api->counters().kernels_run, 1u);
  const std::vector<std::string> calls = api->calls();
  ASSERT_GE(calls.size(), 2u);
  EXPECT_EQ(calls[calls.size() - 2],
            "LaunchDeltaApply stream=1 elements=4 item=2 refused: "
            "cudaErrorInvalidValue");
  ASSERT_OK(api->Free(other));
}

}  // namespace
}  // namespace reshard::cuda
