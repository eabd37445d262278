// One side of an exchange operation as one byte stream: its regions'
// strided sides concatenated (a single region for most operations), packed
// into or unpacked from a message piece by piece.

#ifndef RESHARD_LIVE_EXCHANGE_SIDE_STREAM_H_
#define RESHARD_LIVE_EXCHANGE_SIDE_STREAM_H_

#include <algorithm>
#include <cstdint>
#include <utility>
#include <vector>

#include "bind/strided_stream.h"
#include "reshard/sdk/peer_exchange.h"

namespace reshard::internal {

struct SideStream {
  std::vector<StridedSide> sides;
  std::vector<uint64_t> starts;  // stream offset of each side
  uint64_t total_bytes = 0;

  // The side `op` moves (source for a send, target otherwise) of each of
  // its regions, merged into as few runs as possible; or its buffer.
  static SideStream Of(const ExchangeOp& op) {
    SideStream stream;
    if (op.buffer != nullptr) {
      StridedSide whole;
      whole.base = op.buffer;
      whole.inner_bytes = whole.total_bytes = op.buffer_bytes;
      whole.counts = {1};
      whole.strides = {op.buffer_bytes};
      stream.Add(std::move(whole));
      return stream;
    }
    auto side_of = [&](const BoundRegion& r) {
      return (op.kind == ExchangeOp::Kind::kSend ? StridedSide::Source(r)
                                                 : StridedSide::Target(r))
          .Merged();
    };
    stream.Add(side_of(*op.region));
    for (const BoundRegion* r : op.more) stream.Add(side_of(*r));
    return stream;
  }

  void Add(StridedSide side) {
    starts.push_back(total_bytes);
    total_bytes += side.total_bytes;
    sides.push_back(std::move(side));
  }
  bool contiguous() const { return sides.size() == 1 && sides[0].contiguous(); }

  // Calls fn(side, offset within it, stream position, length) for each
  // piece of stream bytes [offset, offset + length).
  template <typename Fn>
  void ForEachPiece(uint64_t offset, uint64_t length, Fn&& fn) const {
    size_t i = static_cast<size_t>(
        std::upper_bound(starts.begin(), starts.end(), offset) -
        starts.begin() - 1);
    uint64_t done = 0;
    while (done < length && i < sides.size()) {
      const uint64_t at = offset + done - starts[i];
      const uint64_t n = std::min(length - done, sides[i].total_bytes - at);
      if (n > 0) fn(sides[i], at, done, n);
      done += n;
      ++i;
    }
  }

  // Stream bytes [offset, offset + length) into `out`.
  void Pack(uint64_t offset, uint64_t length, uint8_t* out) const {
    ForEachPiece(offset, length,
                 [&](const StridedSide& side, uint64_t at, uint64_t pos,
                     uint64_t len) { PackStream(side, at, out + pos, len); });
  }
  // `in` into stream bytes [offset, offset + length).
  void Unpack(uint64_t offset, uint64_t length, const uint8_t* in) const {
    ForEachPiece(offset, length,
                 [&](const StridedSide& side, uint64_t at, uint64_t pos,
                     uint64_t len) { UnpackStream(side, at, in + pos, len); });
  }
};

}  // namespace reshard::internal

#endif  // RESHARD_LIVE_EXCHANGE_SIDE_STREAM_H_
