// Step 7 of docs/planner.md, the plan's summary: the columns it reads and
// the sums of one range of regions, which Planner::Summarise adds up
// (plan_summary.cc).

#ifndef RESHARD_PLAN_PLAN_SUMMARY_H_
#define RESHARD_PLAN_PLAN_SUMMARY_H_

#include <cstdint>
#include <map>
#include <utility>
#include <vector>

#include "reshard/plan.h"

namespace reshard::internal {

// (source participant << 32 | target participant, bytes) per region.
using TrafficPairs = std::vector<std::pair<uint64_t, uint64_t>>;

// One side's pipeline (pp, stage) pairs, each fragment's as a small id:
// the summary visits fragments in random order, so it reads 4 bytes per
// fragment rather than a whole PlanFragment (or 16 bytes of pair).
struct StageIds {
  std::vector<std::pair<int64_t, int64_t>> stages;  // by id
  std::vector<uint32_t> of;                         // per fragment
};

// `no_pp`: a stored source, which has no pipeline rank.
StageIds MakeStageIds(const std::vector<PlanFragment>& table, bool no_pp);

// The sums of one range of regions (Planner::Summarise adds the ranges').
struct SummaryPart {
  std::vector<uint64_t> target_bytes;
  TrafficPairs traffic;  // sorted by pair, equal pairs summed
  // (source stage id << 32 | target stage id) -> (operations, bytes).
  std::map<uint64_t, std::pair<uint64_t, uint64_t>> routes;
  std::vector<uint8_t> used;  // per source fragment
  uint64_t regions = 0;
  uint64_t bytes = 0;
};

// Sorts `traffic` by pair and sums equal pairs, in place.
void SumTraffic(TrafficPairs* traffic);

}  // namespace reshard::internal

#endif  // RESHARD_PLAN_PLAN_SUMMARY_H_
