// Synchronous host copy of one bound region, for executors that copy some
// regions themselves (the live path's same-rank regions) and for tests.

#ifndef RESHARD_EXEC_REGION_COPY_H_
#define RESHARD_EXEC_REGION_COPY_H_

#include <cstdint>

#include "reshard/bound_plan.h"

namespace reshard::internal {

// Copies segments [first, first + count) of `region`'s row enumeration
// (outer loops, last fastest) on the calling thread. Both ends must be
// host memory of this process.
void CopyRegionSegments(const BoundRegion& region, uint64_t first,
                        uint64_t count);

}  // namespace reshard::internal

#endif  // RESHARD_EXEC_REGION_COPY_H_
