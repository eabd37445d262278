// Strided-copy geometry of one overlap between two canonical row-major
// fragments (docs/planner.md, step 6), then loop compression beyond it.

#include "plan/geometry.h"

#include <algorithm>

namespace reshard::internal {

RegionGeometry ComputeRegionGeometry(const Dims& so, const Dims& ss,
                                     const Dims& to, const Dims& ts,
                                     const Dims& oo, const Dims& os,
                                     int64_t itemsize) {
  const size_t n = os.size();
  // Strides live on the stack for the usual ranks; called once per region.
  constexpr size_t kInline = 16;
  uint64_t inline_strides[2 * kInline];
  std::vector<uint64_t> heap_strides;
  uint64_t* src_stride = inline_strides;
  if (n > kInline) {
    heap_strides.resize(2 * n);
    src_stride = heap_strides.data();
  }
  uint64_t* dst_stride = src_stride + std::max(n, kInline);
  uint64_t s = static_cast<uint64_t>(itemsize);
  uint64_t t = s;
  for (size_t d = n; d-- > 0;) {
    src_stride[d] = s;
    dst_stride[d] = t;
    s *= static_cast<uint64_t>(ss[d]);
    t *= static_cast<uint64_t>(ts[d]);
  }
  RegionGeometry g;
  for (size_t d = 0; d < n; ++d) {
    g.source_base_offset +=
        static_cast<uint64_t>(oo[d] - so[d]) * src_stride[d];
    g.target_base_offset +=
        static_cast<uint64_t>(oo[d] - to[d]) * dst_stride[d];
  }
  // The contiguous suffix shared by both sides (the reference geometry).
  uint64_t inner = static_cast<uint64_t>(os[n - 1]) * itemsize;
  size_t k = n - 1;
  while (k > 0 && src_stride[k - 1] == inner && dst_stride[k - 1] == inner) {
    --k;
    inner *= static_cast<uint64_t>(os[k]);
  }
  g.segments = 1;
  for (size_t d = 0; d < k; ++d) g.segments *= static_cast<uint64_t>(os[d]);
  // Outer loops: drop count-1 dimensions, merge a loop into its outer
  // neighbour when both sides' strides nest exactly.
  for (size_t d = 0; d < k; ++d) {
    if (os[d] == 1) continue;
    OuterLoop cur{static_cast<uint64_t>(os[d]), src_stride[d], dst_stride[d]};
    if (!g.loops.empty()) {
      OuterLoop& last = g.loops.back();
      if (last.source_stride == cur.count * cur.source_stride &&
          last.target_stride == cur.count * cur.target_stride) {
        last = {last.count * cur.count, cur.source_stride, cur.target_stride};
        continue;
      }
    }
    g.loops.push_back(cur);
  }
  // No remaining loop steps exactly one run on both sides: the stride of
  // the dimension above the shared suffix exceeds inner_bytes on at least
  // one side, and outer strides only grow from there.
  g.inner_bytes = inner;
  return g;
}

}  // namespace reshard::internal
