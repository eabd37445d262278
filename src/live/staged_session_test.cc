// Standing sessions over the "inproc" exchange (host memory only) with
// CUDA fragments staged through the pipeline of pinned chunks
// (LiveSessionOptions::device_staging kPipeline; live/staged_exchange.h):
// two ranks as threads, each with its own host emulation of the device
// API, rank 0 holding every source and rank 1 every target in emulated
// device memory; fragments larger than device_staging_bytes, which the
// whole-fragment mirrors would refuse. Targets are checked byte for byte
// against each update's pattern (values from the global element index).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "exec_cuda/host_device_api.h"
#include "live/staged_exchange.h"
#include "reshard/backends/cuda_transport.h"
#include "reshard/backends/fs_store.h"
#include "reshard/live.h"
#include "selftest/host_buffers.h"
#include "selftest/pattern.h"
#include "testing/children.h"
#include "testing/device_sides.h"
#include "testing/fp8_layout.h"
#include "testing/must.h"
#include "testing/placement_builders.h"
#include "testing/status_testing.h"
#include "testing/temp_dir.h"

namespace reshard {
namespace {

using ::reshard::testing::DeviceSide;
using ::reshard::testing::Must;
using ::reshard::testing::TempDir;

// float32 [32, 256, 512]: fragments of 8 MiB on each side, strided targets.
WeightPlacementManifest Source() {
  return testing::CubeLayout(2, 0, {32, 256, 512});
}
WeightPlacementManifest Target() {
  return testing::CubeLayout(2, 1, {32, 256, 512});
}

internal::HostBuffers ViewOf(const DeviceSide& side) {
  internal::HostBuffers view;
  for (const auto& [id, p] : side.data) view.data[id] = p;
  return view;
}

struct RankResult {
  std::string out;
  uint64_t pinned_peak = 0;
};

// Rank r (0: every source, 1: every target) runs updates 1 and 2 and
// reports per update its outcome and whether its targets hold the
// pattern. With `refused`, rank 1's validator refuses that update; with
// shadow targets the targets are then checked to hold the update before.
RankResult StagedRank(uint32_t r, const std::string& dir, LiveSessionOptions o,
                      uint64_t refused = 0) {
  uint64_t current = 0;
  if (refused != 0 && r == 1) {
    o.validate_targets = [&current, refused]() -> Status {
      return current == refused ? Status::DataLoss("refused by the validator")
                                : Status::OK();
    };
  }
  const auto source = Source();
  const auto target = Target();
  const auto tensors = internal::TensorIndex(source);
  auto store = Must(OpenDirectoryRecordStore(dir));
  std::shared_ptr<cuda::HostDeviceApi> api =
      cuda::HostDeviceApi::Make({.devices = 1});
  DeviceSide side(*api, r == 0 ? source : target, 0,
                  "staged-" + std::to_string(r));
  const internal::HostBuffers view = ViewOf(side);
  LiveBindings bindings;
  (r == 0 ? bindings.sources : bindings.targets) = side.bindings;
  o.rank = r;
  o.device_api = api;
  RankResult result;
  auto session = LiveSession::Open(*store, source, target, bindings, o);
  if (!session.ok()) return {session.status().ToString()};
  for (uint64_t g = 1; g <= 2; ++g) {
    current = g;
    if (r == 0) internal::FillPattern(source, tensors, view, nullptr, g);
    auto u = (*session)->Update(g);
    if (!u.ok()) {
      result.out += u.status().ToString();
      if (r == 1 && o.shadow_targets) {
        const std::string bad =
            internal::VerifyPattern(target, tensors, view, nullptr, g - 1);
        result.out += bad.empty() ? " holds " + std::to_string(g - 1) : bad;
      }
      result.out += "|";
      continue;
    }
    result.out += "verified " + std::to_string(u->verified_regions);
    if (r == 1) {
      const std::string bad =
          internal::VerifyPattern(target, tensors, view, nullptr, g);
      result.out += bad.empty() ? " exact" : " " + bad;
    }
    result.out += "|";
  }
  Status closed = (*session)->Close();
  if (!closed.ok()) result.out += closed.ToString();
  result.pinned_peak = api->counters().pinned_peak;
  return result;
}

LiveSessionOptions StagedOptions(const std::string& session) {
  LiveSessionOptions o;
  o.session = session;
  o.ranks = 2;
  o.timeout = std::chrono::seconds(10);
  o.exchange = "inproc";
  o.protocol = LiveProtocol::kPush;
  o.device_staging_bytes = live_internal::kStagedChunkBytes;  // one chunk
  return o;
}

std::vector<RankResult> RunBoth(const LiveSessionOptions& o) {
  TempDir dir;
  std::vector<RankResult> out(2);
  std::thread one([&] { out[1] = StagedRank(1, dir.path(), o); });
  out[0] = StagedRank(0, dir.path(), o);
  one.join();
  return out;
}

// Two updates land byte for byte and verify every region (hashed from the
// staged chunks); each rank's pinned host memory peaked at one chunk, the
// budget, under its 16 MiB of CUDA fragments.
TEST(StagedSessionTest, DeviceFragmentsMoveThroughOneChunkOfPinnedMemory) {
  const auto out = RunBoth(StagedOptions("staged"));
  EXPECT_EQ(out[0].out, "verified 0|verified 0|");  // the receiver verifies
  EXPECT_EQ(out[1].out, "verified 4 exact|verified 4 exact|");
  for (const RankResult& r : out) {
    EXPECT_EQ(r.pinned_peak, live_internal::kStagedChunkBytes);
  }
}

// Under protocol auto over an exchange that pulls on one host (inproc),
// with both ranks on this host: the CUDA fragments in the published
// bindings make the session push through the pipeline (the mirrors would
// refuse 8 MiB fragments under a one-chunk budget), on both ranks alike.
TEST(StagedSessionTest, AutoProtocolPushesCudaFragmentsThroughThePipeline) {
  LiveSessionOptions o = StagedOptions("staged-auto");
  o.protocol = LiveProtocol::kAuto;
  const auto out = RunBoth(o);
  EXPECT_EQ(out[0].out, "verified 0|verified 0|");
  EXPECT_EQ(out[1].out, "verified 4 exact|verified 4 exact|");
  for (const RankResult& r : out) {
    EXPECT_EQ(r.pinned_peak, live_internal::kStagedChunkBytes);
  }
}

// The same over "ucx" (real UCX over shared memory or TCP), the ranks two
// processes, with a budget of two chunks (one window packs while the other
// moves; still half of a rank's 16 MiB of CUDA fragments, which the
// mirrors would refuse): the chunks travel as UCX tagged messages under
// their chunk tags; each rank's pinned peak is the two chunks.
TEST(StagedSessionTest, DeviceFragmentsMoveThroughChunksOverUcx) {
  LiveSessionOptions o = StagedOptions("staged-ucx");
  o.exchange = "ucx";
  o.device_staging_bytes = 2 * live_internal::kStagedChunkBytes;
  TempDir dir;
  const auto out = testing::InChildren(2, [&](uint32_t r) -> std::string {
    const RankResult result = StagedRank(r, dir.path(), o);
    return result.out + " peak " + std::to_string(result.pinned_peak);
  });
  const std::string peak =
      " peak " + std::to_string(2 * live_internal::kStagedChunkBytes);
  EXPECT_EQ(out[0], "verified 0|verified 0|" + peak);
  EXPECT_EQ(out[1], "verified 4 exact|verified 4 exact|" + peak);
}

// A byte flipped in rank 1's device memory after its first region arrived
// in update 2 fails that update on both ranks, naming the region; update
// 1 was exact.
TEST(StagedSessionTest, AFlippedByteFailsTheUpdate) {
  LiveSessionOptions o = StagedOptions("staged-flip");
  o.corrupt_received_in_update = 2;
  const auto out = RunBoth(o);
  const std::string failed =
      "DataLoss: live session staged-flip, rank 1, update 2: region 0 "
      "(tensor w, target participant p-d0-p0-e0-t1) from rank 0 (source "
      "p-d0-p0-e0-t0 and 1 more): the bytes received differ from what the "
      "source sent";
  EXPECT_THAT(out[1].out, ::testing::StartsWith("verified 4 exact|" + failed));
  EXPECT_THAT(out[0].out, ::testing::StartsWith(
                              "verified 0|Aborted: live session staged-flip "
                              "failed as decided by rank 1: " +
                              failed));
}

// A budget under one chunk is refused at open on the ranks, naming
// device_staging_bytes; the mirrors (kMirror) refuse the same budget as
// too small for the fragments.
TEST(StagedSessionTest, BudgetUnderOneChunkIsRefusedAtOpen) {
  LiveSessionOptions o = StagedOptions("staged-small");
  o.device_staging_bytes = 1 << 20;
  const auto out = RunBoth(o);
  EXPECT_THAT(out[0].out,
              ::testing::HasSubstr(
                  "device_staging_bytes (1048576) is smaller than one staged "
                  "chunk (4194304 bytes): the pipeline through pinned host "
                  "buffers needs at least one"));
  o.session = "staged-mirror";
  o.device_staging = DeviceStaging::kMirror;
  const auto mirrored = RunBoth(o);
  EXPECT_THAT(mirrored[1].out,
              ::testing::HasSubstr("past device_staging_bytes (1048576)"));
}

// Shadow targets of the device targets are device memory the staged
// exchange unpacks into: update 2, refused by rank 1's validator after
// its bytes arrived, leaves the serving device targets at update 1, byte
// for byte.
TEST(StagedSessionTest, ShadowTargetsKeepServingDeviceTargetsOnFailure) {
  LiveSessionOptions o = StagedOptions("staged-shadow");
  o.shadow_targets = true;
  TempDir dir;
  std::vector<RankResult> out(2);
  std::thread one([&] { out[1] = StagedRank(1, dir.path(), o, 2); });
  out[0] = StagedRank(0, dir.path(), o, 2);
  one.join();
  EXPECT_EQ(out[1].out,
            "verified 4 exact|DataLoss: live session staged-shadow, rank 1, "
            "update 2: refused by the validator (the session stays open: "
            "retry the update or run the next one) holds 1|");
}

// Without a CUDA executor (no device API given, no device here) a rank
// binding CUDA targets in a pushing session is refused at open in the
// bound plan's words, naming its first CUDA fragment, before any byte
// moves; its peer fails too.
TEST(StagedSessionTest, WithoutACudaExecutorCudaFragmentsAreRefused) {
  if (QueryCuda().devices > 0) {
    GTEST_SKIP() << "this machine has a CUDA device: the fragments stage";
  }
  const auto source = Source();
  const auto target = Target();
  auto src = Must(internal::AllocateHostBuffers(source, "source"));
  auto dst = Must(internal::AllocateHostBuffers(target, "target"));
  std::vector<WeightRuntimeBindingManifest> on_gpu;
  for (const auto& b : dst.bindings) {
    on_gpu.push_back(
        Must(testing::WithBindingChanges(b, {.device = "cuda:0"})));
  }
  LiveSessionOptions o = StagedOptions("staged-no-executor");
  o.timeout = std::chrono::seconds(3);
  TempDir dir;
  std::string out[2];
  const auto open = [&](uint32_t r) {
    auto store = Must(OpenDirectoryRecordStore(dir.path()));
    LiveSessionOptions mine = o;
    mine.rank = r;
    LiveBindings b;
    (r == 0 ? b.sources : b.targets) = r == 0 ? src.bindings : on_gpu;
    auto s = LiveSession::Open(*store, source, target, b, mine);
    out[r] = s.ok() ? "open" : s.status().ToString();
  };
  std::thread one([&] { open(1); });
  open(0);
  one.join();
  EXPECT_EQ(out[1],
            "FailedPrecondition: live session staged-no-executor, rank 1: "
            "inproc executor cannot move cuda memory: target fragment " +
                on_gpu[0].fragments()[0].placement_fragment_id() +
                " of participant " + on_gpu[0].participant_id() +
                " (device \"cuda:0\")");
  EXPECT_NE(out[0], "open");
}

// A converting session (bfloat16 into FP8 with its block scales, on one
// rank) converts on the host, before the staging or the mirrors see the
// bindings: CUDA fragments are refused at open, naming the first, over a
// host-only exchange as over one that moves CUDA memory, and nothing
// moves (the targets keep their poison).
TEST(StagedSessionTest, AConvertingSessionRefusesCudaFragments) {
  const auto source =
      testing::Fp8Layout(1, {"bfloat16", 2, 0}, {"bfloat16", 2}, std::nullopt);
  const auto target = testing::Fp8Layout(1, {"float8_e4m3fn", 1, 0},
                                         {"bfloat16", 2}, {{"float32", 4, 0}});
  std::shared_ptr<cuda::HostDeviceApi> api =
      cuda::HostDeviceApi::Make({.devices = 1});
  DeviceSide sources(*api, source, 0, "convert-s");
  DeviceSide targets(*api, target, 0, "convert-t");
  for (const auto& [id, p] : targets.data) {
    std::memset(p, 0xA5, target.FindFragment(id)->nbytes());
  }
  TempDir dir;
  auto store = Must(OpenDirectoryRecordStore(dir.path()));
  LiveSessionOptions o = StagedOptions("staged-convert");
  o.ranks = 1;
  o.convert = true;
  o.device_api = api;
  for (DeviceStaging mode :
       {DeviceStaging::kPipeline, DeviceStaging::kMirror}) {
    o.device_staging = mode;
    auto session = LiveSession::Open(*store, source, target,
                                     {sources.bindings, targets.bindings}, o);
    std::string weight;  // the weight's fragment: [300, 256]
    for (const RuntimeBindingFragment& f : sources.bindings[0].fragments()) {
      if (f.local_shape().size() == 2) weight = f.placement_fragment_id();
    }
    EXPECT_EQ(session.status().ToString(),
              "InvalidArgument: quantizing needs contiguous host memory: "
              "source fragment " +
                  weight + " of " + sources.bindings[0].participant_id());
  }
  for (const auto& [id, p] : targets.data) {
    const auto* bytes = static_cast<const uint8_t*>(p);
    for (uint64_t k = 0; k < target.FindFragment(id)->nbytes(); ++k) {
      ASSERT_EQ(bytes[k], 0xA5) << id << " byte " << k;
    }
  }
}

}  // namespace
}  // namespace reshard
