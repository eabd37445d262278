// LogicalTransferPlan's shared, immutable state: what the planner fills
// (src/plan/planner.cc, plan_summary.cc) and the plan's accessors read
// (logical_transfer_plan.cc).

#ifndef RESHARD_PLAN_PLAN_IMPL_H_
#define RESHARD_PLAN_PLAN_IMPL_H_

#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "reshard/conversion.h"
#include "reshard/plan.h"

namespace reshard {

struct LogicalTransferPlan::Impl {
  // The manifests the fragment tables' ids view (shared, immutable state).
  std::optional<WeightPlacementManifest> source_placement;
  std::optional<StoredWeightManifest> source_stored;
  std::optional<WeightPlacementManifest> target_placement;
  PlanSourceKind source_kind = PlanSourceKind::kPlacement;
  std::string resource_id;
  std::string revision;
  std::string source_placement_id;
  std::string target_placement_id;
  std::vector<std::string> tensors;
  std::vector<PlanFragment> source_fragments;
  std::vector<PlanFragment> target_fragments;
  // In step 7's order from the first call of regions() on (OrderRegions):
  // a plan that is only summarised, as `reshard plan` prints it, never
  // pays for the ordering. Every reader goes through regions().
  mutable std::vector<TransferRegion> regions;
  mutable std::once_flag regions_ordered;
  std::vector<PipelineRoute> routes;
  std::vector<std::string> source_participants;
  std::vector<uint64_t> source_bytes;
  std::vector<std::string> target_participants;
  std::vector<uint64_t> target_bytes;
  std::vector<TrafficEntry> traffic;
  PlanSummary summary;
  std::shared_ptr<const ConversionPlan> conversion;
};

}  // namespace reshard

#endif  // RESHARD_PLAN_PLAN_IMPL_H_
