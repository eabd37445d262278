// Step 2 of docs/planner.md, the source tiling: a tensor's source
// fragments in (owner, replica) cover groups, the groups with identical box
// sets in tiling classes, and the boxes of the chosen class with their
// interchangeable replicas; then the boxes indexed for step 3's queries.

#ifndef RESHARD_PLAN_SOURCE_TILING_H_
#define RESHARD_PLAN_SOURCE_TILING_H_

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "reshard/placement.h"
#include "reshard/plan.h"
#include "reshard/status.h"

namespace reshard::internal {

// Loops that reach table entries or columns in an order of their own
// prefetch the entry this many steps ahead (the contract's global rules do
// the same): on the VMs measured a miss costs more than the work per entry.
constexpr size_t kPrefetchAhead = 8;

// One box of the chosen source tiling and the interchangeable fragments
// (one per cover group) that hold it.
struct SourceBox {
  const Dims* offset;
  const Dims* shape;
  std::vector<uint32_t> members;  // source fragment indices
};
// Boxes of one tensor indexed for interval queries along one dimension:
// sorted by begin, with a running maximum of ends, so a query visits only
// boxes whose begin lies before the query's end. The sorted boxes'
// coordinates are kept side by side, so a query reads one small array
// rather than chasing each box to its fragment.
class BoxIndex {
 public:
  // Indexes boxes[0, n), each of `ndim` dimensions. The boxes must
  // outlive the index.
  void Build(const SourceBox* boxes, size_t n, size_t ndim);

  // Calls f(box) for every box intersecting [offset, offset + shape)
  // (the index's ndim coordinates each).
  template <typename F>
  void Query(const int64_t* offset, const int64_t* shape, F&& f) const {
    const int64_t a = offset[dim_];
    const int64_t b = a + shape[dim_];
    size_t i = std::upper_bound(max_end_.begin(), max_end_.end(), a) -
               max_end_.begin();
    for (; i < boxes_.size(); ++i) {
      const int64_t* c = &coords_[i * 2 * ndim_];  // [begin, end) per dim
      if (c[2 * dim_] >= b) break;
      bool hit = true;
      for (size_t d = 0; d < ndim_ && hit; ++d) {
        hit = c[2 * d] < offset[d] + shape[d] && offset[d] < c[2 * d + 1];
      }
      if (hit) f(*boxes_[i]);
    }
  }

 private:
  std::vector<const SourceBox*> boxes_;
  std::vector<int64_t> max_end_;
  std::vector<int64_t> coords_;
  size_t dim_ = 0;
  size_t ndim_ = 0;
};

// The source tiling of tensor `t` (docs/planner.md, step 2): the tiling
// held by the most cover groups offers the most choice; ties go to the
// class of the smallest group key.
Result<std::vector<SourceBox>> SourceTiling(
    const TensorDescriptor& t, const std::vector<uint32_t>& frags,
    const std::vector<PlanFragment>& table, const ParallelSizes& sizes);

}  // namespace reshard::internal

#endif  // RESHARD_PLAN_SOURCE_TILING_H_
