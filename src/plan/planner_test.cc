// The planner (docs/planner.md): golden plan numbers of the fixtures and
// conformance scenarios (tests/data), cross-dimension geometry, balanced
// replica choice, local targets, error messages and summaries.

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <simdjson.h>

#include <algorithm>
#include <array>
#include <cstdlib>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "reshard/plan.h"
#include "testing/placement_builders.h"
#include "testing/plan_testing.h"
#include "testing/status_testing.h"

namespace reshard {
namespace {

using ::reshard::testing::StatusIs;
using testing::AddTensor;
using ::testing::ElementsAre;
using testing::GridDraft;
using testing::PlacementDraft;
using testing::ReadTestData;
using testing::Sizes;
using testing::TensorLayout;

// ---------------------------------------------------------------------------
// Helpers.

WeightPlacementManifest MustBuild(const PlacementDraft& d) {
  auto m = d.Build();
  if (!m.ok()) {
    ADD_FAILURE() << "draft does not build: " << m.status().ToString();
    std::abort();
  }
  return std::move(m).ValueOrDie();
}

Result<WeightPlacementManifest> LoadPlacement(const std::string& rel) {
  return WeightPlacementFromJson(ReadTestData(rel));
}

uint64_t VolumeBytes(const Dims& shape, uint64_t itemsize) {
  uint64_t n = itemsize;
  for (int64_t e : shape) n *= static_cast<uint64_t>(e);
  return n;
}

// Invariants every plan satisfies, independent of the expected numbers.
void CheckInvariants(const LogicalTransferPlan& plan) {
  const auto& regions = plan.regions();
  const auto& sf = plan.source_fragments();
  const auto& tf = plan.target_fragments();
  const PlanSummary& s = plan.summary();
  EXPECT_EQ(s.regions, regions.size());
  EXPECT_EQ(s.operations, s.regions);
  uint64_t bytes = 0;
  uint64_t segments = 0;
  std::vector<uint64_t> covered(tf.size(), 0);
  std::set<uint32_t> used;
  for (const auto& r : regions) {
    ASSERT_LT(r.source_fragment, sf.size());
    ASSERT_LT(r.target_fragment, tf.size());
    const PlanFragment& a = sf[r.source_fragment];
    const PlanFragment& b = tf[r.target_fragment];
    EXPECT_EQ(a.tensor, r.tensor);
    EXPECT_EQ(b.tensor, r.tensor);
    ASSERT_EQ(r.overlap_offset.size(), a.global_offset.size());
    ASSERT_EQ(r.overlap_shape.size(), a.global_offset.size());
    for (size_t d = 0; d < r.overlap_offset.size(); ++d) {
      EXPECT_GE(r.overlap_shape[d], 1);
      EXPECT_GE(r.overlap_offset[d], a.global_offset[d]);
      EXPECT_GE(r.overlap_offset[d], b.global_offset[d]);
      EXPECT_LE(r.overlap_offset[d] + r.overlap_shape[d],
                a.global_offset[d] + a.local_shape[d]);
      EXPECT_LE(r.overlap_offset[d] + r.overlap_shape[d],
                b.global_offset[d] + b.local_shape[d]);
    }
    const uint64_t itemsize =
        a.nbytes / VolumeBytes(a.local_shape, 1);  // canonical fragments
    EXPECT_EQ(r.bytes, VolumeBytes(r.overlap_shape, itemsize));
    uint64_t runs = 1;
    for (const auto& l : r.loops) {
      EXPECT_GT(l.count, 1u);
      runs *= l.count;
    }
    EXPECT_EQ(r.inner_bytes * runs, r.bytes);
    EXPECT_EQ(runs, r.segments);
    bytes += r.bytes;
    segments += r.segments;
    covered[r.target_fragment] += r.bytes;
    used.insert(r.source_fragment);
  }
  EXPECT_EQ(s.bytes, bytes);
  EXPECT_EQ(s.segments, segments);
  EXPECT_EQ(s.source_fragments_used, used.size());
  for (size_t i = 0; i < tf.size(); ++i) {
    EXPECT_EQ(covered[i], tf[i].nbytes) << tf[i].fragment_id;
  }
  // Each side's `order` is the fragment's position in id order among that
  // side's fragments (ids are unique on each side).
  for (const auto* side : {&sf, &tf}) {
    std::vector<std::string_view> ids;
    for (const auto& f : *side) ids.push_back(f.fragment_id);
    std::sort(ids.begin(), ids.end());
    for (const auto& f : *side) {
      ASSERT_LT(f.order, ids.size());
      EXPECT_EQ(ids[f.order], f.fragment_id);
    }
  }
  // Regions are in canonical order: (target fragment id, target base,
  // source fragment id, source base).
  for (size_t i = 1; i < regions.size(); ++i) {
    const auto& p = regions[i - 1];
    const auto& q = regions[i];
    EXPECT_LE(
        std::tie(tf[p.target_fragment].fragment_id, p.target_base_offset,
                 sf[p.source_fragment].fragment_id, p.source_base_offset),
        std::tie(tf[q.target_fragment].fragment_id, q.target_base_offset,
                 sf[q.source_fragment].fragment_id, q.source_base_offset));
  }
  // Per-participant bytes, traffic and routes all add up to the plan.
  uint64_t src_total = 0;
  for (uint64_t b : plan.source_bytes()) {
    src_total += b;
    EXPECT_LE(b, s.max_source_bytes);
  }
  uint64_t dst_total = 0;
  for (uint64_t b : plan.target_bytes()) {
    dst_total += b;
    EXPECT_LE(b, s.max_target_bytes);
  }
  EXPECT_EQ(src_total, s.bytes);
  EXPECT_EQ(dst_total, s.bytes);
  EXPECT_EQ(plan.source_bytes().size(), plan.source_participants().size());
  EXPECT_EQ(plan.target_bytes().size(), plan.target_participants().size());
  EXPECT_TRUE(std::is_sorted(plan.source_participants().begin(),
                             plan.source_participants().end()));
  EXPECT_TRUE(std::is_sorted(plan.target_participants().begin(),
                             plan.target_participants().end()));
  uint64_t traffic_total = 0;
  std::vector<uint64_t> traffic_src(plan.source_participants().size(), 0);
  std::vector<uint64_t> traffic_dst(plan.target_participants().size(), 0);
  for (size_t i = 0; i < plan.traffic().size(); ++i) {
    const auto& e = plan.traffic()[i];
    ASSERT_LT(e.source_participant, traffic_src.size());
    ASSERT_LT(e.target_participant, traffic_dst.size());
    EXPECT_GT(e.bytes, 0u);
    traffic_total += e.bytes;
    traffic_src[e.source_participant] += e.bytes;
    traffic_dst[e.target_participant] += e.bytes;
    if (i > 0) {
      const auto& p = plan.traffic()[i - 1];
      EXPECT_LT(std::tie(p.source_participant, p.target_participant),
                std::tie(e.source_participant, e.target_participant));
    }
  }
  EXPECT_EQ(traffic_total, s.bytes);
  EXPECT_EQ(traffic_src, plan.source_bytes());
  EXPECT_EQ(traffic_dst, plan.target_bytes());
  uint64_t route_ops = 0;
  uint64_t route_bytes = 0;
  for (const auto& r : plan.pipeline_routes()) {
    route_ops += r.operations;
    route_bytes += r.bytes;
  }
  EXPECT_EQ(route_ops, s.operations);
  EXPECT_EQ(route_bytes, s.bytes);
  if (!plan.source_participants().empty()) {
    EXPECT_DOUBLE_EQ(
        s.mean_source_bytes,
        static_cast<double>(s.bytes) / plan.source_participants().size());
  }
}

using Route = std::array<int64_t, 5>;  // spp, sstage, tpp, tstage, ops

std::vector<Route> Routes(const LogicalTransferPlan& plan) {
  std::vector<Route> out;
  for (const auto& r : plan.pipeline_routes()) {
    out.push_back({r.source_pp, r.source_stage, r.target_pp, r.target_stage,
                   static_cast<int64_t>(r.operations)});
  }
  return out;
}

int64_t IntOrNull(simdjson::dom::element e) {
  if (e.is_null()) return -1;
  return int64_t(e);
}

std::string Str(simdjson::dom::element e) {
  return std::string(std::string_view(e));
}

// ---------------------------------------------------------------------------
// Golden plans.

TEST(PlannerTest, FixturePairsMatchGolden) {
  const std::string text = ReadTestData("fixtures/plans/expected.json");
  simdjson::dom::parser parser;
  simdjson::dom::element root = parser.parse(text);
  simdjson::dom::object table = root;
  size_t n = 0;
  for (auto [key, value] : table) {
    SCOPED_TRACE(std::string(key));
    auto source = LoadPlacement("fixtures/plans/" + Str(value["source"]));
    auto target = LoadPlacement("fixtures/plans/" + Str(value["target"]));
    ASSERT_OK(source);
    ASSERT_OK(target);
    ASSERT_OK_AND_ASSIGN(auto plan,
                         LogicalTransferPlan::Make(*source, *target));
    const PlanSummary& s = plan.summary();
    EXPECT_EQ(s.regions, uint64_t(value["regions"]));
    EXPECT_EQ(s.operations, uint64_t(value["regions"]));
    EXPECT_EQ(s.segments, uint64_t(value["segments"]));
    EXPECT_EQ(s.bytes, uint64_t(value["bytes"]));
    EXPECT_EQ(plan.target_fragments().size(), target->fragments().size());
    CheckInvariants(plan);
    ++n;
  }
  EXPECT_EQ(n, 6u);
}

TEST(PlannerTest, ScenariosMatchGolden) {
  const std::string text = ReadTestData("scenarios/expected.json");
  simdjson::dom::parser parser;
  simdjson::dom::element root = parser.parse(text);
  simdjson::dom::object plans = root["plans"];
  size_t n = 0;
  size_t errors = 0;
  size_t with_routes = 0;
  for (auto [key, value] : plans) {
    const std::string name(key);
    SCOPED_TRACE(name);
    auto source = LoadPlacement("scenarios/" + Str(value["source"]));
    auto target = LoadPlacement("scenarios/" + Str(value["target"]));
    ASSERT_OK(source);
    ASSERT_OK(target);
    auto plan = LogicalTransferPlan::Make(*source, *target);
    ++n;
    simdjson::dom::element error;
    if (value["error"].get(error) == simdjson::SUCCESS) {
      ++errors;
      ASSERT_THAT(plan, StatusIs(StatusCode::kInvalidArgument, Str(error)));
      continue;
    }
    ASSERT_OK(plan);
    const PlanSummary& s = plan->summary();
    EXPECT_EQ(s.regions, uint64_t(value["regions"]));
    EXPECT_EQ(s.operations, uint64_t(value["regions"]));
    EXPECT_EQ(s.segments, uint64_t(value["segments"]));
    EXPECT_EQ(s.bytes, uint64_t(value["bytes"]));
    uint64_t max_segments = 0;
    for (const auto& r : plan->regions()) {
      max_segments = std::max(max_segments, r.segments);
    }
    EXPECT_EQ(max_segments, uint64_t(value["max_segments_per_region"]));
    simdjson::dom::array routes;
    if (value["routes"].get(routes) == simdjson::SUCCESS) {
      ++with_routes;
      std::vector<Route> want;
      for (simdjson::dom::element r : routes) {
        simdjson::dom::array a = r;
        ASSERT_EQ(a.size(), 5u);
        want.push_back({int64_t(a.at(0)), IntOrNull(a.at(1)), int64_t(a.at(2)),
                        IntOrNull(a.at(3)), int64_t(a.at(4))});
      }
      std::sort(want.begin(), want.end());
      EXPECT_EQ(Routes(*plan), want);
    }
    EXPECT_EQ(plan->target_fragments().size(), target->fragments().size());
    CheckInvariants(*plan);
  }
  EXPECT_EQ(n, 28u);
  EXPECT_EQ(errors, 1u);
  EXPECT_EQ(with_routes, 27u);
}

// ---------------------------------------------------------------------------
// Cross-dimension geometry.

TEST(PlannerTest, CrossDimDim0ToDim2Is16Operations) {
  PlacementDraft src = GridDraft(Sizes{.tp = 4});
  AddTensor(&src, {.tensor_id = "w",
                   .shape = {128, 4096, 16384},
                   .dtype = "uint8",
                   .itemsize = 1,
                   .tp_dim = 0});
  PlacementDraft dst = GridDraft(Sizes{.tp = 4});
  AddTensor(&dst, {.tensor_id = "w",
                   .shape = {128, 4096, 16384},
                   .dtype = "uint8",
                   .itemsize = 1,
                   .tp_dim = 2});
  ASSERT_OK_AND_ASSIGN(
      auto plan, LogicalTransferPlan::Make(MustBuild(src), MustBuild(dst)));
  const PlanSummary& s = plan.summary();
  EXPECT_EQ(s.operations, 16u);
  EXPECT_EQ(s.regions, 16u);
  EXPECT_EQ(s.segments, 2'097'152u);  // the prototype's segment count
  EXPECT_EQ(s.bytes, uint64_t{8} << 30);
  EXPECT_EQ(s.max_source_bytes, uint64_t{2} << 30);
  EXPECT_EQ(s.max_target_bytes, uint64_t{2} << 30);
  for (const auto& r : plan.regions()) {
    EXPECT_EQ(r.overlap_shape, (Dims{32, 4096, 4096}));
    EXPECT_EQ(r.inner_bytes, 4096u);
    EXPECT_THAT(r.loops, ElementsAre(OuterLoop{131072, 16384, 4096}));
    EXPECT_EQ(r.segments, 131072u);
    EXPECT_EQ(r.bytes, uint64_t{512} << 20);
  }
  CheckInvariants(plan);
}

TEST(PlannerTest, APlacementSourceIsNamedAsSuch) {
  PlacementDraft src = GridDraft(Sizes{.tp = 2});
  AddTensor(&src, {.tensor_id = "w", .shape = {8, 8}, .tp_dim = 0});
  PlacementDraft dst = GridDraft(Sizes{.tp = 2});
  AddTensor(&dst, {.tensor_id = "w", .shape = {8, 8}, .tp_dim = 1});
  const auto source = MustBuild(src);
  const LogicalTransferPlan plan =
      LogicalTransferPlan::Make(source, MustBuild(dst)).ValueOrDie();
  EXPECT_EQ(plan.source_kind(), PlanSourceKind::kPlacement);
  // Source fragment ids are the placement's.
  for (const auto& f : plan.source_fragments()) {
    EXPECT_NE(source.FindFragment(f.fragment_id), nullptr) << f.fragment_id;
  }
}

TEST(PlannerTest, CrossDimEp2ToTp2MatchesVectorsCAndD) {
  // [4,6,8] bf16: EP2 dim0 -> TP2 dim1 (vector C) and TP2 dim2 (vector D).
  for (int64_t dim : {1, 2}) {
    SCOPED_TRACE("tp dim " + std::to_string(dim));
    PlacementDraft src = GridDraft(Sizes{.ep = 2});
    AddTensor(&src, {.tensor_id = "w", .shape = {4, 6, 8}, .ep_split = true});
    PlacementDraft dst = GridDraft(Sizes{.tp = 2});
    AddTensor(&dst, {.tensor_id = "w", .shape = {4, 6, 8}, .tp_dim = dim});
    ASSERT_OK_AND_ASSIGN(
        auto plan, LogicalTransferPlan::Make(MustBuild(src), MustBuild(dst)));
    EXPECT_EQ(plan.summary().regions, 4u);
    EXPECT_EQ(plan.summary().bytes, 4u * 6 * 8 * 2);
    CheckInvariants(plan);
    // The ep0 -> tp1 region.
    bool found = false;
    for (const auto& r : plan.regions()) {
      const auto& s = plan.source_fragments()[r.source_fragment];
      const auto& t = plan.target_fragments()[r.target_fragment];
      if (s.rank.ep != 0 || t.rank.tp != 1) continue;
      found = true;
      if (dim == 1) {
        EXPECT_EQ(r.overlap_offset, (Dims{0, 3, 0}));
        EXPECT_EQ(r.overlap_shape, (Dims{2, 3, 8}));
        EXPECT_EQ(r.source_base_offset, 48u);
        EXPECT_EQ(r.target_base_offset, 0u);
        EXPECT_EQ(r.inner_bytes, 48u);
        EXPECT_THAT(r.loops, ElementsAre(OuterLoop{2, 96, 48}));
        EXPECT_EQ(r.segments, 2u);
      } else {
        EXPECT_EQ(r.overlap_offset, (Dims{0, 0, 4}));
        EXPECT_EQ(r.overlap_shape, (Dims{2, 6, 4}));
        EXPECT_EQ(r.source_base_offset, 8u);
        EXPECT_EQ(r.target_base_offset, 0u);
        EXPECT_EQ(r.inner_bytes, 8u);
        EXPECT_THAT(r.loops, ElementsAre(OuterLoop{12, 16, 8}));
        EXPECT_EQ(r.segments, 12u);
      }
    }
    EXPECT_TRUE(found);
  }
}

// ---------------------------------------------------------------------------
// Balanced replica choice.

void ExpectBalanced(const LogicalTransferPlan& plan) {
  const PlanSummary& s = plan.summary();
  for (size_t i = 0; i < plan.source_bytes().size(); ++i) {
    EXPECT_GT(plan.source_bytes()[i], 0u)
        << plan.source_participants()[i] << " serves nothing";
  }
  EXPECT_LE(static_cast<double>(s.max_source_bytes),
            s.mean_source_bytes * 1.01);
}

TEST(PlannerTest, BalancesDp2Tp4ToDp1Tp8) {
  PlacementDraft src = GridDraft(Sizes{.dp = 2, .tp = 4});
  AddTensor(&src, {.tensor_id = "w", .shape = {64, 16}, .tp_dim = 0});
  PlacementDraft dst = GridDraft(Sizes{.tp = 8});
  AddTensor(&dst, {.tensor_id = "w", .shape = {64, 16}, .tp_dim = 0});
  ASSERT_OK_AND_ASSIGN(
      auto plan, LogicalTransferPlan::Make(MustBuild(src), MustBuild(dst)));
  EXPECT_EQ(plan.summary().regions, 8u);
  EXPECT_EQ(plan.summary().segments, 8u);
  EXPECT_EQ(plan.source_participants().size(), 8u);
  EXPECT_EQ(plan.summary().source_fragments_used, 8u);
  std::set<int64_t> dps;
  for (const auto& r : plan.regions()) {
    dps.insert(plan.source_fragments()[r.source_fragment].rank.dp);
  }
  EXPECT_EQ(dps, (std::set<int64_t>{0, 1}));
  ExpectBalanced(plan);
  EXPECT_EQ(plan.summary().max_source_bytes, 8u * 16 * 2);
  CheckInvariants(plan);
}

// Equal regions go in region order to the least loaded replica, the first
// on ties, whether the balance's keys pack into one integer (regions of
// kilobytes) or not (regions of 2^62 bytes: 63 bits of size and 2 of
// index): the same choices either way.
TEST(PlannerTest, BalancesEqualRegionsInOrderWhateverTheirSize) {
  for (int64_t row : {int64_t{512}, int64_t{1} << 61}) {
    SCOPED_TRACE(row);
    PlacementDraft src = GridDraft(Sizes{.dp = 2});
    AddTensor(&src, {.tensor_id = "w", .shape = {3, row}});
    PlacementDraft dst = GridDraft(Sizes{.tp = 3});
    AddTensor(&dst, {.tensor_id = "w", .shape = {3, row}, .tp_dim = 0});
    ASSERT_OK_AND_ASSIGN(
        auto plan, LogicalTransferPlan::Make(MustBuild(src), MustBuild(dst)));
    const uint64_t bytes = static_cast<uint64_t>(row) * 2;  // bfloat16
    ASSERT_EQ(plan.regions().size(), 3u);
    std::map<std::string, int64_t> dp_of_target;
    for (const auto& r : plan.regions()) {
      EXPECT_EQ(r.bytes, bytes);
      dp_of_target[std::string(
          plan.target_fragments()[r.target_fragment].participant_id)] =
          plan.source_fragments()[r.source_fragment].rank.dp;
    }
    EXPECT_EQ(
        dp_of_target,
        (std::map<std::string, int64_t>{
            {"p-d0-p0-e0-t0", 0}, {"p-d0-p0-e0-t1", 1}, {"p-d0-p0-e0-t2", 0}}));
    EXPECT_EQ(plan.source_bytes(), (std::vector<uint64_t>{2 * bytes, bytes}));
    CheckInvariants(plan);
  }
}

TEST(PlannerTest, BalancesMultiFragmentReplicas) {
  // Each DP replica holds [16,8] as four row blocks of 1, 3, 5 and 7 rows;
  // the single target reads half of the rows from each replica.
  PlacementDraft src = GridDraft(Sizes{.dp = 2});
  AddTensor(&src, {.tensor_id = "w", .shape = {16, 8}});
  const auto whole = src.fragments;
  ASSERT_EQ(whole.size(), 2u);
  src.fragments.clear();
  for (const auto& f : whole) {
    int64_t row = 0;
    for (int64_t rows : {1, 3, 5, 7}) {
      PlacementFragmentSpec p = f;
      p.global_offset = {row, 0};
      p.local_shape = {rows, 8};
      p.nbytes = static_cast<uint64_t>(rows) * 8 * 2;
      src.fragments.push_back(p);
      row += rows;
    }
  }
  PlacementDraft dst = GridDraft(Sizes{});
  AddTensor(&dst, {.tensor_id = "w", .shape = {16, 8}});
  ASSERT_OK_AND_ASSIGN(
      auto plan, LogicalTransferPlan::Make(MustBuild(src), MustBuild(dst)));
  EXPECT_EQ(plan.summary().regions, 4u);
  EXPECT_EQ(plan.summary().bytes, 256u);
  ASSERT_EQ(plan.source_participants().size(), 2u);
  ExpectBalanced(plan);
  EXPECT_EQ(plan.source_bytes(), (std::vector<uint64_t>{128, 128}));
  CheckInvariants(plan);
}

TEST(PlannerTest, BalancesManyTensorsOverReplicas) {
  // 24 tensors of different sizes, DP4 -> DP1: every replica serves and
  // the largest load stays close to the mean.
  PlacementDraft src = GridDraft(Sizes{.dp = 4, .tp = 2});
  PlacementDraft dst = GridDraft(Sizes{.tp = 2});
  for (int i = 0; i < 24; ++i) {
    const int64_t rows = 64 + 8 * i;
    const std::string id = "t" + std::to_string(100 + i);
    AddTensor(&src, {.tensor_id = id, .shape = {rows, 64}, .tp_dim = 1});
    AddTensor(&dst, {.tensor_id = id, .shape = {rows, 64}, .tp_dim = 0});
  }
  ASSERT_OK_AND_ASSIGN(
      auto plan, LogicalTransferPlan::Make(MustBuild(src), MustBuild(dst)));
  EXPECT_EQ(plan.source_participants().size(), 8u);
  ExpectBalanced(plan);
  CheckInvariants(plan);
}

TEST(PlannerTest, TpReplicatedSourceUsesBothTpRanks) {
  PlacementDraft src = GridDraft(Sizes{.tp = 2});
  AddTensor(&src, {.tensor_id = "w", .shape = {8, 4}, .tp_dim = -1});
  PlacementDraft dst = GridDraft(Sizes{.tp = 2});
  AddTensor(&dst, {.tensor_id = "w", .shape = {8, 4}, .tp_dim = 0});
  ASSERT_OK_AND_ASSIGN(
      auto plan, LogicalTransferPlan::Make(MustBuild(src), MustBuild(dst)));
  EXPECT_EQ(plan.summary().regions, 2u);
  std::set<int64_t> tps;
  for (const auto& r : plan.regions()) {
    tps.insert(plan.source_fragments()[r.source_fragment].rank.tp);
  }
  EXPECT_EQ(tps, (std::set<int64_t>{0, 1}));
  ExpectBalanced(plan);
  EXPECT_EQ(plan.source_bytes(), (std::vector<uint64_t>{32, 32}));
  CheckInvariants(plan);
}

TEST(PlannerTest, Deterministic) {
  auto make = [] {
    PlacementDraft src = GridDraft(Sizes{.dp = 2, .pp = 2, .tp = 2});
    PlacementDraft dst = GridDraft(Sizes{.dp = 3, .tp = 4});
    for (int l = 0; l < 4; ++l) {
      const std::string id = "layers." + std::to_string(l) + ".w";
      AddTensor(&src, {.tensor_id = id,
                       .shape = {8, 12},
                       .tp_dim = l % 2,
                       .pp_owner = l / 2,
                       .layer_id = l});
      AddTensor(&dst, {.tensor_id = id,
                       .shape = {8, 12},
                       .tp_dim = 1 - l % 2,
                       .layer_id = l});
    }
    return std::make_pair(MustBuild(src), MustBuild(dst));
  };
  auto [s1, t1] = make();
  auto [s2, t2] = make();
  auto a = LogicalTransferPlan::Make(s1, t1);
  auto b = LogicalTransferPlan::Make(s1, t1);
  auto c = LogicalTransferPlan::Make(s2, t2);
  ASSERT_OK(a);
  ASSERT_OK(b);
  ASSERT_OK(c);
  EXPECT_EQ(a->regions(), b->regions());
  testing::ExpectSamePlan(*c, *a);
  CheckInvariants(*a);
  // On any number of threads, an absurd one included, the same plan.
  for (uint32_t threads : {2u, 7u, UINT32_MAX}) {
    SCOPED_TRACE(threads);
    PlanOptions options;
    options.threads = threads;
    auto d = LogicalTransferPlan::Make(s2, t2, options);
    ASSERT_OK(d);
    testing::ExpectSamePlan(*d, *a);
  }
}

// The regions are put in step 7's order at their first reading (a plan
// only summarised never orders them): readers on several threads and
// copies of the plan all see one vector, ordered once, equal to a plan
// read at once.
TEST(PlannerTest, RegionsOrderedOnceUnderConcurrentFirstReads) {
  PlacementDraft src = GridDraft(Sizes{.dp = 2, .tp = 4});
  PlacementDraft dst = GridDraft(Sizes{.tp = 3});
  for (int l = 0; l < 6; ++l) {
    const std::string id = "layers." + std::to_string(l) + ".w";
    AddTensor(&src, {.tensor_id = id, .shape = {12, 24}, .tp_dim = l % 2});
    AddTensor(&dst, {.tensor_id = id, .shape = {12, 24}, .tp_dim = 1 - l % 2});
  }
  const WeightPlacementManifest s = MustBuild(src), t = MustBuild(dst);
  auto reference = LogicalTransferPlan::Make(s, t);
  ASSERT_OK(reference);
  const std::vector<TransferRegion> expected = reference->regions();
  auto plan = LogicalTransferPlan::Make(s, t);
  ASSERT_OK(plan);
  EXPECT_EQ(plan->summary().regions, expected.size());
  std::vector<LogicalTransferPlan> copies(4, *plan);
  std::vector<const std::vector<TransferRegion>*> seen(copies.size());
  std::vector<std::thread> readers;
  for (size_t i = 0; i < copies.size(); ++i) {
    readers.emplace_back([&, i] { seen[i] = &copies[i].regions(); });
  }
  for (auto& r : readers) r.join();
  for (const auto* regions : seen) EXPECT_EQ(regions, &plan->regions());
  EXPECT_EQ(plan->regions(), expected);
  // Target fragments in id order, where the tensors interleave: not the
  // tensor by tensor order in which the regions are made.
  const auto& tf = plan->target_fragments();
  bool interleaved = false;
  for (size_t i = 1; i < expected.size(); ++i) {
    EXPECT_LE(tf[expected[i - 1].target_fragment].order,
              tf[expected[i].target_fragment].order);
    interleaved |= expected[i].tensor < expected[i - 1].tensor;
  }
  EXPECT_TRUE(interleaved);
  CheckInvariants(*plan);
}

// ---------------------------------------------------------------------------
// Local targets.

TEST(PlannerTest, LocalTargetPlansOnlyItsFragments) {
  PlacementDraft src = GridDraft(Sizes{.tp = 4});
  PlacementDraft dst = GridDraft(Sizes{.tp = 8});
  AddTensor(&src, {.tensor_id = "a", .shape = {64, 16}, .tp_dim = 0});
  AddTensor(&dst, {.tensor_id = "a", .shape = {64, 16}, .tp_dim = 1});
  AddTensor(&src, {.tensor_id = "b",
                   .shape = {8},
                   .dtype = "uint8",
                   .itemsize = 1,
                   .tp_dim = 0});
  AddTensor(&dst, {.tensor_id = "b",
                   .shape = {8},
                   .dtype = "uint8",
                   .itemsize = 1,
                   .tp_dim = 0});
  const auto source = MustBuild(src);
  const auto target = MustBuild(dst);
  ASSERT_OK_AND_ASSIGN(auto full, LogicalTransferPlan::Make(source, target));
  uint64_t total = 0;
  for (const auto& part : target.parts()) {
    SCOPED_TRACE(part.participant_id());
    PlanOptions options;
    options.target_participant_id = part.participant_id();
    ASSERT_OK_AND_ASSIGN(auto plan,
                         LogicalTransferPlan::Make(source, target, options));
    uint64_t want = 0;
    std::set<std::string> ids;
    for (const auto& f : part.fragments()) {
      want += f.nbytes();
      ids.insert(f.placement_fragment_id());
    }
    EXPECT_EQ(plan.summary().bytes, want);
    EXPECT_THAT(plan.target_participants(), ElementsAre(part.participant_id()));
    EXPECT_EQ(plan.target_fragments().size(), part.fragments().size());
    for (const auto& r : plan.regions()) {
      const auto& t = plan.target_fragments()[r.target_fragment];
      EXPECT_EQ(t.participant_id, part.participant_id());
      EXPECT_TRUE(ids.count(std::string(t.fragment_id))) << t.fragment_id;
    }
    CheckInvariants(plan);
    total += plan.summary().bytes;
  }
  EXPECT_EQ(total, full.summary().bytes);
}

TEST(PlannerTest, LocalTargetUnknownParticipant) {
  PlacementDraft src = GridDraft(Sizes{.tp = 2});
  AddTensor(&src, {.tensor_id = "w", .shape = {8}, .tp_dim = 0});
  PlanOptions options;
  options.target_participant_id = "nobody";
  auto plan =
      LogicalTransferPlan::Make(MustBuild(src), MustBuild(src), options);
  ASSERT_THAT(plan, StatusIs(StatusCode::kInvalidArgument,
                             "unknown target participant: nobody"));
}

// ---------------------------------------------------------------------------
// Errors.

// A TP2 placement of tensors "a" ([8,4]) and "b" ([8]).
PlacementDraft TwoTensors() {
  PlacementDraft d = GridDraft(Sizes{.tp = 2});
  AddTensor(&d, {.tensor_id = "a", .shape = {8, 4}, .tp_dim = 0});
  AddTensor(&d, {.tensor_id = "b", .shape = {8}, .tp_dim = 0});
  return d;
}

Status PlanStatus(const PlacementDraft& src, const PlacementDraft& dst,
                  const PlanOptions& options = {}) {
  return LogicalTransferPlan::Make(MustBuild(src), MustBuild(dst), options)
      .status();
}

TEST(PlannerTest, ErrorResourceIdDiffers) {
  PlacementDraft src = TwoTensors();
  PlacementDraft dst = TwoTensors();
  src.header.resource_id = "a";
  dst.header.resource_id = "b";
  EXPECT_EQ(
      PlanStatus(src, dst),
      Status::InvalidArgument("source and target resource_id differ: a vs b"));
}

TEST(PlannerTest, ErrorRevisionDiffers) {
  PlacementDraft src = TwoTensors();
  PlacementDraft dst = TwoTensors();
  dst.header.revision = "step-2";
  EXPECT_EQ(PlanStatus(src, dst),
            Status::InvalidArgument(
                "source and target revision differ: step-1 vs step-2"));
}

TEST(PlannerTest, ErrorWeightGenerationDiffers) {
  PlacementDraft src = TwoTensors();
  PlacementDraft dst = TwoTensors();
  src.header.weight_generation = 3;
  dst.header.weight_generation = 4;
  EXPECT_EQ(PlanStatus(src, dst),
            Status::InvalidArgument(
                "source and target weight_generation differ: 3 vs 4"));
}

TEST(PlannerTest, PlacementSetIdMayDiffer) {
  PlacementDraft src = TwoTensors();
  PlacementDraft dst = TwoTensors();
  dst.header.placement_set_id = "other-set";
  EXPECT_OK(PlanStatus(src, dst));
}

TEST(PlannerTest, ErrorMissingTensors) {
  PlacementDraft src = TwoTensors();
  PlacementDraft dst = GridDraft(Sizes{.tp = 2});
  AddTensor(&dst, {.tensor_id = "a", .shape = {8, 4}, .tp_dim = 0});
  EXPECT_EQ(PlanStatus(src, dst),
            Status::InvalidArgument("target manifests are missing tensors: b"));
}

TEST(PlannerTest, ErrorUnknownTensors) {
  PlacementDraft src = GridDraft(Sizes{.tp = 2});
  AddTensor(&src, {.tensor_id = "a", .shape = {8, 4}, .tp_dim = 0});
  PlacementDraft dst = TwoTensors();
  EXPECT_EQ(
      PlanStatus(src, dst),
      Status::InvalidArgument("target manifests contain unknown tensors: b"));
}

TEST(PlannerTest, LocalTargetMayUseSubsetOfSourceTensors) {
  // A local target only needs its own tensors; the source may have more.
  PlacementDraft src = TwoTensors();
  PlacementDraft dst = GridDraft(Sizes{.tp = 2});
  AddTensor(&dst, {.tensor_id = "a", .shape = {8, 4}, .tp_dim = 1});
  PlanOptions options;
  options.target_participant_id = "p-d0-p0-e0-t1";
  ASSERT_OK_AND_ASSIGN(auto plan, LogicalTransferPlan::Make(
                                      MustBuild(src), MustBuild(dst), options));
  EXPECT_THAT(plan.tensors(), ElementsAre("a"));
  EXPECT_EQ(plan.summary().bytes, 32u);
  CheckInvariants(plan);
}

TEST(PlannerTest, ErrorLayoutMismatch) {
  PlacementDraft src = GridDraft(Sizes{.tp = 2});
  AddTensor(&src, {.tensor_id = "w", .shape = {8, 4}, .tp_dim = 0});
  PlacementDraft dst = GridDraft(Sizes{.tp = 2});
  AddTensor(&dst, {.tensor_id = "w",
                   .shape = {8, 4},
                   .tp_dim = 0,
                   .layout_fingerprint = "bfloat16:swizzled"});
  const std::string source_fp = src.tensors[0].layout_fingerprint;
  EXPECT_EQ(
      PlanStatus(src, dst),
      Status::InvalidArgument("layout mismatch for tensor w: source \"" +
                              source_fp + "\", target \"bfloat16:swizzled\""));
}

TEST(PlannerTest, ErrorDescriptorMismatch) {
  const TensorLayout base{.tensor_id = "w",
                          .shape = {8, 4},
                          .tp_dim = 0,
                          .layout_fingerprint = "fp"};
  // Each message names the first differing field and both values.
  struct Case {
    const char* what;
    TensorLayout target;
    std::string difference;
  };
  std::vector<Case> cases;
  {
    TensorLayout l = base;
    l.shape = {8, 8};
    cases.push_back(
        {"shape", l, "global_shape [8, 4] (source) vs [8, 8] (target)"});
  }
  {
    TensorLayout l = base;
    l.dtype = "float16";
    cases.push_back(
        {"dtype", l, "dtype bfloat16 (source) vs float16 (target)"});
  }
  {
    TensorLayout l = base;
    l.dtype = "float32";
    l.itemsize = 4;
    cases.push_back(
        {"itemsize", l, "dtype bfloat16 (source) vs float32 (target)"});
  }
  {
    TensorLayout l = base;
    l.layer_id = 3;
    cases.push_back({"layer_id", l, "layer_id none (source) vs 3 (target)"});
  }
  {
    TensorLayout l = base;
    l.expert_id = 1;
    cases.push_back({"expert_id", l, "expert_id none (source) vs 1 (target)"});
  }
  for (const auto& c : cases) {
    SCOPED_TRACE(c.what);
    PlacementDraft src = GridDraft(Sizes{.tp = 2});
    AddTensor(&src, base);
    PlacementDraft dst = GridDraft(Sizes{.tp = 2});
    AddTensor(&dst, c.target);
    EXPECT_EQ(PlanStatus(src, dst),
              Status::InvalidArgument("tensor descriptor mismatch: w: " +
                                      c.difference));
  }
}

TEST(PlannerTest, ParallelAxesMayDiffer) {
  // Only the logical descriptor must match; the parallel layout is what
  // the plan changes.
  PlacementDraft src = GridDraft(Sizes{.ep = 2, .tp = 2});
  AddTensor(&src,
            {.tensor_id = "w", .shape = {4, 8}, .tp_dim = 1, .ep_split = true});
  PlacementDraft dst = GridDraft(Sizes{.dp = 2, .pp = 2});
  AddTensor(&dst, {.tensor_id = "w", .shape = {4, 8}, .pp_owner = 1});
  ASSERT_OK_AND_ASSIGN(
      auto plan, LogicalTransferPlan::Make(MustBuild(src), MustBuild(dst)));
  EXPECT_EQ(plan.summary().bytes, 2u * 4 * 8 * 2);
  EXPECT_EQ(plan.summary().regions, 8u);
  CheckInvariants(plan);
}

// TP4 -> TP8 of [64,16]: 8 regions.
std::pair<PlacementDraft, PlacementDraft> EightRegions() {
  PlacementDraft src = GridDraft(Sizes{.tp = 4});
  AddTensor(&src, {.tensor_id = "w", .shape = {64, 16}, .tp_dim = 0});
  PlacementDraft dst = GridDraft(Sizes{.tp = 8});
  AddTensor(&dst, {.tensor_id = "w", .shape = {64, 16}, .tp_dim = 0});
  return {src, dst};
}

TEST(PlannerTest, ErrorMaxTransferRegions) {
  auto [src, dst] = EightRegions();
  PlanOptions options;
  options.limits.max_transfer_regions = 3;
  EXPECT_EQ(PlanStatus(src, dst, options),
            Status::ResourceExhausted(
                "plan exceeds max_transfer_regions: more than 3 regions (at "
                "tensor w)"));
  options.limits.max_transfer_regions = 8;
  EXPECT_OK(PlanStatus(src, dst, options));
}

TEST(PlannerTest, ErrorMaxOperations) {
  auto [src, dst] = EightRegions();
  PlanOptions options;
  options.limits.max_operations = 7;
  EXPECT_EQ(PlanStatus(src, dst, options),
            Status::ResourceExhausted("plan exceeds max_operations: 8 > 7"));
  options.limits.max_operations = 8;
  EXPECT_OK(PlanStatus(src, dst, options));
}

TEST(PlannerTest, ErrorDpOwnedAmbiguous) {
  // Two complete DP owners of one DP-owned tensor.
  PlacementDraft src = GridDraft(Sizes{.dp = 2});
  AddTensor(&src, {.tensor_id = "w", .shape = {8}});
  src.tensors[0].parallel_axes = {OwnershipAxis(AxisKind::kDp)};
  PlacementDraft dst = GridDraft(Sizes{});
  AddTensor(&dst, {.tensor_id = "w", .shape = {8}});
  EXPECT_EQ(PlanStatus(src, dst),
            Status::InvalidArgument(
                "DP-owned source tensor has ambiguous declared owners: w"));
}

TEST(PlannerTest, DpOwnedTensorRoutesThroughItsOwner) {
  PlacementDraft src = GridDraft(Sizes{.dp = 2, .tp = 2});
  AddTensor(&src, {.tensor_id = "w", .shape = {8, 4}, .tp_dim = 0});
  src.tensors[0].parallel_axes = {OwnershipAxis(AxisKind::kDp),
                                  *SplitAxis(AxisKind::kTp, 0)};
  std::erase_if(src.fragments, [](const auto& f) { return f.rank.dp != 1; });
  PlacementDraft dst = GridDraft(Sizes{.tp = 2});
  AddTensor(&dst, {.tensor_id = "w", .shape = {8, 4}, .tp_dim = 1});
  ASSERT_OK_AND_ASSIGN(
      auto plan, LogicalTransferPlan::Make(MustBuild(src), MustBuild(dst)));
  EXPECT_EQ(plan.summary().regions, 4u);
  for (const auto& r : plan.regions()) {
    EXPECT_EQ(plan.source_fragments()[r.source_fragment].rank.dp, 1);
  }
  CheckInvariants(plan);
}

// One DP owner, replicated over TP: one owner, two interchangeable replica
// groups, not an ambiguity.
TEST(PlannerTest, DpOwnedTensorReplicatedOverTpIsNotAmbiguous) {
  PlacementDraft src = GridDraft(Sizes{.dp = 2, .tp = 2});
  AddTensor(&src, {.tensor_id = "w", .shape = {8, 4}});
  src.tensors[0].parallel_axes = {OwnershipAxis(AxisKind::kDp),
                                  ReplicatedAxis(AxisKind::kTp)};
  std::erase_if(src.fragments, [](const auto& f) { return f.rank.dp != 1; });
  PlacementDraft dst = GridDraft(Sizes{.tp = 2});
  AddTensor(&dst, {.tensor_id = "w", .shape = {8, 4}, .tp_dim = 1});
  ASSERT_OK_AND_ASSIGN(
      auto plan, LogicalTransferPlan::Make(MustBuild(src), MustBuild(dst)));
  EXPECT_EQ(plan.summary().bytes, 64u);
  for (const auto& r : plan.regions()) {
    EXPECT_EQ(plan.source_fragments()[r.source_fragment].rank.dp, 1);
  }
  ExpectBalanced(plan);
  CheckInvariants(plan);
}

// ---------------------------------------------------------------------------
// Routes and summaries.

TEST(PlannerTest, PipelineStagesFormDistinctRoutes) {
  PlacementDraft src = GridDraft(Sizes{});
  AddTensor(&src, {.tensor_id = "a", .shape = {4}});
  AddTensor(&src, {.tensor_id = "b", .shape = {4}});
  PlacementDraft dst = src;
  src.fragments[0].pipeline_stage_id = 0;
  src.fragments[1].pipeline_stage_id = 1;
  dst.fragments[0].pipeline_stage_id = 2;
  dst.fragments[1].pipeline_stage_id = 3;
  ASSERT_OK_AND_ASSIGN(
      auto plan, LogicalTransferPlan::Make(MustBuild(src), MustBuild(dst)));
  EXPECT_THAT(plan.pipeline_routes(),
              ElementsAre(PipelineRoute{0, 0, 0, 2, 1, 8},
                          PipelineRoute{0, 1, 0, 3, 1, 8}));
}

TEST(PlannerTest, TrafficAndParticipantBytesSumToPlanBytes) {
  PlacementDraft src = GridDraft(Sizes{.dp = 2, .pp = 2, .ep = 2, .tp = 2});
  PlacementDraft dst = GridDraft(Sizes{.dp = 1, .pp = 2, .ep = 1, .tp = 4});
  for (int l = 0; l < 4; ++l) {
    const std::string id = "layers." + std::to_string(l) + ".experts";
    AddTensor(&src, {.tensor_id = id,
                     .shape = {4, 8, 6},
                     .tp_dim = 1,
                     .ep_split = true,
                     .pp_owner = l / 2,
                     .layer_id = l});
    AddTensor(&dst, {.tensor_id = id,
                     .shape = {4, 8, 6},
                     .tp_dim = 0,
                     .pp_owner = l % 2,
                     .layer_id = l});
  }
  ASSERT_OK_AND_ASSIGN(
      auto plan, LogicalTransferPlan::Make(MustBuild(src), MustBuild(dst)));
  EXPECT_EQ(plan.summary().bytes, 4u * 4 * 8 * 6 * 2);
  CheckInvariants(plan);
  uint64_t traffic = 0;
  for (const auto& e : plan.traffic()) traffic += e.bytes;
  EXPECT_EQ(traffic, plan.summary().bytes);
  // Routes: layer l from pp l/2 to pp l%2.
  std::set<std::pair<int64_t, int64_t>> routes;
  for (const auto& r : plan.pipeline_routes()) {
    routes.insert({r.source_pp, r.target_pp});
    EXPECT_EQ(r.source_stage, -1);
    EXPECT_EQ(r.target_stage, -1);
  }
  EXPECT_EQ(routes, (std::set<std::pair<int64_t, int64_t>>{
                        {0, 0}, {0, 1}, {1, 0}, {1, 1}}));
}

TEST(PlannerTest, SummaryJsonHasKeys) {
  auto [src, dst] = EightRegions();
  ASSERT_OK_AND_ASSIGN(
      auto plan, LogicalTransferPlan::Make(MustBuild(src), MustBuild(dst)));
  const std::string json = PlanSummaryToJson(plan);
  simdjson::dom::parser parser;
  simdjson::dom::element root;
  ASSERT_EQ(parser.parse(json).get(root), simdjson::SUCCESS) << json;
  const PlanSummary& s = plan.summary();
  for (const char* key :
       {"regions", "segments", "operations", "bytes", "max_source_bytes",
        "mean_source_bytes", "max_target_bytes"}) {
    simdjson::dom::element v;
    EXPECT_EQ(root[key].get(v), simdjson::SUCCESS) << key;
  }
  EXPECT_EQ(uint64_t(root["regions"]), s.regions);
  EXPECT_EQ(uint64_t(root["segments"]), s.segments);
  EXPECT_EQ(uint64_t(root["operations"]), s.operations);
  EXPECT_EQ(uint64_t(root["bytes"]), s.bytes);
  EXPECT_EQ(uint64_t(root["max_source_bytes"]), s.max_source_bytes);
  EXPECT_EQ(uint64_t(root["mean_source_bytes"]),
            static_cast<uint64_t>(s.mean_source_bytes + 0.5));
  EXPECT_EQ(uint64_t(root["max_target_bytes"]), s.max_target_bytes);
  EXPECT_EQ(s.bytes, 2048u);
  EXPECT_EQ(s.max_source_bytes, 512u);
  EXPECT_EQ(s.max_target_bytes, 256u);
  EXPECT_DOUBLE_EQ(s.mean_source_bytes, 512.0);
  // Per-participant tables add up too.
  uint64_t src_total = 0;
  for (simdjson::dom::element p :
       simdjson::dom::array(root["source_participants"])) {
    src_total += uint64_t(p["bytes"]);
  }
  EXPECT_EQ(src_total, s.bytes);
  uint64_t traffic_total = 0;
  for (simdjson::dom::element p : simdjson::dom::array(root["traffic"])) {
    traffic_total += uint64_t(p["bytes"]);
  }
  EXPECT_EQ(traffic_total, s.bytes);
}

TEST(PlannerTest, DescribeRegion) {
  PlacementDraft src = GridDraft(Sizes{.ep = 2});
  AddTensor(&src, {.tensor_id = "w", .shape = {4, 6, 8}, .ep_split = true});
  PlacementDraft dst = GridDraft(Sizes{.tp = 2});
  AddTensor(&dst, {.tensor_id = "w", .shape = {4, 6, 8}, .tp_dim = 2});
  ASSERT_OK_AND_ASSIGN(
      auto plan, LogicalTransferPlan::Make(MustBuild(src), MustBuild(dst)));
  std::set<std::string> lines;
  for (const auto& r : plan.regions()) lines.insert(plan.DescribeRegion(r));
  EXPECT_TRUE(
      lines.count("w [0,0,4]+[2,6,4]: p-d0-p0-e0-t0@8 -> "
                  "p-d0-p0-e0-t1@0, inner 8 x(12,16,8)"))
      << ::testing::PrintToString(lines);
}

}  // namespace
}  // namespace reshard

