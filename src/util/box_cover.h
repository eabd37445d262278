// N-D box coverage and overlap checks on integer boxes, near-linear in the
// number of boxes (sort and sweep; never all pairs in the common cases).

#ifndef RESHARD_UTIL_BOX_COVER_H_
#define RESHARD_UTIL_BOX_COVER_H_

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <utility>
#include <vector>

namespace reshard::internal {

// A half-open box [offset, offset + shape) viewed through pointers to
// `ndim` coordinates each. The pointed-to data must outlive the call.
struct BoxRef {
  const int64_t* offset;
  const int64_t* shape;
};

// True iff `boxes` (each already inside [0, extent)) tile [0, extent)
// exactly: no gap and no overlap. Uses, in order, a volume check, a grid
// fast path, signed corner sums (for ndim <= 8), else a sweep for overlaps.
bool ExactlyCovers(std::span<const int64_t> extent,
                   std::span<const BoxRef> boxes);

// Returns the indices of one pair of overlapping boxes, or nullopt. Sorts
// and sweeps along the dimension with the most distinct begin coordinates.
std::optional<std::pair<size_t, size_t>> FindOverlap(
    size_t ndim, std::span<const BoxRef> boxes);

}  // namespace reshard::internal

#endif  // RESHARD_UTIL_BOX_COVER_H_
