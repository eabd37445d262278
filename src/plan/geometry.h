// Strided-copy geometry of one overlap between two canonical row-major
// fragments: the planner's per-region arithmetic (docs/planner.md).

#ifndef RESHARD_PLAN_GEOMETRY_H_
#define RESHARD_PLAN_GEOMETRY_H_

#include <cstdint>
#include <vector>

#include "reshard/placement.h"
#include "reshard/plan.h"

namespace reshard::internal {

struct RegionGeometry {
  uint64_t source_base_offset = 0;
  uint64_t target_base_offset = 0;
  uint64_t inner_bytes = 0;
  std::vector<OuterLoop> loops;
  uint64_t segments = 0;
};

// The geometry of the overlap box (`overlap_offset`, `overlap_shape`, in
// global coordinates) between a source and a target fragment, both
// canonical row-major with elements of `itemsize` bytes: base offsets,
// the contiguous inner run and the merged outer loops.
RegionGeometry ComputeRegionGeometry(
    const Dims& source_offset, const Dims& source_shape,
    const Dims& target_offset, const Dims& target_shape,
    const Dims& overlap_offset, const Dims& overlap_shape, int64_t itemsize);

}  // namespace reshard::internal

#endif  // RESHARD_PLAN_GEOMETRY_H_
