// Live sessions over "ucx" with CUDA fragments on a real device (ctest
// label `gpu`; skipped without one). The staged paths (the default
// memory=host: the pipeline of pinned chunks, and the whole-fragment
// mirrors) need any CUDA device; the direct path needs a UCX built with
// CUDA support too.
//
// Direct: a two-rank live session over "ucx" with
// the setting memory=cuda, so the exchange declares CUDA memory and the
// session hands it the CUDA fragments directly (no host mirrors). Rank
// 0's sources and rank 1's targets are cudaMalloc'd on device 0 (two
// processes); one uint8 tensor of 512 x 1024, split two ways on dimension
// 0 into four ways on dimension 0, so that every region is one contiguous
// 128 KiB range (never coalesced or packed). Pulled (RMA gets of device
// memory through keys of CUDA memory type) and pushed (tagged messages
// between device buffers), two updates each; every target byte is copied
// back and checked against values derived from global element indices.
//
// CUDA does not survive fork: both ranks are children forked before
// anything touches CUDA or UCX, and the device count and UCX's memory
// types are asked in a child too.
#include <gtest/gtest.h>

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "exec_cuda/cuda_transport.h"
#include "live_ucx/ucx_handles.h"
#include "reshard/backends/cuda_transport.h"
#include "reshard/backends/fs_store.h"
#include "reshard/live.h"
#include "selftest/host_buffers.h"
#include "selftest/pattern.h"
#include "testing/children.h"
#include "testing/device_sides.h"
#include "testing/must.h"
#include "testing/placement_builders.h"
#include "testing/status_testing.h"
#include "testing/temp_dir.h"

