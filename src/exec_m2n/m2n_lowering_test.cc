// The lowering of one tensor onto ncclReshard: the descriptors of the
// layouts it can express, and every feasibility rule refused in one line
// that names it.

#include "exec_m2n/m2n_lowering.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace reshard::m2n {
namespace {

// `parts` chunks of dimension `dim` of `shape` on ranks first.., the chunk
// of the rank at position p given by chunk_at[p] (chunk p when empty).
std::vector<M2nBox> Boxes(const Dims& shape, int dim, int parts, int first,
                          std::vector<int> chunk_at = {}) {
  if (chunk_at.empty()) {
    for (int p = 0; p < parts; ++p) chunk_at.push_back(p);
  }
  std::vector<M2nBox> out;
  for (size_t p = 0; p < chunk_at.size(); ++p) {
    M2nBox box{first + static_cast<int>(p), Dims(shape.size(), 0), shape};
    if (dim >= 0) {
      const int64_t chunk = (shape[dim] + parts - 1) / parts;
      box.offset[dim] = chunk_at[p] * chunk;
      box.shape[dim] = std::min(chunk, shape[dim] - box.offset[dim]);
    }
    out.push_back(box);
  }
  return out;
}

M2nTensorInput Input(const Dims& shape, std::vector<M2nBox> source,
                     std::vector<M2nBox> target, int comm_size) {
  return M2nTensorInput{"w",
                        shape,
                        "bfloat16",
                        "bfloat16",
                        std::move(source),
                        std::move(target),
                        comm_size};
}

std::string Lowered(const M2nTensorInput& in) {
  M2nDecision d = LowerTensorToM2n(in);
  EXPECT_EQ(d.tensor_id, in.tensor_id);
  if (!d.m2n) return "refused: " + d.reason;
  EXPECT_EQ(d.rule, "");
  return DescribeM2nTensor(*d.m2n);
}

// The refusal, checked to name `rule` in its field and its text.
std::string Refused(const M2nTensorInput& in, const std::string& rule) {
  M2nDecision d = LowerTensorToM2n(in);
  EXPECT_FALSE(d.m2n.has_value());
  EXPECT_EQ(d.rule, rule);
  return d.reason;
}

TEST(M2nLoweringTest, SplitToOtherSplitDimension) {
  const Dims shape{64, 32};
  M2nTensorInput in =
      Input(shape, Boxes(shape, 0, 4, 0), Boxes(shape, 1, 8, 4), 12);
  EXPECT_EQ(Lowered(in),
            "src [4]@0 S(0) local [16,32] -> dst [8]@4 S(1) local [64,4]");
  M2nDecision d = LowerTensorToM2n(in);
  ASSERT_TRUE(d.m2n.has_value());
  EXPECT_EQ(d.m2n->dtype, M2nDtype::kBfloat16);
  EXPECT_EQ(d.m2n->source.mesh, (M2nMesh{{4}, 0}));
  EXPECT_EQ(d.m2n->target.placements, (std::vector<int>{1}));
}

TEST(M2nLoweringTest, ReplicasGiveTwoDimensionalMeshes) {
  const Dims shape{8, 6, 4};
  // Chunks fastest: a [replicas, chunks] mesh, R then S.
  EXPECT_EQ(Lowered(Input(shape, Boxes(shape, 1, 2, 0, {0, 1, 0, 1}),
                          Boxes(shape, -1, 1, 4, {0, 0}), 6)),
            "src [2,2]@0 R,S(1) local [8,3,4] -> dst [2]@4 R local [8,6,4]");
  // Replicas fastest: a [chunks, replicas] mesh, S then R.
  EXPECT_EQ(Lowered(Input(shape, Boxes(shape, 2, 2, 0),
                          Boxes(shape, 0, 4, 2, {0, 0, 1, 1, 2, 2, 3, 3}), 10)),
            "src [2]@0 S(2) local [8,6,2] -> dst [4,2]@2 S(0),R local "
            "[2,6,4]");
}

TEST(M2nLoweringTest, OneRankSelfCopyMayOverlap) {
  const Dims shape{5};
  EXPECT_EQ(Lowered(Input(shape, Boxes(shape, -1, 1, 0, {0}),
                          Boxes(shape, -1, 1, 0, {0}), 1)),
            "src [1]@0 R local [5] -> dst [1]@0 R local [5]");
}

TEST(M2nLoweringTest, DtypesAreNcclReshards) {
  EXPECT_EQ(ParseM2nDtype("float8_e4m3fn"), M2nDtype::kFloat8e4m3);
  EXPECT_EQ(ParseM2nDtype("float8_e5m2"), M2nDtype::kFloat8e5m2);
  EXPECT_EQ(ParseM2nDtype("uint64"), M2nDtype::kUint64);
  EXPECT_EQ(ParseM2nDtype("int16"), std::nullopt);
  EXPECT_EQ(ParseM2nDtype("bool"), std::nullopt);
}

TEST(M2nLoweringTest, RuleTensorRank) {
  const Dims shape{2, 2, 2, 2};
  EXPECT_EQ(
      Refused(Input(shape, Boxes(shape, 0, 2, 0), Boxes(shape, 0, 2, 2), 4),
              "tensor-rank"),
      "tensor \"w\": not lowered to ncclReshard: rule tensor-rank: 4 "
      "dimensions, 1 to 3");
  EXPECT_EQ(Refused(Input(Dims{}, {}, {}, 2), "tensor-rank"),
            "tensor \"w\": not lowered to ncclReshard: rule tensor-rank: 0 "
            "dimensions, 1 to 3");
}

TEST(M2nLoweringTest, RuleDtype) {
  const Dims shape{4};
  M2nTensorInput in =
      Input(shape, Boxes(shape, 0, 2, 0), Boxes(shape, 0, 4, 2), 6);
  in.source_dtype = in.target_dtype = "int16";
  EXPECT_EQ(Refused(in, "dtype"),
            "tensor \"w\": not lowered to ncclReshard: rule dtype: int16 is "
            "not a dtype ncclReshard moves");
}

TEST(M2nLoweringTest, RuleSameDtype) {
  const Dims shape{4};
  M2nTensorInput in =
      Input(shape, Boxes(shape, 0, 2, 0), Boxes(shape, 0, 4, 2), 6);
  in.target_dtype = "float8_e4m3fn";
  EXPECT_EQ(Refused(in, "same-dtype"),
            "tensor \"w\": not lowered to ncclReshard: rule same-dtype: "
            "source bfloat16, target float8_e4m3fn; ncclReshard moves bytes "
            "and converts nothing");
}

TEST(M2nLoweringTest, RuleOneBoxPerRank) {
  const Dims shape{8};
  std::vector<M2nBox> source = Boxes(shape, 0, 2, 0);
  source[1].rank = 0;  // rank 0 holds both halves (a sectioned layout)
  EXPECT_EQ(Refused(Input(shape, source, Boxes(shape, 0, 2, 2), 4),
                    "one-box-per-rank"),
            "tensor \"w\": not lowered to ncclReshard: rule "
            "one-box-per-rank: source rank 0 holds more than one box of the "
            "tensor; ncclReshard takes one local tensor per rank");
}

TEST(M2nLoweringTest, RuleOneShardAxis) {
  const Dims shape{4, 4};
  std::vector<M2nBox> target;
  for (int i = 0; i < 4; ++i) {
    target.push_back({2 + i, Dims{(i / 2) * 2, (i % 2) * 2}, Dims{2, 2}});
  }
  EXPECT_EQ(
      Refused(Input(shape, Boxes(shape, 0, 2, 0), target, 6), "one-shard-axis"),
      "tensor \"w\": not lowered to ncclReshard: rule one-shard-axis: "
      "target boxes split dimensions 0,1; a sharded layout has exactly "
      "one SHARD mesh axis");
}

TEST(M2nLoweringTest, RuleDtensorChunks) {
  const Dims shape{8};
  std::vector<M2nBox> source = {{0, Dims{0}, Dims{3}}, {1, Dims{3}, Dims{5}}};
  EXPECT_EQ(
      Refused(Input(shape, source, Boxes(shape, 0, 2, 2), 4), "dtensor-chunks"),
      "tensor \"w\": not lowered to ncclReshard: rule dtensor-chunks: "
      "source boxes of dimension 0 (extent 8, offsets 0,3) are not "
      "DTensor's chunks");
}

TEST(M2nLoweringTest, RuleEvenSplit) {
  const Dims shape{10, 2};
  EXPECT_EQ(
      Refused(Input(shape, Boxes(shape, 1, 2, 0), Boxes(shape, 0, 4, 2), 6),
              "even-split"),
      "tensor \"w\": not lowered to ncclReshard: rule even-split: "
      "target dimension 0 of 10 in 4 chunks is uneven (DTensor's "
      "chunks of 3); ncclReshard takes one local shape per side");
}

TEST(M2nLoweringTest, RuleUniformReplicas) {
  const Dims shape{4};
  EXPECT_EQ(Refused(Input(shape, Boxes(shape, 0, 2, 0, {0, 0, 1}),
                          Boxes(shape, 0, 2, 3), 5),
                    "uniform-replicas"),
            "tensor \"w\": not lowered to ncclReshard: rule "
            "uniform-replicas: source chunk 0 of dimension 0 is held by 2 "
            "ranks, chunk 1 by 1");
}

TEST(M2nLoweringTest, RuleContiguousRanks) {
  const Dims shape{4};
  std::vector<M2nBox> target = Boxes(shape, 0, 2, 2);
  target[1].rank = 5;
  EXPECT_EQ(Refused(Input(shape, Boxes(shape, 0, 2, 0), target, 6),
                    "contiguous-ranks"),
            "tensor \"w\": not lowered to ncclReshard: rule "
            "contiguous-ranks: target ranks 2,5 are not one interval "
            "[start, start + n)");
}

TEST(M2nLoweringTest, RuleMeshDims) {
  const Dims shape{4};
  EXPECT_EQ(Refused(Input(shape, Boxes(shape, 0, 2, 0, {0, 1, 1, 0}),
                          Boxes(shape, 0, 2, 4), 6),
                    "mesh-dims"),
            "tensor \"w\": not lowered to ncclReshard: rule mesh-dims: "
            "source ranks 0-3 hold 2 chunk(s) with 2 replica(s) each in an "
            "order no row-major mesh of at most 2 dims gives");
}

TEST(M2nLoweringTest, RuleSourceAndTargetCounts) {
  const Dims shape{17 * 65};
  EXPECT_EQ(
      Refused(Input(shape, Boxes(shape, 0, 17, 0), Boxes(shape, 0, 1, 17), 18),
              "source-count"),
      "tensor \"w\": not lowered to ncclReshard: rule source-count: 17 "
      "source ranks, at most 16");
  EXPECT_EQ(
      Refused(Input(shape, Boxes(shape, 0, 1, 0), Boxes(shape, 0, 65, 1), 66),
              "target-count"),
      "tensor \"w\": not lowered to ncclReshard: rule target-count: 65 "
      "target ranks, at most 64");
  EXPECT_EQ(
      Lowered(Input(shape, Boxes(shape, -1, 16, 0, std::vector<int>(16, 0)),
                    Boxes(shape, -1, 64, 16, std::vector<int>(64, 0)), 80)),
      "src [16]@0 R local [1105] -> dst [64]@16 R local [1105]");
}

TEST(M2nLoweringTest, RuleDisjointSides) {
  const Dims shape{4};
  EXPECT_EQ(
      Refused(Input(shape, Boxes(shape, 0, 2, 0), Boxes(shape, 0, 4, 1), 5),
              "disjoint-sides"),
      "tensor \"w\": not lowered to ncclReshard: rule disjoint-sides: "
      "source ranks 0-1 and target ranks 1-4 overlap in a communicator "
      "of 5 ranks");
}

}  // namespace
}  // namespace reshard::m2n
