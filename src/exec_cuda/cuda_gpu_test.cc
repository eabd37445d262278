// Tests that need a CUDA device (ctest label `gpu`; skipped without one):
// the CUDA executor over the real runtime moves every byte of resharded
// cubes and the small-moe layouts host to device, device to device and
// device to host. scripts/gpu-check.sh runs them where there is a GPU.
#include <gtest/gtest.h>

#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "exec_cuda/cuda_transport.h"
#include "reshard/api.h"
#include "reshard/backends/cuda_transport.h"
#include "reshard/backends/local_transport.h"
#include "reshard/gen.h"
#include "selftest/host_buffers.h"
#include "selftest/pattern.h"
#include "testing/device_sides.h"
#include "testing/must.h"
#include "testing/placement_builders.h"
#include "testing/status_testing.h"

namespace reshard::cuda {
namespace {

using ::reshard::testing::Must;

// Skips the test where there is no CUDA device.
#define REQUIRE_CUDA_DEVICE()                                     \
  do {                                                            \
    const CudaInfo info = QueryCuda();                            \
    if (!info.built) GTEST_SKIP() << "this build has no CUDA";    \
    if (info.devices == 0) GTEST_SKIP() << "no CUDA device here"; \
  } while (0)

using DeviceSide = testing::DeviceSide;

// Moves host fragments to or from a device side with the executor itself
// (a reshard between identical placements is a copy of every fragment).
void ExpectDeviceReshardMatchesCpu(const WeightPlacementManifest& source,
                                   const WeightPlacementManifest& target) {
  std::shared_ptr<DeviceApi> api = Must(RuntimeDeviceApi());
  const int last = Must(api->DeviceCount()) - 1;
  const auto tensors = ::reshard::internal::TensorIndex(source);
  auto src =
      Must(::reshard::internal::AllocateHostBuffers(source, "host-source"));
  auto dst =
      Must(::reshard::internal::AllocateHostBuffers(target, "host-target"));
  ::reshard::internal::FillPattern(source, tensors, src);
  auto cuda = Must(MakeCudaTransport());
  DeviceSide s(*api, source, 0, "source");
  DeviceSide t(*api, target, last, "target");
  // Host -> device 0, device 0 -> device `last` (the reshard), device ->
  // host; every byte checked on the host.
  ASSERT_OK(Reshard(source, src.bindings, source, s.bindings, *cuda).status());
  ASSERT_OK(Reshard(source, s.bindings, target, t.bindings, *cuda).status());
  ASSERT_OK(Reshard(target, t.bindings, target, dst.bindings, *cuda).status());
  EXPECT_EQ(::reshard::internal::VerifyPattern(target, tensors, dst), "");
}

TEST(CudaGpuTest, CubeReshardsThroughDeviceMemory) {
  REQUIRE_CUDA_DEVICE();
  const Dims shape{16, 256, 512};
  for (int64_t from = 0; from < 3; ++from) {
    for (int64_t to = 0; to < 3; ++to) {
      SCOPED_TRACE(std::to_string(from) + " -> " + std::to_string(to));
      ExpectDeviceReshardMatchesCpu(testing::CubeLayout(4, from, shape),
                                    testing::CubeLayout(8, to, shape));
    }
  }
}

TEST(CudaGpuTest, SmallMoeTrainerToRollout) {
  REQUIRE_CUDA_DEVICE();
  const ModelSpec model = Must(ModelSpecFromJson(
      testing::ReadTestData("../../examples/models/small-moe.json")));
  ExpectDeviceReshardMatchesCpu(
      Must(GenerateLayout(model,
                          {.sizes = {.tp = 4, .pp = 2, .ep = 8, .dp = 2}})),
      Must(GenerateLayout(model,
                          {.sizes = {.tp = 8, .pp = 4, .ep = 2, .dp = 4}})));
}

TEST(CudaGpuTest, TheRuntimeReportsItsVersionAndDevices) {
  REQUIRE_CUDA_DEVICE();
  const CudaInfo info = QueryCuda();
  EXPECT_FALSE(info.runtime.empty());
  EXPECT_GE(info.devices, 1);
}

}  // namespace
}  // namespace reshard::cuda
