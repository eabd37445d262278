// ComputeRegionGeometry (docs/planner.md, step 6): the prototype's worked
// geometry vectors and a brute-force check of loops x inner_bytes against
// coordinates.

#include "plan/geometry.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <random>
#include <utility>
#include <vector>

#include "reshard/plan.h"

namespace reshard {
namespace {

using internal::ComputeRegionGeometry;
using internal::RegionGeometry;

using ::testing::ElementsAre;

// Row-major byte strides of a box of `shape`.
std::vector<uint64_t> Strides(const Dims& shape, int64_t itemsize) {
  std::vector<uint64_t> s(shape.size());
  uint64_t acc = static_cast<uint64_t>(itemsize);
  for (size_t d = shape.size(); d-- > 0;) {
    s[d] = acc;
    acc *= static_cast<uint64_t>(shape[d]);
  }
  return s;
}

// The prototype's (unmerged) segment count, derived independently: the
// contiguous suffix shared by both sides, then the product of the outer
// overlap extents.
// `outer_dims` receives the number of prototype outer loops.
uint64_t PrototypeSegments(const Dims& ss, const Dims& ts, const Dims& os,
                           int64_t itemsize, size_t* outer_dims = nullptr) {
  const auto s = Strides(ss, itemsize);
  const auto t = Strides(ts, itemsize);
  size_t k = os.size() - 1;
  uint64_t inner = static_cast<uint64_t>(os[k] * itemsize);
  while (k > 0 && s[k - 1] == inner && t[k - 1] == inner) {
    --k;
    inner *= static_cast<uint64_t>(os[k]);
  }
  uint64_t n = 1;
  for (size_t d = 0; d < k; ++d) n *= static_cast<uint64_t>(os[d]);
  if (outer_dims != nullptr) *outer_dims = k;
  return n;
}

// Every (source byte, target byte) pair that loops x inner_bytes describe,
// in enumeration order.
std::vector<std::pair<uint64_t, uint64_t>> ExpandGeometry(
    const RegionGeometry& g) {
  std::vector<std::pair<uint64_t, uint64_t>> out;
  std::vector<uint64_t> idx(g.loops.size(), 0);
  while (true) {
    uint64_t s = g.source_base_offset;
    uint64_t t = g.target_base_offset;
    for (size_t i = 0; i < g.loops.size(); ++i) {
      s += idx[i] * g.loops[i].source_stride;
      t += idx[i] * g.loops[i].target_stride;
    }
    for (uint64_t b = 0; b < g.inner_bytes; ++b) out.emplace_back(s + b, t + b);
    size_t i = g.loops.size();
    while (i > 0) {
      --i;
      if (++idx[i] < g.loops[i].count) break;
      idx[i] = 0;
      if (i == 0) return out;
    }
    if (g.loops.empty()) return out;
  }
}

// Every (source byte, target byte) pair of the overlap, from coordinates.
std::vector<std::pair<uint64_t, uint64_t>> ExpandCoordinates(
    const Dims& so, const Dims& ss, const Dims& to, const Dims& ts,
    const Dims& oo, const Dims& os, int64_t itemsize) {
  const auto s = Strides(ss, itemsize);
  const auto t = Strides(ts, itemsize);
  std::vector<std::pair<uint64_t, uint64_t>> out;
  Dims c(os.size(), 0);
  while (true) {
    uint64_t sb = 0;
    uint64_t tb = 0;
    for (size_t d = 0; d < os.size(); ++d) {
      sb += static_cast<uint64_t>(oo[d] + c[d] - so[d]) * s[d];
      tb += static_cast<uint64_t>(oo[d] + c[d] - to[d]) * t[d];
    }
    for (int64_t b = 0; b < itemsize; ++b) out.emplace_back(sb + b, tb + b);
    size_t d = os.size();
    while (d > 0) {
      --d;
      if (++c[d] < os[d]) break;
      c[d] = 0;
      if (d == 0) return out;
    }
  }
}

// Checks the canonical form of a geometry: no count-1 loop, no two adjacent
// loops that nest exactly on both sides, no innermost loop that steps exactly
// inner_bytes on both sides.
void ExpectCanonical(const RegionGeometry& g) {
  for (const auto& l : g.loops) EXPECT_GT(l.count, 1u);
  for (size_t i = 0; i + 1 < g.loops.size(); ++i) {
    const auto& a = g.loops[i];
    const auto& b = g.loops[i + 1];
    EXPECT_FALSE(a.source_stride == b.count * b.source_stride &&
                 a.target_stride == b.count * b.target_stride)
        << "loops " << i << " and " << i + 1 << " should have merged";
  }
  if (!g.loops.empty()) {
    EXPECT_FALSE(g.loops.back().source_stride == g.inner_bytes &&
                 g.loops.back().target_stride == g.inner_bytes)
        << "innermost loop should have folded into inner_bytes";
  }
}

TEST(GeometryTest, VectorA) {
  // Source (1,0,0)/(2,6,8); target (0,2,0)/(4,3,8); overlap (1,2,0)/(2,3,8).
  const RegionGeometry g = ComputeRegionGeometry(
      {1, 0, 0}, {2, 6, 8}, {0, 2, 0}, {4, 3, 8}, {1, 2, 0}, {2, 3, 8}, 2);
  EXPECT_EQ(g.source_base_offset, 32u);
  EXPECT_EQ(g.target_base_offset, 48u);
  EXPECT_EQ(g.inner_bytes, 48u);
  EXPECT_THAT(g.loops, ElementsAre(OuterLoop{2, 96, 48}));
  EXPECT_EQ(g.segments, 2u);
  // Prototype segments (32,48,48), (128,96,48): the same runs.
  const auto pairs = ExpandGeometry(g);
  ASSERT_EQ(pairs.size(), 96u);
  EXPECT_EQ(pairs[0], std::make_pair(uint64_t{32}, uint64_t{48}));
  EXPECT_EQ(pairs[48], std::make_pair(uint64_t{128}, uint64_t{96}));
}

TEST(GeometryTest, VectorB) {
  // Same source; target (0,0,4)/(4,6,4); overlap (1,0,4)/(2,6,4). The
  // prototype's outer loops (2,6) with strides (96,16)/(48,8) nest exactly
  // on both sides (96 == 6*16, 48 == 6*8), so they merge into one loop.
  const RegionGeometry g = ComputeRegionGeometry(
      {1, 0, 0}, {2, 6, 8}, {0, 0, 4}, {4, 6, 4}, {1, 0, 4}, {2, 6, 4}, 2);
  EXPECT_EQ(g.source_base_offset, 8u);
  EXPECT_EQ(g.target_base_offset, 48u);
  EXPECT_EQ(g.inner_bytes, 8u);
  EXPECT_THAT(g.loops, ElementsAre(OuterLoop{12, 16, 8}));
  EXPECT_EQ(g.segments, 12u);
}

TEST(GeometryTest, VectorC) {
  // [4,6,8] EP2 dim0 -> TP2 dim1, ep0 -> tp1.
  const RegionGeometry g = ComputeRegionGeometry(
      {0, 0, 0}, {2, 6, 8}, {0, 3, 0}, {4, 3, 8}, {0, 3, 0}, {2, 3, 8}, 2);
  EXPECT_EQ(g.source_base_offset, 48u);
  EXPECT_EQ(g.target_base_offset, 0u);
  EXPECT_EQ(g.inner_bytes, 48u);
  EXPECT_THAT(g.loops, ElementsAre(OuterLoop{2, 96, 48}));
  EXPECT_EQ(g.segments, 2u);
}

TEST(GeometryTest, VectorD) {
  // [4,6,8] EP2 dim0 -> TP2 dim2, ep0 -> tp1: prototype outer (2,6) with
  // strides (96,16)/(48,8), merged into (12,16,8).
  const RegionGeometry g = ComputeRegionGeometry(
      {0, 0, 0}, {2, 6, 8}, {0, 0, 4}, {4, 6, 4}, {0, 0, 4}, {2, 6, 4}, 2);
  EXPECT_EQ(g.source_base_offset, 8u);
  EXPECT_EQ(g.target_base_offset, 0u);
  EXPECT_EQ(g.inner_bytes, 8u);
  EXPECT_THAT(g.loops, ElementsAre(OuterLoop{12, 16, 8}));
  EXPECT_EQ(g.segments, 12u);
}

TEST(GeometryTest, VectorE) {
  // [8,8192,8192] bf16 EP8 dim0 -> TP8 dim2: every region has 8,192
  // segments of 2,048 bytes; the count-1 expert dimension is dropped.
  for (int64_t e = 0; e < 8; ++e) {
    for (int64_t t = 0; t < 8; ++t) {
      const RegionGeometry g = ComputeRegionGeometry(
          {e, 0, 0}, {1, 8192, 8192}, {0, 0, t * 1024}, {8, 8192, 1024},
          {e, 0, t * 1024}, {1, 8192, 1024}, 2);
      EXPECT_EQ(g.source_base_offset, static_cast<uint64_t>(t * 2048));
      EXPECT_EQ(g.target_base_offset,
                static_cast<uint64_t>(e) * 8192 * 1024 * 2);
      EXPECT_EQ(g.inner_bytes, 2048u);
      EXPECT_THAT(g.loops, ElementsAre(OuterLoop{8192, 16384, 2048}));
      EXPECT_EQ(g.segments, 8192u);
    }
  }
}

TEST(GeometryTest, CrossDimDim0ToDim2MergesIntoOneLoop) {
  // [128,4096,16384] uint8 TP4 dim0 -> TP4 dim2: overlap [32,4096,4096].
  // Prototype: inner 4096, outer (32,4096) = 131,072 segments. Outer
  // strides (67108864,16384)/(16777216,4096) nest on both sides.
  for (int64_t s = 0; s < 4; ++s) {
    for (int64_t t = 0; t < 4; ++t) {
      const RegionGeometry g = ComputeRegionGeometry(
          {s * 32, 0, 0}, {32, 4096, 16384}, {0, 0, t * 4096},
          {128, 4096, 4096}, {s * 32, 0, t * 4096}, {32, 4096, 4096}, 1);
      EXPECT_EQ(g.source_base_offset, static_cast<uint64_t>(t * 4096));
      EXPECT_EQ(g.target_base_offset,
                static_cast<uint64_t>(s) * 32 * 4096 * 4096);
      EXPECT_EQ(g.inner_bytes, 4096u);
      EXPECT_THAT(g.loops, ElementsAre(OuterLoop{131072, 16384, 4096}));
      EXPECT_EQ(g.segments, 131072u);
    }
  }
}

TEST(GeometryTest, FullyContiguousOverlapHasNoLoops) {
  // TP4 -> TP8 on dim0 of [64,16] bf16: rows are whole on both sides.
  const RegionGeometry g = ComputeRegionGeometry({16, 0}, {16, 16}, {24, 0},
                                                 {8, 16}, {24, 0}, {8, 16}, 2);
  EXPECT_EQ(g.source_base_offset, 8u * 32);
  EXPECT_EQ(g.target_base_offset, 0u);
  EXPECT_EQ(g.inner_bytes, 8u * 32);
  EXPECT_TRUE(g.loops.empty());
  EXPECT_EQ(g.segments, 1u);
}

TEST(GeometryTest, OneDimensional) {
  const RegionGeometry g =
      ComputeRegionGeometry({2}, {4}, {4}, {4}, {4}, {2}, 1);
  EXPECT_EQ(g.source_base_offset, 2u);
  EXPECT_EQ(g.target_base_offset, 0u);
  EXPECT_EQ(g.inner_bytes, 2u);
  EXPECT_TRUE(g.loops.empty());
  EXPECT_EQ(g.segments, 1u);
}

TEST(GeometryTest, CountOneDimensionsAreDropped) {
  // Overlap (1,3,1,2) inside source (2,3,4,4) and target (3,3,2,2): the
  // count-1 dims 0 and 2 vanish; dim 1 steps 32 bytes in the source and 4
  // in the target.
  const Dims so{0, 0, 0, 0}, ss{2, 3, 4, 4};
  const Dims to{1, 0, 1, 2}, ts{3, 3, 2, 2};
  const Dims oo{1, 0, 1, 2}, os{1, 3, 1, 2};
  const RegionGeometry g = ComputeRegionGeometry(so, ss, to, ts, oo, os, 1);
  EXPECT_EQ(g.inner_bytes, 2u);
  EXPECT_THAT(g.loops, ElementsAre(OuterLoop{3, 16, 4}));
  // Prototype: only the last dim is contiguous on both sides, so its outer
  // loops are (1,3,1): 3 segments.
  EXPECT_EQ(g.segments, 3u);
  EXPECT_EQ(ExpandGeometry(g), ExpandCoordinates(so, ss, to, ts, oo, os, 1));
}

TEST(GeometryTest, SuffixMergesThroughCountOneDimensions) {
  // Overlap (3,1,2) of source (3,1,2) and target (3,1,2): every dimension
  // below dim 0 spans both boxes (the count-1 dim 1 included), so the whole
  // overlap is one contiguous run.
  const RegionGeometry g = ComputeRegionGeometry(
      {0, 0, 0}, {3, 1, 2}, {0, 0, 0}, {3, 1, 2}, {0, 0, 0}, {3, 1, 2}, 2);
  EXPECT_EQ(g.inner_bytes, 12u);
  EXPECT_TRUE(g.loops.empty());
  EXPECT_EQ(g.segments, 1u);
}

TEST(GeometryTest, RowsOfDifferentLengthDoNotFold) {
  // Source rows of 4 elements, target rows of 2: the overlap (3,1,2) is a
  // whole target row but half a source row, so dim 0 stays a loop with
  // strides 8 / 4 bytes.
  const Dims so{0, 0, 0}, ss{3, 1, 4};
  const Dims to{0, 0, 0}, ts{3, 1, 2};
  const Dims oo{0, 0, 0}, os{3, 1, 2};
  const RegionGeometry g = ComputeRegionGeometry(so, ss, to, ts, oo, os, 2);
  EXPECT_EQ(g.inner_bytes, 4u);
  EXPECT_THAT(g.loops, ElementsAre(OuterLoop{3, 8, 4}));
  EXPECT_EQ(g.segments, 3u);
  EXPECT_EQ(ExpandGeometry(g), ExpandCoordinates(so, ss, to, ts, oo, os, 2));

  // Source (4,2,2), target (4,1,2), overlap (4,1,2): source dim 1 steps one
  // run (4 bytes) but dim 0 steps 8, target dim 0 steps 4 = one run.
  const RegionGeometry h = ComputeRegionGeometry(
      {0, 0, 0}, {4, 2, 2}, {0, 0, 0}, {4, 1, 2}, {0, 0, 0}, {4, 1, 2}, 1);
  EXPECT_EQ(h.inner_bytes, 2u);
  EXPECT_THAT(h.loops, ElementsAre(OuterLoop{4, 4, 2}));
  EXPECT_EQ(h.segments, 4u);
}

TEST(GeometryTest, RandomizedMatchesCoordinates) {
  std::mt19937_64 rng(0x5eed0001);
  auto uniform = [&](int64_t lo, int64_t hi) {
    return std::uniform_int_distribution<int64_t>(lo, hi)(rng);
  };
  const int64_t itemsizes[] = {1, 2, 4, 8};
  int cases = 0;
  int multi_loop = 0;
  int merged = 0;
  int suffix_merged = 0;
  while (cases < 500) {
    const size_t n = static_cast<size_t>(uniform(1, 4));
    const int64_t itemsize = itemsizes[uniform(0, 3)];
    Dims global(n), so(n), ss(n), to(n), ts(n), oo(n), os(n);
    bool empty = false;
    for (size_t d = 0; d < n; ++d) {
      global[d] = uniform(1, 7);
      // Biased towards full extents so that suffixes merge often.
      auto box = [&](int64_t* o, int64_t* s) {
        if (uniform(0, 2) == 0) {
          *o = 0;
          *s = global[d];
          return;
        }
        *o = uniform(0, global[d] - 1);
        *s = uniform(1, global[d] - *o);
      };
      box(&so[d], &ss[d]);
      box(&to[d], &ts[d]);
      oo[d] = std::max(so[d], to[d]);
      const int64_t end = std::min(so[d] + ss[d], to[d] + ts[d]);
      if (end <= oo[d]) {
        empty = true;
        break;
      }
      os[d] = end - oo[d];
    }
    if (empty) continue;
    ++cases;
    SCOPED_TRACE("case " + std::to_string(cases));
    const RegionGeometry g =
        ComputeRegionGeometry(so, ss, to, ts, oo, os, itemsize);
    ExpectCanonical(g);
    size_t outer_dims = 0;
    EXPECT_EQ(g.segments, PrototypeSegments(ss, ts, os, itemsize, &outer_dims));
    const auto want = ExpandCoordinates(so, ss, to, ts, oo, os, itemsize);
    const auto got = ExpandGeometry(g);
    // Same pairs in the same (row-major) order: every byte exactly once.
    ASSERT_EQ(got, want);
    uint64_t ops = 1;
    for (const auto& l : g.loops) ops *= l.count;
    // Dropping count-1 loops and merging nested ones keep the number of
    // runs; only the loop rank shrinks.
    EXPECT_EQ(ops, g.segments);
    size_t nontrivial = 0;
    for (size_t d = 0; d < outer_dims; ++d) nontrivial += os[d] > 1;
    EXPECT_LE(g.loops.size(), nontrivial);
    if (g.loops.size() > 1) ++multi_loop;
    if (g.loops.size() < nontrivial) ++merged;
    if (g.inner_bytes > static_cast<uint64_t>(os[n - 1] * itemsize) &&
        !g.loops.empty()) {
      ++suffix_merged;
    }
    // Bounds: the last byte touched lies inside both fragments.
    uint64_t smax = g.source_base_offset + g.inner_bytes;
    uint64_t tmax = g.target_base_offset + g.inner_bytes;
    for (const auto& l : g.loops) {
      smax += (l.count - 1) * l.source_stride;
      tmax += (l.count - 1) * l.target_stride;
    }
    uint64_t snb = static_cast<uint64_t>(itemsize);
    uint64_t tnb = snb;
    for (size_t d = 0; d < n; ++d) {
      snb *= static_cast<uint64_t>(ss[d]);
      tnb *= static_cast<uint64_t>(ts[d]);
    }
    EXPECT_LE(smax, snb);
    EXPECT_LE(tmax, tnb);
  }
  // The generator exercises the interesting shapes.
  EXPECT_GT(multi_loop, 10);
  EXPECT_GT(merged, 10);
  EXPECT_GT(suffix_merged, 10);
}

}  // namespace
}  // namespace reshard
