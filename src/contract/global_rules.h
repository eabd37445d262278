// The global rules of a placement's tensors (rules 20-26 of
// docs/validation-rules.md): per tensor, the axes it does not declare, the
// split geometry, and per (owner, replica) group exact cover, the
// topology's replicated and split participants and Cartesian split tuples.
// WeightPlacementManifest::Assemble (placement_manifest.cc) runs them once
// the parts, tensors and alias groups are checked.

#ifndef RESHARD_CONTRACT_GLOBAL_RULES_H_
#define RESHARD_CONTRACT_GLOBAL_RULES_H_

#include <cstddef>
#include <vector>

#include "reshard/placement.h"
#include "reshard/status.h"

namespace reshard::internal {

// Below this many fragments a second thread costs more than it saves.
inline constexpr size_t kParallelIdentityThreshold = 16384;

// The global rules of every tensor: tensors[t]'s fragments are
// fragments_by_tensor[t] (in part order), `fragment_count` fragments in
// all. Large placements cut the tensors into runs of about equal fragment
// counts, which two threads claim in turn: the identity hash shares the
// cores meanwhile, and a fixed split would leave one thread waiting for the
// other. The error reported is the first in tensor order either way.
Status CheckGlobalRules(
    const ParallelTopology& topology,
    const std::vector<TensorDescriptor>& tensors,
    const std::vector<std::vector<const PlacementFragment*>>&
        fragments_by_tensor,
    size_t fragment_count);

}  // namespace reshard::internal

#endif  // RESHARD_CONTRACT_GLOBAL_RULES_H_
