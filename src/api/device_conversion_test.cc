// A converting reshard into CUDA targets, over the host emulation of the
// device API: the staging lands in device memory through the CUDA
// executor and the kernels convert into the device targets; every target
// byte (weights and scales) equals the same reshard on the CPU into host
// targets. Without a CUDA executor such a plan is refused in one line.

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "api/convert_reshard.h"
#include "exec_cuda/cuda_transport.h"
#include "exec_cuda/fragment_staging.h"
#include "exec_cuda/host_device_api.h"
#include "reshard/api.h"
#include "reshard/plan.h"
#include "testing/device_sides.h"
#include "testing/fp8_layout.h"
#include "testing/must.h"
#include "testing/placement_builders.h"
#include "testing/status_testing.h"
#include "util/float_convert.h"

namespace reshard {
namespace {

using ::reshard::internal::FloatType;
using ::reshard::testing::DeviceSide;
using ::reshard::testing::kHostMemory;
using ::reshard::testing::Must;

constexpr int64_t kRows = testing::kFp8Rows, kCols = testing::kFp8Cols;
const std::string& kScale = testing::kFp8Scale;
using Tensor = testing::Fp8Tensor;
// The weight, the norm (`norm` dtype) and, where given, the scales.
constexpr auto& Layout = testing::Fp8Layout;

// Element i (global row-major index) of a tensor: a value of i alone,
// both signs, magnitudes 0 to about 2.5.
float ValueAt(int64_t i) {
  return static_cast<float>((i * 7919) % 2001 - 1000) * 0.0025f;
}

// Fills every source fragment of `side` (host memory) from ValueAt of
// its elements' global indices, in the tensor's dtype.
void FillSource(const WeightPlacementManifest& p, DeviceSide& side) {
  for (const PlacementFragment* f : p.fragments()) {
    const TensorDescriptor* t = p.FindTensor(f->tensor_id());
    const FloatType type = *internal::FloatTypeOf(t->dtype());
    const Dims& o = f->global_offset();
    const Dims& n = f->local_shape();
    const int64_t rows = n.size() == 2 ? n[0] : 1;
    const int64_t cols = n.back();
    const int64_t global_cols = t->global_shape().back();
    std::vector<float> values;
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t c = 0; c < cols; ++c) {
        const int64_t row = n.size() == 2 ? o[0] + r : 0;
        values.push_back(ValueAt(row * global_cols + o.back() + c));
      }
    }
    internal::CastElements(FloatType::kFloat32, values.data(), type,
                           side.data.at(f->placement_fragment_id()),
                           values.size());
  }
}

size_t CallsStartingWith(const cuda::HostDeviceApi& api,
                         const std::string& prefix) {
  const auto calls = api.calls();
  return std::count_if(calls.begin(), calls.end(), [&](const std::string& c) {
    return c.rfind(prefix, 0) == 0;
  });
}

// Reshards source -> target converting, on the CPU into host targets and
// into targets in emulated memory of `device`; every target fragment must
// hold the same bytes. Returns the emulation's launches of `kernel`.
// `out`, where given, receives the device targets' bytes by fragment id.
size_t ExpectDeviceSameAsCpu(
    const WeightPlacementManifest& source,
    const WeightPlacementManifest& target, int device,
    const std::string& kernel,
    std::map<std::string, std::vector<uint8_t>>* out = nullptr) {
  std::shared_ptr<cuda::HostDeviceApi> api =
      cuda::HostDeviceApi::Make({.devices = 2});
  DeviceSide src(*api, source, kHostMemory, "src");
  FillSource(source, src);
  ReshardOptions options;
  options.plan.convert = true;

  DeviceSide host(*api, target, kHostMemory, "host");
  EXPECT_OK(
      Reshard(source, src.bindings, target, host.bindings, options).status());

  DeviceSide on_device(*api, target, device, "device");
  for (const PlacementFragment* f : target.fragments()) {
    std::memset(on_device.data.at(f->placement_fragment_id()), 0xD7,
                f->nbytes());
  }
  const auto plan =
      Must(LogicalTransferPlan::Make(source, target, {.convert = true}));
  const auto checked = Must(
      CheckedBindings::Make(source, src.bindings, BindingCoverage::kSubset));
  auto transport = cuda::MakeTransportOver(api, {});
  EXPECT_OK(internal::ReshardConverting(plan, source, checked, target,
                                        on_device.bindings, *transport, options,
                                        api)
                .status());
  for (const PlacementFragment* f : target.fragments()) {
    const std::string& id = f->placement_fragment_id();
    EXPECT_EQ(std::memcmp(on_device.data.at(id), host.data.at(id), f->nbytes()),
              0)
        << f->tensor_id() << " fragment " << id;
    if (out != nullptr) {
      const uint8_t* at = on_device.data.at(id);
      (*out)[id].assign(at, at + f->nbytes());
    }
  }
  return CallsStartingWith(*api, kernel);
}

