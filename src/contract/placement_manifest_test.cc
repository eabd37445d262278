// Global placement rules (rules 11-28 of docs/validation-rules.md): one
// negative test per rule with its message, plus positive layouts.

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <string>
#include <utility>
#include <vector>

#include "reshard/placement.h"
#include "testing/placement_builders.h"
#include "testing/status_testing.h"

namespace reshard {
namespace {

using testing::AddTensor;
using testing::GridDraft;
using ::testing::HasSubstr;
using testing::PlacementDraft;
using testing::Sizes;
using testing::TensorLayout;

// TP2 x EP2 x PP2 x DP2 with a dense, an expert and a PP-owned tensor.
PlacementDraft FourAxisDraft() {
  PlacementDraft d = GridDraft({2, 2, 2, 2});
  AddTensor(&d, {.tensor_id = "embed", .shape = {16, 8}, .tp_dim = 0});
  AddTensor(&d, {.tensor_id = "layers.0.experts.w1",
                 .shape = {4, 8, 6},
                 .tp_dim = 1,
                 .ep_split = true,
                 .pp_owner = 0,
                 .layer_id = 0});
  AddTensor(&d, {.tensor_id = "layers.1.norm", .shape = {8}, .pp_owner = 1});
  return d;
}

std::string BuildError(const PlacementDraft& d) {
  auto m = d.Build();
  return m.ok() ? "OK" : m.status().message();
}

PlacementFragmentSpec* FindFragment(PlacementDraft* d, const std::string& t,
                                    ParallelRank r) {
  for (auto& f : d->fragments) {
    if (f.tensor_id == t && f.rank == r) return &f;
  }
  return nullptr;
}

TEST(PlacementManifestTest, FourAxisLayoutValidates) {
  ASSERT_OK_AND_ASSIGN(auto m, FourAxisDraft().Build());
  EXPECT_EQ(m.tensors().size(), 3u);
  EXPECT_EQ(m.parts().size(), 16u);
  // embed: 16 fragments; experts: 8 (pp0 only); norm: 8 (pp1 only).
  EXPECT_EQ(m.fragments().size(), 32u);
  EXPECT_TRUE(std::is_sorted(
      m.fragments().begin(), m.fragments().end(), [](auto* a, auto* b) {
        return a->placement_fragment_id() < b->placement_fragment_id();
      }));
  EXPECT_EQ(m.placement_id().substr(0, 7), "sha256:");
  EXPECT_EQ(m.digest().size(), 64u);
  // Deterministic: building twice gives the same identities.
  auto again = FourAxisDraft().Build();
  EXPECT_EQ(again->placement_id(), m.placement_id());
  EXPECT_EQ(again->digest(), m.digest());
}

TEST(PlacementManifestTest, IdentityIgnoresInputOrder) {
  PlacementDraft a = FourAxisDraft();
  PlacementDraft b = FourAxisDraft();
  std::reverse(b.fragments.begin(), b.fragments.end());
  std::reverse(b.tensors.begin(), b.tensors.end());
  std::reverse(b.topology.participants.begin(), b.topology.participants.end());
  EXPECT_EQ(a.Build()->placement_id(), b.Build()->placement_id());
  EXPECT_EQ(a.Build()->digest(), b.Build()->digest());
}

TEST(PlacementManifestTest, IdentityCoversLogicalContent) {
  const std::string base = FourAxisDraft().Build()->placement_id();
  PlacementDraft d = FourAxisDraft();
  d.header.revision = "step-2";
  EXPECT_NE(d.Build()->placement_id(), base);
  d = FourAxisDraft();
  d.header.weight_generation = 2;
  EXPECT_NE(d.Build()->placement_id(), base);
  d = FourAxisDraft();
  d.tensors[0].layout_fingerprint = "other";
  EXPECT_NE(d.Build()->placement_id(), base);
}

// Rule 11.
TEST(PlacementManifestTest, DuplicateFragmentIdRejected) {
  PlacementDraft d = FourAxisDraft();
  auto* a = FindFragment(&d, "embed", {0, 0, 0, 0});
  auto* b = FindFragment(&d, "embed", {1, 0, 0, 0});
  a->placement_fragment_id = "frag-x";
  b->placement_fragment_id = "frag-x";
  EXPECT_EQ(BuildError(d), "duplicate fragment_id: frag-x");
}

TEST(PlacementManifestTest, DuplicateLogicalFragmentRejected) {
  PlacementDraft d = FourAxisDraft();
  PlacementFragmentSpec copy = *FindFragment(&d, "embed", {0, 0, 0, 0});
  copy.placement_fragment_id = "explicit-copy";
  d.fragments.push_back(copy);
  EXPECT_THAT(BuildError(d),
              HasSubstr("duplicate logical fragment for tensor and parallel "
                        "rank: embed at dp=0,pp=0,ep=0,tp=0"));
}

TEST(PlacementManifestTest, UnknownTensorRejected) {
  PlacementDraft d = FourAxisDraft();
  d.fragments[0].tensor_id = "ghost";
  d.fragments[0].placement_fragment_id.reset();
  EXPECT_THAT(BuildError(d), HasSubstr("unknown tensor_id ghost in fragment"));
}

TEST(PlacementManifestTest, DuplicateTensorRejected) {
  PlacementDraft d = FourAxisDraft();
  d.tensors.push_back(d.tensors[0]);
  EXPECT_EQ(BuildError(d), "duplicate tensor_id: embed");
}

// Rule 12.
TEST(PlacementManifestTest, OverlappingBoxesOfOneRankRejected) {
  PlacementDraft d = FourAxisDraft();
  PlacementFragmentSpec extra = *FindFragment(&d, "embed", {0, 0, 0, 0});
  extra.global_offset = {4, 0};
  extra.local_shape = {8, 8};
  extra.nbytes = 128;
  extra.placement_fragment_id = "overlapping";
  d.fragments.push_back(extra);
  EXPECT_THAT(BuildError(d),
              HasSubstr("logical fragment boxes overlap for tensor and "
                        "parallel rank: "));
  EXPECT_THAT(BuildError(d), HasSubstr("overlapping"));
}

// Rules 7-9 through assembly.
TEST(PlacementManifestTest, FragmentGeometryRules) {
  PlacementDraft d = FourAxisDraft();
  auto* f = FindFragment(&d, "embed", {0, 0, 0, 0});
  f->placement_fragment_id = "f0";
  f->nbytes = 3;
  EXPECT_EQ(BuildError(d),
            "fragment byte size mismatch: f0: expected 128, got 3");
  d = FourAxisDraft();
  f = FindFragment(&d, "embed", {0, 0, 0, 0});
  f->placement_fragment_id = "f0";
  f->global_offset = {12, 0};
  EXPECT_EQ(BuildError(d),
            "fragment is out of bounds: f0: tensor embed dim 0: offset 12 + "
            "extent 8 > 16");
  d = FourAxisDraft();
  f = FindFragment(&d, "embed", {0, 0, 0, 0});
  f->placement_fragment_id = "f0";
  f->global_offset = {0, 0, 0};
  f->local_shape = {8, 8, 1};
  EXPECT_EQ(BuildError(d),
            "fragment rank mismatch: f0: tensor embed has 2 dimensions, "
            "fragment has 3");
}

// Rule 13 (through the part factory directly).
TEST(PlacementManifestTest, PartRankMustMatchFragments) {
  auto t = TensorDescriptor::Make({.tensor_id = "w",
                                   .global_shape = {4},
                                   .dtype = "uint8",
                                   .itemsize = 1,
                                   .layout_fingerprint = "x"});
  auto f = PlacementFragment::Make({.tensor_id = "w",
                                    .global_offset = {0},
                                    .local_shape = {4},
                                    .nbytes = 4,
                                    .rank = {1, 0, 0, 0},
                                    .placement_fragment_id = "f"});
  WeightPlacementPartSpec s;
  s.header = {"r", "v", 1, "set"};
  s.topology_id = "sha256:t";
  s.participant_id = "p0";
  s.rank = {0, 0, 0, 0};
  s.tensors = {*t};
  s.fragments = {*f};
  auto part = WeightPlacementPart::Make(s);
  EXPECT_EQ(part.status().message(),
            "placement part p0: placement part fragment rank differs from "
            "part rank: f has dp=1,pp=0,ep=0,tp=0, part has "
            "dp=0,pp=0,ep=0,tp=0");
  // Rule 14: a declared tensor no fragment references.
  s.rank = {1, 0, 0, 0};
  s.tensors.push_back(*TensorDescriptor::Make({.tensor_id = "unused",
                                               .global_shape = {4},
                                               .dtype = "uint8",
                                               .itemsize = 1,
                                               .layout_fingerprint = "x"}));
  part = WeightPlacementPart::Make(s);
  EXPECT_EQ(part.status().message(),
            "placement part p0: placement part contains an unreferenced "
            "tensor: unused");
  // An empty part is valid.
  s.tensors.clear();
  s.fragments.clear();
  EXPECT_OK(WeightPlacementPart::Make(s));
}

WeightPlacementManifestSpec SpecOf(const WeightPlacementManifest& m) {
  WeightPlacementManifestSpec s{m.header(), m.topology(), m.parts(),
                                std::nullopt};
  return s;
}

// Rule 17.
TEST(PlacementManifestTest, PartsMustMatchTopology) {
  auto m = *FourAxisDraft().Build();
  auto s = SpecOf(m);
  s.parts.pop_back();
  EXPECT_EQ(WeightPlacementManifest::Make(s).status().message(),
            "missing topology participant: p-d1-p1-e1-t1");
  s = SpecOf(m);
  s.parts.push_back(s.parts[0]);
  EXPECT_EQ(WeightPlacementManifest::Make(s).status().message(),
            "duplicate placement participant: p-d0-p0-e0-t0");
  // A part for a participant the topology does not know.
  PlacementDraft small = GridDraft({1, 1, 1, 2});
  AddTensor(&small, {.tensor_id = "embed", .shape = {16, 8}, .tp_dim = 0});
  auto other = *small.Build();
  s = SpecOf(other);
  WeightPlacementPartSpec ps;
  ps.header = other.header();
  ps.topology_id = other.topology().topology_id();
  ps.participant_id = "zz-stranger";
  s.parts.push_back(*WeightPlacementPart::Make(ps));
  EXPECT_EQ(WeightPlacementManifest::Make(s).status().message(),
            "unknown topology participant: zz-stranger");
  // Header fields must agree.
  s = SpecOf(m);
  s.header.revision = "step-9";
  EXPECT_EQ(WeightPlacementManifest::Make(s).status().message(),
            "placement part revision differs: participant p-d0-p0-e0-t0");
  s = SpecOf(m);
  s.header.weight_generation = 7;
  EXPECT_EQ(WeightPlacementManifest::Make(s).status().message(),
            "placement part weight_generation differs: participant "
            "p-d0-p0-e0-t0");
  // Part rank must equal the topology rank.
  ParallelTopologySpec ts;
  ts.sizes.tp = 2;
  ts.participants = {{"p-d0-p0-e0-t0", {0, 1, 0, 0}},
                     {"p-d0-p0-e0-t1", {0, 0, 0, 0}}};
  s = SpecOf(other);
  s.topology = *ParallelTopology::Make(ts);
  std::vector<WeightPlacementPart> parts;
  for (const auto& p : other.parts()) {
    WeightPlacementPartSpec q{p.header(),         s.topology.topology_id(),
                              p.participant_id(), p.rank(),
                              p.tensors(),        p.fragments()};
    parts.push_back(*WeightPlacementPart::Make(q));
  }
  s.parts = parts;
  EXPECT_EQ(WeightPlacementManifest::Make(s).status().message(),
            "placement part rank differs from topology: participant "
            "p-d0-p0-e0-t0 has dp=0,pp=0,ep=0,tp=0, topology has "
            "dp=0,pp=0,ep=0,tp=1");
}

// Rule 17: topology_id of a part.
TEST(PlacementManifestTest, PartTopologyIdMustMatch) {
  auto m = *FourAxisDraft().Build();
  auto s = SpecOf(m);
  const auto& p = m.parts()[3];
  WeightPlacementPartSpec q{p.header(), "sha256:other", p.participant_id(),
                            p.rank(),   p.tensors(),    p.fragments()};
  s.parts[3] = *WeightPlacementPart::Make(q);
  EXPECT_EQ(
      WeightPlacementManifest::Make(s).status().message(),
      "placement part topology_id differs: participant " + p.participant_id());
}

// Rule 18.
TEST(PlacementManifestTest, TensorDescriptorsMustAgreeAcrossParts) {
  auto m = *FourAxisDraft().Build();
  auto s = SpecOf(m);
  const auto& p = m.parts()[0];
  std::vector<TensorDescriptor> tensors;
  for (const auto& t : p.tensors()) {
    if (t.tensor_id() != "embed") {
      tensors.push_back(t);
      continue;
    }
    TensorDescriptorSpec ts{
        t.tensor_id(),     t.global_shape(), "float16",
        t.itemsize(),      t.shard_dims(),   t.layout_fingerprint(),
        t.parallel_axes(), t.layer_id(),     t.expert_id()};
    tensors.push_back(*TensorDescriptor::Make(ts));
  }
  WeightPlacementPartSpec q{p.header(), p.topology_id(), p.participant_id(),
                            p.rank(),   tensors,         p.fragments()};
  s.parts[0] = *WeightPlacementPart::Make(q);
  EXPECT_EQ(WeightPlacementManifest::Make(s).status().message(),
            "placement part tensor descriptor mismatch: embed: dtype float16 "
            "(part " +
                p.participant_id() + ") vs bfloat16 (part " +
                m.parts()[1].participant_id() + ")");
}

// A placement moved to another revision keeps its layout and changes its
// identities.
TEST(PlacementManifestTest, WithRevisionChangesOnlyTheRevision) {
  const auto m = *FourAxisDraft().Build();
  ASSERT_OK_AND_ASSIGN(auto r, WithRevision(m, "step-7", 7));
  EXPECT_EQ(r.revision(), "step-7");
  EXPECT_EQ(r.weight_generation(), 7u);
  EXPECT_EQ(r.resource_id(), m.resource_id());
  EXPECT_EQ(r.topology().topology_id(), m.topology().topology_id());
  EXPECT_NE(r.placement_id(), m.placement_id());
  ASSERT_EQ(r.parts().size(), m.parts().size());
  for (size_t i = 0; i < r.parts().size(); ++i) {
    EXPECT_EQ(r.parts()[i].header().revision, "step-7");
    EXPECT_EQ(r.parts()[i].fragments().size(), m.parts()[i].fragments().size());
  }
  ASSERT_EQ(r.fragments().size(), m.fragments().size());
  for (size_t i = 0; i < r.fragments().size(); ++i) {
    EXPECT_EQ(r.fragments()[i]->placement_fragment_id(),
              m.fragments()[i]->placement_fragment_id());
  }
  // Back again: the same placement.
  ASSERT_OK_AND_ASSIGN(auto back,
                       WithRevision(r, m.revision(), m.weight_generation()));
  EXPECT_EQ(back.digest(), m.digest());
}

// Rule 19.
TEST(PlacementManifestTest, AliasGroups) {
  PlacementDraft d = GridDraft({1, 2, 1, 1});
  AddTensor(&d, {.tensor_id = "embed_tokens.weight",
                 .shape = {32},
                 .pp_owner = 0,
                 .aliases = {"embed_tokens.weight", "lm_head.weight"}});
  AddTensor(&d, {.tensor_id = "lm_head.weight",
                 .shape = {32},
                 .pp_owner = 1,
                 .aliases = {"embed_tokens.weight", "lm_head.weight"}});
  EXPECT_OK(d.Build()) << BuildError(d);
  PlacementDraft bad = d;
  for (auto& f : bad.fragments) {
    if (f.tensor_id == "lm_head.weight") f.aliases.clear();
  }
  EXPECT_EQ(BuildError(bad),
            "alias group is not declared consistently for tensor: "
            "lm_head.weight (group of tensor embed_tokens.weight)");
  bad = d;
  for (auto& f : bad.fragments) {
    if (f.tensor_id == "embed_tokens.weight") {
      f.aliases = {"embed_tokens.weight", "ghost.weight"};
    }
  }
  EXPECT_EQ(BuildError(bad),
            "alias group references unknown tensor: ghost.weight (declared "
            "by tensor embed_tokens.weight)");
}

TEST(PlacementManifestTest, AliasGroupInconsistentWithinTensor) {
  PlacementDraft d = GridDraft({1, 1, 1, 2});
  AddTensor(
      &d, {.tensor_id = "a", .shape = {8}, .tp_dim = 0, .aliases = {"a", "b"}});
  AddTensor(
      &d, {.tensor_id = "b", .shape = {8}, .tp_dim = 0, .aliases = {"a", "b"}});
  ASSERT_OK(d.Build()) << BuildError(d);
  d.fragments[0].aliases.clear();
  d.fragments[0].placement_fragment_id = "a0";
  EXPECT_THAT(BuildError(d),
              HasSubstr("alias group is not declared consistently for "
                        "tensor: a (fragment "));
}

// Rule 20.
TEST(PlacementManifestTest, PlacementMustContainTensorsAndFragments) {
  PlacementDraft d = GridDraft({1, 1, 1, 1});
  EXPECT_EQ(BuildError(d), "global weight placement must contain tensors");
}

// Rule 21.
TEST(PlacementManifestTest, UndeclaredActiveAxes) {
  PlacementDraft d = FourAxisDraft();
  d.tensors[0].parallel_axes.erase(d.tensors[0].parallel_axes.begin());
  EXPECT_EQ(BuildError(d),
            "global placement tensor requires explicit parallel semantics for "
            "active undeclared dp axis: embed");
  // TP undeclared while all fragments share tp=0.
  d = GridDraft({1, 1, 1, 2});
  AddTensor(&d, {.tensor_id = "w", .shape = {8}});
  d.tensors[0].parallel_axes.clear();
  std::erase_if(d.fragments, [](auto& f) { return f.rank.tp != 0; });
  EXPECT_EQ(BuildError(d),
            "global placement tensor requires explicit parallel semantics for "
            "active undeclared tp axis: w");
}

TEST(PlacementManifestTest, UndeclaredAxisCoupledToDeclaredSplit) {
  // EP and TP mapped onto the same workers: participants (ep=i, tp=i).
  PlacementDraft d;
  d.topology.sizes.tp = 2;
  d.topology.sizes.ep = 2;
  d.topology.participants = {{"a", {0, 0, 0, 0}}, {"b", {0, 1, 0, 1}}};
  d.tensors.push_back({.tensor_id = "w",
                       .global_shape = {4},
                       .dtype = "uint8",
                       .itemsize = 1,
                       .shard_dims = {0},
                       .layout_fingerprint = "x",
                       .parallel_axes = {*SplitAxis(AxisKind::kTp, 0)}});
  d.fragments.push_back({"w", {0}, {2}, 2, {0, 0, 0, 0}});
  d.fragments.push_back({"w", {2}, {2}, 2, {0, 1, 0, 1}});
  EXPECT_OK(d.Build()) << BuildError(d);
  // Undeclared EP varying with nothing declared varying.
  PlacementDraft v;
  v.topology.sizes.ep = 2;
  v.topology.participants = {{"a", {0, 0, 0, 0}}, {"b", {0, 0, 0, 1}}};
  v.tensors.push_back({.tensor_id = "w",
                       .global_shape = {4},
                       .dtype = "uint8",
                       .itemsize = 1,
                       .layout_fingerprint = "x"});
  v.fragments.push_back({"w", {0}, {4}, 4, {0, 0, 0, 0}});
  v.fragments.push_back({"w", {0}, {4}, 4, {0, 0, 0, 1}});
  EXPECT_EQ(BuildError(v),
            "global placement tensor varies across undeclared ep axis: w");
  // Undeclared EP varying independently of the declared TP split.
  PlacementDraft i = GridDraft({1, 1, 2, 2});
  AddTensor(&i, {.tensor_id = "w", .shape = {4}, .tp_dim = 0});
  i.tensors[0].parallel_axes.erase(i.tensors[0].parallel_axes.begin());
  EXPECT_EQ(BuildError(i),
            "global placement tensor varies independently across undeclared "
            "ep axis: w");
}

// Rule 22.
TEST(PlacementManifestTest, MissingReplica) {
  PlacementDraft d = FourAxisDraft();
  std::erase_if(d.fragments, [](auto& f) {
    return f.tensor_id == "layers.1.norm" && f.rank.dp == 1;
  });
  EXPECT_THAT(BuildError(d),
              HasSubstr("missing or unexpected replicated-axis participant "
                        "for layers.1.norm"));
}

// Ranks beyond 16 bits a coordinate: the global rules sort their rank keys
// without packing them, with the same verdicts and messages.
TEST(PlacementManifestTest, AxesOfMoreThan65534RanksValidate) {
  for (const int64_t ep : {int64_t{4}, int64_t{65536}}) {
    SCOPED_TRACE(ep);
    PlacementDraft d = GridDraft({2, 1, ep, 1});
    AddTensor(&d, {.tensor_id = "experts",
                   .shape = {ep, 2},
                   .dtype = "uint8",
                   .itemsize = 1,
                   .ep_split = true});
    ASSERT_OK_AND_ASSIGN(auto m, d.Build());
    EXPECT_EQ(m.fragments().size(), static_cast<size_t>(2 * ep));
    // The last expert of DP replica 1 lacks its second column.
    auto* f = FindFragment(&d, "experts", {.dp = 1, .ep = ep - 1});
    ASSERT_NE(f, nullptr);
    f->local_shape = {1, 1};
    f->nbytes = 1;
    EXPECT_EQ(BuildError(d),
              "global placement tensor is not fully covered: experts "
              "(owner/replica group at dp=1,pp=0,ep=0,tp=0)");
  }
}

// Rule 23.
TEST(PlacementManifestTest, IncompleteCoverRejected) {
  PlacementDraft d = FourAxisDraft();
  auto* f = FindFragment(&d, "embed", {1, 1, 1, 1});
  f->local_shape = {4, 8};
  f->nbytes = 64;
  EXPECT_THAT(BuildError(d),
              HasSubstr("global placement tensor is not fully covered: embed"));
}

// Rule 24.
TEST(PlacementManifestTest, SplitParticipantMissing) {
  // One TP rank holds the whole tensor while the other holds nothing.
  PlacementDraft d = GridDraft({1, 1, 1, 2});
  AddTensor(&d, {.tensor_id = "w", .shape = {8}, .tp_dim = 0});
  d.fragments.pop_back();
  d.fragments[0].local_shape = {8};
  d.fragments[0].nbytes = 16;
  EXPECT_EQ(BuildError(d),
            "missing or unexpected split-axis participant for w "
            "(owner/replica group at dp=0,pp=0,ep=0,tp=0)");
}

// Rule 25.
TEST(PlacementManifestTest, NonCartesianSplitMapping) {
  // EP2 x TP2 split axes but only the diagonal participants exist.
  PlacementDraft d;
  d.topology.sizes.tp = 2;
  d.topology.sizes.ep = 2;
  d.topology.participants = {{"a", {0, 0, 0, 0}}, {"b", {0, 1, 0, 1}}};
  d.tensors.push_back({.tensor_id = "w",
                       .global_shape = {2, 4},
                       .dtype = "uint8",
                       .itemsize = 1,
                       .shard_dims = {0, 1},
                       .layout_fingerprint = "x",
                       .parallel_axes = {*SplitAxis(AxisKind::kEp, 0),
                                         *SplitAxis(AxisKind::kTp, 1)}});
  d.fragments.push_back({"w", {0, 0}, {1, 4}, 4, {0, 0, 0, 0}});
  d.fragments.push_back({"w", {1, 0}, {1, 4}, 4, {0, 1, 0, 1}});
  EXPECT_EQ(BuildError(d),
            "non-Cartesian split-axis participant mapping cannot prove "
            "rank-to-dimension ownership: w");
}

// Rule 26.
TEST(PlacementManifestTest, SplitGeometryMustFollowDeclaredDimension) {
  // TP declared on dim 1 but the boxes split dim 0.
  PlacementDraft d = GridDraft({1, 1, 1, 2});
  AddTensor(&d, {.tensor_id = "w", .shape = {4, 4}, .tp_dim = 0});
  d.tensors[0].parallel_axes = {*SplitAxis(AxisKind::kTp, 1)};
  d.tensors[0].shard_dims = {1};
  EXPECT_EQ(BuildError(d),
            "split-axis rank geometry conflicts with declared dimension: w: "
            "tp -> dim 1");
}

// Rule 27.
TEST(PlacementManifestTest, SuppliedPlacementIdMustMatch) {
  auto m = *FourAxisDraft().Build();
  auto s = SpecOf(m);
  s.placement_id = m.placement_id();
  EXPECT_OK(WeightPlacementManifest::Make(s));
  s.placement_id = "sha256:0000";
  EXPECT_EQ(WeightPlacementManifest::Make(s).status().message(),
            "placement_id does not match canonical logical content: got "
            "sha256:0000, expected " +
                m.placement_id());
}

// Rule 28.
TEST(PlacementManifestTest, FromFragmentsRankWithoutParticipant) {
  PlacementDraft d = FourAxisDraft();
  d.fragments[0].rank.tp = 1;
  d.fragments[0].rank.dp = 1;
  d.fragments[0].placement_fragment_id = "lost";
  // Its new rank exists; make it one that does not.
  d.topology.participants.erase(std::find_if(
      d.topology.participants.begin(), d.topology.participants.end(),
      [&](auto& p) { return p.rank == d.fragments[0].rank; }));
  EXPECT_THAT(BuildError(d),
              HasSubstr("placement fragment rank has no topology participant: "
                        "lost at "));
}

TEST(PlacementManifestTest, FromFragmentsUnreferencedTensor) {
  PlacementDraft d = FourAxisDraft();
  d.tensors.push_back({.tensor_id = "orphan",
                       .global_shape = {4},
                       .dtype = "uint8",
                       .itemsize = 1,
                       .layout_fingerprint = "x",
                       .parallel_axes = {ReplicatedAxis(AxisKind::kDp)}});
  EXPECT_EQ(BuildError(d),
            "placement fragment inventory contains an unreferenced tensor: "
            "orphan");
}

TEST(PlacementManifestTest, ExpertOwnershipAndEmptyParts) {
  // Individually allocated experts owned by EP ranks; PP stage 1 empty.
  PlacementDraft d = GridDraft({1, 2, 2, 1});
  for (int e = 0; e < 4; ++e) {
    AddTensor(&d, {.tensor_id = "experts." + std::to_string(e) + ".w",
                   .shape = {4, 4},
                   .pp_owner = 0,
                   .expert_id = e,
                   .ep_owner = e % 2});
  }
  ASSERT_OK_AND_ASSIGN(auto m, d.Build());
  size_t empty = 0;
  for (const auto& p : m.parts()) empty += p.fragments().empty();
  EXPECT_EQ(empty, 2u);
}

// FragmentPartPositions(m)[k] is the position, counted part by part, of
// m.fragments()[k] (id order), on both sides of the parallel threshold.
TEST(PlacementManifestTest, FragmentPartPositionsMapIdOrderToPartOrder) {
  for (int tensors : {3, 40}) {
    SCOPED_TRACE(tensors);
    PlacementDraft d = GridDraft({2, 1, 16, 16});
    for (int t = 0; t < tensors; ++t) {
      AddTensor(&d, {.tensor_id = "w" + std::to_string(t),
                     .shape = {32, 16, 16},
                     .tp_dim = 1,
                     .ep_split = true});
    }
    ASSERT_OK_AND_ASSIGN(auto m, d.Build());
    std::vector<const PlacementFragment*> part_order;
    for (const auto& p : m.parts()) {
      for (const auto& f : p.fragments()) part_order.push_back(&f);
    }
    const std::vector<uint32_t>& positions = internal::FragmentPartPositions(m);
    ASSERT_EQ(positions.size(), m.fragments().size());
    ASSERT_EQ(positions.size(), part_order.size());
    for (size_t k = 0; k < positions.size(); ++k) {
      ASSERT_EQ(part_order[positions[k]], m.fragments()[k]) << k;
    }
  }
}

TEST(PlacementManifestTest, MillionFragmentScaleIsNearLinear) {
  // 4,096 tensors x 256 participants = 1,048,576 fragments would be slow in
  // a debug test; 64 tensors x 1,024 participants keeps it fast while still
  // catching any all-pairs behaviour.
  PlacementDraft d = GridDraft({2, 1, 32, 16});
  for (int t = 0; t < 64; ++t) {
    AddTensor(&d, {.tensor_id = "experts.w" + std::to_string(t),
                   .shape = {64, 32, 16},
                   .tp_dim = 1,
                   .ep_split = true});
  }
  ASSERT_OK_AND_ASSIGN(auto m, d.Build());
  EXPECT_EQ(m.fragments().size(), 64u * 1024u);
}

// Placements of kParallelIdentityThreshold (16,384) fragments or more check
// the global rules of runs of their tensors on two threads, which claim the
// runs in turn; the error reported is still the first in tensor order,
// wherever the broken tensors fall among the runs.
TEST(PlacementManifestTest, LargePlacementReportsTheFirstBrokenTensor) {
  auto draft_without = [](std::vector<std::string> holes) {
    PlacementDraft d = GridDraft({1, 1, 1, 64});
    for (int t = 0; t < 260; ++t) {  // 260 x 64 = 16,640 fragments
      char id[8];
      std::snprintf(id, sizeof(id), "t%03d", t);
      AddTensor(&d, {.tensor_id = id, .shape = {64, 8}, .tp_dim = 0});
    }
    // Each named tensor loses its tp=3 fragment: a hole in its cover.
    std::erase_if(d.fragments, [&](const PlacementFragmentSpec& f) {
      return f.rank.tp == 3 &&
             std::find(holes.begin(), holes.end(), f.tensor_id) != holes.end();
    });
    return d;
  };
  ASSERT_OK_AND_ASSIGN(auto whole, draft_without({}).Build());
  EXPECT_EQ(whole.fragments().size(), 16640u);
  const std::string missing = "global placement tensor is not fully covered: ";
  const std::string group = " (owner/replica group at dp=0,pp=0,ep=0,tp=0)";
  for (const auto& [holes, first] :
       std::vector<std::pair<std::vector<std::string>, std::string>>{
           {{"t010", "t250"}, "t010"},
           {{"t250", "t010"}, "t010"},
           {{"t250"}, "t250"},
           {{"t010"}, "t010"},
           {{"t001", "t000"}, "t000"},
           {{"t259"}, "t259"},
           {{"t130", "t129", "t128"}, "t128"},
           {{"t259", "t131", "t007"}, "t007"}}) {
    EXPECT_EQ(draft_without(holes).Build().status().message(),
              missing + first + group)
        << holes.size();
  }
}

}  // namespace
}  // namespace reshard

