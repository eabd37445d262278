// StridedSide, PackStream and UnpackStream against a brute-force row
// enumeration over real host buffers, for random and hand-made regions.

#include "bind/strided_stream.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "reshard/bound_plan.h"
#include "reshard/plan.h"

namespace reshard::internal {
namespace {

constexpr uint8_t kSentinel = 0xA5;
constexpr uint8_t kGuard = 0x5A;

// One side's layout relative to its buffer.
struct SideLayout {
  std::vector<uint64_t> strides;  // outermost first
  uint64_t base_offset = 0;       // first byte of the region in the buffer
  uint64_t buffer_bytes = 0;
};

struct Layout {
  uint64_t inner = 0;
  std::vector<uint64_t> counts;  // outermost first
  SideLayout source;
  SideLayout target;
};

// Row start offsets (from the side's base) in enumeration order: outer loops
// nested, last loop fastest. Deliberately recursive, unlike the library.
void EnumerateRows(const std::vector<uint64_t>& counts,
                   const std::vector<uint64_t>& strides, size_t d,
                   uint64_t addr, std::vector<uint64_t>* rows) {
  if (d == counts.size()) {
    rows->push_back(addr);
    return;
  }
  for (uint64_t i = 0; i < counts[d]; ++i) {
    EnumerateRows(counts, strides, d + 1, addr + i * strides[d], rows);
  }
}

std::vector<uint64_t> Rows(const Layout& l, const SideLayout& side) {
  std::vector<uint64_t> rows;
  EnumerateRows(l.counts, side.strides, 0, 0, &rows);
  return rows;
}

// True if row i starts at i * inner for every i.
bool BruteContiguous(const std::vector<uint64_t>& rows, uint64_t inner) {
  for (size_t i = 0; i < rows.size(); ++i) {
    if (rows[i] != i * inner) return false;
  }
  return true;
}

// Bytes from the side's base to one past its last row byte.
uint64_t Extent(const Layout& l, const SideLayout& side) {
  uint64_t end = 0;
  for (uint64_t r : Rows(l, side)) end = std::max(end, r + l.inner);
  return end;
}

uint64_t Uniform(std::mt19937_64& rng, uint64_t lo, uint64_t hi) {
  return std::uniform_int_distribution<uint64_t>(lo, hi)(rng);
}

// Strides that keep rows disjoint: each loop steps over at least the whole
// extent of the loops inside it (plus optional padding); a count-1 loop may
// carry any stride.
SideLayout RandomSide(std::mt19937_64& rng, uint64_t inner,
                      const std::vector<uint64_t>& counts) {
  SideLayout s;
  s.strides.resize(counts.size());
  const bool dense = Uniform(rng, 0, 2) == 0;
  uint64_t extent = inner;
  for (size_t d = counts.size(); d-- > 0;) {
    if (counts[d] == 1 && Uniform(rng, 0, 1) == 0) {
      s.strides[d] = Uniform(rng, 0, 1000);
      continue;  // extent unchanged
    }
    const uint64_t pad =
        dense || Uniform(rng, 0, 1) == 0 ? 0 : Uniform(rng, 1, 24);
    s.strides[d] = extent + pad;
    extent += (counts[d] - 1) * s.strides[d];
  }
  s.base_offset = Uniform(rng, 0, 31);
  s.buffer_bytes = s.base_offset + extent + Uniform(rng, 0, 31);
  return s;
}

// Rows of [min_inner, max_inner] bytes under up to `max_loops` loops of up
// to `max_count` iterations.
Layout RandomLayout(std::mt19937_64& rng, uint64_t min_inner = 1,
                    uint64_t max_inner = 40, uint64_t max_loops = 4,
                    uint64_t max_count = 5) {
  Layout l;
  l.inner = Uniform(rng, min_inner, max_inner);
  const size_t n = Uniform(rng, 0, max_loops);
  for (size_t d = 0; d < n; ++d) {
    l.counts.push_back(Uniform(rng, 1, max_count));
  }
  l.source = RandomSide(rng, l.inner, l.counts);
  l.target = RandomSide(rng, l.inner, l.counts);
  return l;
}

// A hand-made layout with the same strides on both sides.
Layout HandLayout(uint64_t inner, std::vector<uint64_t> counts,
                  std::vector<uint64_t> strides) {
  Layout l;
  l.inner = inner;
  l.counts = std::move(counts);
  l.source.strides = strides;
  l.target.strides = std::move(strides);
  l.source.base_offset = 3;
  l.target.base_offset = 5;
  l.source.buffer_bytes = 3 + Extent(l, l.source) + 4;
  l.target.buffer_bytes = 5 + Extent(l, l.target) + 6;
  return l;
}

uint64_t AddressOf(const std::vector<uint8_t>& buf, uint64_t offset) {
  return static_cast<uint64_t>(reinterpret_cast<uintptr_t>(buf.data())) +
         offset;
}

// Splits [0, total) into consecutive random-sized pieces (offset, length).
std::vector<std::pair<uint64_t, uint64_t>> RandomPieces(std::mt19937_64& rng,
                                                        uint64_t total,
                                                        uint64_t inner) {
  std::vector<std::pair<uint64_t, uint64_t>> pieces;
  uint64_t pos = 0;
  while (pos < total) {
    const uint64_t left = total - pos;
    const uint64_t caps[] = {1, 3, inner, inner + 1, 2 * inner + 5, left};
    const uint64_t cap = std::min(left, caps[Uniform(rng, 0, 5)]);
    const uint64_t len = Uniform(rng, 1, cap);
    pieces.emplace_back(pos, len);
    pos += len;
  }
  return pieces;
}

// Packs [offset, offset + length) into a fresh buffer with guard bytes
// after it, checks the guard, and returns the packed bytes.
std::vector<uint8_t> PackPiece(const StridedSide& side, uint64_t offset,
                               uint64_t length) {
  std::vector<uint8_t> out(length + 8, kGuard);
  PackStream(side, offset, out.data(), length);
  for (uint64_t i = length; i < out.size(); ++i) {
    EXPECT_EQ(out[i], kGuard) << "PackStream wrote past its length";
  }
  out.resize(length);
  return out;
}

// Checks one layout end to end: contiguity, packing and unpacking.
void CheckLayout(const Layout& l, std::mt19937_64& rng,
                 const std::string& what) {
  SCOPED_TRACE(what);
  std::vector<uint8_t> src(l.source.buffer_bytes);
  for (uint8_t& b : src) b = static_cast<uint8_t>(rng());
  const std::vector<uint8_t> src_copy = src;
  std::vector<uint8_t> dst(l.target.buffer_bytes, kSentinel);

  BoundRegion region;
  region.source_address = AddressOf(src, l.source.base_offset);
  region.target_address = AddressOf(dst, l.target.base_offset);
  region.inner_bytes = l.inner;
  uint64_t bytes = l.inner;
  for (size_t d = 0; d < l.counts.size(); ++d) {
    region.loops.push_back(
        {l.counts[d], l.source.strides[d], l.target.strides[d]});
    bytes *= l.counts[d];
  }
  region.bytes = bytes;

  const StridedSide source = StridedSide::Source(region);
  const StridedSide target = StridedSide::Target(region);
  ASSERT_EQ(source.total_bytes, bytes);
  ASSERT_EQ(target.total_bytes, bytes);

  // Brute-force expectations.
  const std::vector<uint64_t> src_rows = Rows(l, l.source);
  const std::vector<uint64_t> dst_rows = Rows(l, l.target);
  ASSERT_EQ(src_rows.size() * l.inner, bytes);
  std::vector<uint8_t> stream;
  for (uint64_t r : src_rows) {
    const uint64_t at = l.source.base_offset + r;
    ASSERT_LE(at + l.inner, src.size());
    stream.insert(stream.end(), src.begin() + at, src.begin() + at + l.inner);
  }
  std::vector<uint8_t> expected_dst(dst.size(), kSentinel);
  for (size_t i = 0; i < dst_rows.size(); ++i) {
    const uint64_t at = l.target.base_offset + dst_rows[i];
    ASSERT_LE(at + l.inner, expected_dst.size());
    std::copy(stream.begin() + i * l.inner, stream.begin() + (i + 1) * l.inner,
              expected_dst.begin() + at);
  }

  // (c) Contiguity of both sides.
  EXPECT_EQ(source.contiguous(), BruteContiguous(src_rows, l.inner));
  EXPECT_EQ(target.contiguous(), BruteContiguous(dst_rows, l.inner));

  // (a) Pack: the whole stream at once.
  EXPECT_EQ(PackPiece(source, 0, bytes), stream);

  // (a) Pack: consecutive random pieces, in order and shuffled.
  auto pieces = RandomPieces(rng, bytes, l.inner);
  std::vector<uint8_t> packed(bytes, kSentinel);
  for (const auto& [off, len] : pieces) {
    const std::vector<uint8_t> piece = PackPiece(source, off, len);
    std::copy(piece.begin(), piece.end(), packed.begin() + off);
  }
  EXPECT_EQ(packed, stream) << "in-order pieces";
  pieces = RandomPieces(rng, bytes, l.inner);
  std::shuffle(pieces.begin(), pieces.end(), rng);
  std::fill(packed.begin(), packed.end(), kSentinel);
  for (const auto& [off, len] : pieces) {
    const std::vector<uint8_t> piece = PackPiece(source, off, len);
    std::copy(piece.begin(), piece.end(), packed.begin() + off);
  }
  EXPECT_EQ(packed, stream) << "shuffled pieces";

  // (a) Pack: arbitrary windows, including empty ones and the end.
  for (int k = 0; k < 8; ++k) {
    const uint64_t off = Uniform(rng, 0, bytes);
    const uint64_t len = Uniform(rng, 0, bytes - off);
    const std::vector<uint8_t> want(stream.begin() + off,
                                    stream.begin() + off + len);
    EXPECT_EQ(PackPiece(source, off, len), want)
        << "window [" << off << ", " << off + len << ")";
  }
  EXPECT_TRUE(PackPiece(source, bytes, 0).empty());
  EXPECT_EQ(src, src_copy) << "PackStream modified its source";

  // (b) Unpack in random-sized pieces in random order.
  pieces = RandomPieces(rng, bytes, l.inner);
  std::shuffle(pieces.begin(), pieces.end(), rng);
  for (const auto& [off, len] : pieces) {
    const std::vector<uint8_t> piece(stream.begin() + off,
                                     stream.begin() + off + len);
    UnpackStream(target, off, piece.data(), len);
  }
  UnpackStream(target, bytes, nullptr, 0);  // empty at the end: no-op
  EXPECT_EQ(dst, expected_dst);
  if (dst != expected_dst) {
    for (size_t i = 0; i < dst.size(); ++i) {
      if (dst[i] != expected_dst[i]) {
        ADD_FAILURE() << "first target mismatch at byte " << i;
        break;
      }
    }
  }

  // (b) Round trip: unpacking the whole stream at once gives the same.
  std::vector<uint8_t> dst2(dst.size(), kSentinel);
  BoundRegion region2 = region;
  region2.target_address = AddressOf(dst2, l.target.base_offset);
  UnpackStream(StridedSide::Target(region2), 0, stream.data(), bytes);
  EXPECT_EQ(dst2, expected_dst);

  // (d) Merged sides carry the same stream in no more, no shorter rows.
  const StridedSide merged_source = source.Merged();
  const StridedSide merged_target = StridedSide::Target(region2).Merged();
  EXPECT_EQ(merged_source.total_bytes, bytes);
  EXPECT_EQ(merged_source.contiguous(), source.contiguous());
  EXPECT_EQ(merged_target.contiguous(), target.contiguous());
  EXPECT_LE(merged_source.counts.size(), source.counts.size());
  EXPECT_GE(merged_source.inner_bytes, source.inner_bytes);
  EXPECT_EQ(PackPiece(merged_source, 0, bytes), stream) << "merged";
  std::fill(packed.begin(), packed.end(), kSentinel);
  for (const auto& [off, len] : RandomPieces(rng, bytes, l.inner)) {
    const std::vector<uint8_t> piece = PackPiece(merged_source, off, len);
    std::copy(piece.begin(), piece.end(), packed.begin() + off);
  }
  EXPECT_EQ(packed, stream) << "merged, in pieces";
  std::fill(dst2.begin(), dst2.end(), kSentinel);
  for (const auto& [off, len] : RandomPieces(rng, bytes, l.inner)) {
    UnpackStream(merged_target, off, stream.data() + off, len);
  }
  EXPECT_EQ(dst2, expected_dst) << "merged target";

  // (e) ForEachStreamRow visits the stream's rows in order.
  for (const StridedSide* side : {&source, &merged_source}) {
    std::vector<uint8_t> rows;
    ForEachStreamRow(*side, [&](const uint8_t* p, uint64_t at, uint64_t n) {
      EXPECT_EQ(at, rows.size());
      rows.insert(rows.end(), p, p + n);
    });
    EXPECT_EQ(rows, stream) << "rows of the stream";
  }

  // (f) StreamWriter: increasing pieces, every other one skipped, land
  // where UnpackStream puts them (small pieces go through its queue).
  const StridedSide target2 = StridedSide::Target(region2);
  for (const StridedSide* side : {&target2, &merged_target}) {
    std::vector<uint8_t> want(dst.size(), kSentinel);
    std::vector<uint8_t> got(dst.size(), kSentinel);
    StridedSide to_want = *side;
    to_want.base = want.data() + (side->base - dst2.data());
    StridedSide to_got = *side;
    to_got.base = got.data() + (side->base - dst2.data());
    {
      StreamWriter writer(to_got);
      bool skip = false;
      for (const auto& [off, len] : RandomPieces(rng, bytes, 3)) {
        skip = !skip;
        if (skip) continue;
        UnpackStream(to_want, off, stream.data() + off, len);
        writer.Write(off, stream.data() + off, len);
      }
    }  // the destructor lands the queued writes
    EXPECT_EQ(got, want) << "stream writer";
  }
}

std::string Describe(const Layout& l) {
  std::string s = "inner=" + std::to_string(l.inner) + " loops=";
  for (size_t d = 0; d < l.counts.size(); ++d) {
    s += "(" + std::to_string(l.counts[d]) + "," +
         std::to_string(l.source.strides[d]) + "," +
         std::to_string(l.target.strides[d]) + ")";
  }
  return s;
}

TEST(StridedStreamTest, RandomRegionsMatchBruteForce) {
  std::mt19937_64 rng(20240611);
  int contiguous_sources = 0;
  int strided_sources = 0;
  for (int i = 0; i < 500; ++i) {
    const Layout l = RandomLayout(rng);
    CheckLayout(l, rng, "region " + std::to_string(i) + ": " + Describe(l));
    if (BruteContiguous(Rows(l, l.source), l.inner)) {
      ++contiguous_sources;
    } else {
      ++strided_sources;
    }
    if (HasFatalFailure() || HasNonfatalFailure()) break;
  }
  // The generator exercises both kinds.
  EXPECT_GT(contiguous_sources, 50);
  EXPECT_GT(strided_sources, 50);
}

TEST(StridedStreamTest, LongRowsMatchBruteForce) {
  // Rows above the short-row limit (512 bytes) take the plain walk.
  std::mt19937_64 rng(77);
  for (int i = 0; i < 60; ++i) {
    const Layout l = RandomLayout(rng, 400, 1500, 3, 4);
    CheckLayout(l, rng, "long rows " + std::to_string(i) + ": " + Describe(l));
    if (HasFatalFailure() || HasNonfatalFailure()) break;
  }
}

TEST(StridedStreamTest, ManyShortRowsInGroups) {
  // 64-byte rows out of every 128 (the half of a TP-split row), more rows
  // than one copy group, packed and unpacked in pieces that split rows.
  Layout l = HandLayout(64, {3, 75}, {75 * 128 + 64, 128});
  std::mt19937_64 rng(5);
  CheckLayout(l, rng, "225 short rows");
}

TEST(StridedStreamTest, MergedFoldsRowsThatRunOn) {
  struct Case {
    const char* name;
    uint64_t inner;
    std::vector<uint64_t> counts, strides;
    uint64_t merged_inner;
    std::vector<uint64_t> merged_counts, merged_strides;
  };
  const std::vector<Case> cases = {
      // A count-1 loop is dropped, then 2 x 4 rows that run on: one run.
      {"runs on", 64, {2, 1, 4}, {256, 9999, 64}, 512, {}, {}},
      // The outer loop steps over exactly the inner one's extent.
      {"outer folds", 2, {3, 4}, {40, 10}, 2, {12}, {10}},
      {"strided: unchanged", 64, {4}, {128}, 64, {4}, {128}},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    StridedSide s;
    s.inner_bytes = c.inner;
    s.counts = c.counts;
    s.strides = c.strides;
    s.total_bytes = c.inner;
    for (uint64_t n : c.counts) s.total_bytes *= n;
    const StridedSide m = s.Merged();
    EXPECT_EQ(m.inner_bytes, c.merged_inner);
    EXPECT_EQ(m.counts, c.merged_counts);
    EXPECT_EQ(m.strides, c.merged_strides);
    EXPECT_EQ(m.total_bytes, s.total_bytes);
    EXPECT_EQ(m.contiguous(), s.contiguous());
  }
}

TEST(StridedStreamTest, HandMadeContiguity) {
  struct Case {
    const char* name;
    Layout layout;
    bool contiguous;
  };
  std::vector<Case> cases = {
      {"no loops", HandLayout(7, {}, {}), true},
      {"dense strides", HandLayout(2, {3, 4}, {8, 2}), true},
      {"dense three loops", HandLayout(3, {2, 3, 2}, {18, 6, 3}), true},
      {"count-1 loops with arbitrary strides",
       HandLayout(3, {1, 5, 1}, {999, 3, 12345}), true},
      {"count-1 loops with zero stride", HandLayout(4, {1, 1}, {0, 0}), true},
      {"all count-1", HandLayout(9, {1, 1, 1}, {5, 77, 1}), true},
      {"gap between rows", HandLayout(4, {2}, {10}), false},
      {"gap in inner loop", HandLayout(4, {2, 2}, {16, 5}), false},
      {"gap in outer loop only", HandLayout(4, {2, 2}, {9, 4}), false},
      {"transposed", HandLayout(4, {2, 2}, {4, 8}), false},
      {"gap behind count-1 loop", HandLayout(2, {3, 1}, {3, 100}), false},
  };
  std::mt19937_64 rng(7);
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    ASSERT_EQ(BruteContiguous(Rows(c.layout, c.layout.source), c.layout.inner),
              c.contiguous);
    BoundRegion region;
    region.inner_bytes = c.layout.inner;
    for (size_t d = 0; d < c.layout.counts.size(); ++d) {
      region.loops.push_back({c.layout.counts[d], c.layout.source.strides[d],
                              c.layout.target.strides[d]});
    }
    EXPECT_EQ(StridedSide::Source(region).contiguous(), c.contiguous);
    EXPECT_EQ(StridedSide::Target(region).contiguous(), c.contiguous);
    CheckLayout(c.layout, rng, c.name);
  }
}

TEST(StridedStreamTest, DifferentContiguityPerSide) {
  Layout l = HandLayout(4, {3, 2}, {8, 4});
  l.target.strides = {20, 6};
  l.target.buffer_bytes = l.target.base_offset + Extent(l, l.target) + 2;
  BoundRegion region;
  region.inner_bytes = 4;
  region.loops = {{3, 8, 20}, {2, 4, 6}};
  EXPECT_TRUE(StridedSide::Source(region).contiguous());
  EXPECT_FALSE(StridedSide::Target(region).contiguous());
  std::mt19937_64 rng(11);
  CheckLayout(l, rng, "source dense, target strided");
}

TEST(StridedStreamTest, ManyLoopsBeyondInlineIndex) {
  // More than 16 loops, mostly count 1, so the index spills to the heap.
  std::vector<uint64_t> counts(18, 1);
  std::vector<uint64_t> strides(18, 0);
  counts[2] = 2;
  counts[9] = 3;
  counts[17] = 2;
  strides[17] = 5;  // inner 3 + gap 2
  strides[9] = 12;  // extent of the loop inside (8), + 4
  strides[2] = 40;  // extent of the loops inside (32), + 8
  for (size_t d = 0; d < 18; ++d) {
    if (counts[d] == 1) strides[d] = 1000 + d;
  }
  Layout l = HandLayout(3, counts, strides);
  std::mt19937_64 rng(3);
  CheckLayout(l, rng, "18 loops");
  BoundRegion region;
  region.inner_bytes = 3;
  for (size_t d = 0; d < 18; ++d) {
    region.loops.push_back({counts[d], strides[d], strides[d]});
  }
  EXPECT_EQ(StridedSide::Source(region).total_bytes, 3u * 2 * 3 * 2);
  EXPECT_FALSE(StridedSide::Source(region).contiguous());
}

TEST(StridedStreamTest, SourceAndTargetPickTheirSide) {
  BoundRegion region;
  region.source_address = 0x10000;
  region.target_address = 0x20000;
  region.inner_bytes = 6;
  region.loops = {{3, 100, 7}, {2, 50, 60}, {4, 6, 1000}};
  region.bytes = 6 * 3 * 2 * 4;
  region.region = 9;

  const StridedSide s = StridedSide::Source(region);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(s.base), 0x10000u);
  EXPECT_EQ(s.inner_bytes, 6u);
  EXPECT_EQ(s.counts, (std::vector<uint64_t>{3, 2, 4}));
  EXPECT_EQ(s.strides, (std::vector<uint64_t>{100, 50, 6}));
  EXPECT_EQ(s.total_bytes, 144u);

  const StridedSide t = StridedSide::Target(region);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(t.base), 0x20000u);
  EXPECT_EQ(t.inner_bytes, 6u);
  EXPECT_EQ(t.counts, (std::vector<uint64_t>{3, 2, 4}));
  EXPECT_EQ(t.strides, (std::vector<uint64_t>{7, 60, 1000}));
  EXPECT_EQ(t.total_bytes, 144u);

  BoundRegion flat;
  flat.source_address = 0x123;
  flat.target_address = 0x456;
  flat.inner_bytes = 17;
  flat.bytes = 17;
  const StridedSide fs = StridedSide::Source(flat);
  const StridedSide ft = StridedSide::Target(flat);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(fs.base), 0x123u);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(ft.base), 0x456u);
  EXPECT_TRUE(fs.counts.empty());
  EXPECT_TRUE(fs.strides.empty());
  EXPECT_EQ(fs.total_bytes, 17u);
  EXPECT_EQ(ft.total_bytes, 17u);
  EXPECT_TRUE(fs.contiguous());
  EXPECT_TRUE(ft.contiguous());
}

}  // namespace
}  // namespace reshard::internal
