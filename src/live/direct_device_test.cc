// Live sessions over exchanges that move CUDA memory themselves, with CUDA
// fragments bound directly (no host mirrors; live/device_regions.h), over
// the host emulations: "nccl" on emulated device memory (HostNcclApi with
// exec_nccl's MakeEmulatedDeviceMemory, ranks as threads) with same-rank
// copies, and "cuda-ipc" between two processes (HostDeviceApi's shared
// memory IPC). Targets are checked byte for byte against the pattern of
// each update (values from the global element index); the emulation's
// counters show every byte the session itself copied or read on the
// device. Shadow targets there are device memory flipped on the device;
// delta updates are refused at open naming the fragment.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "exec_cuda/host_device_api.h"
#include "exec_nccl/nccl_device_emulation.h"
#include "exec_nccl/nccl_exchange.h"
#include "live_cuda_ipc/cuda_ipc_exchange.h"
#include "reshard/backends/fs_store.h"
#include "reshard/live.h"
#include "reshard/plan.h"
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

// The emulated device of this process's "nccl-device" exchanges.
std::shared_ptr<cuda::HostDeviceApi> NcclDevice() {
  static const std::shared_ptr<cuda::HostDeviceApi> api =
      cuda::HostDeviceApi::Make({.devices = 1});
  return api;
}

// "nccl-device": the nccl exchange over HostNcclApi declaring CUDA memory
// of NcclDevice(), registered once per process.
void RegisterNcclDevice() {
  static const bool registered =
      RegisterPeerExchange(
          {"nccl-device",
           "nccl over the host emulation on emulated CUDA memory",
           [](const PeerExchangeConfig& c)
               -> Result<std::unique_ptr<PeerExchange>> {
             auto api = std::make_shared<nccl::HostNcclApi>();
             auto memory = nccl::MakeEmulatedDeviceMemory(api, NcclDevice());
             return nccl::MakeNcclExchange(c.rank, std::move(api),
                                           std::move(memory), 0);
           },
           [](const PeerExchangeOptions&) { return Status::OK(); }})
          .ok();
  ASSERT_TRUE(registered);
}

// The emulated device memory of "nccl-device" declares CUDA memory and,
// as the library's does, refuses a region side that is not device memory
// of the emulation, naming the operation; a buffer (host memory) passes.
TEST(DirectDeviceTest, EmulatedDeviceMemoryRefusesHostSides) {
  auto memory = nccl::MakeEmulatedDeviceMemory(
      std::make_shared<nccl::HostNcclApi>(), NcclDevice());
  EXPECT_EQ(memory->kind(), MemoryKind::kCuda);
  std::vector<uint8_t> host(64);
  auto* device = static_cast<uint8_t*>(Must(NcclDevice()->Malloc(0, 64)));
  const auto at = [](const uint8_t* p) {
    return reinterpret_cast<uint64_t>(p);
  };
  const BoundRegion into_host{at(device), at(host.data()), 64, {}, 64, 3};
  const BoundRegion into_device{at(host.data()), at(device), 64, {}, 64, 4};
  ExchangeOp receive{&into_host, {}, 1, ExchangeOp::Kind::kReceive};
  EXPECT_EQ(memory->CheckReachable(receive, "receive from rank 1").ToString(),
            "InvalidArgument: receive from rank 1: region 3's target is host "
            "memory; the nccl exchange moves device memory only");
  EXPECT_OK(memory->CheckReachable(
      {&into_device, {}, 1, ExchangeOp::Kind::kReceive}, "receive"));
  receive.buffer = host.data();
  receive.buffer_bytes = host.size();
  EXPECT_OK(memory->CheckReachable(receive, "receive"));
  EXPECT_OK(NcclDevice()->Free(device));
}

