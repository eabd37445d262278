// Reshard with a converting plan (LogicalTransferPlan::conversion()): the
// bytes move into the staging placement, then convert into the targets.

#ifndef RESHARD_API_CONVERT_RESHARD_H_
#define RESHARD_API_CONVERT_RESHARD_H_

#include <vector>

#include "reshard/api.h"

namespace reshard::internal {

// `plan` converts (plan.conversion() is set). The staging fragments of
// tensors that do not convert are the target buffers themselves; those of
// converting tensors are host buffers of this call (the source-dtype copy
// of the converting fragments: the memory cost of converting today). The
// targets must be contiguous host memory; ReshardOptions::current_bindings
// is refused (the fence of a converting reshard is not supported yet).
Result<ReshardReport> ReshardConverting(
    const LogicalTransferPlan& plan, const WeightPlacementManifest& source,
    const CheckedBindings& source_bindings,
    const WeightPlacementManifest& target,
    const std::vector<WeightRuntimeBindingManifest>& target_bindings,
    Transport& transport, const ReshardOptions& options);

}  // namespace reshard::internal

#endif  // RESHARD_API_CONVERT_RESHARD_H_
