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
#include <vector>

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

// The steps the host path above and the device path
// (api/device_conversion.cc) share.

// The staging fragment a converting target fragment `f` reads: its id and
// buffer, or InvalidArgument naming `f` when `staging_of` does not hold it.
struct StagedSource {
  const std::string* id;
  const void* data;
};
Result<StagedSource> StagedSourceOf(const ConversionPlan& plan,
                                    const PlacementFragment& f,
                                    const FragmentMemory& staging_of);

// The staged scales a dequantized fragment `f` (staged as `staged_id`)
// reads: their buffer and their fragment in the staging layout, or
// InvalidArgument naming `f`.
struct StagedScales {
  const void* data;
  const PlacementFragment* box;
};
Result<StagedScales> StagedScalesOf(const ConversionPlan& plan,
                                    const std::string& staged_id,
                                    const PlacementFragment& f,
                                    const FragmentMemory& staging_of);

// One region of a dequantized row-major box: `rows` x `cols` elements from
// local element `at` (rows of the box's width), in blocks of `block_rows`
// x `block_cols`, whose first scale is element `scale_at` of the scale box.
struct DequantizeRegion {
  int64_t at, rows, cols, block_rows, block_cols, scale_at;
};
// The weight box at global `offset` of shape `n` cut at the weight's block
// boundaries (blocks anchored at the weight's element (0, 0), not the
// box's) into at most four non-empty regions: the rest of a first block
// row and column the box splits, then whole blocks. The scale box is at
// global block `scale_offset`, `scale_cols` wide.
std::vector<DequantizeRegion> DequantizeRegions(const Dims& offset,
                                                const Dims& n,
                                                const Fp8Block& block,
                                                const Dims& scale_offset,
                                                int64_t scale_cols);

// Calls `copy` for every fragment of the tensor `scale_tensor_id` in
// `part` inside the block box (first, count) a quantized weight fragment
// computed, with its target buffer and the index of its first scale in the
// box's row-major scales (count[1] a row); InvalidArgument naming the
// first such fragment `target_of` does not hold, or copy's first error.
using ScaleCopy = std::function<Status(const PlacementFragment& scale,
                                       void* out, int64_t scale_at)>;
Status ForEachScaleFragmentIn(const WeightPlacementPart& part,
                              const std::string& scale_tensor_id,
                              const Dims& first, const Dims& count,
                              const FragmentMemory& target_of,
                              const ScaleCopy& copy);

}  // namespace reshard::internal

#endif  // RESHARD_BIND_APPLY_CONVERSION_H_