// The pattern's view of `binding`'s fragments in `side`'s memory (the
// emulation's device memory is host memory the test may read).
internal::HostBuffers ViewOf(const WeightPlacementManifest& m,
                             const DeviceSide& side,
                             const WeightRuntimeBindingManifest& binding) {
  internal::HostBuffers view;
  for (const PlacementFragment* f : m.fragments()) {
    for (const RuntimeBindingFragment& rf : binding.fragments()) {
      if (rf.placement_fragment_id() == f->placement_fragment_id()) {
        view.data[f->placement_fragment_id()] =
            side.data.at(f->placement_fragment_id());
      }
    }
  }
  return view;
}

WeightPlacementManifest Source() {
  return testing::CubeLayout(2, 0, {8, 16, 64});
}
WeightPlacementManifest Target() {
  return testing::CubeLayout(2, 1, {8, 16, 64});
}

// Rank `r` of a session over "nccl-device" on a thread: it hosts source
// participant r and target participant r in emulated device memory (one
// region of each rank stays on it: a same-rank copy, the other two cross),
// runs updates 1 and 2 (the sources filled with that update's pattern) and
// returns per update its report and whether its targets hold the pattern.
std::string NcclDeviceRank(uint32_t r, const std::string& dir,
                           const LiveSessionOptions& base) {
  const auto source = Source();
  const auto target = Target();
  const auto tensors = internal::TensorIndex(source);
  auto store = Must(OpenDirectoryRecordStore(dir));
  const std::string instance = "nccl-device-" + std::to_string(r);
  DeviceSide sources(*NcclDevice(), source, 0, instance + "-s");
  DeviceSide targets(*NcclDevice(), target, 0, instance + "-t");
  LiveBindings bindings;
  bindings.sources = {sources.bindings[r]};
  bindings.targets = {targets.bindings[r]};
  const internal::HostBuffers mine =
      ViewOf(source, sources, sources.bindings[r]);
  const internal::HostBuffers received =
      ViewOf(target, targets, targets.bindings[r]);
  LiveSessionOptions o = base;
  o.rank = r;
  auto session = LiveSession::Open(*store, source, target, bindings, o);
  if (!session.ok()) return session.status().ToString();
  std::string out;
  for (uint64_t g = 1; g <= 2; ++g) {
    internal::FillPattern(source, tensors, mine, nullptr, g);
    auto u = (*session)->Update(g);
    if (!u.ok()) return out + u.status().ToString();
    out += "local " + std::to_string(u->local_operations) + " verified " +
           std::to_string(u->verified_regions) + " ";
    const std::string bad =
        internal::VerifyPattern(target, tensors, received, nullptr, g);
    out += (bad.empty() ? "exact" : bad) + "|";
  }
  Status closed = (*session)->Close();
  return closed.ok() ? out : out + closed.ToString();
}

LiveSessionOptions NcclDeviceOptions(const std::string& session) {
  LiveSessionOptions o;
  o.session = session;
  o.ranks = 2;
  o.timeout = std::chrono::seconds(10);
  o.exchange = "nccl-device";
  o.device_api = NcclDevice();
  o.device_staging_bytes = 1000;  // under a fragment: nothing is mirrored
  return o;
}

// Two ranks as threads: each update moves every target byte exactly, the
// same-rank region copied on the emulated device and every region
// verified through staged reads. The emulation copied, per update, each
// same-rank region 3 times (the copy, its source's and its target's
// hash) and each crossing region twice (the sender's and the receiver's
// hash); nothing else of the session touched the device.
TEST(DirectDeviceTest, NcclOnDeviceMemoryCopiesAndVerifiesOnTheDevice) {
  RegisterNcclDevice();
  const auto plan = Must(LogicalTransferPlan::Make(Source(), Target()));
  ASSERT_EQ(plan.regions().size(), 4u);  // 2048 bytes each
  const uint64_t before = NcclDevice()->counters().bytes_copied;
  TempDir dir;
  std::string out[2];
  const LiveSessionOptions o = NcclDeviceOptions("nccl-device");
  std::thread one([&] { out[1] = NcclDeviceRank(1, dir.path(), o); });
  out[0] = NcclDeviceRank(0, dir.path(), o);
  one.join();
  for (const std::string& rank : out) {
    EXPECT_EQ(rank, "local 1 verified 2 exact|local 1 verified 2 exact|");
  }
  const uint64_t per_update = 2 * 3 * 2048 + 2 * 2 * 2048;
  EXPECT_EQ(NcclDevice()->counters().bytes_copied - before, 2 * per_update);
}

