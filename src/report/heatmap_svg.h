// The traffic matrix as SVG: one <rect class="cell"> per non-empty
// (source bin, target bin) pair with its exact bytes and region count in
// data-b / data-r (and in a <title> when standalone), participants in rank
// order with separators between (dp, pp) groups, a log-scale legend.

#ifndef RESHARD_REPORT_HEATMAP_SVG_H_
#define RESHARD_REPORT_HEATMAP_SVG_H_

#include <cstdint>
#include <string>

#include "report/report_model.h"

namespace reshard::internal {

enum class SvgMode {
  kStandalone,  // an SVG document: XML declaration, <title> per cell
  kInline,      // an <svg> element inside the HTML report
};

// Appends the heatmap of `model` to `out`.
void AppendHeatmapSvg(const ReportModel& model, SvgMode mode, std::string* out);

// The colour of a cell holding `bytes`, on a log scale between the
// smallest and the largest non-empty cell ("#rrggbb").
std::string HeatColor(uint64_t bytes, uint64_t min_bytes, uint64_t max_bytes);

}  // namespace reshard::internal

#endif  // RESHARD_REPORT_HEATMAP_SVG_H_
