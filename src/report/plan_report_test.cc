// The HTML report and the standalone heatmap (reshard/plan_report.h):
// contents against the plan, the pinned script, escaping of hostile ids,
// the explorer's sharing and budget, refusals of bad inputs.

#include "reshard/plan_report.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <openssl/evp.h>
#include <simdjson.h>

#include <chrono>
#include <cmath>
#include <cstdlib>

#include "report/report_assets.h"
#include "testing/placement_builders.h"
#include "testing/status_testing.h"
#include "util/sha256.h"

namespace reshard {
namespace {

using ::reshard::testing::AddTensor;
using ::reshard::testing::GridDraft;
using ::reshard::testing::PlacementDraft;
using ::reshard::testing::ReadTestData;
using ::reshard::testing::Sizes;
using ::reshard::testing::StatusIs;
using ::testing::HasSubstr;
using ::testing::Not;

WeightPlacementManifest MustBuild(const PlacementDraft& d) {
  auto m = d.Build();
  if (!m.ok()) {
    ADD_FAILURE() << "draft does not build: " << m.status().ToString();
    std::abort();
  }
  return std::move(m).ValueOrDie();
}

size_t Count(const std::string& haystack, const std::string& needle) {
  size_t n = 0;
  for (size_t at = haystack.find(needle); at != std::string::npos;
       at = haystack.find(needle, at + needle.size())) {
    ++n;
  }
  return n;
}

// The text between `open` and the next `close` after it.
std::string Between(const std::string& s, const std::string& open,
                    const std::string& close) {
  const size_t begin = s.find(open);
  if (begin == std::string::npos) return "";
  const size_t from = begin + open.size();
  return s.substr(from, s.find(close, from) - from);
}

struct Scenario {
  WeightPlacementManifest source;
  WeightPlacementManifest target;
  LogicalTransferPlan plan;
};

Scenario FourAxis() {
  auto src =
      WeightPlacementFromJson(ReadTestData("scenarios/four_axis_source.json"));
  auto dst =
      WeightPlacementFromJson(ReadTestData("scenarios/four_axis_target.json"));
  if (!src.ok() || !dst.ok()) std::abort();
  auto plan = LogicalTransferPlan::Make(*src, *dst);
  if (!plan.ok()) std::abort();
  return {*src, *dst, *plan};
}

PlanReportOptions Gbps(double gbps) {
  PlanReportOptions o;
  o.gbps = gbps;
  return o;
}

TEST(PlanReportTest, GoldenScenarioHasEveryPartWithThePlansNumbers) {
  const Scenario s = FourAxis();
  ASSERT_OK_AND_ASSIGN(
      std::string html,
      RenderPlanReportHtml(s.plan, PlanReportLayouts::Of(s.source, s.target),
                           Gbps(25)));
  // Header cards: the summary, exactly.
  EXPECT_THAT(html, HasSubstr("data-key=\"bytes\" data-value=\"4096\""));
  EXPECT_THAT(html, HasSubstr("data-key=\"regions\" data-value=\"1024\""));
  EXPECT_THAT(html,
              HasSubstr("data-key=\"max_source_bytes\" data-value=\"32\""));
  EXPECT_THAT(html,
              HasSubstr("data-key=\"mean_source_bytes\" data-value=\"32\""));
  EXPECT_THAT(html,
              HasSubstr("data-key=\"max_target_bytes\" data-value=\"16\""));
  // 32 bytes of the busiest participant at 25 GB/s.
  EXPECT_THAT(html, HasSubstr("data-key=\"estimate_seconds\" "
                              "data-value=\"1.28e-09\""));
  // The layouts: DP2/PP2/EP8/TP4 -> DP4/PP4/EP2/TP8.
  EXPECT_THAT(html, HasSubstr("<tr data-side=\"source\"><td class=\"l\">source"
                              "</td><td class=\"l\">placement</td><td>4</td>"
                              "<td>2</td><td>8</td><td>2</td><td>128</td>"));
  EXPECT_THAT(html, HasSubstr("<tr data-side=\"target\"><td class=\"l\">target"
                              "</td><td class=\"l\">placement</td><td>8</td>"
                              "<td>4</td><td>2</td><td>4</td><td>256</td>"));
  // One heatmap cell per traffic entry, one bar per participant, one route
  // path per route.
  EXPECT_EQ(Count(html, "<rect class=\"cell\""), s.plan.traffic().size());
  EXPECT_EQ(Count(html, "<rect class=\"bar\""),
            s.plan.source_participants().size() +
                s.plan.target_participants().size());
  EXPECT_EQ(Count(html, "<path class=\"route\""),
            s.plan.pipeline_routes().size());
  for (const char* id :
       {"id=\"heatmap-svg\"", "id=\"load-source\"", "id=\"load-target\"",
        "id=\"tx-list\"", "id=\"tx-source\"", "id=\"routes-table\"",
        "id=\"plan-data\""}) {
    EXPECT_THAT(html, HasSubstr(id));
  }
  // Same inputs, same bytes.
  ASSERT_OK_AND_ASSIGN(
      std::string again,
      RenderPlanReportHtml(s.plan, PlanReportLayouts::Of(s.source, s.target),
                           Gbps(25)));
  EXPECT_EQ(html, again);
}

TEST(PlanReportTest, OnlyThePagesOwnScriptMayRunAndNothingMayBeFetched) {
  const Scenario s = FourAxis();
  ASSERT_OK_AND_ASSIGN(
      std::string html,
      RenderPlanReportHtml(s.plan, PlanReportLayouts::Of(s.source, s.target),
                           Gbps(1)));
  const std::string csp =
      Between(html, "http-equiv=\"Content-Security-Policy\" content=\"", "\"");
  internal::Sha256 h;
  h.Update(internal::kReportJs);
  const auto digest = h.Finish();
  unsigned char b64[48];
  const int n = EVP_EncodeBlock(b64, digest.data(), digest.size());
  EXPECT_EQ(csp, "default-src 'none'; script-src 'sha256-" +
                     std::string(reinterpret_cast<char*>(b64), n) +
                     "'; style-src 'unsafe-inline'; base-uri 'none'; "
                     "form-action 'none'");
  EXPECT_EQ(Between(html, "</script><script>", "</script>"),
            std::string(internal::kReportJs));
  EXPECT_EQ(Count(html, "<script"), 2u);
  // No URL but the SVG namespace (a name, never fetched), no source
  // attribute of any element.
  EXPECT_EQ(Count(html, "://"), Count(html, "http://www.w3.org/2000/svg"));
  EXPECT_THAT(html, Not(HasSubstr(" src=")));
}

TEST(PlanReportTest, HostileTensorIdsAndTitlesAreEscapedEverywhere) {
  const std::string evil =
      std::string("</script><script>alert(1)</script><!--\x01\x1b[2J") +
      "\xe2\x80\xae\"'&";
  PlacementDraft src = GridDraft(Sizes{.tp = 2});
  AddTensor(&src, {.tensor_id = evil, .shape = {4, 4}, .tp_dim = 0});
  PlacementDraft dst = GridDraft(Sizes{.tp = 2});
  AddTensor(&dst, {.tensor_id = evil, .shape = {4, 4}, .tp_dim = 1});
  const auto source = MustBuild(src);
  const auto target = MustBuild(dst);
  ASSERT_OK_AND_ASSIGN(auto plan, LogicalTransferPlan::Make(source, target));
  PlanReportOptions options = Gbps(10);
  options.title = "<marquee>" + evil;
  ASSERT_OK_AND_ASSIGN(
      std::string html,
      RenderPlanReportHtml(plan, PlanReportLayouts::Of(source, target),
                           options));
  EXPECT_EQ(Count(html, "<script"), 2u);
  EXPECT_THAT(html, Not(HasSubstr("alert(1)</script>")));
  EXPECT_THAT(html, Not(HasSubstr("<!--")));
  EXPECT_THAT(html, Not(HasSubstr("\x01")));
  EXPECT_THAT(html, Not(HasSubstr("\x1b")));
  EXPECT_THAT(html, Not(HasSubstr("<marquee>")));
  EXPECT_THAT(html,
              HasSubstr("<title>reshard plan: &lt;marquee&gt;&lt;/script&gt;"
                        "&lt;script&gt;alert(1)&lt;/script&gt;&lt;!--"
                        "\\x01\\e[2J\\u{202e}&quot;&#39;&amp;</title>"));
  // In the data the id is JSON with every < > & escaped.
  EXPECT_THAT(html, HasSubstr("\"\\u003c/script\\u003e\\u003cscript\\u003e"
                              "alert(1)\\u003c/script\\u003e\\u003c!--\\u0001"
                              "\\u001b[2J\\u202e\\\"'\\u0026\""));
}

// The embedded data (#plan-data), parsed.
simdjson::dom::element Data(simdjson::dom::parser& parser,
                            const std::string& html, std::string* storage) {
  *storage = Between(html, "id=\"plan-data\">", "</script>");
  return parser.parse(*storage);
}

TEST(PlanReportTest, ExplorerSharesEqualLayoutsAndKeepsToItsBudget) {
  PlacementDraft src = GridDraft(Sizes{.pp = 2, .tp = 2});
  PlacementDraft dst = GridDraft(Sizes{.tp = 4});
  for (int layer = 0; layer < 4; ++layer) {
    const std::string id = "layers." + std::to_string(layer) + ".w";
    AddTensor(&src, {.tensor_id = id,
                     .shape = {8, 4},
                     .tp_dim = 0,
                     .pp_owner = layer / 2,
                     .layer_id = layer});
    AddTensor(
        &dst,
        {.tensor_id = id, .shape = {8, 4}, .tp_dim = 1, .layer_id = layer});
  }
  const auto source = MustBuild(src);
  const auto target = MustBuild(dst);
  ASSERT_OK_AND_ASSIGN(auto plan, LogicalTransferPlan::Make(source, target));
  PlanReportOptions options = Gbps(10);
  ASSERT_OK_AND_ASSIGN(
      std::string html,
      RenderPlanReportHtml(plan, PlanReportLayouts::Of(source, target),
                           options));
  simdjson::dom::parser parser;
  std::string json;
  auto explorer = Data(parser, html, &json)["explorer"];
  // Layers 0 and 1 live on pp0, 2 and 3 on pp1: two distinct records.
  EXPECT_EQ(explorer["records"].get_array().size(), 2u);
  EXPECT_EQ(int64_t(explorer["omitted"]), 0);
  std::vector<int64_t> record_of;
  for (auto t : explorer["tensors"].get_array()) {
    record_of.push_back(int64_t(t.at(8)));
    EXPECT_EQ(int64_t(t.at(4)), 64);  // bytes moved
    EXPECT_EQ(int64_t(t.at(5)), 8);   // regions: 2 x 4 boxes
  }
  EXPECT_EQ(record_of, (std::vector<int64_t>{0, 0, 1, 1}));
  // Record 0: 2 source fragments (participant, offset, shape), 4 target
  // fragments, 8 region pairs.
  auto record = explorer["records"].at(0);
  EXPECT_EQ(record["s"].get_array().size(), 2u * 5);
  EXPECT_EQ(record["t"].get_array().size(), 4u * 5);
  EXPECT_EQ(record["r"].get_array().size(), 8u * 2);

  options.max_explorer_items = 14;  // one record: 2 + 4 + 8
  ASSERT_OK_AND_ASSIGN(
      html, RenderPlanReportHtml(plan, PlanReportLayouts::Of(source, target),
                                 options));
  explorer = Data(parser, html, &json)["explorer"];
  EXPECT_EQ(explorer["records"].get_array().size(), 1u);
  EXPECT_EQ(int64_t(explorer["omitted"]), 2);
  record_of.clear();
  for (auto t : explorer["tensors"].get_array()) {
    record_of.push_back(int64_t(t.at(8)));
  }
  EXPECT_EQ(record_of, (std::vector<int64_t>{0, 0, -1, -1}));
}

TEST(PlanReportTest, StandaloneHeatmapTitlesEveryCell) {
  const Scenario s = FourAxis();
  ASSERT_OK_AND_ASSIGN(
      std::string svg,
      RenderTrafficHeatmapSvg(s.plan, PlanReportLayouts::Of(s.source, s.target),
                              PlanReportOptions{}));
  EXPECT_EQ(svg.rfind("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<svg "
                      "xmlns=\"http://www.w3.org/2000/svg\"",
                      0),
            0u);
  EXPECT_EQ(Count(svg, "<rect class=\"cell\""), 1024u);
  EXPECT_EQ(Count(svg, "<title>"), 1024u);
  EXPECT_THAT(svg, HasSubstr("<title>p-d0-p0-e0-t0 -> p-d0-p0-e0-t0: 4 "
                             "bytes, 1 regions</title>"));
  EXPECT_EQ(svg.substr(svg.size() - 7), "</svg>\n");
}

TEST(PlanReportTest, StoredSourceIsDescribedAsARevision) {
  PlacementDraft src = GridDraft(Sizes{.tp = 4});
  AddTensor(&src, {.tensor_id = "w", .shape = {8, 8}, .tp_dim = 0});
  PlacementDraft dst = GridDraft(Sizes{.tp = 2});
  AddTensor(&dst, {.tensor_id = "w", .shape = {8, 8}, .tp_dim = 1});
  const auto source = MustBuild(src);
  const auto target = MustBuild(dst);
  ASSERT_OK_AND_ASSIGN(
      auto stored, StoredWeightManifest::Make(testing::StoredSpecFrom(source)));
  ASSERT_OK_AND_ASSIGN(auto plan,
                       LogicalTransferPlan::MakeFromStored(stored, target));
  ASSERT_OK_AND_ASSIGN(
      std::string html,
      RenderPlanReportHtml(plan, PlanReportLayouts::Of(stored, target),
                           Gbps(10)));
  EXPECT_THAT(html, HasSubstr("<tr data-side=\"source\"><td class=\"l\">"
                              "source</td><td class=\"l\">stored revision"
                              "</td><td>-</td><td>-</td><td>-</td><td>-</td>"
                              "<td>4</td><td>4</td><td>1</td><td>4</td>"
                              "<td class=\"id\">" +
                              stored.manifest_key() + "</td></tr>"));
  EXPECT_EQ(Count(html, "<path class=\"route\""), 1u);
  EXPECT_THAT(html, HasSubstr("<td class=\"l\">store</td>"));
  // The placement it came from is not the plan's source.
  EXPECT_THAT(
      RenderPlanReportHtml(plan, PlanReportLayouts::Of(source, target),
                           Gbps(10)),
      StatusIs(StatusCode::kInvalidArgument,
               "plan report: the plan's source is a stored manifest; pass "
               "exactly that source layout"));
}

TEST(PlanReportTest, RefusesLayoutsThatAreNotThePlans) {
  const Scenario s = FourAxis();
  const Scenario other = [] {
    auto src = WeightPlacementFromJson(
        ReadTestData("scenarios/four_axis_uint8_source.json"));
    auto dst = WeightPlacementFromJson(
        ReadTestData("scenarios/four_axis_uint8_target.json"));
    if (!src.ok() || !dst.ok()) std::abort();
    return Scenario{*src, *dst, *LogicalTransferPlan::Make(*src, *dst)};
  }();
  EXPECT_THAT(
      RenderPlanReportHtml(
          s.plan, PlanReportLayouts::Of(other.source, s.target), Gbps(1)),
      StatusIs(StatusCode::kInvalidArgument,
               "plan report: source layout " + other.source.placement_id() +
                   " is not the plan's source " + s.source.placement_id()));
  EXPECT_THAT(
      RenderTrafficHeatmapSvg(
          s.plan, PlanReportLayouts::Of(s.source, other.target), Gbps(1)),
      StatusIs(StatusCode::kInvalidArgument,
               "plan report: target layout " + other.target.placement_id() +
                   " is not the plan's target " + s.target.placement_id()));
  PlanReportLayouts missing = PlanReportLayouts::Of(s.source, s.target);
  missing.target = nullptr;
  EXPECT_THAT(RenderPlanReportHtml(s.plan, missing, Gbps(1)),
              StatusIs(StatusCode::kInvalidArgument,
                       "plan report: the target layout is missing"));
  missing = PlanReportLayouts::Of(s.source, s.target);
  missing.source = nullptr;
  EXPECT_THAT(RenderPlanReportHtml(s.plan, missing, Gbps(1)),
              StatusIs(StatusCode::kInvalidArgument,
                       "plan report: the plan's source is a placement; pass "
                       "exactly that source layout"));
}

TEST(PlanReportTest, RefusesOptionsOutOfRange) {
  const Scenario s = FourAxis();
  const auto layouts = PlanReportLayouts::Of(s.source, s.target);
  for (double bad : {0.0, -1.0, std::nan(""), 1.0 / 0.0}) {
    EXPECT_THAT(RenderPlanReportHtml(s.plan, layouts, Gbps(bad)),
                StatusIs(StatusCode::kInvalidArgument,
                         ::testing::StartsWith(
                             "plan report: gbps must be a positive finite "
                             "number, got ")));
  }
  EXPECT_THAT(RenderPlanReportHtml(s.plan, layouts, Gbps(0)),
              StatusIs(StatusCode::kInvalidArgument,
                       "plan report: gbps must be a positive finite number, "
                       "got 0"));
  PlanReportOptions o = Gbps(1);
  o.max_heatmap_axis = 0;
  EXPECT_THAT(RenderTrafficHeatmapSvg(s.plan, layouts, o),
              StatusIs(StatusCode::kInvalidArgument,
                       "plan report: max_heatmap_axis must be 1..4096, got 0"));
  o.max_heatmap_axis = 4097;
  EXPECT_THAT(RenderPlanReportHtml(s.plan, layouts, o),
              StatusIs(StatusCode::kInvalidArgument,
                       "plan report: max_heatmap_axis must be 1..4096, got "
                       "4097"));
  o.max_heatmap_axis = 512;
  o.max_explorer_items = 0;
  EXPECT_THAT(RenderPlanReportHtml(s.plan, layouts, o),
              StatusIs(StatusCode::kInvalidArgument,
                       "plan report: max_explorer_items must be at least 1"));
}

TEST(PlanReportTest, MemcpyBandwidthIsMeasuredQuickly) {
  const auto t0 = std::chrono::steady_clock::now();
  const double gbps = MeasureMemcpyGbps(std::chrono::milliseconds(20));
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0)
          .count();
  EXPECT_TRUE(std::isfinite(gbps));
  EXPECT_GT(gbps, 0.05);
  // Allocation and first touch of 64 MiB plus the timed copies.
  EXPECT_LT(seconds, 2.0);
}

}  // namespace
}  // namespace reshard