// Fault injection on rank 1: a byte flipped in the device memory of its
// first region received (region 2, from rank 0) fails update 2 on both
// ranks, naming the region; update 1 was exact.
TEST(DirectDeviceTest, AByteFlippedInDeviceMemoryFailsTheUpdate) {
  RegisterNcclDevice();
  TempDir dir;
  std::string out[2];
  const LiveSessionOptions o = NcclDeviceOptions("nccl-fault");
  LiveSessionOptions faulty = o;
  faulty.corrupt_received_in_update = 2;
  std::thread one([&] { out[1] = NcclDeviceRank(1, dir.path(), faulty); });
  out[0] = NcclDeviceRank(0, dir.path(), o);
  one.join();
  const std::string failure =
      "DataLoss: live session nccl-fault, rank 1, update 2: region 2 (tensor "
      "w, target participant p-d0-p0-e0-t1) from rank 0 (source "
      "p-d0-p0-e0-t0 and 1 more): the bytes received differ from what the "
      "source sent (XXH3-64 ";
  EXPECT_THAT(out[1],
              ::testing::StartsWith("local 1 verified 2 exact|" + failure));
  EXPECT_THAT(out[0],
              ::testing::StartsWith(
                  "local 1 verified 2 exact|Aborted: live session nccl-fault "
                  "failed as decided by rank 1: " +
                  failure));
  for (const std::string& rank : out) {
    EXPECT_THAT(rank, ::testing::EndsWith(
                          " at the source) (the session stays open: retry "
                          "the update or run the next one)"));
  }
}

// The first fragment of participant `index` (in participant order) of
// `m`'s bindings in device memory, as a refusal names it.
std::string FirstFragment(const WeightPlacementManifest& m, size_t index) {
  DeviceSide side(*NcclDevice(), m, 0, "names");
  const auto& b = side.bindings[index];
  return b.fragments()[0].placement_fragment_id() + " of participant " +
         b.participant_id() + " (device \"cuda:0\")";
}

// Delta updates on device memory the exchange moves directly are refused
// at open on every rank holding such a fragment, naming its first source
// fragment, before any byte moves.
TEST(DirectDeviceTest, DeltaUpdatesAreRefusedAtOpenNamingTheFragment) {
  RegisterNcclDevice();
  TempDir dir;
  std::string out[2];
  LiveSessionOptions o = NcclDeviceOptions("nccl-delta");
  o.delta = true;
  std::thread one([&] { out[1] = NcclDeviceRank(1, dir.path(), o); });
  out[0] = NcclDeviceRank(0, dir.path(), o);
  one.join();
  for (uint32_t r = 0; r < 2; ++r) {
    // Its own refusal, whichever rank's abort the other saw first.
    EXPECT_THAT(out[r],
                ::testing::HasSubstr(
                    "live session nccl-delta, rank " + std::to_string(r) +
                    ": live session nccl-delta: source fragment " +
                    FirstFragment(Source(), r) +
                    ": exchange \"nccl-device\" moves CUDA memory directly, "
                    "and delta updates (delta) snapshot, encode and apply a "
                    "rank's bytes on the host, which is not built for device "
                    "memory"));
  }
}

