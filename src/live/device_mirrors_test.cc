// CUDA fragments in a standing session over the "ucx" exchange (host
// memory only), mirrored in pinned host buffers (live/device_mirrors.h),
// over the host emulation of the device API (LiveSessionOptions::
// device_api): two processes, sources in emulated device memory on rank
// 0, targets in emulated device memory on rank 1.
#include "live/device_mirrors.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "exec_cuda/host_device_api.h"
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

namespace reshard {
namespace {

using ::reshard::testing::DeviceSide;
using ::reshard::testing::InChildren;
using ::reshard::testing::Must;
using ::reshard::testing::TempDir;

WeightPlacementManifest Cube(int64_t tp, int64_t dim) {
  return testing::CubeLayout(tp, dim, {4, 8, 64});
}

uint64_t Bytes(const WeightPlacementManifest& m) {
  uint64_t bytes = 0;
  for (const PlacementFragment* f : m.fragments()) bytes += f->nbytes();
  return bytes;
}

// One rank's side in emulated device memory (rank 0 the sources, rank 1
// the targets) and host buffers of the same fragments for the pattern.
struct DeviceSeat {
  DeviceSeat(cuda::DeviceApi& api, const WeightPlacementManifest& m,
             const std::string& instance)
      : device(api, m, 0, instance),
        host(Must(internal::AllocateHostBuffers(m, instance + "-host"))) {}

  void ToDevice(const WeightPlacementManifest& m) {
    for (const PlacementFragment* f : m.fragments()) {
      const std::string& id = f->placement_fragment_id();
      std::memcpy(device.data.at(id), host.data.at(id), f->nbytes());
    }
  }
  void FromDevice(const WeightPlacementManifest& m) {
    for (const PlacementFragment* f : m.fragments()) {
      const std::string& id = f->placement_fragment_id();
      std::memcpy(host.data.at(id), device.data.at(id), f->nbytes());
    }
  }

