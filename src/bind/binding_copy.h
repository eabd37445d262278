// Building runtime bindings from other bindings: the converting paths bind
// placements derived from the caller's (staging, quantized sources) with
// the caller's own fragments where nothing converts and buffers of their
// own where something does.

#ifndef RESHARD_BIND_BINDING_COPY_H_
#define RESHARD_BIND_BINDING_COPY_H_

#include <cstdint>
#include <string_view>
#include <vector>

#include "reshard/binding.h"
#include "reshard/placement.h"

namespace reshard::internal {

// The plain input that makes `f` again.
RuntimeBindingFragmentSpec SpecOf(const RuntimeBindingFragment& f);

// OK when `f` is contiguous host memory; else InvalidArgument "<what> needs
// contiguous host memory: <side> fragment <id> of <participant>".
Status RequireContiguousHost(const RuntimeBindingFragment& f,
                             std::string_view what, std::string_view side,
                             std::string_view participant);

// A contiguous binding of placement fragment `f` (elements of `itemsize`
// bytes) at `address`, routed (worker, endpoint, device) like `like`.
Result<RuntimeBindingFragment> OwnedBindingFragment(
    const PlacementFragment& f, int64_t itemsize, void* address,
    const RuntimeBindingFragment& like);

// A binding of `placement` with `like`'s header (resource, instance,
// generation, lease, revision, participant) and `fragments`.
Result<WeightRuntimeBindingManifest> RebuiltBinding(
    const WeightRuntimeBindingManifest& like,
    const WeightPlacementManifest& placement,
    std::vector<RuntimeBindingFragment> fragments);

}  // namespace reshard::internal

#endif  // RESHARD_BIND_BINDING_COPY_H_
