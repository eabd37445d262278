// The staged exchange (live/staged_exchange.h) over the "inproc" exchange
// (host memory only), ranks as threads, each with its own host emulation
// of the device API holding its fragments in emulated device memory:
// strided regions move through pinned chunks far smaller than a fragment,
// byte for byte from the global element index, with the emulation's peak
// of pinned host memory at most the budget; a ring that deadlocks in
// per-rank orders completes with one slot; a short chunk is DataLoss; a
// budget under one chunk is refused naming device_staging_bytes.
#include "live/staged_exchange.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "bind/binding_copy.h"
#include "bind/row_walker.h"
#include "exec_cuda/host_device_api.h"
#include "reshard/bound_plan.h"
#include "reshard/plan.h"
#include "selftest/host_buffers.h"
#include "selftest/pattern.h"
#include "testing/device_sides.h"
#include "testing/must.h"
#include "testing/placement_builders.h"
#include "testing/status_testing.h"

namespace reshard::live_internal {
namespace {

using ::reshard::testing::DeviceSide;
using ::reshard::testing::Must;
using Kind = ExchangeOp::Kind;

// `ranks` ranks; source participant p on rank p, target participant q on
// rank (q + shift) % ranks; each rank's own fragments in emulated device
// memory of its own HostDeviceApi (every rank allocates a whole side and
// binds only its participants' fragments).
struct World {
  World(const WeightPlacementManifest& source_m,
        const WeightPlacementManifest& target_m, uint32_t ranks, uint32_t shift)
      : source(source_m), target(target_m), n(ranks), shift(shift) {
    std::vector<WeightRuntimeBindingManifest> sb, tb;
    for (uint32_t r = 0; r < n; ++r) {
      apis.push_back(cuda::HostDeviceApi::Make({.devices = 1}));
      sources.push_back(std::make_unique<DeviceSide>(
          *apis[r], source, 0, "staged-s" + std::to_string(r)));
      targets.push_back(std::make_unique<DeviceSide>(
          *apis[r], target, 0, "staged-t" + std::to_string(r)));
    }
    for (uint32_t p = 0; p < n; ++p) {
      sb.push_back(sources[p]->bindings[p]);
      tb.push_back(targets[(p + shift) % n]->bindings[p]);
      // Keyed by the device sides' own ids: `sb` and `tb` reallocate.
      for (const auto& f : sb.back().fragments()) {
        const auto& [id, bytes] =
            *sources[p]->data.find(f.placement_fragment_id());
        source_view.data[id] = bytes;
      }
      for (const auto& f : tb.back().fragments()) {
        const auto& [id, bytes] =
            *targets[(p + shift) % n]->data.find(f.placement_fragment_id());
        target_view.data[id] = bytes;
      }
    }
    plan.emplace(Must(LogicalTransferPlan::Make(source, target)));
    bound.emplace(Must(BoundTransferPlan::Bind(*plan, source, sb, target, tb)));
    for (uint32_t r = 0; r < n; ++r) {
      exchanges.push_back(Must(MakePeerExchange("inproc", {r, {}})));
    }
    for (uint32_t r = 0; r < n; ++r) {
      for (uint32_t q = 0; q < n; ++q) {
        if (q == r) continue;
        EXPECT_OK(exchanges[r]->Connect(q, Must(exchanges[q]->Address()),
                                        "rank " + std::to_string(q)));
      }
    }
  }

  uint32_t SourceRank(const BoundRegion& br) const {
    const auto& f =
        plan->source_fragments()[plan->regions()[br.region].source_fragment];
    const auto& ps = plan->source_participants();
    return static_cast<uint32_t>(
        std::find(ps.begin(), ps.end(), f.participant_id) - ps.begin());
  }
  uint32_t TargetRank(const BoundRegion& br) const {
    const auto& f =
        plan->target_fragments()[plan->regions()[br.region].target_fragment];
    const auto& ps = plan->target_participants();
    const auto q = static_cast<uint32_t>(
        std::find(ps.begin(), ps.end(), f.participant_id) - ps.begin());
    return (q + shift) % n;
  }

