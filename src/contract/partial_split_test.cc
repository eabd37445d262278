// Partial split axes: a tensor split over the first ranks of its axis
// only, the ranks after them holding nothing of it (vLLM's vocabulary when
// padding leaves the last TP ranks without a real row). Validation, the
// wire, and planning from and into them.

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

// DP `dp` x TP `tp`; tensor "v" [rows, 4] uint8 whose rank t holds rows
// [t chunk, min((t + 1) chunk, rows)), declared a partial split over the
// `ranks` ranks (0: a plain split); tensor "q" [8, 4] replicated.
PlacementDraft VocabDraft(int64_t dp, int64_t tp, int64_t rows, int64_t chunk,
                          int64_t ranks) {
  PlacementDraft d = GridDraft({dp, 1, 1, tp});
  auto axis = [&](bool partial) {
    std::vector<ParallelAxis> axes;
    if (dp > 1) axes.push_back(ReplicatedAxis(AxisKind::kDp));
    if (tp > 1) {
      axes.push_back(partial && ranks > 0
                         ? *PartialSplitAxis(AxisKind::kTp, 0, ranks)
                     : partial ? *SplitAxis(AxisKind::kTp, 0)
                               : ReplicatedAxis(AxisKind::kTp));
    }
    return axes;
  };
  for (const char* name : {"q", "v"}) {
    const bool vocab = std::string(name) == "v";
    d.tensors.push_back({.tensor_id = name,
                         .global_shape = {vocab ? rows : 8, 4},
                         .dtype = "uint8",
                         .itemsize = 1,
                         .shard_dims = vocab && tp > 1 ? Dims{0} : Dims{},
                         .layout_fingerprint = "uint8:row-major",
                         .parallel_axes = axis(vocab)});
    for (int64_t r = 0; r < dp; ++r) {
      for (int64_t t = 0; t < tp; ++t) {
        const int64_t row0 = vocab ? t * chunk : 0;
        const int64_t n = vocab ? std::min(chunk, rows - row0) : 8;
        if (n <= 0) continue;
        d.fragments.push_back({.tensor_id = name,
                               .global_offset = {row0, 0},
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

TEST(PartialSplitTest, TrailingRanksWithoutFragmentsValidate) {
  // 9 rows, 2 per rank at TP 8: ranks 0-4 hold rows (rank 4 one), 5-7 none.
  ASSERT_OK_AND_ASSIGN(auto m, VocabDraft(2, 8, 9, 2, 5).Build());
  const TensorDescriptor* v = m.FindTensor("v");
  ASSERT_NE(v, nullptr);
  const ParallelAxis* tp = v->FindAxis(AxisKind::kTp);
  ASSERT_NE(tp, nullptr);
  EXPECT_EQ(tp->ranks(), 5);
  EXPECT_EQ(tp->shards(), 0);
  EXPECT_EQ(m.FindTensor("q")->FindAxis(AxisKind::kTp)->ranks(), 0);
  EXPECT_EQ(m.fragments().size(), 2u * 8 + 2u * 5);
  TensorDescriptorSpec spec = VocabDraft(2, 8, 9, 2, 5).tensors[1];
  spec.parallel_axes[1] = *SplitAxis(AxisKind::kTp, 0);
  ASSERT_OK_AND_ASSIGN(auto plain, TensorDescriptor::Make(spec));
  EXPECT_EQ(DescribeDescriptorDifference(*v, plain, "a", "b"),
            "parallel_axes [replicated dp, split tp dim 0 over its first 5 "
            "ranks] (a) vs [replicated dp, split tp dim 0] (b)");
  ASSERT_OK_AND_ASSIGN(auto other, VocabDraft(2, 8, 9, 2, 5).Build());
  EXPECT_EQ(other.placement_id(), m.placement_id());
}

TEST(PartialSplitTest, TheWireCarriesRanksOnlyForPartialAxes) {
  ASSERT_OK_AND_ASSIGN(auto m, VocabDraft(1, 8, 9, 2, 5).Build());
  const std::string wire = WeightPlacementToJson(m);
  EXPECT_THAT(wire, HasSubstr(R"([{"dim":0,"kind":"tp","ranks":5,)"
                              R"("semantics":"split"}])"));
  EXPECT_THAT(wire, HasSubstr(R"([{"kind":"tp","semantics":"replicated"}])"));
  ASSERT_OK_AND_ASSIGN(auto back, WeightPlacementFromJson(wire));
  EXPECT_EQ(back.digest(), m.digest());
  EXPECT_EQ(back.placement_id(), m.placement_id());
  EXPECT_EQ(WeightPlacementToJson(back), wire);
  // A plain split of the same tensor never carries the key.
  ASSERT_OK_AND_ASSIGN(auto plain, VocabDraft(1, 8, 16, 2, 0).Build());
  EXPECT_THAT(WeightPlacementToJson(plain),
              ::testing::Not(HasSubstr("\"ranks\"")));
}

TEST(PartialSplitTest, WireRefusesMalformedRanks) {
  ASSERT_OK_AND_ASSIGN(auto m, VocabDraft(1, 8, 9, 2, 5).Build());
  const std::string wire = WeightPlacementToJson(m);
  const std::string from = R"({"dim":0,"kind":"tp","ranks":5,)"
                           R"("semantics":"split"})";
  auto with = [&](const std::string& axis) {
    std::string w = wire;
    w.replace(w.find(from), from.size(), axis);
    auto back = WeightPlacementFromJson(w);
    return back.ok() ? std::string("OK") : back.status().message();
  };
  EXPECT_EQ(with(R"({"dim":0,"kind":"tp","ranks":0,"semantics":"split"})"),
            "tensors[1].parallel_axes[0]: partial split axis ranks must be "
            "positive, got 0");
  EXPECT_EQ(with(R"({"dim":0,"kind":"tp","ranks":5,"semantics":"split",)"
                 R"("shards":2})"),
            "tensors[1].parallel_axes[0]: parallel axis schema fields do not "
            "match contract: a split axis carries \"shards\" or \"ranks\", "
            "not both");
  EXPECT_EQ(with(R"({"kind":"tp","ranks":5,"semantics":"replicated"})"),
            "tensors[1].parallel_axes[0]: parallel axis schema fields do not "
            "match contract: only split axes carry \"dim\", \"shards\" and "
            "\"ranks\"");
  EXPECT_EQ(with(R"({"dim":0,"kind":"tp","ranks":true,"semantics":"split"})"),
            "tensors[1].parallel_axes[0].ranks must be an integer");
}

TEST(PartialSplitTest, RanksMustBeFewerThanTheAxisHas) {
  PlacementDraft d = VocabDraft(1, 8, 16, 2, 0);
  d.tensors[1].parallel_axes = {*PartialSplitAxis(AxisKind::kTp, 0, 8)};
  EXPECT_EQ(BuildError(d),
            "partial split axis of v: tp of size 8 cannot leave ranks from 8 "
            "on without fragments (a partial split is held by fewer ranks "
            "than its axis has; use a plain split)");
  EXPECT_THAT(PartialSplitAxis(AxisKind::kTp, 0, 0).status(),
              StatusIs(StatusCode::kInvalidArgument,
                       "partial split axis ranks must be positive, got 0"));
  EXPECT_THAT(PartialSplitAxis(AxisKind::kDp, 0, 2).status(),
              StatusIs(StatusCode::kInvalidArgument,
                       HasSubstr("dp axis cannot use split semantics")));
}

TEST(PartialSplitTest, ExactlyTheDeclaredRanksHoldTheSplit) {
  // Rules 24 and 26: declared over 4 ranks, held by 5 (rank 4 unexpected).
  PlacementDraft d = VocabDraft(1, 8, 9, 2, 4);
  EXPECT_EQ(BuildError(d),
            "missing or unexpected split-axis participant for v (owner/replica "
            "group at dp=0,pp=0,ep=0,tp=0)");
  // Declared over 6 ranks, held by 5 (rank 5 missing).
  d = VocabDraft(1, 8, 9, 2, 6);
  EXPECT_EQ(BuildError(d),
            "missing or unexpected split-axis participant for v (owner/replica "
            "group at dp=0,pp=0,ep=0,tp=0)");
  // Without the extension every rank must hold a fragment (the prototype's
  // rule, unchanged).
  d = VocabDraft(1, 8, 9, 2, 0);
  EXPECT_EQ(BuildError(d),
            "missing or unexpected split-axis participant for v (owner/replica "
            "group at dp=0,pp=0,ep=0,tp=0)");
  // A DP replica missing a held rank's rows is not covered.
  d = VocabDraft(2, 8, 9, 2, 5);
  d.fragments.pop_back();
  EXPECT_EQ(BuildError(d),
            "global placement tensor is not fully covered: v (owner/replica "
            "group at dp=1,pp=0,ep=0,tp=0)");
}

void ReshardAndCheck(const WeightPlacementManifest& source,
                     const WeightPlacementManifest& target, uint64_t bytes) {
  testing::ReshardRowsAndCheck(source, target, bytes, "v");
}

// TP 8 with "v" on ranks 0-4 to TP 2 (rows [0, 5) and [5, 9)) and back:
// 9 x 4 bytes of "v" and 32 of "q" per target rank.
TEST(PartialSplitTest, PlansAndMovesIntoAndOutOfAPartialSplit) {
  ASSERT_OK_AND_ASSIGN(auto tp8, VocabDraft(1, 8, 9, 2, 5).Build());
  ASSERT_OK_AND_ASSIGN(auto tp2, VocabDraft(1, 2, 9, 5, 0).Build());
  ReshardAndCheck(tp8, tp2, 36 + 2 * 32);
  ReshardAndCheck(tp2, tp8, 36 + 8 * 32);
  // Between two partial splits of different ranks: TP 8 on 5 ranks to TP 4
  // with 4 rows per rank on 3 ranks.
  ASSERT_OK_AND_ASSIGN(auto tp4, VocabDraft(2, 4, 9, 4, 3).Build());
  ReshardAndCheck(tp8, tp4, 2 * 36 + 8 * 32);
}

}  // namespace
}  // namespace reshard
