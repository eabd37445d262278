#include "bind/strided_stream.h"

#include <algorithm>
#include <cstring>

#include "bind/row_walker.h"

namespace reshard::internal {
namespace {

StridedSide MakeSide(const BoundRegion& r, uint64_t address, bool source) {
  StridedSide s;
  s.base = reinterpret_cast<uint8_t*>(address);
  s.inner_bytes = r.inner_bytes;
  s.total_bytes = r.inner_bytes;
  for (const OuterLoop& l : r.loops) {
    s.counts.push_back(l.count);
    s.strides.push_back(source ? l.source_stride : l.target_stride);
    s.total_bytes *= l.count;
  }
  return s;
}

// The pieces of rows covering stream bytes [offset, offset + length):
// f(address in the side, position in the caller's buffer, bytes).
template <typename F>
void Walk(const StridedSide& s, uint64_t offset, uint64_t length, F&& f) {
  WalkStreamRange(SideLoops(s.counts, s.strides), s.base, s.inner_bytes, offset,
                  length, f);
}

}  // namespace

StridedSide StridedSide::Source(const BoundRegion& region) {
  return MakeSide(region, region.source_address, true);
}

StridedSide StridedSide::Target(const BoundRegion& region) {
  return MakeSide(region, region.target_address, false);
}

bool StridedSide::contiguous() const {
  uint64_t run = inner_bytes;
  for (size_t d = counts.size(); d-- > 0;) {
    if (counts[d] > 1 && strides[d] != run) return false;
    run *= counts[d];
  }
  return true;
}

uint64_t RowOffset(const StridedSide& side, uint64_t row) {
  uint64_t offset = 0;
  for (size_t d = side.counts.size(); d-- > 0;) {
    offset += (row % side.counts[d]) * side.strides[d];
    row /= side.counts[d];
  }
  return offset;
}

void PackStream(const StridedSide& side, uint64_t offset, void* dest,
                uint64_t length) {
  auto* out = static_cast<uint8_t*>(dest);
  Walk(side, offset, length, [&](uint8_t* p, uint64_t at, uint64_t n) {
    std::memcpy(out + at, p, n);
  });
}

void UnpackStream(const StridedSide& side, uint64_t offset, const void* src,
                  uint64_t length) {
  const auto* in = static_cast<const uint8_t*>(src);
  Walk(side, offset, length, [&](uint8_t* p, uint64_t at, uint64_t n) {
    std::memcpy(p, in + at, n);
  });
}

}  // namespace reshard::internal