  // Rank r's operations: per peer, the even regions coalesced into one
  // message and the odd ones a message each; same-rank regions copied.
  std::vector<ExchangeOp> OpsOf(uint32_t r) const {
    std::vector<ExchangeOp> ops;
    for (uint32_t peer = 0; peer < n; ++peer) {
      if (peer == r) continue;
      for (Kind kind : {Kind::kSend, Kind::kReceive}) {
        ExchangeOp even{nullptr, {}, peer, kind};
        for (const BoundRegion& br : bound->regions()) {
          const uint32_t from = SourceRank(br), to = TargetRank(br);
          if (kind == Kind::kSend ? (from != r || to != peer)
                                  : (to != r || from != peer)) {
            continue;
          }
          if (br.region % 2 == 1) {
            ops.push_back({&br, {}, peer, kind});
          } else if (even.region == nullptr) {
            even.region = &br;
          } else {
            even.more.push_back(&br);
          }
        }
        if (even.region != nullptr) ops.push_back(even);
      }
    }
    return ops;
  }

  void CopyLocal() const {
    for (const BoundRegion& br : bound->regions()) {
      if (SourceRank(br) == TargetRank(br)) {
        internal::CopyRegionSegments(br, 0, internal::RowCount(br));
      }
    }
  }

  WeightPlacementManifest source, target;
  uint32_t n, shift;
  std::vector<std::shared_ptr<cuda::HostDeviceApi>> apis;
  std::vector<std::unique_ptr<DeviceSide>> sources, targets;
  internal::HostBuffers source_view, target_view;
  std::optional<LogicalTransferPlan> plan;
  std::optional<BoundTransferPlan> bound;
  std::vector<std::unique_ptr<PeerExchange>> exchanges;
};

ExchangeRunOptions RunOptions(
    uint32_t tag, std::chrono::milliseconds wait = std::chrono::seconds(10)) {
  ExchangeRunOptions o;
  o.session_tag = tag;
  o.deadline = std::chrono::steady_clock::now() + wait;
  return o;
}

// Every rank's Run on a thread of its own; per rank its status and, for
// every operation, how often on_completion named it and the bytes its
// pieces covered ("i:completions/piece bytes").
std::vector<std::string> RunAll(
    World& w, std::vector<std::unique_ptr<PeerExchange>>& staged, uint32_t tag,
    std::chrono::milliseconds wait = std::chrono::seconds(10)) {
  std::vector<std::string> out(w.n);
  std::vector<std::thread> threads;
  for (uint32_t r = 0; r < w.n; ++r) {
    threads.emplace_back([&, r] {
      const std::vector<ExchangeOp> ops = w.OpsOf(r);
      std::vector<int> completions(ops.size(), 0);
      std::vector<uint64_t> pieces(ops.size(), 0);
      ExchangeRunOptions o = RunOptions(tag, wait);
      o.on_completion = [&](size_t i) { ++completions[i]; };
      o.on_piece = [&](size_t i, uint64_t, const uint8_t*, uint64_t length) {
        pieces[i] += length;
      };
      ExchangeStats stats;
      Status st = staged[r]->Run(ops, o, &stats);
      std::string s = st.ToString();
      for (size_t i = 0; i < ops.size(); ++i) {
        const bool whole = completions[i] == 1 &&
                           (pieces[i] == 0 || pieces[i] == ops[i].bytes());
        if (!whole) {
          s += " op " + std::to_string(i) + ":" +
               std::to_string(completions[i]) + "/" + std::to_string(pieces[i]);
        }
      }
      out[r] = s;
    });
  }
  for (auto& t : threads) t.join();
  return out;
}

// With `host_only`, every rank's staged exchange has no device API: its
// slots are host memory and its copies host copies (the emulation's device
// memory is host memory).
std::vector<std::unique_ptr<PeerExchange>> Staged(World& w, uint64_t budget,
                                                  uint64_t chunk,
                                                  bool host_only = false) {
  std::vector<std::unique_ptr<PeerExchange>> staged;
  for (uint32_t r = 0; r < w.n; ++r) {
    StagedExchangeOptions o;
    o.budget = budget;
    o.chunk_bytes = chunk;
    o.staged = [](uint32_t region) { return region % 2 == 0; };
    staged.push_back(Must(MakeStagedExchange(
        std::move(w.exchanges[r]), host_only ? nullptr : w.apis[r], o)));
  }
  return staged;
}

// Four ranks, sources split on dimension 0, targets on dimension 1 (every
// target side strided), chunks of 1000 bytes (rows cut mid-way), a budget
// of 3 chunks against fragments of 16 KiB: two updates land byte for byte
// (even regions staged, coalesced per pair of ranks; odd ones passed
// through); every operation completes once, its pieces covering it; each
// rank's pinned host memory peaked at two slots: the budget's 3 chunks
// hold two halves of one slot each (one window packs while the other
// moves).
TEST(StagedExchangeTest, StridedRegionsMoveThroughChunksWithinTheBudget) {
  World w(testing::CubeLayout(4, 0, {8, 32, 64}),
          testing::CubeLayout(4, 1, {8, 32, 64}), 4, 1);
  ASSERT_GT(w.source.fragments()[0]->nbytes(), 3000u);
  auto staged = Staged(w, 3000, 1000);
  const auto tensors = internal::TensorIndex(w.source);
  for (uint64_t g = 1; g <= 2; ++g) {
    internal::FillPattern(w.source, tensors, w.source_view, nullptr, g);
    w.CopyLocal();
    const auto out = RunAll(w, staged, 100 + static_cast<uint32_t>(g));
    for (uint32_t r = 0; r < w.n; ++r) EXPECT_EQ(out[r], "OK") << r;
    EXPECT_EQ(
        internal::VerifyPattern(w.target, tensors, w.target_view, nullptr, g),
        "");
  }
  for (uint32_t r = 0; r < w.n; ++r) {
    EXPECT_EQ(w.apis[r]->counters().pinned_peak, 2000u) << r;
  }
}

// Without a device API (a rank without a CUDA executor, all its sides in
// host memory) the same moves stage through host memory: exact, and no
// pinned memory taken.
TEST(StagedExchangeTest, WithoutADeviceApiChunksStageThroughHostMemory) {
  World w(testing::CubeLayout(4, 0, {8, 32, 64}),
          testing::CubeLayout(4, 1, {8, 32, 64}), 4, 1);
  auto staged = Staged(w, 3000, 1000, /*host_only=*/true);
  const auto tensors = internal::TensorIndex(w.source);
  internal::FillPattern(w.source, tensors, w.source_view, nullptr, 1);
  w.CopyLocal();
  const auto out = RunAll(w, staged, 150);
  for (uint32_t r = 0; r < w.n; ++r) EXPECT_EQ(out[r], "OK") << r;
  EXPECT_EQ(
      internal::VerifyPattern(w.target, tensors, w.target_view, nullptr, 1),
      "");
  for (uint32_t r = 0; r < w.n; ++r) {
    EXPECT_EQ(w.apis[r]->counters().pinned_peak, 0u) << r;
  }
}

// A ring: rank r sends its only region to rank r + 1. With one slot each
// rank runs a window per chunk message; in a per-rank order that puts a
// rank's receive first every rank would wait on its predecessor forever.
// In the global (chunk, region) order every chunk arrives.
TEST(StagedExchangeTest, ARingWithOneSlotPerRankCompletes) {
  // One slot (windows in turn), and two (the next window packs while one
  // moves): the peak is the budget either way.
  for (uint64_t budget : {1024u, 2048u}) {
    SCOPED_TRACE(budget);
    World w(testing::CubeLayout(4, 0, {8, 32, 64}),
            testing::CubeLayout(4, 0, {8, 32, 64}), 4, 1);
    ASSERT_EQ(w.bound->regions().size(), 4u);
    std::vector<std::unique_ptr<PeerExchange>> staged;
    for (uint32_t r = 0; r < w.n; ++r) {
      StagedExchangeOptions o{.budget = budget, .chunk_bytes = 1024};
      o.staged = [](uint32_t) { return true; };
      staged.push_back(
          Must(MakeStagedExchange(std::move(w.exchanges[r]), w.apis[r], o)));
    }
    const auto tensors = internal::TensorIndex(w.source);
    internal::FillPattern(w.source, tensors, w.source_view, nullptr, 1);
    const auto out = RunAll(w, staged, 200);
    for (uint32_t r = 0; r < w.n; ++r) EXPECT_EQ(out[r], "OK") << r;
    EXPECT_EQ(
        internal::VerifyPattern(w.target, tensors, w.target_view, nullptr, 1),
        "");
    for (uint32_t r = 0; r < w.n; ++r) {
      EXPECT_EQ(w.apis[r]->counters().pinned_peak, budget) << r;
    }
  }
}

// A receiver cutting its stream into other chunks than the sender (a
// mismatch of chunk sizes) fails with DataLoss naming the operation.
TEST(StagedExchangeTest, AChunkOfAnotherSizeIsDataLoss) {
  World w(testing::CubeLayout(2, 0, {8, 32, 64}),
          testing::CubeLayout(2, 0, {8, 32, 64}), 2, 1);
  std::vector<std::unique_ptr<PeerExchange>> staged;
  for (uint32_t r = 0; r < w.n; ++r) {
    // Rank 0's windows (two chunks each) hold its send and its receive
    // of chunk 0, so it sends before it waits.
    StagedExchangeOptions o{.budget = r == 0 ? 16384u : 8192u,
                            .chunk_bytes = r == 0 ? 4096u : 8192u};
    o.staged = [](uint32_t) { return true; };
    staged.push_back(
        Must(MakeStagedExchange(std::move(w.exchanges[r]), w.apis[r], o)));
  }
  // Rank 0 then waits for a chunk rank 1 never sends: its deadline.
  const auto out = RunAll(w, staged, 300, std::chrono::milliseconds(300));
  const BoundRegion* into_one = nullptr;
  for (const BoundRegion& br : w.bound->regions()) {
    if (w.TargetRank(br) == 1) into_one = &br;
  }
  ASSERT_NE(into_one, nullptr);
  ASSERT_GE(into_one->bytes, 8192u);
  EXPECT_EQ(out[1].substr(0, out[1].find(" op ")),
            "DataLoss: receiving region " + std::to_string(into_one->region) +
                " from rank 0: staged chunk 0 holds 4096 bytes, expected "
                "8192");
}

// A budget under one chunk is refused naming the option; a get of a
// staged region is refused naming the operation.
TEST(StagedExchangeTest, RefusesABudgetUnderOneChunkAndGets) {
  std::shared_ptr<cuda::DeviceApi> api =
      cuda::HostDeviceApi::Make({.devices = 1});
  EXPECT_EQ(MakeStagedExchange(Must(MakePeerExchange("inproc", {0, {}})), api,
                               {.budget = 4095, .chunk_bytes = 4096})
                .status()
                .ToString(),
            "InvalidArgument: device_staging_bytes (4095) is smaller than one "
            "staged chunk (4096 bytes): the pipeline through pinned host "
            "buffers needs at least one");
  StagedExchangeOptions o{.budget = 4096, .chunk_bytes = 4096};
  o.staged = [](uint32_t) { return true; };
  auto staged = Must(
      MakeStagedExchange(Must(MakePeerExchange("inproc", {0, {}})), api, o));
  const auto caps = staged->capabilities();
  EXPECT_FALSE(caps.pull_on_one_host);
  EXPECT_EQ(caps.memory_kinds,
            (std::vector<MemoryKind>{MemoryKind::kHost, MemoryKind::kCuda}));
  BoundRegion region{1, 2, 8, {}, 8, 5};
  EXPECT_EQ(staged->Run({{&region, {}, 1, Kind::kGet}}, RunOptions(1), nullptr)
                .ToString(),
            "FailedPrecondition: reading region 5 from rank 1: the exchange "
            "stages CUDA memory through pinned host buffers and reads no "
            "peer's memory (push)");
}

}  // namespace
}  // namespace reshard::live_internal
