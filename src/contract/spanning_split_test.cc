// Spanning split axes: a tensor split over the TP and DP ranks together,
// rank (d, t) holding part d * tp + t of dp * tp (vLLM's routed experts at
// DP > 1 without EP). Validation, the wire, and planning from and into
// them.

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <map>
#include <string>
#include <vector>

#include "reshard/api.h"
#include "reshard/placement.h"
#include "reshard/plan.h"
#include "testing/placement_builders.h"
#include "testing/reshard_testing.h"
#include "testing/status_testing.h"

namespace reshard {
namespace {

using ::reshard::testing::StatusIs;
using testing::GridDraft;
using ::testing::HasSubstr;
using testing::PlacementDraft;

// DP `dp` x TP `tp`; tensor "x" [8, 4] uint8 whose rank (d, t) holds rows
// [part * n, (part + 1) * n), part = d * tp + t and n = 8 / (dp * tp),
// declared a tp split spanning dp (`spanning`; else a plain tp split
// replicated over dp, each DP replica holding all rows); tensor "q" [8, 4]
// replicated.
PlacementDraft ExpertDraft(int64_t dp, int64_t tp, bool spanning) {
  PlacementDraft d = GridDraft({dp, 1, 1, tp});
  std::vector<ParallelAxis> x_axes, q_axes;
  if (dp > 1) q_axes.push_back(ReplicatedAxis(AxisKind::kDp));
  if (tp > 1) q_axes.push_back(ReplicatedAxis(AxisKind::kTp));
  if (spanning) {
    x_axes.push_back(*SpanningSplitAxis(AxisKind::kTp, 0, AxisKind::kDp));
  } else {
    if (dp > 1) x_axes.push_back(ReplicatedAxis(AxisKind::kDp));
    if (tp > 1) x_axes.push_back(*SplitAxis(AxisKind::kTp, 0));
  }
  const int64_t parts = spanning ? dp * tp : tp;
  for (const char* name : {"q", "x"}) {
    const bool x = std::string(name) == "x";
    const bool split = x && (spanning || tp > 1);
    d.tensors.push_back({.tensor_id = name,
                         .global_shape = {8, 4},
                         .dtype = "uint8",
                         .itemsize = 1,
                         .shard_dims = split ? Dims{0} : Dims{},
                         .layout_fingerprint = "uint8:row-major",
                         .parallel_axes = x ? x_axes : q_axes});
    for (int64_t r = 0; r < dp; ++r) {
      for (int64_t t = 0; t < tp; ++t) {
        const int64_t n = split ? 8 / parts : 8;
        const int64_t part = spanning ? r * tp + t : t;
        d.fragments.push_back({.tensor_id = name,
                               .global_offset = {split ? part * n : 0, 0},
                               .local_shape = {n, 4},
                               .nbytes = static_cast<uint64_t>(n * 4),
                               .rank = {.dp = r, .tp = t}});
      }
    }
  }
  return d;
}

std::string BuildError(const PlacementDraft& d) {
  auto m = d.Build();
  return m.ok() ? "OK" : m.status().message();
}

TEST(SpanningSplitTest, EachRankOfTheGridHoldsItsPart) {
  ASSERT_OK_AND_ASSIGN(auto m, ExpertDraft(2, 2, true).Build());
  const TensorDescriptor* x = m.FindTensor("x");
  ASSERT_NE(x, nullptr);
  EXPECT_EQ(x->FindAxis(AxisKind::kDp), nullptr);
  const ParallelAxis* tp = x->FindAxis(AxisKind::kTp);
  ASSERT_NE(tp, nullptr);
  EXPECT_EQ(tp->over(), AxisKind::kDp);
  EXPECT_EQ(tp->shards(), 0);
  EXPECT_EQ(tp->ranks(), 0);
  EXPECT_EQ(m.FindTensor("q")->FindAxis(AxisKind::kTp)->over(), std::nullopt);
  TensorDescriptorSpec spec = ExpertDraft(2, 2, false).tensors[1];
  ASSERT_OK_AND_ASSIGN(auto plain, TensorDescriptor::Make(spec));
  EXPECT_EQ(DescribeDescriptorDifference(*x, plain, "a", "b"),
            "parallel_axes [split tp dim 0 over dp] (a) vs [replicated dp, "
            "split tp dim 0] (b)");
  // TP 1: the DP ranks alone split the tensor.
  ASSERT_OK_AND_ASSIGN(auto tp1, ExpertDraft(2, 1, true).Build());
  EXPECT_EQ(tp1.fragments().size(), 4u);
}

TEST(SpanningSplitTest, TheWireCarriesOverOnlyForSpanningAxes) {
  ASSERT_OK_AND_ASSIGN(auto m, ExpertDraft(2, 2, true).Build());
  const std::string wire = WeightPlacementToJson(m);
  EXPECT_THAT(wire, HasSubstr(R"([{"dim":0,"kind":"tp","over":"dp",)"
                              R"("semantics":"split"}])"));
  ASSERT_OK_AND_ASSIGN(auto back, WeightPlacementFromJson(wire));
  EXPECT_EQ(back.digest(), m.digest());
  EXPECT_EQ(back.placement_id(), m.placement_id());
  EXPECT_EQ(WeightPlacementToJson(back), wire);
  ASSERT_OK_AND_ASSIGN(auto plain, ExpertDraft(2, 2, false).Build());
  EXPECT_THAT(WeightPlacementToJson(plain),
              ::testing::Not(HasSubstr("\"over\"")));
}

TEST(SpanningSplitTest, WireRefusesMalformedOver) {
  ASSERT_OK_AND_ASSIGN(auto m, ExpertDraft(2, 2, true).Build());
  const std::string wire = WeightPlacementToJson(m);
  const std::string from = R"({"dim":0,"kind":"tp","over":"dp",)"
                           R"("semantics":"split"})";
  auto with = [&](const std::string& axis) {
    std::string w = wire;
    w.replace(w.find(from), from.size(), axis);
    auto back = WeightPlacementFromJson(w);
    return back.ok() ? std::string("OK") : back.status().message();
  };
  EXPECT_EQ(with(R"({"dim":0,"kind":"tp","over":"ep","semantics":"split"})"),
            "tensors[1].parallel_axes[0]: a spanning split axis splits tp "
            "over dp, not tp over ep");
  EXPECT_EQ(with(R"({"dim":0,"kind":"tp","over":"xp","semantics":"split"})"),
            "tensors[1].parallel_axes[0]: unsupported parallel axis kind: "
            "\"xp\"");
  EXPECT_EQ(with(R"({"dim":0,"kind":"tp","over":"dp","semantics":"split",)"
                 R"("shards":2})"),
            "tensors[1].parallel_axes[0]: parallel axis schema fields do not "
            "match contract: a split axis carrying \"over\" carries neither "
            "\"shards\" nor \"ranks\"");
  EXPECT_EQ(with(R"({"kind":"tp","over":"dp","semantics":"replicated"})"),
            "tensors[1].parallel_axes[0]: parallel axis schema fields do not "
            "match contract: only split axes carry \"over\"");
  EXPECT_EQ(with(R"({"dim":0,"kind":"tp","over":1,"semantics":"split"})"),
            "tensors[1].parallel_axes[0].over must be a string");
}

TEST(SpanningSplitTest, TheSplitConsumesDp) {
  EXPECT_THAT(SpanningSplitAxis(AxisKind::kEp, 0, AxisKind::kDp).status(),
              StatusIs(StatusCode::kInvalidArgument,
                       "a spanning split axis splits tp over dp, not ep over "
                       "dp"));
  EXPECT_THAT(SpanningSplitAxis(AxisKind::kDp, 0, AxisKind::kTp).status(),
              StatusIs(StatusCode::kInvalidArgument,
                       "dp axis cannot use split semantics"));
  PlacementDraft d = ExpertDraft(2, 2, true);
  d.tensors[1].parallel_axes.push_back(ReplicatedAxis(AxisKind::kDp));
  EXPECT_EQ(BuildError(d),
            "tensor x: tp split over dp consumes the dp axis, which the "
            "tensor must not declare too");
  // Over a DP axis of size 1 the split is a plain one.
  EXPECT_EQ(BuildError(ExpertDraft(1, 2, true)),
            "spanning split axis of x: tp split over dp of size 1 spans "
            "nothing (use a plain split)");
}

TEST(SpanningSplitTest, EveryRankOfTheGridHoldsExactlyItsPart) {
  // Rule 23: each DP replica holding all rows covers the tensor twice.
  PlacementDraft d = ExpertDraft(2, 2, true);
  d.fragments = ExpertDraft(2, 2, false).fragments;
  EXPECT_EQ(BuildError(d),
            "global placement tensor is not fully covered: x (owner/replica "
            "group at dp=0,pp=0,ep=0,tp=0)");
  // Rule 23: a rank without its part leaves rows uncovered.
  d = ExpertDraft(2, 2, true);
  d.fragments.pop_back();
  EXPECT_EQ(BuildError(d),
            "global placement tensor is not fully covered: x (owner/replica "
            "group at dp=0,pp=0,ep=0,tp=0)");
  // Rule 24: rank (1, 0) holding the rows of (1, 1) too leaves part 3
  // without its rank.
  d = ExpertDraft(2, 2, true);
  d.fragments.pop_back();
  d.fragments.back().local_shape = {4, 4};
  d.fragments.back().nbytes = 16;
  EXPECT_EQ(BuildError(d),
            "missing or unexpected split-axis participant for x (owner/replica "
            "group at dp=0,pp=0,ep=0,tp=0)");
}

void ReshardAndCheck(const WeightPlacementManifest& source,
                     const WeightPlacementManifest& target, uint64_t bytes) {
  testing::ReshardRowsAndCheck(source, target, bytes, "x");
}

// TP 2 x DP 2 with "x" split four ways to TP 1 and TP 4 and back: 32
// bytes of "x" once, 32 of "q" per target rank.
TEST(SpanningSplitTest, PlansAndMovesIntoAndOutOfASpanningSplit) {
  ASSERT_OK_AND_ASSIGN(auto grid, ExpertDraft(2, 2, true).Build());
  ASSERT_OK_AND_ASSIGN(auto tp1, ExpertDraft(1, 1, false).Build());
  ASSERT_OK_AND_ASSIGN(auto tp4, ExpertDraft(1, 4, false).Build());
  ReshardAndCheck(grid, tp1, 32 + 32);
  ReshardAndCheck(grid, tp4, 32 + 4 * 32);
  ReshardAndCheck(tp4, grid, 32 + 4 * 32);
  ReshardAndCheck(tp1, grid, 32 + 4 * 32);
  // Into TP 1 x DP 2 (the DP ranks alone split "x") and from a plain TP 2
  // x DP 2, whose DP replicas each hold every row.
  ASSERT_OK_AND_ASSIGN(auto dp2, ExpertDraft(2, 1, true).Build());
  ASSERT_OK_AND_ASSIGN(auto replicated, ExpertDraft(2, 2, false).Build());
  ReshardAndCheck(grid, dp2, 32 + 2 * 32);
  ReshardAndCheck(replicated, grid, 32 + 4 * 32);
  ReshardAndCheck(grid, replicated, 2 * 32 + 4 * 32);
}

}  // namespace
}  // namespace reshard
