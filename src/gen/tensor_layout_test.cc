// AppendTensorLayout: even, padded and sectioned TP splits, checked box by
// box and by the placement validator.

#include "gen/tensor_layout.h"

#include <gtest/gtest.h>

#include <map>
#include <utility>
#include <vector>

#include "testing/status_testing.h"

namespace reshard::internal {
namespace {

using ::reshard::testing::StatusIs;

ParallelTopologySpec Grid(int64_t tp, int64_t pp) {
  ParallelTopologySpec topo;
  topo.sizes = ParallelSizes{tp, pp, 1, 1};
  for (int64_t p = 0; p < pp; ++p) {
    for (int64_t t = 0; t < tp; ++t) {
      topo.participants.push_back(
          {"p" + std::to_string(p) + "-t" + std::to_string(t),
           ParallelRank{0, t, p, 0}});
    }
  }
  return topo;
}

Result<WeightPlacementManifest> Build(const ParallelTopologySpec& spec,
                                      std::vector<TensorDescriptorSpec> ts,
                                      std::vector<PlacementFragmentSpec> fs) {
  return ManifestFromSpecs(PlacementHeader{"m", "r", 0, "test"}, spec,
                           std::move(ts), std::move(fs));
}

// Rule: a sectioned split gives TP rank r the r-th equal share of every
// section, one fragment per section, in section order; the validator
// accepts the result (every rank's intervals tile the dimension together).
TEST(TensorLayoutTest, SectionedSplitHoldsAShareOfEverySection) {
  const auto topo = Grid(/*tp=*/2, /*pp=*/1);
  TensorLayout l;
  l.tensor_id = "conv1d.weight";
  l.shape = {12, 1, 4};  // [q 4 | k 4 | v 4]
  l.tp_dim = 0;
  l.tp_sections = {4, 4, 4};
  std::vector<TensorDescriptorSpec> tensors;
  std::vector<PlacementFragmentSpec> fragments;
  ASSERT_OK(AppendTensorLayout(topo, l, &tensors, &fragments));
  ASSERT_EQ(fragments.size(), 6u);
  std::map<int64_t, std::vector<std::pair<int64_t, int64_t>>> rows;
  for (const auto& f : fragments) {
    EXPECT_EQ(f.local_shape, (Dims{2, 1, 4}));
    EXPECT_EQ(f.nbytes, 2u * 4 * 2);
    rows[f.rank.tp].emplace_back(f.global_offset[0], f.local_shape[0]);
  }
  EXPECT_EQ(rows[0],
            (std::vector<std::pair<int64_t, int64_t>>{{0, 2}, {4, 2}, {8, 2}}));
  EXPECT_EQ(rows[1], (std::vector<std::pair<int64_t, int64_t>>{
                         {2, 2}, {6, 2}, {10, 2}}));
  ASSERT_OK(Build(topo, tensors, fragments).status());
}

// Unequal sections (q and k of 2 heads, v of 4) at TP 2 and a PP owner.
TEST(TensorLayoutTest, UnequalSectionsValidate) {
  const auto topo = Grid(/*tp=*/2, /*pp=*/2);
  TensorLayout l;
  l.tensor_id = "in_proj_qkv.weight";
  l.shape = {16, 8};
  l.tp_dim = 0;
  l.tp_sections = {4, 4, 8};
  l.pp_owner = 1;
  std::vector<TensorDescriptorSpec> tensors;
  std::vector<PlacementFragmentSpec> fragments;
  ASSERT_OK(AppendTensorLayout(topo, l, &tensors, &fragments));
  ASSERT_EQ(fragments.size(), 6u);
  EXPECT_EQ(fragments[2].global_offset, (Dims{8, 0}));
  EXPECT_EQ(fragments[2].local_shape, (Dims{4, 8}));
  EXPECT_EQ(fragments[5].global_offset, (Dims{12, 0}));
  for (const auto& f : fragments) EXPECT_EQ(f.rank.pp, 1);
  ASSERT_OK(Build(topo, tensors, fragments).status());
}

TEST(TensorLayoutTest, SectionsMustDivideAndSumToTheExtent) {
  const auto topo = Grid(/*tp=*/4, /*pp=*/1);
  TensorLayout l;
  l.tensor_id = "x";
  l.shape = {12, 2};
  l.tp_dim = 0;
  l.tp_sections = {4, 6, 2};
  std::vector<TensorDescriptorSpec> tensors;
  std::vector<PlacementFragmentSpec> fragments;
  EXPECT_THAT(AppendTensorLayout(topo, l, &tensors, &fragments),
              StatusIs(StatusCode::kInvalidArgument,
                       "TP 4 does not divide section 6 of dimension 0 of x"));
  l.tp_sections = {4, 4};
  EXPECT_THAT(AppendTensorLayout(topo, l, &tensors, &fragments),
              StatusIs(StatusCode::kInvalidArgument,
                       "the sections of dimension 0 of x sum to 8, not its "
                       "extent 12"));
  EXPECT_TRUE(fragments.empty());
}

}  // namespace
}  // namespace reshard::internal