// Shadow targets of CUDA targets are device memory (the exchange refuses
// any other) flipped on the device after the world barrier: updates 1 and
// 3 land byte for byte in the serving targets; update 2, refused by rank
// 1's validator after its bytes arrived in the shadows, leaves every
// serving target at update 1.
TEST(DirectDeviceTest, ShadowTargetsOnTheDeviceFlipOnlyAfterSuccess) {
  RegisterNcclDevice();
  TempDir dir;
  std::string out[2];
  auto rank = [&](uint32_t r) {
    const auto source = Source();
    const auto target = Target();
    const auto tensors = internal::TensorIndex(source);
    auto store = Must(OpenDirectoryRecordStore(dir.path()));
    const std::string instance = "shadow-" + std::to_string(r);
    DeviceSide sources(*NcclDevice(), source, 0, instance + "-s");
    DeviceSide targets(*NcclDevice(), target, 0, instance + "-t");
    LiveBindings bindings;
    bindings.sources = {sources.bindings[r]};
    bindings.targets = {targets.bindings[r]};
    const auto mine = ViewOf(source, sources, sources.bindings[r]);
    const auto serving = ViewOf(target, targets, targets.bindings[r]);
    uint64_t g = 0;
    LiveSessionOptions o = NcclDeviceOptions("nccl-shadow");
    o.rank = r;
    o.shadow_targets = true;
    if (r == 1) {
      o.validate_targets = [&]() -> Status {
        return g == 2 ? Status::DataLoss("refused by the validator")
                      : Status::OK();
      };
    }
    auto session = LiveSession::Open(*store, source, target, bindings, o);
    if (!session.ok()) {
      out[r] = session.status().ToString();
      return;
    }
    for (g = 1; g <= 3; ++g) {
      internal::FillPattern(source, tensors, mine, nullptr, g);
      const bool ok = (*session)->Update(g).ok();
      const uint64_t holds = g == 2 ? 1 : g;
      const std::string bad =
          internal::VerifyPattern(target, tensors, serving, nullptr, holds);
      out[r] += std::string(ok ? "ok" : "failed") + " holds " +
                std::to_string(holds) + (bad.empty() ? "" : " " + bad) + "|";
    }
    Status closed = (*session)->Close();
    if (!closed.ok()) out[r] += closed.ToString();
  };
  std::thread one([&] { rank(1); });
  rank(0);
  one.join();
  for (const std::string& r : out) {
    EXPECT_EQ(r, "ok holds 1|failed holds 1|ok holds 3|");
  }
}

// A converting session's converted fragments must be contiguous host
// memory (the conversion runs on the host): a rank holding one in CUDA
// memory is refused at open, naming it, before it publishes anything.
TEST(DirectDeviceTest, ConvertedFragmentsInDeviceMemoryAreRefusedAtOpen) {
  RegisterNcclDevice();
  const auto source =
      testing::Fp8Layout(1, {"bfloat16", 2, 0}, {"bfloat16", 2}, std::nullopt);
  const auto target = testing::Fp8Layout(1, {"float8_e4m3fn", 1, 0},
                                         {"bfloat16", 2}, {{"float32", 4, 0}});
  DeviceSide sources(*NcclDevice(), source, 0, "convert-s");
  DeviceSide targets(*NcclDevice(), target, 0, "convert-t");
  TempDir dir;
  auto store = Must(OpenDirectoryRecordStore(dir.path()));
  LiveSessionOptions o = NcclDeviceOptions("nccl-convert");
  o.ranks = 1;
  o.convert = true;
  auto session = LiveSession::Open(*store, source, target,
                                   {sources.bindings, targets.bindings}, o);
  std::string weight;  // the weight's fragment: [300, 256]
  for (const RuntimeBindingFragment& f : sources.bindings[0].fragments()) {
    if (f.local_shape().size() == 2) weight = f.placement_fragment_id();
  }
  EXPECT_EQ(session.status().ToString(),
            "InvalidArgument: quantizing needs contiguous host memory: source "
            "fragment " +
                weight + " of " + sources.bindings[0].participant_id());
}

