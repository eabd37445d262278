// Tests that need a CUDA device (ctest label `gpu`; skipped without one):
// the FP8 and delta kernels on the GPU, through the CUDA runtime's device
// API, bit for bit against the CPU functions (the same checks the host
// emulation passes in convert_kernels_test.cc).
#include <gtest/gtest.h>

#include <cstdint>
#include <memory>
#include <vector>

#include "exec_cuda/cuda_transport.h"
#include "reshard/backends/cuda_transport.h"
#include "testing/convert_kernel_checks.h"
#include "testing/must.h"

namespace reshard::cuda {
namespace {

using ::reshard::testing::Must;

// The runtime's device API, or a skip where there is no CUDA device.
#define REQUIRE_CUDA_API(api)                                   \
  const CudaInfo info = QueryCuda();                            \
  if (!info.built) GTEST_SKIP() << "this build has no CUDA";    \
  if (info.devices == 0) GTEST_SKIP() << "no CUDA device here"; \
  std::shared_ptr<DeviceApi> api = Must(RuntimeDeviceApi())

TEST(ConvertKernelsGpuTest, CastsEveryValueAsTheCpu) {
  REQUIRE_CUDA_API(api);
  std::vector<uint16_t> all16(65536);
  for (uint32_t i = 0; i < all16.size(); ++i) all16[i] = uint16_t(i);
  std::vector<uint8_t> all8(256);
  for (uint32_t i = 0; i < all8.size(); ++i) all8[i] = uint8_t(i);
  const std::vector<uint32_t> f32 = testing::Float32Edges();
  testing::ExpectCastsAsTheCpu(*api, FloatType::kBFloat16, all16.data(),
                               all16.size());
  testing::ExpectCastsAsTheCpu(*api, FloatType::kFloat16, all16.data(),
                               all16.size());
  testing::ExpectCastsAsTheCpu(*api, FloatType::kFloat8E4M3, all8.data(),
                               all8.size());
  testing::ExpectCastsAsTheCpu(*api, FloatType::kFloat32, f32.data(),
                               f32.size());
}

TEST(ConvertKernelsGpuTest, QuantizesAndDequantizesBlocksAsTheCpu) {
  REQUIRE_CUDA_API(api);
  for (FloatType from :
       {FloatType::kFloat32, FloatType::kBFloat16, FloatType::kFloat16}) {
    testing::ExpectQuantizesAsTheCpu(*api, from, 300, 700, 128, 128);
    testing::ExpectQuantizesAsTheCpu(*api, from, 7, 130, 3, 5);
    testing::ExpectQuantizesAsTheCpu(*api, from, 1, 1, 128, 128);
    testing::ExpectQuantizesAsTheCpu(*api, from, 1024, 2048, 128, 128);
  }
}

TEST(ConvertKernelsGpuTest, DeltaEncodeAndApplyMatchTheCpuCodec) {
  REQUIRE_CUDA_API(api);
  for (uint32_t item : {1u, 2u, 3u, 4u, 8u}) {
    for (double fraction : {0.0, 0.001, 0.05, 0.3, 1.0}) {
      testing::ExpectDeltaAsTheCpu(*api, 5000, item, fraction);
      testing::ExpectDeltaAsTheCpu(*api, 1 << 20, item, fraction);
    }
  }
}

}  // namespace
}  // namespace reshard::cuda
