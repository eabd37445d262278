// The per-tensor split of a plan between ncclReshard and the send/recv
// fallback: the golden scenarios (tests/data/scenarios) lowered exactly or
// refused with their rule, default communicator ranks, and mixed plans.

#include "exec_m2n/m2n_plan_split.h"

#include <gtest/gtest.h>

#include <map>
#include <string>
#include <vector>

#include "reshard/plan.h"
#include "testing/must.h"
#include "testing/placement_builders.h"
#include "testing/status_testing.h"

namespace reshard::m2n {
namespace {

using ::reshard::testing::Must;
using ::reshard::testing::StatusIs;

// "tensor: description" or "tensor: reason", one line per tensor.
std::vector<std::string> Lines(const std::vector<M2nDecision>& decisions) {
  std::vector<std::string> out;
  for (const M2nDecision& d : decisions) {
    out.push_back(d.m2n ? d.tensor_id + ": " + DescribeM2nTensor(*d.m2n)
                        : d.reason);
  }
  return out;
}

std::vector<std::string> SplitLines(const WeightPlacementManifest& source,
                                    const WeightPlacementManifest& target) {
  const LogicalTransferPlan plan =
      Must(LogicalTransferPlan::Make(source, target));
  return Lines(Must(
      SplitPlanForM2n(plan, source, target, DefaultM2nRanks(source, target))));
}

// Every golden scenario that plans, over the default ranks (sources
// first): "<scenario> | <tensor>: <descriptors>" or "<scenario> | <refusal>".
// The DP x TP scenarios give [dp, tp] meshes (R, S); the ones whose boxes
// split two dimensions (EP and TP at once) are refused by rule
// one-shard-axis.
TEST(M2nPlanSplitTest, GoldenScenarios) {
  const std::vector<std::string> want = {
      "aliases_cross_dim | lm_head.weight: src [2]@0 S(0) local [1,2] -> dst "
      "[2]@2 S(1) local [2,1]",
      "aliases_cross_dim | model.embed_tokens.weight: src [2]@0 S(0) local "
      "[1,2] -> dst [2]@2 S(1) local [2,1]",
      "aliases_tied_embeddings | lm_head.weight: src [1]@1 R local [32] -> dst "
      "[1]@2 R local [32]",
      "aliases_tied_embeddings | model.embed_tokens.weight: src [1]@0 R local "
      "[32] -> dst [1]@2 R local [32]",
      "cross_dim_ep2_to_tp2 | layers.0.experts.c: src [2]@0 S(0) local [2,6,8] "
      "-> dst [2]@2 S(1) local [4,3,8]",
      "cross_dim_ep2_to_tp2 | layers.0.experts.d: src [2]@0 S(0) local [2,6,8] "
      "-> dst [2]@2 S(2) local [4,6,4]",
      "cross_dim_ep4_to_tp4_uint8 | layers.0.experts.c: src [4]@0 S(0) local "
      "[1,8,8] -> dst [4]@4 S(1) local [4,2,8]",
      "cross_dim_ep4_to_tp4_uint8 | layers.0.experts.d: src [4]@0 S(0) local "
      "[1,8,8] -> dst [4]@4 S(2) local [4,8,2]",
      "cross_dim_ep8_to_tp8_dim2 | layers.0.experts.w: src [8]@0 S(0) local "
      "[1,8192,8192] -> dst [8]@8 S(2) local [8,8192,1024]",
      "cross_dim_tp4_dim0_to_dim2 | layers.0.physical: src [4]@0 S(0) local "
      "[32,4096,16384] -> dst [4]@4 S(2) local [128,4096,4096]",
      "dp_ownership | layers.0.owned_0: src [2]@0 S(0) local [4,4] -> dst "
      "[2]@4 R local [8,4]",
      "dp_ownership | layers.0.owned_1: src [2]@2 S(0) local [4,4] -> dst "
      "[2]@4 R local [8,4]",
      "dp_replicas_dp2tp2_to_dp3tp4 | layers.0.bytes: src [2,2]@0 R,S(0) local "
      "[4] -> dst [3,4]@4 R,S(0) local [2]",
      "dp_replicas_dp2tp2_to_dp3tp4 | layers.0.proj.weight: src [2,2]@0 R,S(1) "
      "local [16,4] -> dst [3,4]@4 R,S(1) local [16,2]",
      "dp_replicas_dp2tp4_to_dp1tp8 | layers.0.big: src [2,4]@0 R,S(0) local "
      "[512,2048,1024] -> dst [8]@8 S(0) local [256,2048,1024]",
      "ep_ownership_8_to_2 | layers.0.experts.0.weight: src [1]@0 R local "
      "[4,2] -> dst [1]@8 R local [4,2]",
      "ep_ownership_8_to_2 | layers.0.experts.1.weight: src [1]@1 R local "
      "[4,2] -> dst [1]@8 R local [4,2]",
      "ep_ownership_8_to_2 | layers.0.experts.2.weight: src [1]@2 R local "
      "[4,2] -> dst [1]@8 R local [4,2]",
      "ep_ownership_8_to_2 | layers.0.experts.3.weight: src [1]@3 R local "
      "[4,2] -> dst [1]@8 R local [4,2]",
      "ep_ownership_8_to_2 | layers.0.experts.4.weight: src [1]@4 R local "
      "[4,2] -> dst [1]@9 R local [4,2]",
      "ep_ownership_8_to_2 | layers.0.experts.5.weight: src [1]@5 R local "
      "[4,2] -> dst [1]@9 R local [4,2]",
      "ep_ownership_8_to_2 | layers.0.experts.6.weight: src [1]@6 R local "
      "[4,2] -> dst [1]@9 R local [4,2]",
      "ep_ownership_8_to_2 | layers.0.experts.7.weight: src [1]@7 R local "
      "[4,2] -> dst [1]@9 R local [4,2]",
      "ep_regroup_2_to_8 | layers.0.experts.bytes: src [2]@0 S(0) local [4,4] "
      "-> dst [8]@2 S(0) local [1,4]",
      "ep_regroup_2_to_8 | layers.0.experts.w: src [2]@0 S(0) local [4,4,2] -> "
      "dst [8]@2 S(0) local [1,4,2]",
      "ep_regroup_8_to_2 | layers.0.experts.bytes: src [8]@0 S(0) local [1,4] "
      "-> dst [2]@8 S(0) local [4,4]",
      "ep_regroup_8_to_2 | layers.0.experts.w: src [8]@0 S(0) local [1,4,2] -> "
      "dst [2]@8 S(0) local [4,4,2]",
      "four_axis | tensor \"layers.0.experts.w\": not lowered to ncclReshard: "
      "rule one-shard-axis: source boxes split dimensions 0,1; a sharded "
      "layout has exactly one SHARD mesh axis",
      "four_axis | tensor \"layers.1.experts.w\": not lowered to ncclReshard: "
      "rule one-shard-axis: source boxes split dimensions 0,1; a sharded "
      "layout has exactly one SHARD mesh axis",
      "four_axis | tensor \"layers.2.experts.w\": not lowered to ncclReshard: "
      "rule one-shard-axis: source boxes split dimensions 0,1; a sharded "
      "layout has exactly one SHARD mesh axis",
      "four_axis | tensor \"layers.3.experts.w\": not lowered to ncclReshard: "
      "rule one-shard-axis: source boxes split dimensions 0,1; a sharded "
      "layout has exactly one SHARD mesh axis",
      "four_axis_uint8 | tensor \"layers.0.experts.w\": not lowered to "
      "ncclReshard: rule one-shard-axis: source boxes split dimensions 0,1; a "
      "sharded layout has exactly one SHARD mesh axis",
      "four_axis_uint8 | tensor \"layers.1.experts.w\": not lowered to "
      "ncclReshard: rule one-shard-axis: source boxes split dimensions 0,1; a "
      "sharded layout has exactly one SHARD mesh axis",
      "four_axis_uint8 | tensor \"layers.2.experts.w\": not lowered to "
      "ncclReshard: rule one-shard-axis: source boxes split dimensions 0,1; a "
      "sharded layout has exactly one SHARD mesh axis",
      "four_axis_uint8 | tensor \"layers.3.experts.w\": not lowered to "
      "ncclReshard: rule one-shard-axis: source boxes split dimensions 0,1; a "
      "sharded layout has exactly one SHARD mesh axis",
      "fp8_fused_moe | tensor \"layers.0.mlp.experts.gate_proj.weight\": not "
      "lowered to ncclReshard: rule one-shard-axis: source boxes split "
      "dimensions 0,1; a sharded layout has exactly one SHARD mesh axis",
      "fp8_fused_moe | tensor "
      "\"layers.0.mlp.experts.gate_proj.weight_scale_inv\": not lowered to "
      "ncclReshard: rule one-shard-axis: source boxes split dimensions 0,1; a "
      "sharded layout has exactly one SHARD mesh axis",
      "fp8_fused_moe | tensor \"layers.0.mlp.experts.up_proj.weight\": not "
      "lowered to ncclReshard: rule one-shard-axis: source boxes split "
      "dimensions 0,1; a sharded layout has exactly one SHARD mesh axis",
      "fp8_fused_moe | tensor "
      "\"layers.0.mlp.experts.up_proj.weight_scale_inv\": not lowered to "
      "ncclReshard: rule one-shard-axis: source boxes split dimensions 0,1; a "
      "sharded layout has exactly one SHARD mesh axis",
      "fp8_weight_scale_tp4_to_tp8 | layers.0.mlp.down_proj.weight: src [4]@0 "
      "S(0) local [256,128] -> dst [8]@4 S(0) local [128,128]",
      "fp8_weight_scale_tp4_to_tp8 | layers.0.mlp.down_proj.weight_scale_inv: "
      "src [4]@0 S(0) local [2,1] -> dst [8]@4 S(0) local [1,1]",
      "pp_routing_2_to_4 | layers.0.weight: src [1]@0 R local [8] -> dst [1]@2 "
      "R local [8]",
      "pp_routing_2_to_4 | layers.1.weight: src [1]@0 R local [8] -> dst [1]@3 "
      "R local [8]",
      "pp_routing_2_to_4 | layers.2.weight: src [1]@1 R local [8] -> dst [1]@4 "
      "R local [8]",
      "pp_routing_2_to_4 | layers.3.weight: src [1]@1 R local [8] -> dst [1]@5 "
      "R local [8]",
      "pp_routing_4_to_2 | layers.0.weight: src [1]@0 R local [8] -> dst [1]@4 "
      "R local [8]",
      "pp_routing_4_to_2 | layers.1.weight: src [1]@1 R local [8] -> dst [1]@4 "
      "R local [8]",
      "pp_routing_4_to_2 | layers.2.weight: src [1]@2 R local [8] -> dst [1]@5 "
      "R local [8]",
      "pp_routing_4_to_2 | layers.3.weight: src [1]@3 R local [8] -> dst [1]@5 "
      "R local [8]",
      "pp_routing_mod_2_to_4 | layers.0.weight: src [1]@0 R local [8] -> dst "
      "[1]@2 R local [8]",
      "pp_routing_mod_2_to_4 | layers.1.weight: src [1]@1 R local [8] -> dst "
      "[1]@3 R local [8]",
      "pp_routing_mod_2_to_4 | layers.2.weight: src [1]@0 R local [8] -> dst "
      "[1]@4 R local [8]",
      "pp_routing_mod_2_to_4 | layers.3.weight: src [1]@1 R local [8] -> dst "
      "[1]@5 R local [8]",
      "pp_routing_mod_4_to_2 | layers.0.weight: src [1]@0 R local [8] -> dst "
      "[1]@4 R local [8]",
      "pp_routing_mod_4_to_2 | layers.1.weight: src [1]@1 R local [8] -> dst "
      "[1]@5 R local [8]",
      "pp_routing_mod_4_to_2 | layers.2.weight: src [1]@2 R local [8] -> dst "
      "[1]@4 R local [8]",
      "pp_routing_mod_4_to_2 | layers.3.weight: src [1]@3 R local [8] -> dst "
      "[1]@5 R local [8]",
      "tp_cube_dim0_4_to_8 | layers.0.cube: src [4]@0 S(0) local "
      "[512,2048,2048] -> dst [8]@4 S(0) local [256,2048,2048]",
      "tp_cube_dim0_8_to_4 | layers.0.cube: src [8]@0 S(0) local "
      "[256,2048,2048] -> dst [4]@8 S(0) local [512,2048,2048]",
      "tp_cube_dim0_to_dim1 | layers.0.cube: src [4]@0 S(0) local "
      "[512,2048,2048] -> dst [4]@4 S(1) local [2048,512,2048]",
      "tp_cube_dim0_to_dim2_stress | layers.0.cube: src [4]@0 S(0) local "
      "[512,2048,2048] -> dst [4]@4 S(2) local [2048,2048,512]",
      "tp_merge_8_to_4 | layers.0.bias.bytes: src [8]@0 S(0) local [1] -> dst "
      "[4]@8 S(0) local [2]",
      "tp_merge_8_to_4 | layers.0.proj.weight: src [8]@0 S(0) local [8,16] -> "
      "dst [4]@8 S(0) local [16,16]",
      "tp_split_4_to_8 | layers.0.bias.bytes: src [4]@0 S(0) local [2] -> dst "
      "[8]@4 S(0) local [1]",
      "tp_split_4_to_8 | layers.0.proj.weight: src [4]@0 S(0) local [16,16] -> "
      "dst [8]@4 S(0) local [8,16]",
      "virtual_pp_stages | layers.0.weight: src [2]@0 S(0) local [4] -> dst "
      "[2]@2 S(0) local [4]",
      "virtual_pp_stages | layers.1.weight: src [2]@0 S(0) local [4] -> dst "
      "[2]@2 S(0) local [4]",
  };
  std::vector<std::string> got;
  size_t scenarios = 0;
  for (const testing::ScenarioPair& pair :
       testing::ScenarioPairs(uint64_t{1} << 40)) {
    ++scenarios;
    for (const std::string& line : SplitLines(pair.source, pair.target)) {
      got.push_back(pair.name + " | " + line);
    }
  }
  EXPECT_EQ(scenarios, 27u);
  EXPECT_EQ(got, want);
}

// A plan whose tensors go both ways: the even split to ncclReshard, the
// uneven, sectioned and four-dimensional ones to the fallback.
TEST(M2nPlanSplitTest, MixedPlanSplitsPerTensor) {
  testing::PlacementDraft src = testing::GridDraft(testing::Sizes{.tp = 4});
  testing::PlacementDraft dst = testing::GridDraft(testing::Sizes{.tp = 2});
  for (testing::PlacementDraft* d : {&src, &dst}) {
    AddTensor(d, {.tensor_id = "even", .shape = {8, 4}, .tp_dim = 0});
    AddTensor(d, {.tensor_id = "four_d", .shape = {4, 2, 2, 2}, .tp_dim = 0});
    AddTensor(d, {.tensor_id = "qkv",
                  .shape = {16, 4},
                  .tp_dim = 0,
                  .tp_sections = {8, 8}});
  }
  AddTensor(
      &src,
      {.tensor_id = "vocab", .shape = {10, 4}, .tp_dim = 0, .tp_chunk = 3});
  AddTensor(&dst, {.tensor_id = "vocab", .shape = {10, 4}, .tp_dim = 0});
  const WeightPlacementManifest source = Must(src.Build());
  const WeightPlacementManifest target = Must(dst.Build());
  const LogicalTransferPlan plan =
      Must(LogicalTransferPlan::Make(source, target));
  const std::vector<M2nDecision> decisions = Must(
      SplitPlanForM2n(plan, source, target, DefaultM2nRanks(source, target)));
  std::vector<std::string> rules;
  for (const M2nDecision& d : decisions) rules.push_back(d.rule);
  EXPECT_EQ(rules, (std::vector<std::string>{
                       "", "tensor-rank", "one-box-per-rank", "even-split"}));
  EXPECT_EQ(
      Lines(decisions),
      (std::vector<std::string>{
          "even: src [4]@0 S(0) local [2,4] -> dst [2]@4 S(0) local [4,4]",
          "tensor \"four_d\": not lowered to ncclReshard: rule tensor-rank: "
          "4 dimensions, 1 to 3",
          "tensor \"qkv\": not lowered to ncclReshard: rule "
          "one-box-per-rank: source rank 0 holds more than one box of the "
          "tensor; ncclReshard takes one local tensor per rank",
          "tensor \"vocab\": not lowered to ncclReshard: rule even-split: "
          "source dimension 0 of 10 in 4 chunks is uneven (DTensor's chunks "
          "of 3); ncclReshard takes one local shape per side"}));
}

TEST(M2nPlanSplitTest, DefaultRanksPutSourcesFirstInRankOrder) {
  const WeightPlacementManifest source =
      testing::CubeLayout(2, 0, Dims{4, 4, 4});
  const WeightPlacementManifest target =
      testing::CubeLayout(4, 1, Dims{4, 4, 4});
  const M2nRanks ranks = DefaultM2nRanks(source, target);
  EXPECT_EQ(ranks.comm_size, 6);
  std::vector<std::string> got;
  for (const auto& [id, rank] : ranks.source) {
    got.push_back("s " + id + " " + std::to_string(rank));
  }
  for (const auto& [id, rank] : ranks.target) {
    got.push_back("t " + id + " " + std::to_string(rank));
  }
  EXPECT_EQ(
      got, (std::vector<std::string>{
               "s p-d0-p0-e0-t0 0", "s p-d0-p0-e0-t1 1", "t p-d0-p0-e0-t0 2",
               "t p-d0-p0-e0-t1 3", "t p-d0-p0-e0-t2 4", "t p-d0-p0-e0-t3 5"}));
}

TEST(M2nPlanSplitTest, StoreSourceRefusesEveryTensor) {
  const WeightPlacementManifest source =
      testing::CubeLayout(2, 0, Dims{4, 4, 4});
  const WeightPlacementManifest target =
      testing::CubeLayout(4, 1, Dims{4, 4, 4});
  const StoredWeightManifest stored =
      Must(StoredWeightManifest::Make(testing::StoredSpecFrom(source)));
  const LogicalTransferPlan plan =
      Must(LogicalTransferPlan::MakeFromStored(stored, target));
  const std::vector<M2nDecision> decisions = Must(
      SplitPlanForM2n(plan, source, target, DefaultM2nRanks(source, target)));
  ASSERT_EQ(decisions.size(), 1u);
  EXPECT_EQ(decisions[0].rule, "live-source");
  EXPECT_EQ(decisions[0].reason,
            "tensor \"w\": not lowered to ncclReshard: rule live-source: the "
            "source is a store revision, not ranks of the communicator");
}

TEST(M2nPlanSplitTest, RefusesOtherPlacementsAndUnrankedParticipants) {
  const WeightPlacementManifest source =
      testing::CubeLayout(2, 0, Dims{4, 4, 4});
  const WeightPlacementManifest target =
      testing::CubeLayout(4, 1, Dims{4, 4, 4});
  const LogicalTransferPlan plan =
      Must(LogicalTransferPlan::Make(source, target));
  M2nRanks ranks = DefaultM2nRanks(source, target);
  EXPECT_THAT(SplitPlanForM2n(plan, target, target, ranks),
              StatusIs(StatusCode::kInvalidArgument,
                       "the placements given are not those the plan was made "
                       "from"));
  ranks.target.erase("p-d0-p0-e0-t3");
  EXPECT_THAT(SplitPlanForM2n(plan, source, target, ranks),
              StatusIs(StatusCode::kInvalidArgument,
                       "target participant p-d0-p0-e0-t3 has no communicator "
                       "rank"));
}

// Rule contiguous-binding: a lowered tensor stays lowered while every
// participant's binding of it is contiguous row-major; a transposed view
// or a missing binding refuses it, naming the side, participant and
// fragment.
TEST(M2nPlanSplitTest, BindingsMustBeContiguousRowMajor) {
  const auto source = testing::CubeLayout(2, 0, {4, 8});
  const auto target = testing::CubeLayout(2, 1, {4, 8});
  const LogicalTransferPlan plan =
      Must(LogicalTransferPlan::Make(source, target));
  const auto split = Must(
      SplitPlanForM2n(plan, source, target, DefaultM2nRanks(source, target)));
  const auto sources = Must(testing::BindingBuilder(source).Build());
  const auto targets = Must(testing::BindingBuilder(target).Build());
  std::vector<M2nDecision> kept = split;
  RequireContiguousBindings(source, sources, target, targets, &kept);
  EXPECT_EQ(Lines(kept), Lines(split));
  ASSERT_TRUE(kept[0].m2n.has_value());

  const std::string t1 = "p-d0-p0-e0-t1";
  const auto transposed = Must(
      testing::BindingBuilder(target)
          .AdjustEach([&](const std::string& p, RuntimeBindingFragmentSpec* v) {
            if (p == t1) v->strides_bytes = Dims({1, 4});
          })
          .Build());
  std::vector<M2nDecision> refused = split;
  RequireContiguousBindings(source, sources, target, transposed, &refused);
  const std::string fragment =
      target.FindPart(t1)->fragments()[0].placement_fragment_id();
  EXPECT_FALSE(refused[0].m2n.has_value());
  EXPECT_EQ(refused[0].rule, "contiguous-binding");
  EXPECT_EQ(refused[0].reason,
            "tensor \"w\": not lowered to ncclReshard: rule "
            "contiguous-binding: target participant " +
                t1 + " fragment " + fragment +
                " is not one contiguous row-major buffer of its local shape "
                "[4,4]");

  std::vector<M2nDecision> unbound = split;
  RequireContiguousBindings(source, {sources[1]}, target, targets, &unbound);
  const std::string t0_fragment =
      source.FindPart("p-d0-p0-e0-t0")->fragments()[0].placement_fragment_id();
  EXPECT_EQ(unbound[0].reason,
            "tensor \"w\": not lowered to ncclReshard: rule "
            "contiguous-binding: source participant p-d0-p0-e0-t0 fragment " +
                t0_fragment + " has no binding");
}

}  // namespace
}  // namespace reshard::m2n
