// The second step of a converting reshard: every converting target
// fragment computed from its staging fragment (reshard/conversion.h), in
// host memory, on a few threads.

#ifndef RESHARD_BIND_APPLY_CONVERSION_H_
#define RESHARD_BIND_APPLY_CONVERSION_H_

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <unordered_map>

#include "reshard/conversion.h"
#include "reshard/status.h"

namespace reshard::internal {

// The host buffer of a fragment (contiguous, row-major), or nullptr when
// this call does not hold it.
using FragmentMemory = std::function<void*(std::string_view fragment_id)>;

// `map`'s entry for a fragment id, or nullptr; `map` must outlive the
// result.
FragmentMemory FragmentMemoryIn(
    const std::unordered_map<std::string, void*>& map);

// Converts every target fragment of a converting tensor that `target_of`
// holds, reading its staging fragment (and, dequantizing, its staging scale
// fragment) from `staging_of`; quantizing also fills the target's scale
// fragments of the same participant. A fragment held on one side only is
// an error naming it. Fragments run on `threads` threads.
Status ApplyConversions(const ConversionPlan& plan,
                        const FragmentMemory& staging_of,
                        const FragmentMemory& target_of, uint32_t threads);

}  // namespace reshard::internal

#endif  // RESHARD_BIND_APPLY_CONVERSION_H_
