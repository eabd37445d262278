// Live sessions over the NCCL exchange's host emulation (api=host) whose
// whole tensors move through the emulated ncclReshard (m2n=auto): six
// ranks (two source ranks, tensor-parallel; four target ranks, two
// replicas of two), two tensors lowered (a row split to a replicated
// column split, a replica to a row split) and two that fall back to
// send/recv (a fused tensor in sections, a 4-D one); every target byte is
// checked against the pattern of its global element index and every region
// verified. m2n=off moves the same bytes with none moved whole, and a byte
// flipped in a moved region fails the session's verification.

#include <gtest/gtest.h>

#include <cstdint>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "exec_nccl/nccl_exchange.h"
#include "reshard/backends/fs_store.h"
#include "reshard/live.h"
#include "reshard/plan.h"
#include "selftest/host_buffers.h"
#include "selftest/pattern.h"
#include "testing/must.h"
#include "testing/placement_builders.h"
#include "testing/temp_dir.h"

namespace reshard::nccl {
namespace {

using ::reshard::testing::Must;

constexpr uint32_t kRanks = 6;

// The four tensors on `sizes`: "a" [8, 12] split on dim `a_dim`, "b" [16]
// replicated (source) or split (target), "fused" [8, 4] split on dim 0
// (the target in two sections: two fragments a rank), "cube" [2, 2, 2, 4];
// without `fallbacks`, "a" and "b" only.
WeightPlacementManifest Layout(testing::Sizes sizes, bool target,
                               bool fallbacks = true) {
  auto d = testing::GridDraft(sizes);
  testing::AddTensor(&d, {.tensor_id = "a",
                          .shape = {8, 12},
                          .dtype = "int32",
                          .itemsize = 4,
                          .tp_dim = target ? 1 : 0});
  testing::AddTensor(
      &d, {.tensor_id = "b", .shape = {16}, .tp_dim = target ? 0 : -1});
  if (!fallbacks) return Must(d.Build());
  testing::TensorLayout fused{
      .tensor_id = "fused", .shape = {8, 4}, .tp_dim = 0};
  if (target) fused.tp_sections = {4, 4};
  testing::AddTensor(&d, fused);
  testing::AddTensor(&d, {.tensor_id = "cube",
                          .shape = {2, 2, 2, 4},
                          .dtype = "uint8",
                          .itemsize = 1,
                          .tp_dim = 3});
  return Must(d.Build());
}

struct Outcome {
  std::string status = "not run";
  uint64_t m2n_tensors = 0;
  uint64_t verified_regions = 0;
  std::string pattern;  // VerifyPattern of its targets ("" when right)
};

struct Seat {
  internal::HostBuffers buffers;
  LiveBindings bindings;
};

// Ranks 0 and 1 hold the sources (TP 2), ranks 2 to 5 the targets (DP 2
// x TP 2).
Seat SeatOf(uint32_t r, const WeightPlacementManifest& source,
            const WeightPlacementManifest& target) {
  Seat s;
  const std::string instance = "m2n-" + std::to_string(r);
  if (r < 2) {
    const std::string p =
        testing::ParticipantId({.tp = static_cast<int64_t>(r)});
    s.buffers = Must(internal::AllocateHostBuffers(source, instance, {p}));
    s.bindings.sources = s.buffers.bindings;
  } else {
    const std::string p =
        testing::ParticipantId({.dp = static_cast<int64_t>((r - 2) / 2),
                                .tp = static_cast<int64_t>((r - 2) % 2)});
    s.buffers = Must(internal::AllocateHostBuffers(target, instance, {p}));
    s.bindings.targets = s.buffers.bindings;
  }
  return s;
}

LiveSessionOptions Options(const std::string& session, uint32_t r,
                           const std::string& m2n) {
  LiveSessionOptions o;
  o.session = session;
  o.rank = r;
  o.ranks = kRanks;
  o.timeout = std::chrono::seconds(10);
  o.exchange = "nccl";
  o.exchange_options = PeerExchangeOptions().Set("api", "host").Set("m2n", m2n);
  o.verify = true;
  return o;
}

// Every rank on a thread of its own.
void RunRanks(const std::function<void(uint32_t)>& rank) {
  std::vector<std::thread> threads;
  for (uint32_t r = 1; r < kRanks; ++r) threads.emplace_back(rank, r);
  rank(0);
  for (auto& t : threads) t.join();
}

// A one-shot session; `m2n` the exchange's setting; rank 2 flips a
// received byte when `corrupt` (every tensor lowered then: the flipped
// byte is in a region ncclReshard moved).
std::vector<Outcome> RunSession(const std::string& m2n, bool corrupt) {
  const WeightPlacementManifest source = Layout({.tp = 2}, false, !corrupt);
  const WeightPlacementManifest target =
      Layout({.dp = 2, .tp = 2}, true, !corrupt);
  const auto tensors = internal::TensorIndex(source);
  testing::TempDir dir;
  std::vector<Outcome> out(kRanks);
  RunRanks([&](uint32_t r) {
    auto store = Must(OpenDirectoryRecordStore(dir.path()));
    Seat seat = SeatOf(r, source, target);
    if (r < 2) internal::FillPattern(source, tensors, seat.buffers);
    LiveSessionOptions o = Options("m2n", r, m2n);
    if (corrupt && r == 2) o.corrupt_received_in_update = 1;
    auto report = RunLiveReshard(*store, source, target, seat.bindings, o);
    if (!report.ok()) {
      out[r].status = report.status().ToString();
      return;
    }
    out[r].status = "ok";
    out[r].m2n_tensors = report->m2n_tensors;
    out[r].verified_regions = report->verified_regions;
    if (r >= 2) {
      out[r].pattern = internal::VerifyPattern(target, tensors, seat.buffers);
    }
  });
  return out;
}

uint64_t Regions() {
  return Must(LogicalTransferPlan::Make(Layout({.tp = 2}, false),
                                        Layout({.dp = 2, .tp = 2}, true)))
      .regions()
      .size();
}

TEST(NcclM2nSessionTest, LoweredTensorsMoveThroughNcclReshard) {
  const std::vector<Outcome> out = RunSession("auto", false);
  uint64_t verified = 0;
  for (uint32_t r = 0; r < kRanks; ++r) {
    EXPECT_EQ(out[r].status, "ok") << "rank " << r;
    EXPECT_EQ(out[r].m2n_tensors, 2u) << "rank " << r;  // "a" and "b"
    EXPECT_EQ(out[r].pattern, "") << "rank " << r;
    verified += out[r].verified_regions;
  }
  EXPECT_EQ(verified, Regions());
}

TEST(NcclM2nSessionTest, OffMovesTheSameBytesBySendAndReceive) {
  const std::vector<Outcome> out = RunSession("off", false);
  uint64_t verified = 0;
  for (uint32_t r = 0; r < kRanks; ++r) {
    EXPECT_EQ(out[r].status, "ok") << "rank " << r;
    EXPECT_EQ(out[r].m2n_tensors, 0u) << "rank " << r;
    EXPECT_EQ(out[r].pattern, "") << "rank " << r;
    verified += out[r].verified_regions;
  }
  EXPECT_EQ(verified, Regions());
}

// Rank 2's first region received from another rank is tensor "a"'s,
// moved by ncclReshard (as every tensor here): its flipped byte fails
// verification there, and the session fails on every rank.
TEST(NcclM2nSessionTest, VerificationCatchesACorruptedMove) {
  const std::vector<Outcome> out = RunSession("auto", true);
  EXPECT_NE(out[2].status.find("DataLoss"), std::string::npos) << out[2].status;
  EXPECT_NE(out[2].status.find("(tensor a, target participant p-d0-p0-e0-t0)"),
            std::string::npos)
      << out[2].status;
  EXPECT_NE(out[2].status.find("the bytes received differ from what the "
                               "source sent"),
            std::string::npos)
      << out[2].status;
  for (uint32_t r = 0; r < kRanks; ++r) {
    EXPECT_NE(out[r].status, "ok") << "rank " << r;
  }
}

// A standing session: each update moves the lowered tensors through
// ncclReshard again (one group each), and the targets hold each update's
// pattern.
TEST(NcclM2nSessionTest, EveryUpdateOfAStandingSessionMovesThemAgain) {
  const WeightPlacementManifest source = Layout({.tp = 2}, false);
  const WeightPlacementManifest target = Layout({.dp = 2, .tp = 2}, true);
  const auto tensors = internal::TensorIndex(source);
  testing::TempDir dir;
  std::vector<std::string> out(kRanks);
  RunRanks([&](uint32_t r) {
    auto store = Must(OpenDirectoryRecordStore(dir.path()));
    Seat seat = SeatOf(r, source, target);
    auto session = LiveSession::Open(*store, source, target, seat.bindings,
                                     Options("m2n-standing", r, "auto"));
    if (!session.ok()) {
      out[r] = session.status().ToString();
      return;
    }
    for (uint64_t g = 1; g <= 2; ++g) {
      if (r < 2) internal::FillPattern(source, tensors, seat.buffers, {}, g);
      auto u = (*session)->Update(g);
      if (!u.ok()) {
        out[r] += u.status().ToString();
        return;
      }
      out[r] += "update " + std::to_string(g) + ": " +
                std::to_string(u->m2n_tensors) + " moved whole";
      if (r >= 2) {
        out[r] += "; " +
                  internal::VerifyPattern(target, tensors, seat.buffers, {}, g);
      }
      out[r] += "\n";
    }
    Status closed = (*session)->Close();
    if (!closed.ok()) out[r] += closed.ToString();
  });
  for (uint32_t r = 0; r < kRanks; ++r) {
    EXPECT_EQ(out[r], r < 2 ? "update 1: 2 moved whole\n"
                              "update 2: 2 moved whole\n"
                            : "update 1: 2 moved whole; \n"
                              "update 2: 2 moved whole; \n")
        << "rank " << r;
  }
}

// `b` with tensor "a"'s fragment viewed transposed (column-major over the
// same bytes): not the canonical contiguous view the binding contract
// requires (and ncclReshard takes).
WeightRuntimeBindingManifest Transposed(const WeightRuntimeBindingManifest& b,
                                        const WeightPlacementManifest& m) {
  WeightRuntimeBindingManifestSpec spec = testing::SpecOf(b);
  for (RuntimeBindingFragment& f : spec.fragments) {
    if (m.FindFragment(f.placement_fragment_id())->tensor_id() != "a") continue;
    RuntimeBindingFragmentSpec view = testing::SpecOf(f);
    view.strides_bytes = Dims({4, 32});  // local [8, 6] int32
    f = Must(RuntimeBindingFragment::Make(view));
  }
  return Must(WeightRuntimeBindingManifest::Make(spec));
}

// Rebinds of a tensor moved whole: one to a strided view is refused by the
// binding checks before anything moves (so rule contiguous-binding holds
// for every bound view), the update failing on every rank and the session
// staying usable; the retry with the target moved to fresh buffers moves
// through ncclReshard into them (the mover takes this rank's current
// views at every run).
TEST(NcclM2nSessionTest, ARebindOfAMovedTensorIsFollowedOrRefusedAlike) {
  const WeightPlacementManifest source = Layout({.tp = 2}, false);
  const WeightPlacementManifest target = Layout({.dp = 2, .tp = 2}, true);
  const auto tensors = internal::TensorIndex(source);
  testing::TempDir dir;
  std::vector<std::string> out(kRanks);
  RunRanks([&](uint32_t r) {
    auto store = Must(OpenDirectoryRecordStore(dir.path()));
    Seat seat = SeatOf(r, source, target);
    auto session = Must(LiveSession::Open(*store, source, target, seat.bindings,
                                          Options("m2n-rebind", r, "auto")));
    if (r < 2) internal::FillPattern(source, tensors, seat.buffers, {}, 1);
    const std::string first = session->Update(1).status().ToString();
    LiveBindings strided = seat.bindings;
    if (r == 2) strided.targets[0] = Transposed(strided.targets[0], target);
    auto refused = session->Update(2, r == 2 ? &strided : nullptr);
    out[r] = first + " | " +
             (r == 2 ? refused.status().ToString()
                     : std::string(StatusCodeName(refused.status().code()))) +
             " | usable " + (session->usable() ? "yes" : "no");
    if (r < 2) internal::FillPattern(source, tensors, seat.buffers, {}, 2);
    Seat moved = SeatOf(r, source, target);
    auto retried = session->Update(2, r == 2 ? &moved.bindings : nullptr);
    out[r] += " | " + (retried.ok() ? std::to_string(retried->m2n_tensors) +
                                          " moved whole"
                                    : retried.status().ToString());
    if (r == 2) {
      out[r] +=
          "; " + internal::VerifyPattern(target, tensors, moved.buffers, {}, 2);
    }
    (void)session->Close();
  });
  std::string fragment;  // rank 2's fragment of "a"
  for (const PlacementFragment& f :
       target.FindPart("p-d0-p0-e0-t0")->fragments()) {
    if (f.tensor_id() == "a") fragment = f.placement_fragment_id();
  }
  for (uint32_t r = 0; r < kRanks; ++r) {
    if (r == 2) {
      EXPECT_EQ(out[r],
                "OK | InvalidArgument: live session m2n-rebind, rank 2, "
                "update 2: target bindings: runtime binding stride does not "
                "describe a canonical contiguous view: " +
                    fragment +
                    " (the session stays open: retry the update or run the "
                    "next one) | usable yes | 2 moved whole; ");
    } else {
      EXPECT_EQ(out[r], "OK | Aborted | usable yes | 2 moved whole")
          << "rank " << r;
    }
  }
}

}  // namespace
}  // namespace reshard::nccl