TEST(DeviceConversionTest, BFloat16ToFp8BlocksIntoDeviceTargets) {
  const auto source =
      Layout(1, {"bfloat16", 2, -1}, {"bfloat16", 2, -1}, std::nullopt);
  const auto target = Layout(2, {"float8_e4m3fn", 1, 1}, {"bfloat16", 2, -1},
                             Tensor{"float32", 4, 1});
  // One quantization per weight fragment (TP2 on columns).
  std::map<std::string, std::vector<uint8_t>> out;
  EXPECT_EQ(
      ExpectDeviceSameAsCpu(source, target, 0, "LaunchQuantizeE4m3", &out), 2u);
  // The scales are the whole tensor's: participant t<k> holds block
  // column k.
  std::vector<float> whole(kRows * kCols);
  for (int64_t i = 0; i < kRows * kCols; ++i) whole[i] = ValueAt(i);
  std::vector<uint16_t> bf16(whole.size());
  internal::CastElements(FloatType::kFloat32, whole.data(),
                         FloatType::kBFloat16, bf16.data(), whole.size());
  std::vector<uint8_t> codes(whole.size());
  std::vector<float> scales(6);
  internal::QuantizeE4m3Blocks(FloatType::kBFloat16, bf16.data(),
                               {kRows, kCols, kCols}, 128, 128, codes.data(),
                               kCols, scales.data(), 2);
  int scale_fragments = 0;
  for (const PlacementFragment* f : target.fragments()) {
    if (f->tensor_id() != kScale) continue;
    ++scale_fragments;
    const int64_t col = f->global_offset()[1];
    std::vector<float> got(3);
    std::memcpy(got.data(), out.at(f->placement_fragment_id()).data(), 12);
    EXPECT_EQ(got, (std::vector<float>{scales[col], scales[2 + col],
                                       scales[4 + col]}))
        << f->placement_fragment_id();
    EXPECT_GT(got[0], 0.0f);
  }
  EXPECT_EQ(scale_fragments, 2);
}

TEST(DeviceConversionTest, Float32ToBFloat16CastIntoDeviceTargets) {
  const auto source =
      Layout(2, {"float32", 4, 0}, {"float32", 4, -1}, std::nullopt);
  const auto target =
      Layout(2, {"bfloat16", 2, 1}, {"bfloat16", 2, -1}, std::nullopt);
  // A cast per weight fragment and per (replicated) norm fragment, on
  // device 1.
  EXPECT_EQ(ExpectDeviceSameAsCpu(source, target, 1, "LaunchCast"), 4u);
}

TEST(DeviceConversionTest, Fp8BlocksToBFloat16IntoShardsThatSplitBlocks) {
  // bfloat16 scales (widened by a cast launch); TP2 on rows cuts block row
  // 1 at row 150, so the second shard dequantizes in two launches.
  const auto source = Layout(1, {"float8_e4m3fn", 1, -1}, {"bfloat16", 2, -1},
                             Tensor{"bfloat16", 2, -1});
  const auto target =
      Layout(2, {"bfloat16", 2, 0}, {"bfloat16", 2, -1}, std::nullopt);
  EXPECT_EQ(ExpectDeviceSameAsCpu(source, target, 0, "LaunchDequantizeE4m3"),
            3u);
}

// Without a CUDA executor (this build or machine has none) a converting
// plan with a CUDA target is refused before a byte moves, naming the
// fragment.
TEST(DeviceConversionTest, RefusedWithoutCudaExecutor) {
  if (cuda::StagingDeviceApi(nullptr).ok()) {
    GTEST_SKIP() << "a CUDA device is present: the refusal cannot happen";
  }
  const auto source =
      Layout(2, {"float32", 4, 0}, {"float32", 4, -1}, std::nullopt);
  const auto target =
      Layout(2, {"bfloat16", 2, 1}, {"bfloat16", 2, -1}, std::nullopt);
  std::shared_ptr<cuda::HostDeviceApi> api = cuda::HostDeviceApi::Make({});
  DeviceSide src(*api, source, kHostMemory, "src");
  FillSource(source, src);
  // Host memory bound as CUDA memory: nothing may touch it.
  DeviceSide dst(*api, target, kHostMemory, "dst");
  std::vector<WeightRuntimeBindingManifest> as_cuda;
  for (const WeightPlacementPart& part : target.parts()) {
    BufferBindingOptions o;
    o.instance_id = "dst";
    o.device = "cuda:0";
    std::map<std::string, void*> buffers;
    for (const PlacementFragment& f : part.fragments()) {
      buffers[f.placement_fragment_id()] =
          dst.data.at(f.placement_fragment_id());
    }
    as_cuda.push_back(
        Must(BindBuffers(target, part.participant_id(), buffers, o)));
  }
  ReshardOptions options;
  options.plan.convert = true;
  Result<ReshardReport> r =
      Reshard(source, src.bindings, target, as_cuda, options);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kFailedPrecondition)
      << r.status().ToString();
  const Status why = cuda::StagingDeviceApi(nullptr).status();
  ASSERT_EQ(why.message().rfind("CUDA executor unavailable: ", 0), 0u)
      << why.ToString();
  EXPECT_EQ(r.status().message(),
            "a converting reshard into CUDA memory needs the CUDA executor: "
            "target fragment " +
                as_cuda[0].fragments()[0].placement_fragment_id() +
                " of participant p-d0-p0-e0-t0 (device \"cuda:0\"); " +
                why.message())
      << r.status().ToString();
  // Before a byte moved.
  for (const PlacementFragment* f : target.fragments()) {
    const uint8_t* at = dst.data.at(f->placement_fragment_id());
    EXPECT_EQ(std::count(at, at + f->nbytes(), 0),
              static_cast<ptrdiff_t>(f->nbytes()))
        << f->placement_fragment_id();
  }
}

}  // namespace
}  // namespace reshard
