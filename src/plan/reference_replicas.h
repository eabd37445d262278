// Step 2 under ReplicaPolicy::kReference (docs/planner.md): the source
// boxes each target fragment reads from as the reference prototype's
// planner chooses them, in place of the tiling held by the most cover
// groups and the balanced choice among its members.

#ifndef RESHARD_PLAN_REFERENCE_REPLICAS_H_
#define RESHARD_PLAN_REFERENCE_REPLICAS_H_

#include <cstddef>
#include <string>
#include <vector>

#include "plan/source_tiling.h"
#include "reshard/placement.h"
#include "reshard/plan.h"
#include "reshard/status.h"

namespace reshard::internal {

// One planned tensor's reference groups: group g is boxes
// [group_first[g], group_first[g + 1]), each box with exactly one member.
// A target fragment at DP rank d reads group d % groups().
struct ReferenceTiling {
  std::vector<SourceBox> boxes;
  std::vector<size_t> group_first;  // groups() + 1 entries
  size_t groups() const { return group_first.size() - 1; }
};

// The reference's choice for each tensor of `tensors` (the plan's tensor
// ids), whose source fragments are in `table` (ids of `source`'s
// fragments):
//
// Per DP rank, a tensor's fragments are grouped by owner (their
// OwnershipAxis coordinates), a box held several times counted once, by
// its first copy in (dp, pp, ep, tp, fragment id) order. A DP rank is a
// complete replica when every owner of every tensor that is not DP-owned
// covers its tensor (the boxes' volumes add up to the tensor's), judged
// over all of `source`'s tensors. Target DP rank d reads the sorted
// complete replicas' R[d mod |R|], its smallest owner there; a DP-owned
// tensor reads its one complete owner. Refuses a DP-owned tensor without
// a complete owner or with several owners, and a source without a complete
// replica, with the prototype's words.
Result<std::vector<ReferenceTiling>> ReferenceTilings(
    const WeightPlacementManifest& source,
    const std::vector<std::string>& tensors,
    const std::vector<PlanFragment>& table);

}  // namespace reshard::internal

#endif  // RESHARD_PLAN_REFERENCE_REPLICAS_H_
