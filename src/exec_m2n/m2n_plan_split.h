// Which tensors of a plan move through NCCL M2N's ncclReshard and which
// fall back to the point-to-point NCCL backend: one decision per tensor,
// the lowering of m2n_lowering.h applied to the whole boxes of both
// placements (every rank that holds the tensor joins ncclReshard, not only
// those the planner chose to read from).

#ifndef RESHARD_EXEC_M2N_M2N_PLAN_SPLIT_H_
#define RESHARD_EXEC_M2N_M2N_PLAN_SPLIT_H_

#include <functional>
#include <map>
#include <string>
#include <vector>

#include "exec_m2n/m2n_lowering.h"
#include "reshard/binding.h"
#include "reshard/placement.h"
#include "reshard/plan.h"
#include "reshard/status.h"

namespace reshard::m2n {

// The communicator rank of every participant of both sides.
struct M2nRanks {
  std::map<std::string, int, std::less<>> source;  // participant id -> rank
  std::map<std::string, int, std::less<>> target;
  int comm_size = 0;
};

// One communicator of both jobs, sources first: the source participants
// in ParallelRank order (dp, pp, ep, tp; tp fastest, as a row-major mesh
// of the axes) on ranks [0, S), the target participants in the same order
// on [S, S + T).
M2nRanks DefaultM2nRanks(const WeightPlacementManifest& source,
                         const WeightPlacementManifest& target);

// One decision per tensor of `plan`, in plan.tensors() order. A plan from
// a store revision refuses every tensor (rule live-source: ncclReshard
// moves between ranks of one communicator). InvalidArgument when the
// manifests are not the plan's or a participant has no rank.
Result<std::vector<M2nDecision>> SplitPlanForM2n(
    const LogicalTransferPlan& plan, const WeightPlacementManifest& source,
    const WeightPlacementManifest& target, const M2nRanks& ranks);

// Whether `view` is one contiguous row-major buffer of `fragment`'s local
// shape (what ncclReshard takes: one pointer per rank and side).
bool ContiguousView(const RuntimeBindingFragment& view,
                    const PlacementFragment& fragment);

// Rule contiguous-binding: refuses, in place, each lowered decision of
// which some participant's binding (`source_bindings` over `source`,
// `target_bindings` over `target`: every participant's, as published, so
// that every rank that applies it decides alike) is missing or not a
// ContiguousView of its fragment. The reason names the side, participant
// and fragment:
//   tensor "w": not lowered to ncclReshard: rule contiguous-binding:
//   target participant p fragment f is not one contiguous row-major
//   buffer of its local shape [4,8]
void RequireContiguousBindings(
    const WeightPlacementManifest& source,
    const std::vector<WeightRuntimeBindingManifest>& source_bindings,
    const WeightPlacementManifest& target,
    const std::vector<WeightRuntimeBindingManifest>& target_bindings,
    std::vector<M2nDecision>* decisions);

}  // namespace reshard::m2n

#endif  // RESHARD_EXEC_M2N_M2N_PLAN_SPLIT_H_
