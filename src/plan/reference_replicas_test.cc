// ReplicaPolicy::kReference: the exact source fragment of every region, as
// the reference prototype's planner chooses it, beside the balanced
// policy's choice for the same placements.

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "reshard/plan.h"
#include "testing/placement_builders.h"
#include "testing/status_testing.h"

namespace reshard {
namespace {

using ::reshard::testing::StatusIs;
using testing::AddTensor;
using testing::GridDraft;
using testing::PlacementDraft;
using testing::Sizes;

WeightPlacementManifest MustBuild(const PlacementDraft& d) {
  auto m = d.Build();
  if (!m.ok()) {
    ADD_FAILURE() << "draft does not build: " << m.status().ToString();
    std::abort();
  }
  return std::move(m).ValueOrDie();
}

Result<LogicalTransferPlan> PlanWith(const WeightPlacementManifest& source,
                                     const WeightPlacementManifest& target,
                                     ReplicaPolicy policy,
                                     uint32_t threads = 1) {
  PlanOptions options;
  options.replica_policy = policy;
  options.threads = threads;
  return LogicalTransferPlan::Make(source, target, options);
}

// (target participant, source participant, overlap row) of every region.
using Choice = std::tuple<std::string, std::string, int64_t>;
std::set<Choice> Choices(const LogicalTransferPlan& plan) {
  std::set<Choice> out;
  for (const auto& r : plan.regions()) {
    out.emplace(plan.target_fragments()[r.target_fragment].participant_id,
                plan.source_fragments()[r.source_fragment].participant_id,
                r.overlap_offset[0]);
  }
  return out;
}

TEST(ReferenceReplicasTest, TargetDpRanksReadTheReplicasRoundRobin) {
  // Two whole DP replicas to DP3 x TP2 rows: target DP rank d reads source
  // replica d mod 2 for both of its TP halves.
  PlacementDraft src = GridDraft(Sizes{.dp = 2});
  AddTensor(&src, {.tensor_id = "w", .shape = {4, 4}});
  PlacementDraft dst = GridDraft(Sizes{.dp = 3, .tp = 2});
  AddTensor(&dst, {.tensor_id = "w", .shape = {4, 4}, .tp_dim = 0});
  const auto source = MustBuild(src);
  const auto target = MustBuild(dst);
  ASSERT_OK_AND_ASSIGN(auto plan,
                       PlanWith(source, target, ReplicaPolicy::kReference));
  EXPECT_EQ(Choices(plan), (std::set<Choice>{
                               {"p-d0-p0-e0-t0", "p-d0-p0-e0-t0", 0},
                               {"p-d0-p0-e0-t1", "p-d0-p0-e0-t0", 2},
                               {"p-d1-p0-e0-t0", "p-d1-p0-e0-t0", 0},
                               {"p-d1-p0-e0-t1", "p-d1-p0-e0-t0", 2},
                               {"p-d2-p0-e0-t0", "p-d0-p0-e0-t0", 0},
                               {"p-d2-p0-e0-t1", "p-d0-p0-e0-t0", 2},
                           }));
  EXPECT_EQ(plan.summary().bytes, 6u * 16);
  EXPECT_EQ(plan.source_bytes(), (std::vector<uint64_t>{64, 32}));
  // The same plan on two threads.
  ASSERT_OK_AND_ASSIGN(auto two,
                       PlanWith(source, target, ReplicaPolicy::kReference, 2));
  EXPECT_EQ(Choices(two), Choices(plan));
  // Balanced (the default) gives each replica half of the bytes.
  ASSERT_OK_AND_ASSIGN(auto balanced,
                       LogicalTransferPlan::Make(source, target));
  EXPECT_EQ(balanced.source_bytes(), (std::vector<uint64_t>{48, 48}));
}

TEST(ReferenceReplicasTest, ABoxHeldTwiceIsReadFromItsFirstCopy) {
  // Replicated over TP: both TP ranks hold the whole tensor; the reference
  // reads every row from TP rank 0, the balanced policy from both.
  PlacementDraft src = GridDraft(Sizes{.tp = 2});
  AddTensor(&src, {.tensor_id = "w", .shape = {8, 4}, .tp_dim = -1});
  PlacementDraft dst = GridDraft(Sizes{.tp = 2});
  AddTensor(&dst, {.tensor_id = "w", .shape = {8, 4}, .tp_dim = 0});
  const auto source = MustBuild(src);
  const auto target = MustBuild(dst);
  ASSERT_OK_AND_ASSIGN(auto plan,
                       PlanWith(source, target, ReplicaPolicy::kReference));
  EXPECT_EQ(Choices(plan), (std::set<Choice>{
                               {"p-d0-p0-e0-t0", "p-d0-p0-e0-t0", 0},
                               {"p-d0-p0-e0-t1", "p-d0-p0-e0-t0", 4},
                           }));
  ASSERT_OK_AND_ASSIGN(auto balanced,
                       PlanWith(source, target, ReplicaPolicy::kBalanced));
  EXPECT_EQ(Choices(balanced), (std::set<Choice>{
                                   {"p-d0-p0-e0-t0", "p-d0-p0-e0-t0", 0},
                                   {"p-d0-p0-e0-t1", "p-d0-p0-e0-t1", 4},
                               }));
}

// Tensor "w" [4, 2] bfloat16 owned by PP, PP rank i holding it whole
// (tilings[i] == 1) or as two row halves (2).
WeightPlacementManifest OwnersTiledAs(const std::vector<int>& tilings) {
  PlacementDraft d =
      GridDraft(Sizes{.pp = static_cast<int64_t>(tilings.size())});
  d.tensors.push_back({.tensor_id = "w",
                       .global_shape = {4, 2},
                       .dtype = "bfloat16",
                       .itemsize = 2,
                       .layout_fingerprint = "row-major",
                       .parallel_axes = {OwnershipAxis(AxisKind::kPp)}});
  for (size_t i = 0; i < tilings.size(); ++i) {
    const int64_t rows = 4 / tilings[i];
    for (int64_t r = 0; r < 4; r += rows) {
      d.fragments.push_back({.tensor_id = "w",
                             .global_offset = {r, 0},
                             .local_shape = {rows, 2},
                             .nbytes = static_cast<uint64_t>(rows) * 4,
                             .rank = {.pp = static_cast<int64_t>(i)}});
    }
  }
  return MustBuild(d);
}

TEST(ReferenceReplicasTest, ReadsTheSmallestOwnerInItsOwnTiling) {
  // PP 0 holds w whole, PP 1 and 2 in halves: the balanced policy
  // intersects the tiling two owners share, the reference PP 0's.
  const auto source = OwnersTiledAs({1, 2, 2});
  PlacementDraft dst = GridDraft(Sizes{});
  AddTensor(&dst, {.tensor_id = "w", .shape = {4, 2}});
  dst.tensors[0].layout_fingerprint = "row-major";
  const auto target = MustBuild(dst);
  ASSERT_OK_AND_ASSIGN(auto plan,
                       PlanWith(source, target, ReplicaPolicy::kReference));
  EXPECT_EQ(Choices(plan), (std::set<Choice>{
                               {"p-d0-p0-e0-t0", "p-d0-p0-e0-t0", 0},
                           }));
  EXPECT_EQ(plan.regions()[0].overlap_shape, (Dims{4, 2}));
  ASSERT_OK_AND_ASSIGN(auto balanced,
                       PlanWith(source, target, ReplicaPolicy::kBalanced));
  EXPECT_EQ(Choices(balanced), (std::set<Choice>{
                                   {"p-d0-p0-e0-t0", "p-d0-p1-e0-t0", 0},
                                   {"p-d0-p0-e0-t0", "p-d0-p2-e0-t0", 2},
                               }));
  // Halves at PP 0: the reference reads both halves there.
  ASSERT_OK_AND_ASSIGN(auto halves, PlanWith(OwnersTiledAs({2, 1, 1}), target,
                                             ReplicaPolicy::kReference));
  EXPECT_EQ(Choices(halves), (std::set<Choice>{
                                 {"p-d0-p0-e0-t0", "p-d0-p0-e0-t0", 0},
                                 {"p-d0-p0-e0-t0", "p-d0-p0-e0-t0", 2},
                             }));
}

TEST(ReferenceReplicasTest, RefusesASourceWithoutACompleteReplica) {
  // Both TP copies are complete, but TP rank 0 holds w whole and TP rank 1
  // in halves: the reference counts the DP rank's distinct boxes, which
  // cover the tensor twice over less once, and finds no complete replica.
  PlacementDraft src = GridDraft(Sizes{.tp = 2});
  AddTensor(&src, {.tensor_id = "w", .shape = {4, 2}, .tp_dim = -1});
  PlacementFragmentSpec half = src.fragments[1];
  half.local_shape = {2, 2};
  half.nbytes = 8;
  src.fragments[1] = half;
  half.global_offset = {2, 0};
  src.fragments.push_back(half);
  PlacementDraft dst = GridDraft(Sizes{});
  AddTensor(&dst, {.tensor_id = "w", .shape = {4, 2}});
  const auto source = MustBuild(src);
  const auto target = MustBuild(dst);
  EXPECT_THAT(PlanWith(source, target, ReplicaPolicy::kReference),
              StatusIs(StatusCode::kInvalidArgument,
                       "source manifests have no complete DP replica; "
                       "tensors are not fully covered"));
  EXPECT_OK(PlanWith(source, target, ReplicaPolicy::kBalanced).status());
}

}  // namespace
}  // namespace reshard
