// One side of a bound region seen as a byte stream: the region's rows in
// enumeration order (outer loops, last fastest), `inner_bytes` each. The
// UCX executor packs a strided source into that stream and unpacks it into
// a strided target, so a region is one message however small its rows.

#ifndef RESHARD_BIND_STRIDED_STREAM_H_
#define RESHARD_BIND_STRIDED_STREAM_H_

#include <cstddef>
#include <cstdint>
#include <vector>

#include "bind/row_walker.h"
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
// of `side`. Same precondition. Rows longer than 512 bytes are written with
// streaming stores (util/stream_copy.h), fenced before it returns: the
// target is a final buffer, not read again by this process soon.
void UnpackStream(const StridedSide& side, uint64_t offset, const void* src,
                  uint64_t length);

// Calls fn(address, stream position, bytes) for every row of `side`, in
// stream order.
template <typename Fn>
void ForEachStreamRow(const StridedSide& side, Fn&& fn) {
  WalkStreamRange(SideLoops(side.counts, side.strides), side.base,
                  side.inner_bytes, 0, side.total_bytes, fn);
}

// Writes pieces of a side's stream at increasing offsets (a delta's
// changed elements): the row under the last write is kept, and the next
// rows are reached by stepping the row index, so a write costs a compare
// and a copy, not a division per loop as UnpackStream's start does. Small
// pieces are held in a short queue behind a prefetch of their
// destination; every write has landed once Flush (or the destructor)
// returns.
class StreamWriter {
 public:
  explicit StreamWriter(const StridedSide& side);
  ~StreamWriter();
  StreamWriter(StreamWriter&&) = default;
  StreamWriter(const StreamWriter&) = delete;
  StreamWriter& operator=(const StreamWriter&) = delete;

  // Copies `length` bytes from `src` to stream bytes [offset, offset +
  // length). Precondition: offset is at least the end of the previous
  // write, and offset + length <= side.total_bytes.
  void Write(uint64_t offset, const uint8_t* src, uint64_t length);

  // Lands every queued write.
  void Flush();

 private:
  static constexpr uint64_t kSmall = 16;
  static constexpr size_t kDepth = 16;
  struct Small {
    uint8_t* dest;
    uint8_t bytes;
    uint8_t data[kSmall];
  };
  void SeekRow(uint64_t row);
  void Drain(size_t n);  // lands the n oldest queued writes

  const StridedSide& side_;
  std::vector<uint64_t> index_;  // mixed-radix index of row_
  uint64_t row_ = 0;
  uint64_t row_offset_ = 0;  // byte offset of row_ from side_.base
  Small queue_[kDepth];
  size_t head_ = 0, queued_ = 0;
};

}  // namespace reshard::internal

#endif  // RESHARD_BIND_STRIDED_STREAM_H_
