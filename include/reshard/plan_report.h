// A plan as something to look at: one self-contained HTML report (header,
// traffic heatmap, per-participant load bars, tensor explorer, pipeline
// routes) and the traffic heatmap alone as SVG. docs/plan-report.md
// describes what each part shows and how large plans are aggregated.
//
// The report is a pure function of the plan, the two layouts it was made
// from and the options: the same inputs give the same bytes. It needs no
// network: CSS, script, data and drawings are inline, and a
// Content-Security-Policy forbids every fetch.

#ifndef RESHARD_PLAN_REPORT_H_
#define RESHARD_PLAN_REPORT_H_

#include <chrono>
#include <cstdint>
#include <string>

#include "reshard/placement.h"
#include "reshard/plan.h"
#include "reshard/status.h"
#include "reshard/stored_manifest.h"

namespace reshard {

// The layouts a plan was made from, not owned: they must outlive the call.
// They give the report what the plan does not keep (the grid sizes, the
// topology's participant count, dtypes); their identities must equal the
// plan's (source_placement_id, target_placement_id).
struct PlanReportLayouts {
  // Exactly one of the two, matching plan.source_kind().
  const WeightPlacementManifest* source = nullptr;
  const StoredWeightManifest* stored_source = nullptr;
  const WeightPlacementManifest* target = nullptr;

  static PlanReportLayouts Of(const WeightPlacementManifest& source,
                              const WeightPlacementManifest& target) {
    return {&source, nullptr, &target};
  }
  static PlanReportLayouts Of(const StoredWeightManifest& source,
                              const WeightPlacementManifest& target) {
    return {nullptr, &source, &target};
  }
};

struct PlanReportOptions {
  // Bandwidth (GB/s, 1e9 bytes per second) of the estimated transfer time;
  // positive and finite. MeasureMemcpyGbps() gives this host's.
  double gbps = 0;
  // Where `gbps` came from, shown beside it ("given", "memcpy measured on
  // this host").
  std::string gbps_origin = "given";
  // The report's heading; empty: "<resource_id> @ <revision>".
  std::string title;
  // Rows and columns of the heatmap, at most (1 to 4096). A side with more
  // participants is grouped by rank: first by (dp, pp, ep), then (dp, pp),
  // then dp, then runs of consecutive participants.
  uint32_t max_heatmap_axis = 512;
  // The tensor explorer embeds each distinct fragment layout once; past
  // this many fragments plus regions (after that sharing) further tensors
  // keep their totals but not their boxes. At least 1.
  uint64_t max_explorer_items = 4'000'000;
};

// The HTML report: one UTF-8 document. InvalidArgument when the layouts do
// not match the plan or an option is out of range.
Result<std::string> RenderPlanReportHtml(const LogicalTransferPlan& plan,
                                         const PlanReportLayouts& layouts,
                                         const PlanReportOptions& options);

// The traffic heatmap alone as a standalone SVG document (rows: source
// participants, columns: target participants, in rank order; each cell's
// <title> holds its exact bytes and region count). Uses the same options
// (gbps is not needed and may be 0).
Result<std::string> RenderTrafficHeatmapSvg(const LogicalTransferPlan& plan,
                                            const PlanReportLayouts& layouts,
                                            const PlanReportOptions& options);

// This host's single-threaded memcpy bandwidth in GB/s: the best of
// repeated copies of a 32 MiB buffer within about `budget` (the first copy
// always completes).
double MeasureMemcpyGbps(
    std::chrono::milliseconds budget = std::chrono::milliseconds(30));

}  // namespace reshard

#endif  // RESHARD_PLAN_REPORT_H_
