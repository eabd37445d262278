// Tests of the leaf placement types: axes, tensor descriptors, placement
// fragments and the parallel topology (rules 3, 5, 6, 10 and 16).

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "reshard/placement.h"
#include "testing/status_testing.h"

namespace reshard {
namespace {

using ::testing::HasSubstr;

// The message of a failed Result, or "<ok>" when it unexpectedly succeeded.
template <typename T>
std::string ErrorOf(const Result<T>& r) {
  return r.ok() ? std::string("<ok>") : r.status().message();
}

// ------------------------------------------------------------------- axes

TEST(PlacementTypesTest, AxisKindNamesRoundTrip) {
  for (AxisKind kind : kAllAxisKinds) {
    ASSERT_OK_AND_ASSIGN(auto parsed, ParseAxisKind(AxisKindName(kind)));
    EXPECT_EQ(parsed, kind);
  }
  EXPECT_EQ(AxisKindName(AxisKind::kDp), "dp");
  EXPECT_EQ(AxisKindName(AxisKind::kPp), "pp");
  EXPECT_EQ(AxisKindName(AxisKind::kEp), "ep");
  EXPECT_EQ(AxisKindName(AxisKind::kTp), "tp");
  EXPECT_EQ(AxisSemanticsName(AxisSemantics::kSplit), "split");
  EXPECT_EQ(AxisSemanticsName(AxisSemantics::kReplicated), "replicated");
  EXPECT_EQ(AxisSemanticsName(AxisSemantics::kOwnership), "ownership");
}

TEST(PlacementTypesTest, ParseAxisKindRejectsUnknownKinds) {
  EXPECT_EQ(ErrorOf(ParseAxisKind("cp")),
            "unsupported parallel axis kind: \"cp\"");
  EXPECT_EQ(ErrorOf(ParseAxisKind("TP")),
            "unsupported parallel axis kind: \"TP\"");
  EXPECT_EQ(ErrorOf(ParseAxisKind("")), "unsupported parallel axis kind: \"\"");
}

TEST(PlacementTypesTest, SplitAxisAcceptsEpDimZeroAndAnyTpDim) {
  ASSERT_OK_AND_ASSIGN(auto ep, SplitAxis(AxisKind::kEp, 0));
  EXPECT_EQ(ep.semantics(), AxisSemantics::kSplit);
  EXPECT_EQ(ep.kind(), AxisKind::kEp);
  EXPECT_EQ(ep.dim(), 0);
  ASSERT_OK_AND_ASSIGN(auto tp, SplitAxis(AxisKind::kTp, 3));
  EXPECT_EQ(tp.dim(), 3);
  EXPECT_EQ(ReplicatedAxis(AxisKind::kDp).dim(), -1);
  EXPECT_EQ(ReplicatedAxis(AxisKind::kDp).semantics(),
            AxisSemantics::kReplicated);
  EXPECT_EQ(OwnershipAxis(AxisKind::kPp).dim(), -1);
  EXPECT_EQ(OwnershipAxis(AxisKind::kPp).semantics(),
            AxisSemantics::kOwnership);
}

TEST(PlacementTypesTest, SplitAxisRejectsDpAndPp) {
  EXPECT_EQ(ErrorOf(SplitAxis(AxisKind::kDp, 0)),
            "dp axis cannot use split semantics");
  EXPECT_EQ(ErrorOf(SplitAxis(AxisKind::kPp, 1)),
            "pp axis cannot use split semantics");
}

TEST(PlacementTypesTest, SplitAxisRejectsNegativeDim) {
  EXPECT_EQ(ErrorOf(SplitAxis(AxisKind::kTp, -1)),
            "split axis dim must be non-negative");
}

TEST(PlacementTypesTest, EpSplitMustUseDimZero) {
  EXPECT_EQ(ErrorOf(SplitAxis(AxisKind::kEp, 1)),
            "EP must split the leading logical expert dimension (dim 0), got "
            "dim 1");
}

// ------------------------------------------------------------ ParallelRank

TEST(PlacementTypesTest, ParallelRankOrdersByDpPpEpTp) {
  ParallelRank r{.dp = 1, .tp = 3, .pp = 2, .ep = 0};
  EXPECT_EQ(r.ToString(), "dp=1,pp=2,ep=0,tp=3");
  EXPECT_EQ(r.Get(AxisKind::kDp), 1);
  EXPECT_EQ(r.Get(AxisKind::kPp), 2);
  EXPECT_EQ(r.Get(AxisKind::kEp), 0);
  EXPECT_EQ(r.Get(AxisKind::kTp), 3);
  // pp dominates ep and tp.
  EXPECT_LT((ParallelRank{.dp = 0, .tp = 9, .pp = 0, .ep = 9}),
            (ParallelRank{.dp = 0, .tp = 0, .pp = 1, .ep = 0}));
  // ep dominates tp.
  EXPECT_LT((ParallelRank{.dp = 0, .tp = 9, .pp = 0, .ep = 0}),
            (ParallelRank{.dp = 0, .tp = 0, .pp = 0, .ep = 1}));
  // dp dominates everything.
  EXPECT_LT((ParallelRank{.dp = 0, .tp = 9, .pp = 9, .ep = 9}),
            (ParallelRank{.dp = 1, .tp = 0, .pp = 0, .ep = 0}));
}

// ------------------------------------------------------- TensorDescriptor

// A valid 2-D descriptor split by TP along dim 1 and replicated over DP.
TensorDescriptorSpec ValidTensorSpec() {
  TensorDescriptorSpec s;
  s.tensor_id = "layers.0.mlp.w";
  s.global_shape = {8, 4};
  s.dtype = "bfloat16";
  s.itemsize = 2;
  s.shard_dims = {1};
  s.layout_fingerprint = "test:bfloat16";
  s.parallel_axes = {ReplicatedAxis(AxisKind::kDp),
                     *SplitAxis(AxisKind::kTp, 1)};
  return s;
}

// Descriptor mismatches name the first differing field and both values.
TEST(PlacementTypesTest, DescriptorDifferenceNamesTheFieldAndBothValues) {
  const TensorDescriptor a = *TensorDescriptor::Make(ValidTensorSpec());
  auto differ = [&](auto change) {
    TensorDescriptorSpec s = ValidTensorSpec();
    change(s);
    return DescribeDescriptorDifference(a, *TensorDescriptor::Make(s), "source",
                                        "target");
  };
  EXPECT_EQ(DescribeDescriptorDifference(a, a, "source", "target"), "");
  EXPECT_EQ(differ([](auto& s) {
              s.dtype = "float16";
              s.layout_fingerprint = "test:float16";
            }),
            "dtype bfloat16 (source) vs float16 (target)");
  EXPECT_EQ(differ([](auto& s) {
              s.global_shape = {8, 8};
            }),
            "global_shape [8, 4] (source) vs [8, 8] (target)");
  EXPECT_EQ(differ([](auto& s) { s.layer_id = 3; }),
            "layer_id none (source) vs 3 (target)");
  EXPECT_EQ(differ([](auto& s) { s.layout_fingerprint = "x"; }),
            "layout_fingerprint \"test:bfloat16\" (source) vs \"x\" (target)");
  EXPECT_EQ(differ([](auto& s) {
              s.shard_dims = {};
              s.parallel_axes = {ReplicatedAxis(AxisKind::kDp)};
            }),
            "shard_dims [1] (source) vs [] (target)");
  EXPECT_EQ(differ([](auto& s) {
              s.parallel_axes = {OwnershipAxis(AxisKind::kDp),
                                 *SplitAxis(AxisKind::kTp, 1)};
            }),
            "parallel_axes [replicated dp, split tp dim 1] (source) vs "
            "[ownership dp, split tp dim 1] (target)");
}

TEST(PlacementTypesTest, ValidTensorDescriptorKeepsItsFields) {
  ASSERT_OK_AND_ASSIGN(auto t, TensorDescriptor::Make(ValidTensorSpec()));
  EXPECT_EQ(t.tensor_id(), "layers.0.mlp.w");
  EXPECT_EQ(t.global_shape(), (Dims{8, 4}));
  EXPECT_EQ(t.ndim(), 2u);
  EXPECT_EQ(t.dtype(), "bfloat16");
  EXPECT_EQ(t.itemsize(), 2);
  EXPECT_EQ(t.shard_dims(), (Dims{1}));
  EXPECT_EQ(t.layout_fingerprint(), "test:bfloat16");
  EXPECT_EQ(t.num_elements(), 32u);
  EXPECT_FALSE(t.layer_id().has_value());
  EXPECT_FALSE(t.expert_id().has_value());
  ASSERT_NE(t.FindAxis(AxisKind::kTp), nullptr);
  EXPECT_EQ(t.FindAxis(AxisKind::kTp)->dim(), 1);
  EXPECT_EQ(t.FindAxis(AxisKind::kEp), nullptr);
}

TEST(PlacementTypesTest, ParallelAxesAreNormalisedToKindOrder) {
  TensorDescriptorSpec s = ValidTensorSpec();
  s.parallel_axes = {
      *SplitAxis(AxisKind::kTp, 1), ReplicatedAxis(AxisKind::kEp),
      OwnershipAxis(AxisKind::kPp), ReplicatedAxis(AxisKind::kDp)};
  ASSERT_OK_AND_ASSIGN(auto t, TensorDescriptor::Make(s));
  ASSERT_EQ(t.parallel_axes().size(), 4u);
  EXPECT_EQ(t.parallel_axes()[0], ReplicatedAxis(AxisKind::kDp));
  EXPECT_EQ(t.parallel_axes()[1], OwnershipAxis(AxisKind::kPp));
  EXPECT_EQ(t.parallel_axes()[2], ReplicatedAxis(AxisKind::kEp));
  EXPECT_EQ(t.parallel_axes()[3], *SplitAxis(AxisKind::kTp, 1));

  // The same axes in another input order give an equal descriptor.
  TensorDescriptorSpec other = s;
  other.parallel_axes = {
      OwnershipAxis(AxisKind::kPp), ReplicatedAxis(AxisKind::kDp),
      *SplitAxis(AxisKind::kTp, 1), ReplicatedAxis(AxisKind::kEp)};
  ASSERT_OK_AND_ASSIGN(auto u, TensorDescriptor::Make(other));
  EXPECT_EQ(t, u);
}

TEST(PlacementTypesTest, TensorRejectsEmptyId) {
  TensorDescriptorSpec s = ValidTensorSpec();
  s.tensor_id = "";
  EXPECT_EQ(ErrorOf(TensorDescriptor::Make(s)),
            "tensor_id must be a non-empty string");
}

TEST(PlacementTypesTest, TensorRejectsEmptyShape) {
  TensorDescriptorSpec s = ValidTensorSpec();
  s.global_shape = {};
  s.shard_dims = {};
  s.parallel_axes = {};
  EXPECT_EQ(ErrorOf(TensorDescriptor::Make(s)),
            "tensor layers.0.mlp.w: global_shape must not be empty");
}

TEST(PlacementTypesTest, TensorRejectsNonPositiveExtents) {
  TensorDescriptorSpec s = ValidTensorSpec();
  s.global_shape = {8, 0};
  EXPECT_EQ(ErrorOf(TensorDescriptor::Make(s)),
            "tensor layers.0.mlp.w: global_shape extents must be >= 1");
  s.global_shape = {-8, 4};
  EXPECT_EQ(ErrorOf(TensorDescriptor::Make(s)),
            "tensor layers.0.mlp.w: global_shape extents must be >= 1");
}

TEST(PlacementTypesTest, TensorRejectsEmptyDtype) {
  TensorDescriptorSpec s = ValidTensorSpec();
  s.dtype = "";
  EXPECT_EQ(ErrorOf(TensorDescriptor::Make(s)),
            "tensor layers.0.mlp.w: dtype must be a non-empty string");
}

TEST(PlacementTypesTest, TensorRejectsNonPositiveItemsize) {
  TensorDescriptorSpec s = ValidTensorSpec();
  s.itemsize = 0;
  EXPECT_EQ(ErrorOf(TensorDescriptor::Make(s)),
            "tensor layers.0.mlp.w: itemsize must be >= 1");
  s.itemsize = -2;
  EXPECT_EQ(ErrorOf(TensorDescriptor::Make(s)),
            "tensor layers.0.mlp.w: itemsize must be >= 1");
}

TEST(PlacementTypesTest, TensorRejectsEmptyLayoutFingerprint) {
  TensorDescriptorSpec s = ValidTensorSpec();
  s.layout_fingerprint = "";
  EXPECT_EQ(
      ErrorOf(TensorDescriptor::Make(s)),
      "tensor layers.0.mlp.w: layout_fingerprint must be a non-empty string");
}

TEST(PlacementTypesTest, TensorRejectsNegativeLayerAndExpertIds) {
  TensorDescriptorSpec s = ValidTensorSpec();
  s.layer_id = -1;
  EXPECT_EQ(ErrorOf(TensorDescriptor::Make(s)),
            "tensor layers.0.mlp.w: layer_id must be >= 0");
  s = ValidTensorSpec();
  s.expert_id = -1;
  EXPECT_EQ(ErrorOf(TensorDescriptor::Make(s)),
            "tensor layers.0.mlp.w: expert_id must be >= 0");
  s = ValidTensorSpec();
  s.layer_id = 0;
  s.expert_id = 0;
  ASSERT_OK_AND_ASSIGN(auto t, TensorDescriptor::Make(s));
  EXPECT_EQ(t.layer_id(), 0);
  EXPECT_EQ(t.expert_id(), 0);
}

TEST(PlacementTypesTest, TensorRejectsOutOfRangeShardDims) {
  TensorDescriptorSpec s = ValidTensorSpec();
  s.shard_dims = {2};
  EXPECT_EQ(ErrorOf(TensorDescriptor::Make(s)),
            "tensor layers.0.mlp.w: shard_dims contains an out-of-range "
            "dimension 2");
  s.shard_dims = {-1};
  EXPECT_EQ(ErrorOf(TensorDescriptor::Make(s)),
            "tensor layers.0.mlp.w: shard_dims contains an out-of-range "
            "dimension -1");
}

TEST(PlacementTypesTest, TensorRejectsDuplicateShardDims) {
  TensorDescriptorSpec s = ValidTensorSpec();
  s.shard_dims = {1, 1};
  EXPECT_EQ(ErrorOf(TensorDescriptor::Make(s)),
            "tensor layers.0.mlp.w: shard_dims must not contain duplicates");
}

TEST(PlacementTypesTest, TensorRejectsUnsortedShardDims) {
  TensorDescriptorSpec s = ValidTensorSpec();
  s.shard_dims = {1, 0};
  EXPECT_EQ(ErrorOf(TensorDescriptor::Make(s)),
            "tensor layers.0.mlp.w: shard_dims must be sorted");
}

TEST(PlacementTypesTest, TensorRejectsDuplicateAxisKinds) {
  TensorDescriptorSpec s = ValidTensorSpec();
  s.parallel_axes = {*SplitAxis(AxisKind::kTp, 1),
                     ReplicatedAxis(AxisKind::kTp)};
  EXPECT_EQ(ErrorOf(TensorDescriptor::Make(s)),
            "tensor layers.0.mlp.w: parallel_axes must not contain duplicate "
            "kinds (tp)");
  s = ValidTensorSpec();
  s.parallel_axes = {ReplicatedAxis(AxisKind::kDp),
                     OwnershipAxis(AxisKind::kDp),
                     *SplitAxis(AxisKind::kTp, 1)};
  EXPECT_EQ(ErrorOf(TensorDescriptor::Make(s)),
            "tensor layers.0.mlp.w: parallel_axes must not contain duplicate "
            "kinds (dp)");
}

TEST(PlacementTypesTest, TensorRejectsSplitAxesSharingADimension) {
  TensorDescriptorSpec s = ValidTensorSpec();
  s.shard_dims = {0};
  s.parallel_axes = {*SplitAxis(AxisKind::kEp, 0),
                     *SplitAxis(AxisKind::kTp, 0)};
  EXPECT_EQ(ErrorOf(TensorDescriptor::Make(s)),
            "tensor layers.0.mlp.w: split axes must not share a dimension");
}

TEST(PlacementTypesTest, TensorRejectsOutOfRangeSplitDim) {
  TensorDescriptorSpec s = ValidTensorSpec();
  s.parallel_axes = {*SplitAxis(AxisKind::kTp, 2)};
  EXPECT_EQ(ErrorOf(TensorDescriptor::Make(s)),
            "tensor layers.0.mlp.w: split axis tp uses an out-of-range "
            "dimension 2");
}

TEST(PlacementTypesTest, TensorRejectsSplitDimsConflictingWithShardDims) {
  const std::string kConflict =
      "tensor layers.0.mlp.w: parallel axis split dimensions conflict with "
      "shard_dims";
  // Split along dim 1, shard_dims names dim 0.
  TensorDescriptorSpec s = ValidTensorSpec();
  s.shard_dims = {0};
  EXPECT_EQ(ErrorOf(TensorDescriptor::Make(s)), kConflict);
  // shard_dims without any split axis.
  s = ValidTensorSpec();
  s.parallel_axes = {ReplicatedAxis(AxisKind::kTp)};
  EXPECT_EQ(ErrorOf(TensorDescriptor::Make(s)), kConflict);
  // A split axis without shard_dims.
  s = ValidTensorSpec();
  s.shard_dims = {};
  EXPECT_EQ(ErrorOf(TensorDescriptor::Make(s)), kConflict);
  // Two split axes: shard_dims must list both.
  s = ValidTensorSpec();
  s.parallel_axes = {*SplitAxis(AxisKind::kEp, 0),
                     *SplitAxis(AxisKind::kTp, 1)};
  s.shard_dims = {1};
  EXPECT_EQ(ErrorOf(TensorDescriptor::Make(s)), kConflict);
  s.shard_dims = {0, 1};
  auto t = TensorDescriptor::Make(s);
  EXPECT_OK(t);
}

TEST(PlacementTypesTest, IndividualExpertRejectsEpSplit) {
  TensorDescriptorSpec s = ValidTensorSpec();
  s.tensor_id = "layers.0.experts.3.w";
  s.expert_id = 3;
  s.shard_dims = {0};
  s.parallel_axes = {*SplitAxis(AxisKind::kEp, 0)};
  EXPECT_EQ(ErrorOf(TensorDescriptor::Make(s)),
            "tensor layers.0.experts.3.w: an individually allocated expert "
            "requires explicit EP ownership, not an EP split");
  // Explicit EP ownership is the supported form.
  s.shard_dims = {};
  s.parallel_axes = {OwnershipAxis(AxisKind::kEp)};
  ASSERT_OK_AND_ASSIGN(auto t, TensorDescriptor::Make(s));
  EXPECT_EQ(t.expert_id(), 3);
}

TEST(PlacementTypesTest, NumElementsSaturates) {
  TensorDescriptorSpec s = ValidTensorSpec();
  s.global_shape = {int64_t{1} << 40, int64_t{1} << 40};
  ASSERT_OK_AND_ASSIGN(auto t, TensorDescriptor::Make(s));
  EXPECT_EQ(t.num_elements(), UINT64_MAX);
}

// ------------------------------------------------------ PlacementFragment

// The right half (columns 4..7) of an 8x8 bfloat16 tensor at tp=1.
PlacementFragmentSpec ValidFragmentSpec() {
  PlacementFragmentSpec s;
  s.tensor_id = "w";
  s.global_offset = {0, 4};
  s.local_shape = {8, 4};
  s.nbytes = 64;
  s.rank = ParallelRank{.dp = 0, .tp = 1, .pp = 0, .ep = 0};
  return s;
}

constexpr char kAnonymousFragment[] =
    "placement fragment of tensor w at rank dp=0,pp=0,ep=0,tp=1: ";

TEST(PlacementTypesTest, FragmentWithoutIdGetsTheCanonicalId) {
  PlacementFragmentSpec s = ValidFragmentSpec();
  ASSERT_OK_AND_ASSIGN(auto f, PlacementFragment::Make(s));
  EXPECT_EQ(f.placement_fragment_id(), CanonicalPlacementFragmentId(s));
  EXPECT_THAT(f.placement_fragment_id(), ::testing::StartsWith("sha256:"));
  EXPECT_EQ(f.placement_fragment_id().size(), 7u + 64u);
  EXPECT_EQ(f.tensor_id(), "w");
  EXPECT_EQ(f.global_offset(), (Dims{0, 4}));
  EXPECT_EQ(f.local_shape(), (Dims{8, 4}));
  EXPECT_EQ(f.nbytes(), 64u);
  EXPECT_EQ(f.rank(), s.rank);
  EXPECT_TRUE(f.aliases().empty());
  EXPECT_FALSE(f.pipeline_stage_id().has_value());
}

TEST(PlacementTypesTest, FragmentIdDependsOnEveryLogicalField) {
  const std::string base = CanonicalPlacementFragmentId(ValidFragmentSpec());
  PlacementFragmentSpec s = ValidFragmentSpec();
  s.tensor_id = "v";
  EXPECT_NE(CanonicalPlacementFragmentId(s), base);
  s = ValidFragmentSpec();
  s.global_offset = {0, 3};
  EXPECT_NE(CanonicalPlacementFragmentId(s), base);
  s = ValidFragmentSpec();
  s.local_shape = {4, 8};
  EXPECT_NE(CanonicalPlacementFragmentId(s), base);
  s = ValidFragmentSpec();
  s.nbytes = 128;
  EXPECT_NE(CanonicalPlacementFragmentId(s), base);
  s = ValidFragmentSpec();
  s.rank.dp = 1;
  EXPECT_NE(CanonicalPlacementFragmentId(s), base);
  s = ValidFragmentSpec();
  s.aliases = {"v", "w"};
  EXPECT_NE(CanonicalPlacementFragmentId(s), base);
  s = ValidFragmentSpec();
  s.pipeline_stage_id = 0;
  EXPECT_NE(CanonicalPlacementFragmentId(s), base);
}

TEST(PlacementTypesTest, SuppliedFragmentIdIsKept) {
  PlacementFragmentSpec s = ValidFragmentSpec();
  s.placement_fragment_id = "frag-custom";
  ASSERT_OK_AND_ASSIGN(auto f, PlacementFragment::Make(s));
  EXPECT_EQ(f.placement_fragment_id(), "frag-custom");
  EXPECT_EQ(f.placement_fragment_id(), "frag-custom");
}

TEST(PlacementTypesTest, FragmentAliasesAreSorted) {
  PlacementFragmentSpec s = ValidFragmentSpec();
  s.aliases = {"z.tied", "w", "a.tied"};
  ASSERT_OK_AND_ASSIGN(auto f, PlacementFragment::Make(s));
  EXPECT_EQ(f.aliases(), (std::vector<std::string>{"a.tied", "w", "z.tied"}));
  // The canonical id is computed over the sorted group.
  PlacementFragmentSpec sorted = s;
  sorted.aliases = {"a.tied", "w", "z.tied"};
  EXPECT_EQ(f.placement_fragment_id(), CanonicalPlacementFragmentId(sorted));
}

TEST(PlacementTypesTest, SharingFragmentsHoldOneTensorIdAndValidateAlike) {
  auto id = std::make_shared<const std::string>("w");
  PlacementFragmentSpec s = ValidFragmentSpec();
  s.tensor_id = "ignored";
  ASSERT_OK_AND_ASSIGN(auto a, internal::MakeFragmentSharingTensorId(s, id));
  s.global_offset = {0, 0};
  ASSERT_OK_AND_ASSIGN(auto b, internal::MakeFragmentSharingTensorId(s, id));
  EXPECT_EQ(&a.tensor_id(), id.get());
  EXPECT_EQ(&b.tensor_id(), id.get());
  // Equal to a fragment that holds its own copy, canonical id included.
  ASSERT_OK_AND_ASSIGN(auto own, PlacementFragment::Make(ValidFragmentSpec()));
  EXPECT_EQ(a, own);
  EXPECT_EQ(a.placement_fragment_id(),
            CanonicalPlacementFragmentId(ValidFragmentSpec()));
  PlacementFragment copy = b;
  EXPECT_EQ(copy, b);
  EXPECT_EQ(&copy.tensor_id(), id.get());
  // The same rules and messages, with the shared id.
  s = ValidFragmentSpec();
  s.global_offset = {0, -4};
  EXPECT_EQ(ErrorOf(internal::MakeFragmentSharingTensorId(s, id)),
            std::string(kAnonymousFragment) + "global_offset must be >= 0");
  s = ValidFragmentSpec();
  s.aliases = {"a.tied", "b.tied"};
  EXPECT_EQ(ErrorOf(internal::MakeFragmentSharingTensorId(s, id)),
            std::string(kAnonymousFragment) +
                "alias group must contain the fragment tensor_id");
  s.aliases = {"a.tied", "w"};
  ASSERT_OK_AND_ASSIGN(auto aliased,
                       internal::MakeFragmentSharingTensorId(s, id));
  EXPECT_EQ(aliased.aliases(), (std::vector<std::string>{"a.tied", "w"}));
  EXPECT_EQ(ErrorOf(internal::MakeFragmentSharingTensorId(
                ValidFragmentSpec(), std::make_shared<const std::string>())),
            "placement fragment tensor_id must be a non-empty string");
}

TEST(PlacementTypesTest, FragmentRejectsEmptyTensorId) {
  PlacementFragmentSpec s = ValidFragmentSpec();
  s.tensor_id = "";
  EXPECT_EQ(ErrorOf(PlacementFragment::Make(s)),
            "placement fragment tensor_id must be a non-empty string");
}

TEST(PlacementTypesTest, FragmentRejectsEmptySuppliedId) {
  PlacementFragmentSpec s = ValidFragmentSpec();
  s.placement_fragment_id = "";
  EXPECT_EQ(ErrorOf(PlacementFragment::Make(s)),
            "placement_fragment_id must be a non-empty string (tensor w)");
}

TEST(PlacementTypesTest, FragmentRejectsNegativeOffset) {
  PlacementFragmentSpec s = ValidFragmentSpec();
  s.global_offset = {0, -4};
  EXPECT_EQ(ErrorOf(PlacementFragment::Make(s)),
            std::string(kAnonymousFragment) + "global_offset must be >= 0");
}

TEST(PlacementTypesTest, FragmentErrorsNameASuppliedId) {
  PlacementFragmentSpec s = ValidFragmentSpec();
  s.placement_fragment_id = "frag-7";
  s.global_offset = {-1, 4};
  EXPECT_EQ(ErrorOf(PlacementFragment::Make(s)),
            "placement fragment frag-7: global_offset must be >= 0");
}

TEST(PlacementTypesTest, FragmentRejectsNonPositiveExtent) {
  PlacementFragmentSpec s = ValidFragmentSpec();
  s.local_shape = {8, 0};
  EXPECT_EQ(
      ErrorOf(PlacementFragment::Make(s)),
      std::string(kAnonymousFragment) + "local_shape extents must be >= 1");
}

TEST(PlacementTypesTest, FragmentRejectsZeroNbytes) {
  PlacementFragmentSpec s = ValidFragmentSpec();
  s.nbytes = 0;
  EXPECT_EQ(ErrorOf(PlacementFragment::Make(s)),
            std::string(kAnonymousFragment) + "nbytes must be >= 1");
}

TEST(PlacementTypesTest, FragmentRejectsOffsetShapeLengthMismatch) {
  const std::string kMismatch =
      std::string(kAnonymousFragment) +
      "fragment rank mismatch: global_offset and local_shape differ in length";
  PlacementFragmentSpec s = ValidFragmentSpec();
  s.global_offset = {0};
  EXPECT_EQ(ErrorOf(PlacementFragment::Make(s)), kMismatch);
  s.global_offset = {};
  s.local_shape = {};
  EXPECT_EQ(ErrorOf(PlacementFragment::Make(s)), kMismatch);
}

TEST(PlacementTypesTest, FragmentRejectsNegativeRank) {
  PlacementFragmentSpec s = ValidFragmentSpec();
  s.rank.pp = -1;
  EXPECT_EQ(ErrorOf(PlacementFragment::Make(s)),
            "placement fragment of tensor w at rank dp=0,pp=-1,ep=0,tp=1: "
            "rank coordinates must be >= 0");
}

TEST(PlacementTypesTest, FragmentRejectsNegativePipelineStage) {
  PlacementFragmentSpec s = ValidFragmentSpec();
  s.pipeline_stage_id = -1;
  EXPECT_EQ(ErrorOf(PlacementFragment::Make(s)),
            std::string(kAnonymousFragment) + "pipeline_stage_id must be >= 0");
}

TEST(PlacementTypesTest, FragmentRejectsDuplicateAliases) {
  PlacementFragmentSpec s = ValidFragmentSpec();
  s.aliases = {"w", "lm_head", "w"};
  EXPECT_EQ(
      ErrorOf(PlacementFragment::Make(s)),
      std::string(kAnonymousFragment) + "aliases must not contain duplicates");
}

TEST(PlacementTypesTest, FragmentRejectsEmptyAlias) {
  PlacementFragmentSpec s = ValidFragmentSpec();
  s.aliases = {"w", ""};
  EXPECT_EQ(
      ErrorOf(PlacementFragment::Make(s)),
      std::string(kAnonymousFragment) + "aliases must be non-empty strings");
}

TEST(PlacementTypesTest, FragmentRejectsSingleMemberAliasGroup) {
  PlacementFragmentSpec s = ValidFragmentSpec();
  s.aliases = {"w"};
  EXPECT_EQ(ErrorOf(PlacementFragment::Make(s)),
            std::string(kAnonymousFragment) +
                "alias group must contain at least two tensor IDs");
}

TEST(PlacementTypesTest, FragmentRejectsAliasGroupWithoutItsTensor) {
  PlacementFragmentSpec s = ValidFragmentSpec();
  s.aliases = {"embed_tokens.weight", "lm_head.weight"};
  EXPECT_EQ(ErrorOf(PlacementFragment::Make(s)),
            std::string(kAnonymousFragment) +
                "alias group must contain the fragment tensor_id");
}

// Golden ids computed independently with Python:
//   hashlib.sha256(json.dumps(obj, sort_keys=True,
//                             separators=(",", ":")).encode()).hexdigest()
// over {schema: "weight-placement-fragment", tensor_id, global_offset,
// local_shape, nbytes, rank: {dp, tp, pp, ep}, aliases}.
TEST(PlacementTypesTest, GoldenFragmentIdWithNonAsciiTensorIds) {
  PlacementFragmentSpec s;
  s.tensor_id = "layers.0.\u00e9t\u00e9";
  s.global_offset = {0, 4};
  s.local_shape = {8, 4};
  s.nbytes = 64;
  s.rank = ParallelRank{.dp = 0, .tp = 1, .pp = 0, .ep = 0};
  // Listed unsorted: Make sorts by code point ("e" < "l").
  s.aliases = {"layers.0.\u00e9t\u00e9", "emb.\U0001F680"};
  constexpr char kGolden[] =
      "sha256:9497f0619d3ec16a759c29a4d5ccb75c0bb10dd5e727ecf7885aa71e14c23362";
  ASSERT_OK_AND_ASSIGN(auto f, PlacementFragment::Make(s));
  EXPECT_EQ(f.placement_fragment_id(), kGolden);
  EXPECT_EQ(f.aliases(), (std::vector<std::string>{"emb.\U0001F680",
                                                   "layers.0.\u00e9t\u00e9"}));
  s.aliases = f.aliases();
  EXPECT_EQ(CanonicalPlacementFragmentId(s), kGolden);
}

TEST(PlacementTypesTest, GoldenFragmentIdAboveTheBmp) {
  PlacementFragmentSpec s;
  s.tensor_id = "emb.\U0001F680";
  s.global_offset = {0};
  s.local_shape = {16};
  s.nbytes = 32;
  s.rank = ParallelRank{.dp = 1, .tp = 0, .pp = 2, .ep = 3};
  ASSERT_OK_AND_ASSIGN(auto f, PlacementFragment::Make(s));
  EXPECT_EQ(f.placement_fragment_id(),
            "sha256:3fc400728bd64ee7c0fc4fcad77addfd021f780cbe7a4c82a8741e1792d"
            "4a69e");
  // pipeline_stage_id joins the identity object only when set.
  s.pipeline_stage_id = 2;
  ASSERT_OK_AND_ASSIGN(auto staged, PlacementFragment::Make(s));
  EXPECT_EQ(staged.placement_fragment_id(),
            "sha256:79c90a2f1d5f3214fa9aca9151a861b89abcdb9d6c3b21dc99cab108e7f"
            "ad0c6");
  EXPECT_EQ(staged.pipeline_stage_id(), 2);
}

// ------------------------------------------------------- ParallelTopology

TopologyParticipant Participant(std::string id, int64_t dp, int64_t tp) {
  return {std::move(id), ParallelRank{.dp = dp, .tp = tp, .pp = 0, .ep = 0}};
}

// DP2 x TP2, participants listed out of order.
ParallelTopologySpec Dp2Tp2Spec() {
  ParallelTopologySpec s;
  s.sizes.tp = 2;
  s.sizes.dp = 2;
  s.participants = {
      Participant("worker-d", 1, 1), Participant("worker-b", 0, 1),
      Participant("worker-a", 0, 0), Participant("worker-c", 1, 0)};
  return s;
}

// Computed independently with Python over
// {schema: "weight-parallel-topology", tp_size: 2, pp_size: 1, ep_size: 1,
//  dp_size: 2, participants: [worker-a..worker-d sorted by id]}.
constexpr char kDp2Tp2TopologyId[] =
    "sha256:d4051c468395464dcca2d8eaf5bb68facab9d7140ecd4ed9e214c0603f095663";

TEST(PlacementTypesTest, GoldenTopologyId) {
  ASSERT_OK_AND_ASSIGN(auto t, ParallelTopology::Make(Dp2Tp2Spec()));
  EXPECT_EQ(t.topology_id(), kDp2Tp2TopologyId);
}

TEST(PlacementTypesTest, GoldenTopologyIdWithNonAsciiParticipant) {
  ParallelTopologySpec s;
  s.participants = {Participant("\u00e9-worker", 0, 0)};
  ASSERT_OK_AND_ASSIGN(auto t, ParallelTopology::Make(s));
  EXPECT_EQ(t.topology_id(),
            "sha256:9f6d93185c5c49a28011cf153db7485bc664379fb79dfbbaa53f5a299d5"
            "d8b7d");
}

TEST(PlacementTypesTest, TopologySortsParticipantsById) {
  ASSERT_OK_AND_ASSIGN(auto t, ParallelTopology::Make(Dp2Tp2Spec()));
  std::vector<std::string> ids;
  for (const auto& p : t.participants()) ids.push_back(p.participant_id);
  EXPECT_EQ(ids, (std::vector<std::string>{"worker-a", "worker-b", "worker-c",
                                           "worker-d"}));
  EXPECT_EQ(t.world_size(), 4u);
  EXPECT_EQ(t.tp_size(), 2);
  EXPECT_EQ(t.dp_size(), 2);
  EXPECT_EQ(t.pp_size(), 1);
  EXPECT_EQ(t.ep_size(), 1);
  EXPECT_EQ(t.size(AxisKind::kTp), 2);
  EXPECT_EQ(t.size(AxisKind::kPp), 1);
  const TopologyParticipant* c = t.FindParticipant("worker-c");
  ASSERT_NE(c, nullptr);
  EXPECT_EQ(c->rank, (ParallelRank{.dp = 1, .tp = 0, .pp = 0, .ep = 0}));
  EXPECT_EQ(t.FindParticipant("worker-e"), nullptr);
  EXPECT_EQ(t.FindParticipant(""), nullptr);

  // The input order does not change the identity.
  ParallelTopologySpec reordered = Dp2Tp2Spec();
  std::swap(reordered.participants[0], reordered.participants[3]);
  ASSERT_OK_AND_ASSIGN(auto u, ParallelTopology::Make(reordered));
  EXPECT_EQ(u.topology_id(), t.topology_id());
  EXPECT_EQ(u, t);
}

TEST(PlacementTypesTest, WorldSizeCountsParticipantsNotTheGrid) {
  // One DP replica selected out of a declared dp_size of 2.
  ParallelTopologySpec s;
  s.sizes.tp = 2;
  s.sizes.dp = 2;
  s.participants = {Participant("worker-a", 0, 0),
                    Participant("worker-b", 0, 1)};
  ASSERT_OK_AND_ASSIGN(auto t, ParallelTopology::Make(s));
  EXPECT_EQ(t.world_size(), 2u);
  EXPECT_EQ(t.dp_size(), 2);
}

TEST(PlacementTypesTest, TopologyAcceptsMatchingSuppliedId) {
  ParallelTopologySpec s = Dp2Tp2Spec();
  s.topology_id = kDp2Tp2TopologyId;
  ASSERT_OK_AND_ASSIGN(auto t, ParallelTopology::Make(s));
  EXPECT_EQ(t.topology_id(), kDp2Tp2TopologyId);
}

TEST(PlacementTypesTest, TopologyRejectsMismatchedSuppliedId) {
  ParallelTopologySpec s = Dp2Tp2Spec();
  const std::string wrong = "sha256:" + std::string(64, '0');
  s.topology_id = wrong;
  EXPECT_EQ(ErrorOf(ParallelTopology::Make(s)),
            "topology_id does not match canonical topology: got " + wrong +
                ", expected " + kDp2Tp2TopologyId);
}

TEST(PlacementTypesTest, TopologyRejectsSizesBelowOne) {
  const std::pair<int64_t ParallelSizes::*, const char*> fields[] = {
      {&ParallelSizes::tp, "topology tp_size must be >= 1"},
      {&ParallelSizes::pp, "topology pp_size must be >= 1"},
      {&ParallelSizes::ep, "topology ep_size must be >= 1"},
      {&ParallelSizes::dp, "topology dp_size must be >= 1"}};
  for (const auto& [field, message] : fields) {
    for (int64_t bad : {int64_t{0}, int64_t{-1}}) {
      ParallelTopologySpec s = Dp2Tp2Spec();
      s.sizes.*field = bad;
      EXPECT_EQ(ErrorOf(ParallelTopology::Make(s)), message) << "size " << bad;
    }
  }
}

TEST(PlacementTypesTest, TopologyRejectsEmptyParticipants) {
  ParallelTopologySpec s;
  EXPECT_EQ(ErrorOf(ParallelTopology::Make(s)),
            "topology participants must not be empty");
}

TEST(PlacementTypesTest, TopologyRejectsEmptyParticipantId) {
  ParallelTopologySpec s = Dp2Tp2Spec();
  s.participants[0].participant_id = "";
  EXPECT_EQ(ErrorOf(ParallelTopology::Make(s)),
            "topology participant_id must be a non-empty string");
}

TEST(PlacementTypesTest, TopologyRejectsDuplicateParticipantId) {
  ParallelTopologySpec s = Dp2Tp2Spec();
  s.participants[0].participant_id = "worker-b";
  EXPECT_EQ(ErrorOf(ParallelTopology::Make(s)),
            "duplicate topology participant_id: worker-b");
}

TEST(PlacementTypesTest, TopologyRejectsDuplicateRank) {
  ParallelTopologySpec s = Dp2Tp2Spec();
  s.participants[0].rank = s.participants[1].rank;  // worker-d gets dp0/tp1
  EXPECT_EQ(ErrorOf(ParallelTopology::Make(s)),
            "duplicate topology parallel rank: dp=0,pp=0,ep=0,tp=1");
}

TEST(PlacementTypesTest, TopologyRejectsOutOfRangeCoordinates) {
  ParallelTopologySpec s = Dp2Tp2Spec();
  s.participants[1].rank.tp = 2;  // worker-b
  EXPECT_EQ(ErrorOf(ParallelTopology::Make(s)),
            "tp rank is out of range for participant worker-b: 2 not in "
            "[0, 2)");
  s = Dp2Tp2Spec();
  s.participants[2].rank.dp = -1;  // worker-a
  EXPECT_EQ(ErrorOf(ParallelTopology::Make(s)),
            "dp rank is out of range for participant worker-a: -1 not in "
            "[0, 2)");
  s = Dp2Tp2Spec();
  s.participants[3].rank.pp = 1;  // worker-c; pp_size is 1
  EXPECT_EQ(ErrorOf(ParallelTopology::Make(s)),
            "pp rank is out of range for participant worker-c: 1 not in "
            "[0, 1)");
  s = Dp2Tp2Spec();
  s.participants[0].rank.ep = 5;  // worker-d; ep_size is 1
  EXPECT_EQ(ErrorOf(ParallelTopology::Make(s)),
            "ep rank is out of range for participant worker-d: 5 not in "
            "[0, 1)");
}

}  // namespace
}  // namespace reshard