  DeviceSide device;
  internal::HostBuffers host;
};

LiveSessionOptions Options(const std::string& session, uint32_t rank,
                           std::shared_ptr<cuda::DeviceApi> api) {
  LiveSessionOptions lo;
  lo.session = session;
  lo.rank = rank;
  lo.ranks = 2;
  lo.timeout = std::chrono::seconds(10);
  lo.device_api = std::move(api);
  // The whole-fragment mirrors (the default pipeline: staged_session_test).
  lo.device_staging = DeviceStaging::kMirror;
  return lo;
}

// Updates 1 to 3 move every byte from the device sources into the device
// targets, values from global element indices; update 4 is refused by
// the target's validator after its bytes arrived in the mirrors, and the
// device targets still hold update 3, byte for byte; update 5 succeeds.
// The emulation copied exactly: on rank 0 the sources once per update, on
// rank 1 the targets once at open and once per successful update. The
// fence is given the device bindings as current (current_bindings).
TEST(LiveDeviceMirrorsTest, DeviceSourcesIntoDeviceTargetsOverUcx) {
  const auto source = Cube(2, 0);
  const auto target = Cube(2, 1);
  const auto tensors = internal::TensorIndex(source);
  for (bool shadow : {false, true}) {
    SCOPED_TRACE(shadow ? "shadow targets" : "in place");
    TempDir dir;
    const auto out = InChildren(2, [&](uint32_t rank) -> std::string {
      auto store = Must(OpenDirectoryRecordStore(dir.path()));
      std::shared_ptr<cuda::HostDeviceApi> api =
          cuda::HostDeviceApi::Make({.devices = 1});
      const auto& side = rank == 0 ? source : target;
      DeviceSeat seat(*api, side, "mirror-" + std::to_string(rank));
      LiveBindings bindings;
      (rank == 0 ? bindings.sources : bindings.targets) = seat.device.bindings;
      uint64_t generation = 0;
      LiveSessionOptions lo = Options("mirrors", rank, api);
      lo.shadow_targets = shadow;
      lo.device_staging_bytes = Bytes(side);  // exactly enough
      // The fence takes the device bindings for the mirrors they have.
      lo.current_bindings = [&]() -> Result<LiveBindings> { return bindings; };
      if (rank == 1) {
        lo.validate_targets = [&]() -> Status {
          return generation == 4 ? Status::DataLoss("refused by the validator")
                                 : Status::OK();
        };
      }
      auto session = LiveSession::Open(*store, source, target, bindings, lo);
      if (!session.ok()) return "open: " + session.status().ToString();
      std::string out;
      for (generation = 1; generation <= 5; ++generation) {
        if (rank == 0) {
          internal::FillPattern(source, tensors, seat.host, nullptr,
                                generation);
          seat.ToDevice(source);
        }
        auto u = (*session)->Update(generation);
        out += u.ok() ? "ok" : "failed";
        if (rank == 1) {
          seat.FromDevice(target);
          const uint64_t holds = generation == 4 ? 3 : generation;
          const std::string bad = internal::VerifyPattern(
              target, tensors, seat.host, nullptr, holds);
          out += bad.empty() ? " holds " + std::to_string(holds) : " " + bad;
        }
        out += "|";
      }
      out += "copied " + std::to_string(api->counters().bytes_copied);
      if (Status st = (*session)->Close(); !st.ok()) return st.ToString();
      return out;
    });
    EXPECT_EQ(out[0],
              "ok|ok|ok|failed|ok|copied " + std::to_string(5 * Bytes(source)));
    EXPECT_EQ(out[1],
              "ok holds 1|ok holds 2|ok holds 3|failed holds 3|ok holds 5|"
              "copied " +
                  std::to_string(5 * Bytes(target)));
  }
}

// A rank whose CUDA fragments take more than device_staging_bytes is
// refused at open, naming the first fragment past the bound, before it
// publishes anything; its peer fails naming it.
TEST(LiveDeviceMirrorsTest, FragmentsPastTheBoundAreRefusedNamingOne) {
  const auto source = Cube(2, 0);
  const auto target = Cube(2, 1);
  const uint64_t bound = Bytes(target) - 1;
  std::string last, participant;  // the fragment that crosses the bound
  uint64_t last_bytes = 0;
  {
    auto api = cuda::HostDeviceApi::Make({.devices = 1});
    DeviceSide side(*api, target, 0, "bound-1");
    const auto& b = side.bindings.back();
    participant = b.participant_id();
    last = b.fragments().back().placement_fragment_id();
    last_bytes = b.fragments().back().nbytes();
  }
  TempDir dir;
  const auto out = InChildren(2, [&](uint32_t rank) -> std::string {
    auto store = Must(OpenDirectoryRecordStore(dir.path()));
    std::shared_ptr<cuda::HostDeviceApi> api =
        cuda::HostDeviceApi::Make({.devices = 1});
    const auto& side = rank == 0 ? source : target;
    DeviceSide seat(*api, side, 0, "bound-" + std::to_string(rank));
    LiveBindings bindings;
    (rank == 0 ? bindings.sources : bindings.targets) = seat.bindings;
    LiveSessionOptions lo = Options("bound", rank, api);
    lo.device_staging_bytes = rank == 1 ? bound : Bytes(source);
    auto session = LiveSession::Open(*store, source, target, bindings, lo);
    return session.ok() ? std::string("open: ok") : session.status().ToString();
  });
  EXPECT_EQ(out[1],
            "FailedPrecondition: live session bound, rank 1: live session "
            "bound: target fragment " +
                last + " of participant " + participant +
                " (device \"cuda:0\", " + std::to_string(last_bytes) +
                " bytes) does not fit the pinned host mirrors of CUDA "
                "memory: " +
                std::to_string(Bytes(target)) +
                " bytes in all, past device_staging_bytes (" +
                std::to_string(bound) + ")");
  EXPECT_THAT(out[0], ::testing::HasSubstr("rank 1"));
}

// Targets opened in host memory and passed to update 2 in emulated device
// memory (the rebind adopts mirrors for them): update 2 lands in the
// device buffers, byte for byte, and the host buffers keep update 1.
TEST(LiveDeviceMirrorsTest, TargetsReboundIntoDeviceMemoryAtAnUpdate) {
  const auto source = Cube(2, 0);
  const auto target = Cube(2, 1);
  const auto tensors = internal::TensorIndex(source);
  TempDir dir;
  const auto out = InChildren(2, [&](uint32_t rank) -> std::string {
    auto store = Must(OpenDirectoryRecordStore(dir.path()));
    std::shared_ptr<cuda::HostDeviceApi> api =
        cuda::HostDeviceApi::Make({.devices = 1});
    const auto& side = rank == 0 ? source : target;
    const std::string instance = "rebound-" + std::to_string(rank);
    DeviceSeat seat(*api, side, instance);
    LiveBindings bindings;
    (rank == 0 ? bindings.sources : bindings.targets) = seat.host.bindings;
    auto session = LiveSession::Open(*store, source, target, bindings,
                                     Options("rebound", rank, api));
    if (!session.ok()) return "open: " + session.status().ToString();
    std::string out;
    for (uint64_t generation = 1; generation <= 2; ++generation) {
      if (rank == 0) {
        internal::FillPattern(source, tensors, seat.host, nullptr, generation);
      }
      LiveBindings now = bindings;
      if (rank == 1 && generation == 2) now.targets = seat.device.bindings;
      auto u = (*session)->Update(generation, &now);
      if (!u.ok()) return u.status().ToString();
      out += "ok|";
    }
    if (rank == 1) {
      out += internal::VerifyPattern(target, tensors, seat.host, nullptr, 1)
                     .empty()
                 ? "host holds 1|"
                 : "host changed|";
      seat.FromDevice(target);
      out += internal::VerifyPattern(target, tensors, seat.host, nullptr, 2);
    }
    if (Status st = (*session)->Close(); !st.ok()) return st.ToString();
    return out;
  });
  EXPECT_EQ(out[0], "ok|ok|");
  EXPECT_EQ(out[1], "ok|ok|host holds 1|");
}

// RefuseDirectDeviceMemory, for the work a session cannot do on device
// memory that an exchange moves directly (delta updates, shadow targets):
// names the first CUDA fragment and the reason; host bindings pass.
TEST(LiveDeviceMirrorsTest, DirectDeviceMemoryRefusalNamesFragmentAndReason) {
  const auto target = Cube(2, 1);
  auto api = cuda::HostDeviceApi::Make({.devices = 1});
  testing::DeviceSide device(*api, target, 0, "direct");
  testing::DeviceSide host(*api, target, testing::kHostMemory, "direct-host");
  const auto& first = device.bindings[0];
  EXPECT_EQ(live_internal::RefuseDirectDeviceMemory(
                device.bindings, "target", "s1", "nccl",
                "delta updates (delta) snapshot, encode and apply a rank's "
                "bytes on the host")
                .ToString(),
            "FailedPrecondition: live session s1: target fragment " +
                first.fragments()[0].placement_fragment_id() +
                " of participant " + first.participant_id() +
                " (device \"cuda:0\"): exchange \"nccl\" moves CUDA memory "
                "directly, and delta updates (delta) snapshot, encode and "
                "apply a rank's bytes on the host, which is not built for "
                "device memory");
  EXPECT_OK(live_internal::RefuseDirectDeviceMemory(
      host.bindings, "target", "s1", "nccl", "any reason"));
}

}  // namespace
}  // namespace reshard
