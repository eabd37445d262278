// Host buffers and runtime bindings for every fragment of a placement: the
// self-test's and the benchmarks' stand-in for a framework's allocations.

#ifndef RESHARD_SELFTEST_HOST_BUFFERS_H_
#define RESHARD_SELFTEST_HOST_BUFFERS_H_

#include <cstdint>
#include <cstdlib>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "reshard/binding.h"
#include "reshard/placement.h"
#include "util/host_memory.h"

namespace reshard::internal {

// One 64-byte-aligned allocation per fragment and one binding per
// participant with fragments, made by BindBuffers (instance `instance`,
// generation 1, lease "host-lease", the participant as worker, device
// "cpu"). `checked` holds the same bindings as one checked set (coverage
// kSubset; each binding checked once) for consumers that take it.
struct HostBuffers {
  std::vector<HostBuffer> buffers;
  std::vector<WeightRuntimeBindingManifest> bindings;
  std::optional<CheckedBindings> checked;
  std::unordered_map<std::string_view, uint8_t*> data;  // by fragment id
};

// With `participants` non-empty, only those participants' fragments.
Result<HostBuffers> AllocateHostBuffers(
    const WeightPlacementManifest& m, const std::string& instance,
    const std::vector<std::string>& participants = {});

// Best-of-3 bandwidth (GB/s) of `threads` parallel memcpys over `bytes`.
double MeasureMemcpyGbps(uint64_t bytes, uint32_t threads);

}  // namespace reshard::internal

#endif  // RESHARD_SELFTEST_HOST_BUFFERS_H_
