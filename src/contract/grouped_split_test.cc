// Grouped split axes: a tensor split into fewer shards than its axis has
// ranks, each shard held by a contiguous group of ranks (vLLM's KV heads
// when TP exceeds them). Validation, the wire, and planning from them.

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "reshard/api.h"
#include "reshard/placement.h"
#include "reshard/plan.h"
#include "testing/placement_builders.h"
#include "testing/status_testing.h"

namespace reshard {
namespace {

using ::reshard::testing::StatusIs;
using testing::GridDraft;
using ::testing::HasSubstr;
using testing::PlacementDraft;

// TP `tp`; tensor "k" [8, 4] uint8 in `shards` shards on dim 0 (rank t
// holds shard t / (tp / shards)); tensor "q" [8, 4] plainly split.
PlacementDraft KvDraft(int64_t tp, int64_t shards) {
  PlacementDraft d = GridDraft({1, 1, 1, tp});
  for (const char* name : {"k", "q"}) {
    const bool grouped = std::string(name) == "k";
    d.tensors.push_back(
        {.tensor_id = name,
         .global_shape = {8, 4},
         .dtype = "uint8",
         .itemsize = 1,
         .shard_dims = {0},
         .layout_fingerprint = "uint8:row-major",
         .parallel_axes = {grouped ? *GroupedSplitAxis(AxisKind::kTp, 0, shards)
                                   : *SplitAxis(AxisKind::kTp, 0)}});
    const int64_t n = grouped ? shards : tp;
    for (int64_t t = 0; t < tp; ++t) {
      const int64_t s = grouped ? t / (tp / shards) : t;
      d.fragments.push_back({.tensor_id = name,
                             .global_offset = {s * 8 / n, 0},
                             .local_shape = {8 / n, 4},
                             .nbytes = static_cast<uint64_t>(32 / n),
                             .rank = {.tp = t}});
    }
  }
  return d;
}

std::string BuildError(const PlacementDraft& d) {
  auto m = d.Build();
  return m.ok() ? "OK" : m.status().message();
}

TEST(GroupedSplitTest, ShardsHeldByGroupsOfRanksValidate) {
  ASSERT_OK_AND_ASSIGN(auto m, KvDraft(4, 2).Build());
  const TensorDescriptor* k = m.FindTensor("k");
  ASSERT_NE(k, nullptr);
  EXPECT_EQ(k->parallel_axes()[0].shards(), 2);
  EXPECT_EQ(m.FindTensor("q")->parallel_axes()[0].shards(), 0);
  ASSERT_OK_AND_ASSIGN(auto m8, KvDraft(8, 2).Build());
  EXPECT_EQ(m8.fragments().size(), 16u);
}

TEST(GroupedSplitTest, TheWireCarriesShardsOnlyForGroupedAxes) {
  ASSERT_OK_AND_ASSIGN(auto m, KvDraft(4, 2).Build());
  const std::string wire = WeightPlacementToJson(m);
  EXPECT_THAT(wire, HasSubstr(R"({"dim":0,"kind":"tp","semantics":"split",)"
                              R"("shards":2})"));
  EXPECT_THAT(wire, HasSubstr(R"({"dim":0,"kind":"tp","semantics":"split"}])"));
  ASSERT_OK_AND_ASSIGN(auto back, WeightPlacementFromJson(wire));
  EXPECT_EQ(back.digest(), m.digest());
  EXPECT_EQ(back.placement_id(), m.placement_id());
  // The same boxes with k replicated instead hash differently.
  std::string replicated = wire;
  const std::string from = R"("semantics":"split","shards":2)";
  replicated.replace(replicated.find(from), from.size(),
                     R"("semantics":"split","shards":0)");
  EXPECT_THAT(WeightPlacementFromJson(replicated).status(),
              StatusIs(StatusCode::kInvalidArgument,
                       HasSubstr("grouped split axis shards must be positive, "
                                 "got 0")));
}

TEST(GroupedSplitTest, WireRefusesShardsOutsideSplitAxes) {
  ASSERT_OK_AND_ASSIGN(auto m, KvDraft(4, 2).Build());
  std::string wire = WeightPlacementToJson(m);
  const std::string from = R"({"dim":0,"kind":"tp","semantics":"split",)"
                           R"("shards":2})";
  wire.replace(wire.find(from), from.size(),
               R"({"kind":"tp","semantics":"replicated","shards":2})");
  EXPECT_THAT(WeightPlacementFromJson(wire).status(),
              StatusIs(StatusCode::kInvalidArgument,
                       HasSubstr("only split axes carry \"dim\", "
                                 "\"shards\" and \"ranks\"")));
}

TEST(GroupedSplitTest, ShardsMustDivideTheAxisIntoGroups) {
  EXPECT_EQ(BuildError(KvDraft(4, 4)),
            "grouped split axis of k: tp of size 4 cannot hold 4 shards (they "
            "must divide the axis into groups of two or more ranks)");
  PlacementDraft d = KvDraft(4, 2);
  d.tensors[0].parallel_axes = {*GroupedSplitAxis(AxisKind::kTp, 0, 3)};
  EXPECT_EQ(BuildError(d),
            "grouped split axis of k: tp of size 4 cannot hold 3 shards (they "
            "must divide the axis into groups of two or more ranks)");
  EXPECT_THAT(GroupedSplitAxis(AxisKind::kPp, 0, 2).status(),
              StatusIs(StatusCode::kInvalidArgument,
                       HasSubstr("pp axis cannot use split semantics")));
}

TEST(GroupedSplitTest, EveryRankOfAGroupHoldsItsShard) {
  // Rank 1 (group 0) holds shard 1's rows: shard 0 lacks a replica.
  PlacementDraft d = KvDraft(4, 2);
  d.fragments[1].global_offset = {4, 0};
  EXPECT_EQ(BuildError(d),
            "global placement tensor is not fully covered: k (owner/replica "
            "group at dp=0,pp=0,ep=0,tp=1)");
  // Rank 3 holds nothing of k: its group lacks shard 1.
  d = KvDraft(4, 2);
  d.fragments.erase(d.fragments.begin() + 3);
  EXPECT_EQ(BuildError(d),
            "global placement tensor is not fully covered: k (owner/replica "
            "group at dp=0,pp=0,ep=0,tp=1)");
}

// Plans TP 4 with grouped KV shards into a plain TP 2 split and moves the
// bytes: every target byte is its global element's, each source box read
// from one member of its group.
TEST(GroupedSplitTest, PlansAndMovesFromOneReplicaPerGroup) {
  ASSERT_OK_AND_ASSIGN(auto source, KvDraft(4, 2).Build());
  PlacementDraft td = KvDraft(2, 1);
  for (auto& t : td.tensors) t.parallel_axes = {*SplitAxis(AxisKind::kTp, 0)};
  for (auto& f : td.fragments) {
    f.global_offset = {f.rank.tp * 4, 0};
    f.local_shape = {4, 4};
    f.nbytes = 16;
  }
  ASSERT_OK_AND_ASSIGN(auto target, td.Build());
  // Per side: equal boxes of both sides have equal fragment ids.
  std::map<std::string, std::vector<uint8_t>> memory[2];
  auto buffers = [&](const WeightPlacementManifest& m, bool fill) {
    for (const PlacementFragment* f : m.fragments()) {
      auto& v = memory[fill ? 0 : 1][f->placement_fragment_id()];
      v.assign(f->nbytes(), 0xEE);
      if (!fill) continue;
      for (size_t i = 0; i < v.size(); ++i) {
        const int64_t row = f->global_offset()[0] + static_cast<int64_t>(i) / 4;
        v[i] = static_cast<uint8_t>((f->tensor_id() == "k" ? 100 : 0) +
                                    row * 4 + static_cast<int64_t>(i) % 4);
      }
    }
  };
  buffers(source, true);
  buffers(target, false);
  auto lookup = [&](int side) {
    return [&, side](std::string_view id) -> void* {
      return memory[side].at(std::string(id)).data();
    };
  };
  BufferBindingOptions so, to;
  so.instance_id = "source";
  to.instance_id = "target";
  ASSERT_OK_AND_ASSIGN(auto sb, BindAllBuffers(source, lookup(0), so));
  ASSERT_OK_AND_ASSIGN(auto tb, BindAllBuffers(target, lookup(1), to));
  ASSERT_OK_AND_ASSIGN(auto plan, LogicalTransferPlan::Make(source, target));
  EXPECT_EQ(plan.summary().bytes, 64u);
  ASSERT_OK_AND_ASSIGN(auto report, Reshard(source, sb, target, tb));
  EXPECT_EQ(report.bytes, 64u);
  for (const PlacementFragment* f : target.fragments()) {
    const auto& v = memory[1][f->placement_fragment_id()];
    for (size_t i = 0; i < v.size(); ++i) {
      const int64_t row = f->global_offset()[0] + static_cast<int64_t>(i) / 4;
      ASSERT_EQ(v[i], (f->tensor_id() == "k" ? 100 : 0) + row * 4 +
                          static_cast<int64_t>(i) % 4)
          << f->tensor_id() << " byte " << i;
    }
  }
}

}  // namespace
}  // namespace reshard