namespace reshard {
namespace {

// A part of `n` one-dimensional tensors t00, t01, ... with one fragment
// each, given in descending id order (so the part sorts them).
WeightPlacementPartSpec ManyTensorPart(int n) {
  WeightPlacementPartSpec s{{"r", "v", 1, "set"}, "sha256:t", "p", {}, {}, {}};
  for (int t = 0; t < n; ++t) {
    const std::string id = (t < 10 ? "t0" : "t") + std::to_string(t);
    s.tensors.push_back(*TensorDescriptor::Make({.tensor_id = id,
                                                 .global_shape = {4},
                                                 .dtype = "uint8",
                                                 .itemsize = 1,
                                                 .layout_fingerprint = "x"}));
    s.fragments.push_back(*PlacementFragment::Make(
        {.tensor_id = id,
         .global_offset = {0},
         .local_shape = {4},
         .nbytes = 4,
         .placement_fragment_id = "f" + std::to_string(1000 - t)}));
  }
  return s;
}

// Both ways of finding a fragment's tensor (binary search for few tensors,
// a hash for many) give the same tensor and the same errors.
TEST(PlacementPartTest, FragmentTensorsAndErrorsWithFewOrManyTensors) {
  for (int n : {3, 40}) {
    SCOPED_TRACE(n);
    ASSERT_OK_AND_ASSIGN(auto part,
                         WeightPlacementPart::Make(ManyTensorPart(n)));
    ASSERT_EQ(part.fragments().size(), size_t(n));
    for (size_t i = 0; i < part.fragments().size(); ++i) {
      EXPECT_EQ(part.tensors()[part.fragment_tensor(i)].tensor_id(),
                part.fragments()[i].tensor_id());
    }
    EXPECT_TRUE(std::is_sorted(part.fragments().begin(), part.fragments().end(),
                               [](const auto& a, const auto& b) {
                                 return a.placement_fragment_id() <
                                        b.placement_fragment_id();
                               }));
    WeightPlacementPartSpec unknown = ManyTensorPart(n);
    unknown.fragments[1] =
        *PlacementFragment::Make({.tensor_id = "t99x",
                                  .global_offset = {0},
                                  .local_shape = {4},
                                  .nbytes = 4,
                                  .placement_fragment_id = "g"});
    EXPECT_EQ(WeightPlacementPart::Make(unknown).status().message(),
              "placement part p: unknown tensor_id t99x in fragment g");
    WeightPlacementPartSpec twice = ManyTensorPart(n);
    twice.fragments.push_back(twice.fragments[2]);
    const std::string dup = twice.fragments[2].placement_fragment_id();
    EXPECT_EQ(WeightPlacementPart::Make(twice).status().message(),
              "placement part p: duplicate fragment_id: " + dup);
    // Sorted input with a repeated id is caught as well.
    std::sort(twice.fragments.begin(), twice.fragments.end(),
              [](const auto& a, const auto& b) {
                return a.placement_fragment_id() < b.placement_fragment_id();
              });
    EXPECT_EQ(WeightPlacementPart::Make(twice).status().message(),
              "placement part p: duplicate fragment_id: " + dup);
  }
}

// A decoder's hint of each fragment's tensor is checked: a right one gives
// the same part, a wrong, short or out-of-range one is ignored, and errors
// read as without a hint.
TEST(PlacementPartTest, TensorHintIsCheckedNotTrusted) {
  for (int n : {3, 40}) {
    SCOPED_TRACE(n);
    WeightPlacementPartSpec spec = ManyTensorPart(n);
    auto by_id = [](const auto& a, const auto& b) {
      return a.placement_fragment_id() < b.placement_fragment_id();
    };
    std::sort(spec.fragments.begin(), spec.fragments.end(), by_id);
    std::vector<uint32_t> right;
    for (const auto& f : spec.fragments) {
      for (uint32_t t = 0; t < spec.tensors.size(); ++t) {
        if (spec.tensors[t].tensor_id() == f.tensor_id()) right.push_back(t);
      }
    }
    ASSERT_EQ(right.size(), size_t(n));
    std::vector<uint32_t> swapped = right;
    std::swap(swapped[0], swapped[1]);
    const std::vector<std::vector<uint32_t>> hints = {
        right, swapped, {0}, std::vector<uint32_t>(n, uint32_t(n + 5))};
    for (const auto& hint : hints) {
      ASSERT_OK_AND_ASSIGN(auto part, WeightPlacementPart::Make(spec, hint));
      ASSERT_EQ(part.fragments().size(), size_t(n));
      for (size_t i = 0; i < part.fragments().size(); ++i) {
        EXPECT_EQ(part.tensors()[part.fragment_tensor(i)].tensor_id(),
                  part.fragments()[i].tensor_id());
      }
    }
    // Unsorted fragments: the hint (in input order) no longer fits.
    ASSERT_OK_AND_ASSIGN(auto unsorted,
                         WeightPlacementPart::Make(ManyTensorPart(n), right));
    for (size_t i = 0; i < unsorted.fragments().size(); ++i) {
      EXPECT_EQ(unsorted.tensors()[unsorted.fragment_tensor(i)].tensor_id(),
                unsorted.fragments()[i].tensor_id());
    }
    WeightPlacementPartSpec unknown = spec;
    unknown.fragments[1] = *PlacementFragment::Make(
        {.tensor_id = "t99x",
         .global_offset = {0},
         .local_shape = {4},
         .nbytes = 4,
         .placement_fragment_id =
             unknown.fragments[1].placement_fragment_id()});
    EXPECT_EQ(WeightPlacementPart::Make(unknown, right).status().message(),
              "placement part p: unknown tensor_id t99x in fragment " +
                  unknown.fragments[1].placement_fragment_id());
  }
}

}  // namespace
}  // namespace reshard
