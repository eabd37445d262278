// The report's model (report/report_model.h): rank order, grouping of
// large sides into heatmap bins, and cells that add up to the plan.

#include "report/report_model.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <map>
#include <numeric>

#include "testing/placement_builders.h"
#include "testing/status_testing.h"

namespace reshard::internal {
namespace {

using ::reshard::testing::AddTensor;
using ::reshard::testing::GridDraft;
using ::reshard::testing::PlacementDraft;
using ::reshard::testing::Sizes;

WeightPlacementManifest MustBuild(const PlacementDraft& d) {
  auto m = d.Build();
  if (!m.ok()) {
    ADD_FAILURE() << "draft does not build: " << m.status().ToString();
    std::abort();
  }
  return std::move(m).ValueOrDie();
}

LogicalTransferPlan MustPlan(const WeightPlacementManifest& s,
                             const WeightPlacementManifest& t) {
  auto plan = LogicalTransferPlan::Make(s, t);
  if (!plan.ok()) {
    ADD_FAILURE() << plan.status().ToString();
    std::abort();
  }
  return std::move(plan).ValueOrDie();
}

std::vector<std::string> DisplayIds(const ReportSide& side,
                                    const std::vector<std::string>& ids) {
  std::vector<std::string> out;
  for (uint32_t p : side.order) out.push_back(ids[p]);
  return out;
}

// Bins must tile the display order and agree with bin_of.
void ExpectBinsTile(const ReportSide& side) {
  uint32_t next = 0;
  for (uint32_t b = 0; b < side.bins.size(); ++b) {
    EXPECT_EQ(side.bins[b].first, next);
    ASSERT_GT(side.bins[b].count, 0u);
    for (uint32_t pos = next; pos < next + side.bins[b].count; ++pos) {
      EXPECT_EQ(side.bin_of[side.order[pos]], b);
    }
    next += side.bins[b].count;
  }
  EXPECT_EQ(next, side.order.size());
}

// Each cell equals the plan's traffic summed over its participants.
void ExpectCellsAreTraffic(const LogicalTransferPlan& plan,
                           const ReportModel& m) {
  std::map<std::pair<uint32_t, uint32_t>, uint64_t> want;
  for (const TrafficEntry& e : plan.traffic()) {
    want[{m.source.bin_of[e.source_participant],
          m.target.bin_of[e.target_participant]}] += e.bytes;
  }
  std::map<std::pair<uint32_t, uint32_t>, uint64_t> got;
  uint64_t regions = 0;
  for (const HeatmapCell& c : m.cells) {
    EXPECT_TRUE(got.emplace(std::make_pair(c.row, c.col), c.bytes).second);
    regions += c.regions;
  }
  EXPECT_EQ(got, want);
  EXPECT_EQ(regions, plan.regions().size());
  EXPECT_EQ(std::accumulate(m.source.regions.begin(), m.source.regions.end(),
                            uint64_t{0}),
            plan.regions().size());
}

TEST(ReportModelTest, ParticipantsInRankOrderNotIdOrder) {
  PlacementDraft src = GridDraft(Sizes{.ep = 16});
  AddTensor(&src, {.tensor_id = "w", .shape = {16, 4}, .ep_split = true});
  PlacementDraft dst = GridDraft(Sizes{.tp = 2});
  AddTensor(&dst, {.tensor_id = "w", .shape = {16, 4}, .tp_dim = 0});
  const auto plan = MustPlan(MustBuild(src), MustBuild(dst));
  const ReportModel m = BuildReportModel(plan, 512);
  std::vector<std::string> want;
  for (int e = 0; e < 16; ++e)
    want.push_back("p-d0-p0-e" + std::to_string(e) + "-t0");
  EXPECT_EQ(DisplayIds(m.source, plan.source_participants()), want);
  EXPECT_EQ(m.source.grouping, "participant");
  ASSERT_EQ(m.source.bins.size(), 16u);
  EXPECT_EQ(m.source.bins[10].label, "p-d0-p0-e10-t0");
  EXPECT_EQ(m.source.bins[10].major, "dp0 pp0");
  // Expert row e (8 bytes) goes to target rank e / 8, one region each.
  ASSERT_EQ(m.cells.size(), 16u);
  for (uint32_t e = 0; e < 16; ++e) {
    EXPECT_EQ(m.cells[e].row, e);
    EXPECT_EQ(m.cells[e].col, e / 8);
    EXPECT_EQ(m.cells[e].bytes, 8u);
    EXPECT_EQ(m.cells[e].regions, 1u);
  }
  ExpectCellsAreTraffic(plan, m);
}

TEST(ReportModelTest, LargeSidesAreGroupedByRankThenRuns) {
  PlacementDraft src = GridDraft(Sizes{.dp = 2, .pp = 2, .ep = 4, .tp = 2});
  AddTensor(&src, {.tensor_id = "w", .shape = {8, 8}, .tp_dim = 0});
  PlacementDraft dst = GridDraft(Sizes{.tp = 4});
  AddTensor(&dst, {.tensor_id = "w", .shape = {8, 8}, .tp_dim = 1});
  const auto plan = MustPlan(MustBuild(src), MustBuild(dst));
  struct Want {
    uint32_t max_axis;
    const char* grouping;
    size_t bins;
    const char* first_label;
  };
  for (const Want& w :
       {Want{32, "participant", 32, "p-d0-p0-e0-t0"},
        Want{16, "dp,pp,ep", 16, "dp0 pp0 ep0"},
        Want{15, "dp,pp", 4, "dp0 pp0"}, Want{2, "dp", 2, "dp0"},
        Want{1, "run of 32", 1, "p-d0-p0-e0-t0 .. p-d1-p1-e3-t1"}}) {
    SCOPED_TRACE(w.max_axis);
    const ReportModel m = BuildReportModel(plan, w.max_axis);
    EXPECT_EQ(m.source.grouping, w.grouping);
    ASSERT_EQ(m.source.bins.size(), w.bins);
    EXPECT_EQ(m.source.bins[0].label, w.first_label);
    ExpectBinsTile(m.source);
    ExpectBinsTile(m.target);
    ExpectCellsAreTraffic(plan, m);
  }
  const ReportModel m = BuildReportModel(plan, 16);
  EXPECT_EQ(m.source.bins[5].label, "dp0 pp1 ep1");
  EXPECT_EQ(m.source.bins[5].count, 2u);
  EXPECT_EQ(m.source.bins[5].major, "dp0 pp1");
}

TEST(ReportModelTest, StoredSourcesHaveNoRanksAndGroupInRuns) {
  PlacementDraft src = GridDraft(Sizes{.tp = 4});
  AddTensor(&src, {.tensor_id = "w", .shape = {8, 8}, .tp_dim = 0});
  PlacementDraft dst = GridDraft(Sizes{.tp = 2});
  AddTensor(&dst, {.tensor_id = "w", .shape = {8, 8}, .tp_dim = 1});
  const auto source = MustBuild(src);
  ASSERT_OK_AND_ASSIGN(
      auto stored, StoredWeightManifest::Make(testing::StoredSpecFrom(source)));
  ASSERT_OK_AND_ASSIGN(
      auto plan, LogicalTransferPlan::MakeFromStored(stored, MustBuild(dst)));
  const ReportModel m = BuildReportModel(plan, 3);
  EXPECT_FALSE(m.source.ranked);
  EXPECT_EQ(m.source.grouping, "run of 2");
  ASSERT_EQ(m.source.bins.size(), 2u);
  EXPECT_EQ(m.source.bins[0].major, "");
  ExpectBinsTile(m.source);
  ExpectCellsAreTraffic(plan, m);
}

}  // namespace
}  // namespace reshard::internal
