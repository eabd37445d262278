// One side of a bound region seen as a byte stream: the region's rows in
// enumeration order (outer loops, last fastest), `inner_bytes` each. The
// UCX executor packs a strided source into that stream and unpacks it into
// a strided target, so a region is one message however small its rows.

#ifndef RESHARD_BIND_STRIDED_STREAM_H_
#define RESHARD_BIND_STRIDED_STREAM_H_

#include <cstddef>
#include <cstdint>
#include <vector>

#include "reshard/bound_plan.h"

namespace reshard::internal {

struct StridedSide {
  uint8_t* base = nullptr;
  uint64_t inner_bytes = 0;
  std::vector<uint64_t> counts;   // outermost first
  std::vector<uint64_t> strides;  // bytes, same order
  uint64_t total_bytes = 0;

  // The source or the target side of `region`.
  static StridedSide Source(const BoundRegion& region);
  static StridedSide Target(const BoundRegion& region);

  // True if the stream is one contiguous run at `base`.
  bool contiguous() const;

  // The same byte stream with fewer, longer rows: loops of one iteration
  // dropped, an innermost loop whose rows run on folded into the rows, and
  // a loop folded into the next inner one where it steps over exactly
  // that loop's extent. Pack and unpack then copy runs, not rows (a side
  // with 64-byte rows that is contiguous is one copy per call). Row
  // numbers change, so RowOffset of the result no longer matches the
  // other side's rows.
  StridedSide Merged() const;
};

// Byte offset from `side.base` of row `row` (enumeration order).
uint64_t RowOffset(const StridedSide& side, uint64_t row);

// Copies stream bytes [offset, offset + length) of `side` to `dest`.
// Precondition: offset + length <= side.total_bytes.
void PackStream(const StridedSide& side, uint64_t offset, void* dest,
                uint64_t length);

// Copies `length` bytes from `src` to stream bytes [offset, offset + length)
// of `side`. Same precondition.
void UnpackStream(const StridedSide& side, uint64_t offset, const void* src,
                  uint64_t length);

}  // namespace reshard::internal

#endif  // RESHARD_BIND_STRIDED_STREAM_H_
