// The CUDA executor over the host emulation of the device API: every byte
// of the golden scenarios, resharded cubes and the small-moe layouts lands
// as the CPU executor puts it, host to device, device to host and between
// two devices; the emulation's deferred streams prove the executor waits.
#include "exec_cuda/cuda_transport.h"

#include <gtest/gtest.h>

#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "exec_cuda/host_device_api.h"
#include "reshard/api.h"
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

using ::reshard::internal::AllocateHostBuffers;
using ::reshard::internal::HostBuffers;
using ::reshard::testing::Must;

constexpr int kHost = testing::kHostMemory;

// One side in emulated memory of `device` (kHost: host memory), every
// byte 0xD7 first (emulated device memory is host memory the test may
// write).
struct Side : testing::DeviceSide {
  Side(HostDeviceApi& api, const WeightPlacementManifest& m, int device,
       const std::string& instance)
      : DeviceSide(api, m, device, instance) {
    for (const PlacementFragment* f : m.fragments()) {
      std::memset(data.at(f->placement_fragment_id()), 0xD7, f->nbytes());
    }
  }
};

// Reshards source -> target on the CPU executor (host buffers, pattern
// checked) and through the CUDA executor over the emulation with the
// sides in `src_device` / `dst_device`; every target byte must be equal.
// Returns the emulation's counters.
HostDeviceApiCounters ExpectSameAsCpu(
    const WeightPlacementManifest& source,
    const WeightPlacementManifest& target, int src_device, int dst_device,
    const CudaTransportOptions& options = {}) {
  const auto tensors = ::reshard::internal::TensorIndex(source);
  HostBuffers src = Must(AllocateHostBuffers(source, "source"));
  HostBuffers dst = Must(AllocateHostBuffers(target, "target"));
  ::reshard::internal::FillPattern(source, tensors, src);
  auto local = Must(LocalTransport::Make({}));
  EXPECT_OK(
      Reshard(source, src.bindings, target, dst.bindings, *local).status());
  EXPECT_EQ(::reshard::internal::VerifyPattern(target, tensors, dst), "");

  std::shared_ptr<HostDeviceApi> api = HostDeviceApi::Make({.devices = 2});
  HostDeviceApiCounters counters;
  {
    Side s(*api, source, src_device, "source");
    Side t(*api, target, dst_device, "target");
    for (const PlacementFragment* f : source.fragments()) {
      const std::string& id = f->placement_fragment_id();
      std::memcpy(s.data.at(id), src.data.at(id), f->nbytes());
    }
    auto cuda = MakeTransportOver(api, options);
    EXPECT_OK(Reshard(source, s.bindings, target, t.bindings, *cuda).status());
    for (const PlacementFragment* f : target.fragments()) {
      const std::string& id = f->placement_fragment_id();
      EXPECT_EQ(std::memcmp(t.data.at(id), dst.data.at(id), f->nbytes()), 0)
          << "fragment " << id;
    }
    counters = api->counters();
  }
  return counters;
}

TEST(CudaTransportTest, GoldenScenariosMoveEveryByteAsTheCpuExecutor) {
  const auto pairs = testing::ScenarioPairs(uint64_t{8} << 20);
  ASSERT_GE(pairs.size(), 10u);
  for (const auto& pair : pairs) {
    SCOPED_TRACE(pair.name);
    const auto c = ExpectSameAsCpu(pair.source, pair.target, 0, 1);
    EXPECT_EQ(c.bytes_copied + c.kernel_bytes, pair.bytes);
  }
}

TEST(CudaTransportTest, EveryDirectionOfACubeReshard) {
  const Dims shape{6, 48, 96};
  for (int64_t from = 0; from < 3; ++from) {
    for (int64_t to = 0; to < 3; ++to) {
      const auto source = testing::CubeLayout(2, from, shape);
      const auto target = testing::CubeLayout(3, to, shape);
      for (auto [s, d] : std::vector<std::pair<int, int>>{
               {kHost, 0}, {0, kHost}, {0, 0}, {1, 0}, {kHost, kHost}}) {
        SCOPED_TRACE("dim " + std::to_string(from) + " -> " +
                     std::to_string(to) + ", devices " + std::to_string(s) +
                     " -> " + std::to_string(d));
        const auto c = ExpectSameAsCpu(source, target, s, d);
        EXPECT_EQ(c.bytes_copied + c.kernel_bytes, 6u * 48 * 96);
      }
    }
  }
}

// With no copies allowed per region, every device-to-device region goes
// through the gather/scatter kernel (run by the emulation exactly as the
// GPU runs it) and every host-side region row by row.
TEST(CudaTransportTest, TheKernelAndRowCopiesMoveWhatCopiesDoNot) {
  const Dims shape{4, 6, 8, 16};
  CudaTransportOptions options;
  options.max_copies_per_region = 0;
  options.max_queued_per_stream = 8;  // many throttling waits
  for (int64_t from = 0; from < 4; ++from) {
    for (int64_t to = 0; to < 4; ++to) {
      SCOPED_TRACE(std::to_string(from) + " -> " + std::to_string(to));
      const auto source = testing::CubeLayout(2, from, shape);
      const auto target = testing::CubeLayout(2, to, shape);
      const auto d2d = ExpectSameAsCpu(source, target, 1, 0, options);
      EXPECT_EQ(d2d.copies_run, 0u);
      EXPECT_GT(d2d.kernels_run, 0u);
      EXPECT_EQ(d2d.kernel_bytes, 4u * 6 * 8 * 16);
      const auto h2d = ExpectSameAsCpu(source, target, kHost, 0, options);
      EXPECT_EQ(h2d.kernels_run, 0u);
      EXPECT_EQ(h2d.bytes_copied, 4u * 6 * 8 * 16);
    }
  }
}

TEST(CudaTransportTest, SmallMoeTrainerToRolloutLayouts) {
  const ModelSpec model = Must(ModelSpecFromJson(
      testing::ReadTestData("../../examples/models/small-moe.json")));
  const auto source = Must(
      GenerateLayout(model, {.sizes = {.tp = 4, .pp = 2, .ep = 8, .dp = 2}}));
  const auto target = Must(
      GenerateLayout(model, {.sizes = {.tp = 8, .pp = 4, .ep = 2, .dp = 4}}));
  const auto c = ExpectSameAsCpu(source, target, 0, 1);
  EXPECT_GT(c.copies_run, 0u);
}

}  // namespace
}  // namespace reshard::cuda
