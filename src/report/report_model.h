// What the report draws, computed once from a plan: each side's
// participants in rank order, their grouping into heatmap rows / columns,
// and the non-empty heatmap cells with bytes and region counts.

#ifndef RESHARD_REPORT_REPORT_MODEL_H_
#define RESHARD_REPORT_REPORT_MODEL_H_

#include <cstdint>
#include <string>
#include <vector>

#include "reshard/plan.h"

namespace reshard::internal {

// One heatmap row or column: participants [first, first + count) in
// display order.
struct HeatmapBin {
  uint32_t first = 0;
  uint32_t count = 0;
  // The participant id for a single participant, else the group key
  // ("dp0 pp1 ep3") or the first and last ids of a run.
  std::string label;
  // The coarse group (dp and pp) the bin lies in, for separators and axis
  // labels; empty when the side has no ranks (a stored source).
  std::string major;
};

// One side of the plan (the source or the target participants).
struct ReportSide {
  // Display position -> plan participant index; ordered by rank (dp, pp,
  // ep, tp), then id.
  std::vector<uint32_t> order;
  // Plan participant index -> display position.
  std::vector<uint32_t> position;
  // By plan participant index: the rank of the participant's fragments and
  // how many regions it serves or receives.
  std::vector<ParallelRank> ranks;
  std::vector<uint64_t> regions;
  // Heatmap rows (source) or columns (target), in display order.
  std::vector<HeatmapBin> bins;
  // Plan participant index -> bin.
  std::vector<uint32_t> bin_of;
  // How bins group participants: "participant", "dp,pp,ep", "dp,pp", "dp"
  // or "run of N".
  std::string grouping;
  // False for a stored source (payload objects carry no ranks).
  bool ranked = true;
};

struct HeatmapCell {
  uint32_t row = 0;  // source bin
  uint32_t col = 0;  // target bin
  uint64_t bytes = 0;
  uint64_t regions = 0;
};

struct ReportModel {
  ReportSide source;
  ReportSide target;
  // Non-empty cells sorted by (row, col).
  std::vector<HeatmapCell> cells;
};

// `max_axis` >= 1 bounds the bins of each side.
ReportModel BuildReportModel(const LogicalTransferPlan& plan,
                             uint32_t max_axis);

}  // namespace reshard::internal

#endif  // RESHARD_REPORT_REPORT_MODEL_H_
