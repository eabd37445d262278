// The report's other drawings: per-participant load bars (bytes each source
// participant serves, bytes each target participant receives) and the
// pipeline routes between source and target stages.

#ifndef RESHARD_REPORT_CHARTS_H_
#define RESHARD_REPORT_CHARTS_H_

#include <string>
#include <vector>

#include "report/report_model.h"
#include "reshard/plan.h"

namespace reshard::internal {

// Bars in display (rank) order, one <rect class="bar"> per participant with
// data-id, data-b (bytes) and data-r (regions); the mean as a dashed line;
// bars above the mean by more than 5% orange, the largest red.
void AppendLoadBarsSvg(const ReportSide& side,
                       const std::vector<std::string>& ids,
                       const std::vector<uint64_t>& bytes,
                       const std::string& id_attr, std::string* out);

// "pp1 stage 3", "pp0", or "store" for a stored source.
std::string RouteEndLabel(int64_t pp, int64_t stage);

// Source (pp, stage) nodes on the left, target ones on the right, one
// <path class="route"> per route with data-b (bytes) and data-o
// (operations), its width growing with bytes.
void AppendRoutesSvg(const std::vector<PipelineRoute>& routes,
                     std::string* out);

}  // namespace reshard::internal

#endif  // RESHARD_REPORT_CHARTS_H_
