// The one walker of a bound region's row enumeration.
//
// A BoundRegion is `inner_bytes`-long rows laid out by its outer loops
// (outermost first, the last loop fastest); each side has its own byte
// strides. Every executor that touches rows goes through WalkRows: the
// local executor's copies (both sides at once), the strided stream's pack
// and unpack (one side, at any byte offset) and the UCX pull path's
// per-row gets (both sides). The walk keeps a mixed-radix index and one
// running byte offset per side, so a row costs one add in the common case
// (no carry) instead of a division per loop.

#ifndef RESHARD_BIND_ROW_WALKER_H_
#define RESHARD_BIND_ROW_WALKER_H_

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <vector>

#include "reshard/bound_plan.h"

namespace reshard::internal {

// A region's loops as the walker reads them: side 0 is the source, side 1
// the target.
class RegionLoops {
 public:
  static constexpr size_t kSides = 2;
  explicit RegionLoops(const BoundRegion& region) : loops_(region.loops) {}
  size_t size() const { return loops_.size(); }
  uint64_t count(size_t d) const { return loops_[d].count; }
  uint64_t stride(size_t side, size_t d) const {
    return side == 0 ? loops_[d].source_stride : loops_[d].target_stride;
  }

 private:
  const std::vector<OuterLoop>& loops_;
};

// One side's loops as parallel arrays (outermost first).
class SideLoops {
 public:
  static constexpr size_t kSides = 1;
  SideLoops(const std::vector<uint64_t>& counts,
            const std::vector<uint64_t>& strides)
      : counts_(counts), strides_(strides) {}
  size_t size() const { return counts_.size(); }
  uint64_t count(size_t d) const { return counts_[d]; }
  uint64_t stride(size_t, size_t d) const { return strides_[d]; }

 private:
  const std::vector<uint64_t>& counts_;
  const std::vector<uint64_t>& strides_;
};

// Rows of a region (the product of its loop counts; 1 without loops).
inline uint64_t RowCount(const BoundRegion& region) {
  uint64_t rows = 1;
  for (const OuterLoop& l : region.loops) rows *= l.count;
  return rows;
}

// Calls `action(offsets)` for rows [first, first + count) of `loops` in
// enumeration order, where offsets[s] (a std::array<uint64_t, kSides>) is
// the row's byte offset from side s's base. Precondition: first + count
// does not exceed the number of rows; every loop count is at least 1.
template <typename Loops, typename Action>
void WalkRows(const Loops& loops, uint64_t first, uint64_t count,
              Action&& action) {
  constexpr size_t kSides = Loops::kSides;
  if (count == 0) return;
  const size_t n = loops.size();
  // Mixed-radix index of `first` (inline for up to 16 loops).
  uint64_t inline_index[16];
  std::vector<uint64_t> heap_index;
  uint64_t* index = inline_index;
  if (n > 16) {
    heap_index.resize(n);
    index = heap_index.data();
  }
  std::array<uint64_t, kSides> at{};
  uint64_t rest = first;
  for (size_t d = n; d-- > 0;) {
    index[d] = rest % loops.count(d);
    rest /= loops.count(d);
    for (size_t s = 0; s < kSides; ++s) at[s] += index[d] * loops.stride(s, d);
  }
  for (uint64_t k = 0;;) {
    action(static_cast<const std::array<uint64_t, kSides>&>(at));
    if (++k == count) return;
    // Advance the innermost loop; carry outwards.
    for (size_t d = n; d-- > 0;) {
      for (size_t s = 0; s < kSides; ++s) at[s] += loops.stride(s, d);
      if (++index[d] < loops.count(d)) break;
      for (size_t s = 0; s < kSides; ++s) {
        at[s] -= index[d] * loops.stride(s, d);
      }
      index[d] = 0;
    }
  }
}

// Calls `action(source_offset, target_offset)` for rows [first, first +
// count) of `region`; offsets are relative to the region's addresses.
template <typename Action>
void ForEachRegionRow(const BoundRegion& region, uint64_t first, uint64_t count,
                      Action&& action) {
  WalkRows(RegionLoops(region), first, count,
           [&](const std::array<uint64_t, 2>& at) { action(at[0], at[1]); });
}

// Calls `action(address, position, bytes)` for the pieces of rows that
// cover bytes [offset, offset + length) of one side's row stream (rows
// back to back, `inner_bytes` each): `address` is `base` plus the row's
// offset and the offset within it, `position` the piece's offset from
// `offset` in the stream. Precondition: offset + length does not exceed the
// stream's bytes.
template <typename Action>
void WalkStreamRange(const SideLoops& loops, uint8_t* base,
                     uint64_t inner_bytes, uint64_t offset, uint64_t length,
                     Action&& action) {
  if (length == 0 || inner_bytes == 0) return;
  const uint64_t first = offset / inner_bytes;
  const uint64_t last = (offset + length - 1) / inner_bytes;
  uint64_t within = offset % inner_bytes;
  uint64_t done = 0;
  WalkRows(
      loops, first, last - first + 1, [&](const std::array<uint64_t, 1>& at) {
        const uint64_t take = std::min(inner_bytes - within, length - done);
        action(base + at[0] + within, done, take);
        done += take;
        within = 0;
      });
}

// Copies rows [first, first + count) of `region` on the calling thread
// with `copy(dst, src, bytes)`; both ends must be host memory of this
// process.
template <typename Copy>
void CopyRegionRows(const BoundRegion& region, uint64_t first, uint64_t count,
                    Copy&& copy) {
  ForEachRegionRow(region, first, count, [&](uint64_t src, uint64_t dst) {
    copy(reinterpret_cast<void*>(region.target_address + dst),
         reinterpret_cast<const void*>(region.source_address + src),
         region.inner_bytes);
  });
}

// CopyRegionRows with memcpy.
inline void CopyRegionSegments(const BoundRegion& region, uint64_t first,
                               uint64_t count) {
  CopyRegionRows(region, first, count, [](void* d, const void* s, size_t n) {
    std::memcpy(d, s, n);
  });
}

}  // namespace reshard::internal

#endif  // RESHARD_BIND_ROW_WALKER_H_