// One rank of a session between processes over "cuda-ipc" on this
// process's emulated device, its fragments bound as CUDA memory (rank 0
// the sources, rank 1 the targets): per update its report and (rank 1)
// whether the targets hold the pattern, then the emulation's calls that
// show what the exchange was handed (IPC handles of the device
// allocations; the one pinned buffer is the 1000-byte hash staging, no
// mirror) and the bytes the emulation copied.
std::string IpcRank(uint32_t rank, const std::string& dir) {
  std::shared_ptr<cuda::HostDeviceApi> api =
      cuda::HostDeviceApi::Make({.devices = 1, .ipc_shareable = true});
  Status registered = RegisterPeerExchange(
      {"cuda-ipc-direct", "cuda-ipc over the host emulation",
       [api](const PeerExchangeConfig& c) {
         return internal::MakeCudaIpcExchangeOver(api, c);
       },
       &internal::CheckCudaIpcOptions});
  if (!registered.ok()) return registered.ToString();
  const auto source = Source();
  const auto target = Target();
  const auto& mine = rank == 0 ? source : target;
  const auto tensors = internal::TensorIndex(source);
  DeviceSide side(*api, mine, 0, "ipc-" + std::to_string(rank));
  internal::HostBuffers view;
  for (const auto& b : side.bindings) {
    internal::HostBuffers one = ViewOf(mine, side, b);
    view.data.insert(one.data.begin(), one.data.end());
  }
  auto store = Must(OpenDirectoryRecordStore(dir));
  LiveSessionOptions o;
  o.session = "ipc-direct";
  o.rank = rank;
  o.ranks = 2;
  o.exchange = "cuda-ipc-direct";
  o.timeout = std::chrono::seconds(20);
  o.device_api = api;
  o.device_staging_bytes = 1000;  // under a fragment: nothing is mirrored
  LiveBindings bindings;
  (rank == 0 ? bindings.sources : bindings.targets) = side.bindings;
  auto session = LiveSession::Open(*store, source, target, bindings, o);
  if (!session.ok()) return session.status().ToString();
  std::string out;
  for (uint64_t g = 1; g <= 2; ++g) {
    if (rank == 0) internal::FillPattern(source, tensors, view, nullptr, g);
    auto u = (*session)->Update(g);
    if (!u.ok()) return out + u.status().ToString();
    out += "gets " + std::to_string(u->gets) + " verified " +
           std::to_string(u->verified_regions);
    if (rank == 1) {
      const std::string bad =
          internal::VerifyPattern(target, tensors, view, nullptr, g);
      out += bad.empty() ? " exact" : " " + bad;
    }
    out += "|";
  }
  if (Status st = (*session)->Close(); !st.ok()) return out + st.ToString();
  session->reset();
  for (const std::string& line : api->calls()) {
    if (line.rfind("Ipc", 0) == 0 || line.rfind("MallocHost", 0) == 0) {
      out += line + "|";
    }
  }
  return out + "copied " + std::to_string(api->counters().bytes_copied);
}

// Rank 1 reads every region straight from rank 0's device allocations into
// its device targets, byte for byte, and both verify through staged reads:
// per update rank 0 read its 4 sources' 2048 bytes each to hash them, rank
// 1 copied 4 regions and read them back to hash them.
TEST(DirectDeviceTest, CudaIpcMovesDeviceAddressesBetweenProcesses) {
  TempDir dir;
  const std::vector<std::string> out = testing::InChildren(
      2, [&](uint32_t r) { return IpcRank(r, dir.path()); });
  EXPECT_EQ(out[0],
            "gets 0 verified 0|gets 0 verified 0|"
            "IpcGetMemHandle device=0 bytes=4096|"
            "IpcGetMemHandle device=0 bytes=4096|MallocHost bytes=1000|"
            "copied " +
                std::to_string(2 * 4 * 2048));
  EXPECT_EQ(out[1],
            "gets 4 verified 4 exact|gets 4 verified 4 exact|"
            "IpcOpenMemHandle device=0 bytes=4096 -> refs=1|"
            "IpcOpenMemHandle device=0 bytes=4096 -> refs=1|"
            "MallocHost bytes=1000|"
            "IpcCloseMemHandle bytes=4096 -> refs=0|"
            "IpcCloseMemHandle bytes=4096 -> refs=0|copied " +
                std::to_string(2 * 2 * 4 * 2048));
}

}  // namespace
}  // namespace reshard
