// Reshard with a converting plan (LogicalTransferPlan::conversion()): the
// bytes move into the staging placement, then convert into the targets.

#ifndef RESHARD_API_CONVERT_RESHARD_H_
#define RESHARD_API_CONVERT_RESHARD_H_

#include <memory>
#include <vector>

#include "exec_cuda/device_api.h"
#include "reshard/api.h"

namespace reshard::internal {

// `plan` converts (plan.conversion() is set). The staging fragments of
// tensors that do not convert are the target buffers themselves; those of
// converting tensors are host buffers of this call (the source-dtype copy
// of the converting fragments: the memory cost of converting today). The
// targets must be contiguous; ReshardOptions::current_bindings is refused
// (the fence of a converting reshard is not supported yet).
//
// Participants whose targets are host memory convert on the CPU
// (bind/apply_conversion.h). Those whose targets are CUDA memory (every
// fragment on one device) stage in device memory of that device, which
// `transport` must reach (the CUDA executor), and convert with the
// kernels (api/device_conversion.h), bit for bit as the CPU would.
// `device_api` is the device API of that path (tests pass the host
// emulation); null: the CUDA runtime's (cuda::StagingDeviceApi). Where
// there is none, a plan with a CUDA target is refused before a byte moves:
// FailedPrecondition "a converting reshard into CUDA memory needs the CUDA
// executor: target fragment <id> of participant <p> (device "cuda:0");
// CUDA executor unavailable: <why>".
Result<ReshardReport> ReshardConverting(
    const LogicalTransferPlan& plan, const WeightPlacementManifest& source,
    const CheckedBindings& source_bindings,
    const WeightPlacementManifest& target,
    const std::vector<WeightRuntimeBindingManifest>& target_bindings,
    Transport& transport, const ReshardOptions& options,
    std::shared_ptr<cuda::DeviceApi> device_api = nullptr);

}  // namespace reshard::internal

#endif  // RESHARD_API_CONVERT_RESHARD_H_