namespace reshard::internal {
namespace {

using ::reshard::testing::DeviceSide;
using ::reshard::testing::InChild;
using ::reshard::testing::InChildren;
using ::reshard::testing::Must;
using ::reshard::testing::MustOk;
using ::reshard::testing::TempDir;

// Every fragment of `m` between `host` and its device copy in `device`.
void CopyAll(cuda::DeviceApi& api, const WeightPlacementManifest& m,
             HostBuffers& host, DeviceSide& device, bool to_device) {
  const cuda::StreamHandle stream = Must(api.CreateStream(0));
  for (const PlacementFragment* f : m.fragments()) {
    const std::string& id = f->placement_fragment_id();
    const size_t n = f->nbytes();
    uint8_t* h = host.data.at(id);
    uint8_t* d = device.data.at(id);
    MustOk(to_device ? api.Copy2DAsync(d, n, h, n, n, 1,
                                       cuda::CopyKind::kHostToDevice, stream)
                     : api.Copy2DAsync(h, n, d, n, n, 1,
                                       cuda::CopyKind::kDeviceToHost, stream));
  }
  MustOk(api.SynchronizeStream(stream));
  MustOk(api.DestroyStream(stream));
}

// How a run moves its CUDA fragments: the ucx memory setting, the
// session's device staging and its budget.
struct Staging {
  std::string memory = "cuda";
  DeviceStaging mode = DeviceStaging::kPipeline;
  uint64_t budget = uint64_t{256} << 20;
};

// One rank: "ok holds <g>|" per update on rank 1, "ok|" on rank 0.
std::string Rank(const std::string& dir, uint32_t rank, LiveProtocol protocol,
                 const WeightPlacementManifest& source,
                 const WeightPlacementManifest& target,
                 const Staging& staging = {}) {
  const auto tensors = TensorIndex(source);
  auto store = Must(OpenDirectoryRecordStore(dir));
  std::shared_ptr<cuda::DeviceApi> api = Must(cuda::RuntimeDeviceApi());
  const auto& side = rank == 0 ? source : target;
  DeviceSide device(*api, side, 0, "ucx-cuda-" + std::to_string(rank));
  HostBuffers host =
      Must(AllocateHostBuffers(side, "ucx-cuda-host-" + std::to_string(rank)));
  LiveBindings bindings;
  (rank == 0 ? bindings.sources : bindings.targets) = device.bindings;
  LiveSessionOptions lo;
  lo.session = "ucx-cuda";
  lo.rank = rank;
  lo.ranks = 2;
  lo.timeout = std::chrono::seconds(30);
  lo.protocol = protocol;
  lo.exchange = "ucx";
  lo.exchange_options.Set("memory", staging.memory);
  lo.device_staging = staging.mode;
  lo.device_staging_bytes = staging.budget;
  auto session = LiveSession::Open(*store, source, target, bindings, lo);
  if (!session.ok()) return "open: " + session.status().ToString();
  std::string out;
  for (uint64_t generation = 1; generation <= 2; ++generation) {
    if (rank == 0) {
      FillPattern(source, tensors, host, nullptr, generation);
      CopyAll(*api, source, host, device, /*to_device=*/true);
    }
    auto u = (*session)->Update(generation);
    if (!u.ok()) return out + u.status().ToString();
    out += "ok";
    if (rank == 1) {
      CopyAll(*api, target, host, device, /*to_device=*/false);
      const std::string bad =
          VerifyPattern(target, tensors, host, nullptr, generation);
      out += bad.empty() ? " holds " + std::to_string(generation) : " " + bad;
    }
    out += "|";
  }
  if (Status st = (*session)->Close(); !st.ok()) return out + st.ToString();
  return out;
}

TEST(UcxCudaGpuTest, LiveSessionMovesCudaFragmentsOverUcxDirectly) {
  const std::string here = InChild([] {
    const CudaInfo info = QueryCuda();
    if (!info.built) return std::string("not built");
    if (info.devices < 1) return std::string("no device");
    const uint64_t types =
        Must(Must(UcxContext::Make(UcxOptions{})).MemoryTypes());
    return std::string(
        (types & UCS_BIT(UCS_MEMORY_TYPE_CUDA)) != 0 ? "ready" : "no ucx cuda");
  });
  if (here == "not built") GTEST_SKIP() << "this build has no CUDA";
  if (here == "no device") GTEST_SKIP() << "no CUDA device here";
  if (here == "no ucx cuda") GTEST_SKIP() << "this UCX has no CUDA support";
  ASSERT_EQ(here, "ready");
  const auto source = testing::CubeLayout(2, 0, {512, 1024});
  const auto target = testing::CubeLayout(4, 0, {512, 1024});
  for (LiveProtocol protocol : {LiveProtocol::kPull, LiveProtocol::kPush}) {
    SCOPED_TRACE(protocol == LiveProtocol::kPull ? "pull" : "push");
    TempDir dir;
    const std::vector<std::string> out = InChildren(2, [&](uint32_t rank) {
      return Rank(dir.path(), rank, protocol, source, target);
    });
    EXPECT_EQ(out[0], "ok|ok|");
    EXPECT_EQ(out[1], "ok holds 1|ok holds 2|");
  }
}

// Staged: the default memory=host over any UCX, strided regions (a split
// on dimension 0 into one on dimension 1 of float32 [32, 256, 512]: 8 MiB
// per fragment), through the pipeline with a budget of one 4 MiB chunk
// (protocol auto and push), and through whole-fragment mirrors.
TEST(UcxCudaGpuTest, LiveSessionStagesCudaFragmentsOverAnyUcx) {
  const std::string here = InChild([] {
    const CudaInfo info = QueryCuda();
    if (!info.built) return std::string("not built");
    return std::string(info.devices < 1 ? "no device" : "ready");
  });
  if (here == "not built") GTEST_SKIP() << "this build has no CUDA";
  if (here == "no device") GTEST_SKIP() << "no CUDA device here";
  ASSERT_EQ(here, "ready");
  const auto source = testing::CubeLayout(2, 0, {32, 256, 512});
  const auto target = testing::CubeLayout(2, 1, {32, 256, 512});
  struct Run {
    const char* name;
    LiveProtocol protocol;
    Staging staging;
  };
  const std::vector<Run> runs = {
      {"pipeline, auto",
       LiveProtocol::kAuto,
       {"host", DeviceStaging::kPipeline, uint64_t{4} << 20}},
      {"pipeline, push",
       LiveProtocol::kPush,
       {"host", DeviceStaging::kPipeline, uint64_t{8} << 20}},
      {"mirrors, auto",
       LiveProtocol::kAuto,
       {"host", DeviceStaging::kMirror, uint64_t{64} << 20}}};
  for (const Run& run : runs) {
    SCOPED_TRACE(run.name);
    TempDir dir;
    const std::vector<std::string> out = InChildren(2, [&](uint32_t rank) {
      return Rank(dir.path(), rank, run.protocol, source, target, run.staging);
    });
    EXPECT_EQ(out[0], "ok|ok|");
    EXPECT_EQ(out[1], "ok holds 1|ok holds 2|");
  }
}

}  // namespace
}  // namespace reshard::internal
