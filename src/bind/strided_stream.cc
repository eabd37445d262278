#include "bind/strided_stream.h"

#include <algorithm>
#include <cstring>

#include "bind/row_walker.h"
#include "util/stream_copy.h"

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

StridedSide StridedSide::Merged() const {
  StridedSide m;
  m.base = base;
  m.inner_bytes = inner_bytes;
  m.total_bytes = total_bytes;
  for (size_t d = 0; d < counts.size(); ++d) {
    if (counts[d] == 1) continue;
    if (!m.counts.empty() && m.strides.back() == strides[d] * counts[d]) {
      m.counts.back() *= counts[d];  // the outer loop steps over this one
      m.strides.back() = strides[d];
      continue;
    }
    m.counts.push_back(counts[d]);
    m.strides.push_back(strides[d]);
  }
  while (!m.counts.empty() && m.strides.back() == m.inner_bytes) {
    m.inner_bytes *= m.counts.back();
    m.counts.pop_back();
    m.strides.pop_back();
  }
  return m;
}

uint64_t RowOffset(const StridedSide& side, uint64_t row) {
  uint64_t offset = 0;
  for (size_t d = side.counts.size(); d-- > 0;) {
    offset += (row % side.counts[d]) * side.strides[d];
    row /= side.counts[d];
  }
  return offset;
}

namespace {

// Rows of at most this many bytes are copied in groups: their addresses
// first, with a prefetch each, then the copies. A strided side with short
// rows (64 bytes out of every few KiB) otherwise waits on one cache miss
// per row; with the group the misses overlap.
constexpr uint64_t kShortRow = 512;
constexpr size_t kGroup = 32;

// Copies the pieces of `side` covering stream bytes [offset, offset +
// length) to (pack) or from (unpack) `buffer`.
template <bool kPack>
void CopyStream(const StridedSide& side, uint64_t offset, uint8_t* buffer,
                uint64_t length) {
  auto copy = [&](uint8_t* p, uint64_t at, uint64_t n) {
    if constexpr (kPack) {
      std::memcpy(buffer + at, p, n);
    } else {
      std::memcpy(p, buffer + at, n);
    }
  };
  if (side.inner_bytes > kShortRow) {
    if constexpr (kPack) {
      Walk(side, offset, length, copy);
    } else {
      // Long rows into the target stream past the cache (the message
      // buffer they come from stays in it).
      Walk(side, offset, length, [&](uint8_t* p, uint64_t at, uint64_t n) {
        StreamCopy(p, buffer + at, n);
      });
      StreamFence();
    }
    return;
  }
  struct Piece {
    uint8_t* p;
    uint64_t at;
    uint64_t n;
  };
  Piece group[kGroup];
  size_t k = 0;
  auto flush = [&] {
    for (size_t i = 0; i < k; ++i) copy(group[i].p, group[i].at, group[i].n);
    k = 0;
  };
  Walk(side, offset, length, [&](uint8_t* p, uint64_t at, uint64_t n) {
    for (uint64_t line = 0; line < n; line += 64) {
      __builtin_prefetch(p + line, kPack ? 0 : 1);
    }
    group[k++] = {p, at, n};
    if (k == kGroup) flush();
  });
  flush();
}

}  // namespace

void PackStream(const StridedSide& side, uint64_t offset, void* dest,
                uint64_t length) {
  CopyStream<true>(side, offset, static_cast<uint8_t*>(dest), length);
}

void UnpackStream(const StridedSide& side, uint64_t offset, const void* src,
                  uint64_t length) {
  CopyStream<false>(side, offset,
                    const_cast<uint8_t*>(static_cast<const uint8_t*>(src)),
                    length);
}

StreamWriter::StreamWriter(const StridedSide& side)
    : side_(side), index_(side.counts.size(), 0) {}

StreamWriter::~StreamWriter() { Flush(); }

void StreamWriter::Flush() { Drain(queued_); }

void StreamWriter::Drain(size_t n) {
  for (; n > 0; --n, --queued_) {
    const Small& q = queue_[head_];
    std::memcpy(q.dest, q.data, q.bytes);
    head_ = (head_ + 1) % kDepth;
  }
}

void StreamWriter::SeekRow(uint64_t row) {
  const size_t n = side_.counts.size();
  if (row - row_ <= 4) {
    // The next few rows: step the innermost loop, carrying outwards.
    for (; row_ < row; ++row_) {
      for (size_t d = n; d-- > 0;) {
        row_offset_ += side_.strides[d];
        if (++index_[d] < side_.counts[d]) break;
        row_offset_ -= index_[d] * side_.strides[d];
        index_[d] = 0;
      }
    }
    return;
  }
  row_ = row;
  row_offset_ = 0;
  for (size_t d = n; d-- > 0;) {
    index_[d] = row % side_.counts[d];
    row /= side_.counts[d];
    row_offset_ += index_[d] * side_.strides[d];
  }
}

void StreamWriter::Write(uint64_t offset, const uint8_t* src, uint64_t length) {
  const uint64_t inner = side_.inner_bytes;
  while (length > 0) {
    const uint64_t row_start = row_ * inner;
    if (offset >= row_start + inner) SeekRow(offset / inner);
    const uint64_t within = offset - row_ * inner;
    const uint64_t take = std::min(inner - within, length);
    uint8_t* dest = side_.base + row_offset_ + within;
    if (take <= kSmall) {
      // Most changed runs are an element or two, each on another cache
      // line: queued behind a prefetch, so that the misses overlap.
      if (queued_ == kDepth) Drain(1);
      Small& q = queue_[(head_ + queued_++) % kDepth];
      q.dest = dest;
      q.bytes = static_cast<uint8_t>(take);
      std::memcpy(q.data, src, take);
      __builtin_prefetch(dest, 1);
    } else {
      std::memcpy(dest, src, take);
    }
    offset += take;
    src += take;
    length -= take;
  }
}

}  // namespace reshard::internal