namespace reshard {
namespace {

TEST(PlannerLocalTargetTest, ParticipantWithoutFragmentsIsRejected) {
  auto src = testing::GridDraft({1, 2, 1, 1});
  testing::AddTensor(&src, {.tensor_id = "w", .shape = {8}, .pp_owner = 0});
  auto dst = src;
  auto plan = LogicalTransferPlan::Make(
      *src.Build(), *dst.Build(), {.target_participant_id = "p-d0-p1-e0-t0"});
  EXPECT_EQ(plan.status().message(),
            "local target manifest is missing fragments: participant "
            "p-d0-p1-e0-t0 holds none");
}

// Two bfloat16 tensors of 2^62 elements each: every tensor and fragment
// fits in 64 bits, their sum does not. Refused before planning, naming the
// fragment, tensor and participant where the sum overflows.
TEST(PlannerTest, ByteTotalsPastTwoToTheSixtyFourAreRefused) {
  PlacementDraft d = GridDraft(Sizes{});
  AddTensor(&d, {.tensor_id = "a", .shape = {int64_t{1} << 62}});
  AddTensor(&d, {.tensor_id = "b", .shape = {int64_t{1} << 62}});
  const WeightPlacementManifest m = MustBuild(d);
  const Status st = LogicalTransferPlan::Make(m, m).status();
  EXPECT_EQ(st.code(), StatusCode::kOutOfRange);
  EXPECT_THAT(st.message(),
              ::testing::StartsWith("plan bytes exceed 2^64 - 1: the target "
                                    "fragments' nbytes overflow at fragment "));
  EXPECT_THAT(st.message(),
              ::testing::EndsWith("(tensor b, participant p-d0-p0-e0-t0)"));
}

}  // namespace
}  // namespace reshard
