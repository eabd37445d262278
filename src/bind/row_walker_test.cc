// WalkRows and its forms (ForEachRegionRow, WalkStreamRange,
// CopyRegionRows) against a brute-force expansion of the loop nest: every
// row's offsets computed on their own by division, for random nests, every
// sub-range of rows and nests deeper than the inline index.

#include "bind/row_walker.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <random>
#include <utility>
#include <vector>

namespace reshard::internal {
namespace {

// The brute force: row `row`'s offsets on both sides, by division.
std::pair<uint64_t, uint64_t> RowOffsets(const BoundRegion& r, uint64_t row) {
  uint64_t src = 0;
  uint64_t dst = 0;
  for (size_t d = r.loops.size(); d-- > 0;) {
    const uint64_t i = row % r.loops[d].count;
    row /= r.loops[d].count;
    src += i * r.loops[d].source_stride;
    dst += i * r.loops[d].target_stride;
  }
  return {src, dst};
}

BoundRegion RandomRegion(std::mt19937_64& rng, size_t loops) {
  BoundRegion r;
  r.inner_bytes = 1 + rng() % 9;
  for (size_t d = 0; d < loops; ++d) {
    r.loops.push_back({1 + rng() % 4, rng() % 1000, rng() % 1000});
  }
  r.bytes = r.inner_bytes * RowCount(r);
  return r;
}

std::vector<std::pair<uint64_t, uint64_t>> Walked(const BoundRegion& r,
                                                  uint64_t first,
                                                  uint64_t count) {
  std::vector<std::pair<uint64_t, uint64_t>> rows;
  ForEachRegionRow(r, first, count, [&](uint64_t src, uint64_t dst) {
    rows.emplace_back(src, dst);
  });
  return rows;
}

TEST(RowWalkerTest, RowCount) {
  BoundRegion r;
  EXPECT_EQ(RowCount(r), 1u);
  r.loops = {{3, 0, 0}, {5, 0, 0}};
  EXPECT_EQ(RowCount(r), 15u);
}

TEST(RowWalkerTest, EveryRangeOfRandomNestsMatchesBruteForce) {
  std::mt19937_64 rng(11);
  for (int iter = 0; iter < 300; ++iter) {
    const BoundRegion r = RandomRegion(rng, rng() % 5);
    const uint64_t rows = RowCount(r);
    for (uint64_t first = 0; first <= rows; ++first) {
      for (uint64_t count = 0; first + count <= rows; ++count) {
        const auto walked = Walked(r, first, count);
        ASSERT_EQ(walked.size(), count);
        for (uint64_t k = 0; k < count; ++k) {
          ASSERT_EQ(walked[k], RowOffsets(r, first + k))
              << "iteration " << iter << ", row " << first + k;
        }
      }
    }
  }
}

TEST(RowWalkerTest, NoLoopsIsOneRowAtTheBase) {
  BoundRegion r;
  r.inner_bytes = 7;
  EXPECT_TRUE(Walked(r, 0, 0).empty());
  EXPECT_EQ(Walked(r, 0, 1),
            (std::vector<std::pair<uint64_t, uint64_t>>{{0, 0}}));
}

// More loops than the inline index holds; count-1 loops with large strides
// contribute nothing.
TEST(RowWalkerTest, DeepNestsBeyondTheInlineIndex) {
  std::mt19937_64 rng(5);
  for (size_t loops : {16u, 17u, 24u}) {
    BoundRegion r;
    r.inner_bytes = 2;
    for (size_t d = 0; d < loops; ++d) {
      const bool counted = d % 7 == 3 || d + 1 == loops;
      r.loops.push_back({counted ? 2 + rng() % 2 : 1, 10000 + rng() % 100,
                         20000 + rng() % 100});
    }
    const uint64_t rows = RowCount(r);
    ASSERT_GT(rows, 1u);
    for (uint64_t first = 0; first < rows; ++first) {
      const auto walked = Walked(r, first, rows - first);
      for (uint64_t k = 0; k < walked.size(); ++k) {
        ASSERT_EQ(walked[k], RowOffsets(r, first + k)) << loops << " loops";
      }
    }
  }
}

// The stream form: pieces cover exactly the byte range, in order, each
// within one row, at the row's brute-force offset.
TEST(RowWalkerTest, StreamRangesMatchBruteForce) {
  std::mt19937_64 rng(3);
  for (int iter = 0; iter < 200; ++iter) {
    const BoundRegion r = RandomRegion(rng, rng() % 4);
    std::vector<uint64_t> counts;
    std::vector<uint64_t> strides;
    for (const OuterLoop& l : r.loops) {
      counts.push_back(l.count);
      strides.push_back(l.target_stride);
    }
    uint8_t* const base = reinterpret_cast<uint8_t*>(uintptr_t{1} << 20);
    for (uint64_t offset = 0; offset <= r.bytes; ++offset) {
      const uint64_t length = rng() % (r.bytes - offset + 1);
      uint64_t next = 0;
      WalkStreamRange(SideLoops(counts, strides), base, r.inner_bytes, offset,
                      length, [&](uint8_t* p, uint64_t at, uint64_t n) {
                        ASSERT_EQ(at, next);
                        ASSERT_GT(n, 0u);
                        const uint64_t byte = offset + at;
                        const uint64_t row = byte / r.inner_bytes;
                        ASSERT_LE(byte % r.inner_bytes + n, r.inner_bytes);
                        ASSERT_EQ(p, base + RowOffsets(r, row).second +
                                         byte % r.inner_bytes);
                        next += n;
                      });
      ASSERT_EQ(next, length) << "iteration " << iter;
    }
  }
}

// CopyRegionRows moves each row's bytes from its source offset to its
// target offset, and nothing else.
TEST(RowWalkerTest, CopyRegionRowsMatchesBruteForce) {
  std::mt19937_64 rng(8);
  for (int iter = 0; iter < 100; ++iter) {
    BoundRegion r = RandomRegion(rng, 1 + rng() % 3);
    // Non-overlapping rows: each stride spans the loops inside it.
    uint64_t src_span = r.inner_bytes;
    uint64_t dst_span = r.inner_bytes;
    for (size_t d = r.loops.size(); d-- > 0;) {
      r.loops[d].source_stride = src_span + rng() % 3;
      r.loops[d].target_stride = dst_span + rng() % 5;
      src_span = r.loops[d].source_stride * r.loops[d].count;
      dst_span = r.loops[d].target_stride * r.loops[d].count;
    }
    std::vector<uint8_t> src(src_span);
    for (auto& b : src) b = static_cast<uint8_t>(rng());
    std::vector<uint8_t> dst(dst_span, 0xA5);
    std::vector<uint8_t> expected = dst;
    r.source_address = reinterpret_cast<uint64_t>(src.data());
    r.target_address = reinterpret_cast<uint64_t>(dst.data());
    const uint64_t rows = RowCount(r);
    const uint64_t first = rng() % rows;
    const uint64_t count = rng() % (rows - first + 1);
    for (uint64_t row = first; row < first + count; ++row) {
      const auto [s, t] = RowOffsets(r, row);
      std::copy_n(src.begin() + s, r.inner_bytes, expected.begin() + t);
    }
    CopyRegionSegments(r, first, count);
    ASSERT_EQ(dst, expected) << "iteration " << iter;
  }
}

}  // namespace
}  // namespace reshard::internal
