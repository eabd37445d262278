// Tests of ExactlyCovers and FindOverlap: hand-picked tilings and defects in
// 1-D to 9-D, plus a seeded randomized comparison against a brute-force
// cell-count oracle.

#include "util/box_cover.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <optional>
#include <random>
#include <string>
#include <utility>
#include <vector>

namespace reshard::internal {
namespace {

struct Box {
  std::vector<int64_t> off;
  std::vector<int64_t> shape;
};

std::vector<BoxRef> Refs(const std::vector<Box>& boxes) {
  std::vector<BoxRef> refs;
  refs.reserve(boxes.size());
  for (const Box& b : boxes) refs.push_back({b.off.data(), b.shape.data()});
  return refs;
}

bool Covers(const std::vector<int64_t>& extent, const std::vector<Box>& boxes) {
  const auto refs = Refs(boxes);
  return ExactlyCovers(extent, refs);
}

std::optional<std::pair<size_t, size_t>> Overlap(
    size_t ndim, const std::vector<Box>& boxes) {
  const auto refs = Refs(boxes);
  return FindOverlap(ndim, refs);
}

bool BoxesIntersect(const Box& a, const Box& b) {
  for (size_t d = 0; d < a.off.size(); ++d) {
    if (std::max(a.off[d], b.off[d]) >=
        std::min(a.off[d] + a.shape[d], b.off[d] + b.shape[d])) {
      return false;
    }
  }
  return true;
}

bool AnyPairIntersects(const std::vector<Box>& boxes) {
  for (size_t i = 0; i < boxes.size(); ++i) {
    for (size_t j = i + 1; j < boxes.size(); ++j) {
      if (BoxesIntersect(boxes[i], boxes[j])) return true;
    }
  }
  return false;
}

// Brute force: every cell of the extent is covered exactly once and no box
// reaches outside it.
bool OracleCovers(const std::vector<int64_t>& extent,
                  const std::vector<Box>& boxes) {
  if (boxes.empty()) return false;
  const size_t ndim = extent.size();
  size_t cells = 1;
  for (int64_t e : extent) cells *= static_cast<size_t>(e);
  std::vector<int> count(cells, 0);
  for (const Box& b : boxes) {
    for (size_t d = 0; d < ndim; ++d) {
      if (b.off[d] < 0 || b.off[d] + b.shape[d] > extent[d]) return false;
    }
    // Iterate the box's cells with an odometer.
    std::vector<int64_t> pos(b.off);
    while (true) {
      size_t linear = 0;
      for (size_t d = 0; d < ndim; ++d) {
        linear = linear * static_cast<size_t>(extent[d]) +
                 static_cast<size_t>(pos[d]);
      }
      ++count[linear];
      size_t d = ndim;
      while (d > 0) {
        --d;
        if (++pos[d] < b.off[d] + b.shape[d]) break;
        pos[d] = b.off[d];
        if (d == 0) {
          d = ndim + 1;  // done
          break;
        }
      }
      if (d == ndim + 1 || ndim == 0) break;
    }
  }
  return std::all_of(count.begin(), count.end(), [](int c) { return c == 1; });
}

void ExpectOverlapResult(size_t ndim, const std::vector<Box>& boxes,
                         const std::string& what) {
  const auto got = Overlap(ndim, boxes);
  if (AnyPairIntersects(boxes)) {
    ASSERT_TRUE(got.has_value()) << what;
    EXPECT_LT(got->first, got->second) << what;
    ASSERT_LT(got->second, boxes.size()) << what;
    EXPECT_TRUE(BoxesIntersect(boxes[got->first], boxes[got->second]))
        << what << " pair " << got->first << "," << got->second;
  } else {
    EXPECT_FALSE(got.has_value()) << what;
  }
}

// All unit-step grid cells of `extent` cut at the given per-dim boundaries.
std::vector<Box> Grid(const std::vector<std::vector<int64_t>>& cuts) {
  std::vector<Box> boxes = {Box{}};
  for (const auto& c : cuts) {
    std::vector<Box> next;
    for (const Box& b : boxes) {
      for (size_t i = 0; i + 1 < c.size(); ++i) {
        Box nb = b;
        nb.off.push_back(c[i]);
        nb.shape.push_back(c[i + 1] - c[i]);
        next.push_back(std::move(nb));
      }
    }
    boxes = std::move(next);
  }
  return boxes;
}

// ---------------------------------------------------------------------------
// Hand-picked cases
// ---------------------------------------------------------------------------

TEST(BoxCoverTest, EmptyListNeverCovers) {
  EXPECT_FALSE(Covers({4}, {}));
  EXPECT_FALSE(Overlap(1, {}).has_value());
}

TEST(BoxCoverTest, SingleBox) {
  EXPECT_TRUE(Covers({4, 3}, {{{0, 0}, {4, 3}}}));
  EXPECT_FALSE(Covers({4, 3}, {{{0, 0}, {4, 2}}}));
  EXPECT_FALSE(Covers({4, 3}, {{{1, 0}, {4, 3}}}));  // out of bounds
  EXPECT_FALSE(Overlap(2, {{{0, 0}, {4, 3}}}).has_value());
}

TEST(BoxCoverTest, OneDimensional) {
  EXPECT_TRUE(Covers({10}, {{{0}, {3}}, {{3}, {3}}, {{6}, {4}}}));
  EXPECT_TRUE(Covers({10}, {{{6}, {4}}, {{0}, {3}}, {{3}, {3}}}));   // order
  EXPECT_FALSE(Covers({10}, {{{0}, {3}}, {{4}, {3}}, {{6}, {4}}}));  // gap+ovl
  EXPECT_FALSE(Covers({10}, {{{0}, {3}}, {{3}, {3}}}));              // gap
  EXPECT_FALSE(Covers({10}, {{{0}, {3}}, {{3}, {3}}, {{6}, {5}}}));  // oob
  EXPECT_FALSE(Covers({10}, {{{0}, {5}}, {{0}, {5}}}));              // dup
  EXPECT_FALSE(Covers({10}, {{{-1}, {5}}, {{4}, {6}}}));  // negative offset
}

TEST(BoxCoverTest, TwoDimensionalGrid) {
  const auto grid = Grid({{0, 1, 3, 4}, {0, 2, 5}});
  ASSERT_EQ(grid.size(), 6u);
  EXPECT_TRUE(Covers({4, 5}, grid));
  EXPECT_FALSE(Overlap(2, grid).has_value());
  // Duplicate one cell in place of another: same count, same volume only if
  // the cells are equal-sized; here (0,0)-(1,2) and (0,2)-(1,5) differ, so
  // pick two equal cells: [1,3)x[0,2) and... use a uniform grid instead.
  auto uniform = Grid({{0, 2, 4}, {0, 2, 4}});
  EXPECT_TRUE(Covers({4, 4}, uniform));
  auto dup = uniform;
  dup[3] = dup[0];  // one cell twice, another missing: equal volume
  EXPECT_FALSE(Covers({4, 4}, dup));
  const auto pair = Overlap(2, dup);
  ASSERT_TRUE(pair.has_value());
  EXPECT_EQ(*pair, std::make_pair(size_t{0}, size_t{3}));
}

TEST(BoxCoverTest, GridWithMissingCell) {
  auto grid = Grid({{0, 1, 2, 3}, {0, 1, 2, 3}});
  grid.erase(grid.begin() + 4);
  EXPECT_FALSE(Covers({3, 3}, grid));
  EXPECT_FALSE(Overlap(2, grid).has_value());
}

TEST(BoxCoverTest, BrickPattern) {
  // Rows of bricks offset by half a brick: not a grid.
  //   row 0: [0,2) [2,4) [4,6)
  //   row 1: [0,1) [1,3) [3,5) [5,6)
  //   row 2: like row 0
  std::vector<Box> bricks;
  for (int64_t row = 0; row < 3; ++row) {
    if (row % 2 == 0) {
      for (int64_t x : {0, 2, 4}) bricks.push_back({{row, x}, {1, 2}});
    } else {
      bricks.push_back({{row, 0}, {1, 1}});
      for (int64_t x : {1, 3}) bricks.push_back({{row, x}, {1, 2}});
      bricks.push_back({{row, 5}, {1, 1}});
    }
  }
  EXPECT_TRUE(Covers({3, 6}, bricks));
  EXPECT_TRUE(OracleCovers({3, 6}, bricks));
  EXPECT_FALSE(Overlap(2, bricks).has_value());

  // Shift one brick right by one within its row: overlap and gap, equal
  // volume, still in bounds.
  auto shifted = bricks;
  shifted[0].off[1] = 1;  // [1,3) overlaps [2,4); [0,1) uncovered
  EXPECT_FALSE(Covers({3, 6}, shifted));
  const auto pair = Overlap(2, shifted);
  ASSERT_TRUE(pair.has_value());
  EXPECT_EQ(*pair, std::make_pair(size_t{0}, size_t{1}));
}

TEST(BoxCoverTest, PinwheelIsNotGuillotine) {
  // The classic 3x3 pinwheel: no straight cut separates the boxes.
  const std::vector<Box> pinwheel = {
      {{0, 0}, {2, 1}},  // A
      {{2, 0}, {1, 2}},  // B
      {{1, 2}, {2, 1}},  // C
      {{0, 1}, {1, 2}},  // D
      {{1, 1}, {1, 1}},  // centre
  };
  EXPECT_TRUE(Covers({3, 3}, pinwheel));
  EXPECT_FALSE(Overlap(2, pinwheel).has_value());
  // Replace the centre by a copy of A's first cell: overlap + hole.
  auto broken = pinwheel;
  broken[4].off = {0, 0};
  EXPECT_FALSE(Covers({3, 3}, broken));
  const auto pair = Overlap(2, broken);
  ASSERT_TRUE(pair.has_value());
  EXPECT_EQ(*pair, std::make_pair(size_t{0}, size_t{4}));
}

TEST(BoxCoverTest, LShapedRegions) {
  // A 4x4 square split into two interlocking L shapes, each made of two
  // boxes, plus the 2x2 block they leave.
  //   L1: [0,4)x[0,1) + [0,1)x[1,4)   (top row + left column)
  //   L2: [1,4)x[3,4) + [3,4)x[1,3)   (bottom row + right column)
  //   rest: [1,3)x[1,3)
  const std::vector<Box> ls = {
      {{0, 0}, {1, 4}}, {{1, 0}, {3, 1}}, {{1, 3}, {3, 1}},
      {{3, 1}, {1, 2}}, {{1, 1}, {2, 2}},
  };
  EXPECT_TRUE(OracleCovers({4, 4}, ls));
  EXPECT_TRUE(Covers({4, 4}, ls));
  // Swap the orientation of one arm: same volume, overlaps the centre.
  auto bad = ls;
  bad[3] = {{1, 2}, {2, 1}};
  EXPECT_FALSE(OracleCovers({4, 4}, bad));
  EXPECT_FALSE(Covers({4, 4}, bad));
}

TEST(BoxCoverTest, OverlapWithEqualVolumeNonGrid) {
  // Extent 4x4: a 2x4 slab, plus two 2x2 blocks where one is duplicated
  // over the other's slot partially (shifted by one row).
  const std::vector<Box> boxes = {
      {{0, 0}, {2, 4}},
      {{2, 0}, {2, 2}},
      {{2, 1}, {2, 2}},  // should be at column 2
  };
  EXPECT_FALSE(Covers({4, 4}, boxes));
  const auto pair = Overlap(2, boxes);
  ASSERT_TRUE(pair.has_value());
  EXPECT_EQ(*pair, std::make_pair(size_t{1}, size_t{2}));
}

TEST(BoxCoverTest, ThreeDimensional) {
  auto grid = Grid({{0, 2, 4}, {0, 1, 3}, {0, 5}});
  EXPECT_TRUE(Covers({4, 3, 5}, grid));
  // Non-grid 3-D: a slab plus a 2-D brick pattern on the other half.
  std::vector<Box> boxes = {{{0, 0, 0}, {2, 3, 4}},
                            {{2, 0, 0}, {2, 1, 4}},
                            {{2, 1, 0}, {2, 2, 1}},
                            {{2, 1, 1}, {2, 2, 3}}};
  EXPECT_TRUE(Covers({4, 3, 4}, boxes));
  EXPECT_TRUE(OracleCovers({4, 3, 4}, boxes));
  boxes[3].off[2] = 0;  // now overlaps boxes[2]; z=3 row uncovered
  EXPECT_FALSE(Covers({4, 3, 4}, boxes));
  ExpectOverlapResult(3, boxes, "3-D shifted");
}

TEST(BoxCoverTest, FiveDimensional) {
  auto grid = Grid({{0, 1, 2}, {0, 3}, {0, 1, 2}, {0, 2}, {0, 1, 3}});
  const std::vector<int64_t> extent = {2, 3, 2, 2, 3};
  EXPECT_TRUE(Covers(extent, grid));
  EXPECT_FALSE(Overlap(5, grid).has_value());
  // Merge two neighbours along the last dim into one box: still a tiling,
  // no longer a grid.
  auto merged = grid;
  merged[0].shape[4] = 3;
  merged.erase(merged.begin() + 1);
  EXPECT_TRUE(OracleCovers(extent, merged));
  EXPECT_TRUE(Covers(extent, merged));
  // Then shift another box onto the merged one: equal volume, overlap.
  auto bad = merged;
  bad[1].off = merged[0].off;
  EXPECT_FALSE(OracleCovers(extent, bad));
  EXPECT_FALSE(Covers(extent, bad));
  ExpectOverlapResult(5, bad, "5-D shifted");
}

TEST(BoxCoverTest, NineDimensionsUseTheSweep) {
  // ndim 9 skips the corner sums: grids take the fast path, other tilings
  // the overlap sweep.
  std::vector<std::vector<int64_t>> cuts(9, {0, 2});
  cuts[0] = {0, 1, 2};
  cuts[8] = {0, 1, 2};
  auto grid = Grid(cuts);
  const std::vector<int64_t> extent(9, 2);
  ASSERT_EQ(grid.size(), 4u);
  EXPECT_TRUE(Covers(extent, grid));

  // Non-grid: split one cell of the grid along dim 4.
  auto nongrid = grid;
  Box half = nongrid[0];
  nongrid[0].shape[4] = 1;
  half.shape[4] = 1;
  half.off[4] = 1;
  nongrid.push_back(half);
  EXPECT_TRUE(OracleCovers(extent, nongrid));
  EXPECT_TRUE(Covers(extent, nongrid));
  EXPECT_FALSE(Overlap(9, nongrid).has_value());

  // Move the new half onto the other half: equal volume, overlap.
  auto bad = nongrid;
  bad.back().off[4] = 0;
  EXPECT_FALSE(OracleCovers(extent, bad));
  EXPECT_FALSE(Covers(extent, bad));
  const auto pair = Overlap(9, bad);
  ASSERT_TRUE(pair.has_value());
  EXPECT_EQ(*pair, std::make_pair(size_t{0}, bad.size() - 1));

  // Overlap only in the last dimension's coordinates.
  std::vector<Box> two = {
      {std::vector<int64_t>(9, 0), std::vector<int64_t>(9, 1)},
      {std::vector<int64_t>(9, 0), std::vector<int64_t>(9, 1)}};
  two[1].off[0] = 1;
  EXPECT_FALSE(Overlap(9, two).has_value());
  two[1].off[0] = 0;
  EXPECT_TRUE(Overlap(9, two).has_value());
}

TEST(BoxCoverTest, LargeCoordinatesDoNotOverflow) {
  const int64_t big = int64_t{1} << 40;
  const std::vector<int64_t> extent = {big, big, 4};
  std::vector<Box> boxes = {{{0, 0, 0}, {big, big, 1}},
                            {{0, 0, 1}, {big / 2, big, 3}},
                            {{big / 2, 0, 1}, {big / 2, big, 3}}};
  EXPECT_TRUE(Covers(extent, boxes));
  boxes[2].off[0] = big / 2 - 1;  // overlaps by one; last row is out of bounds
  EXPECT_FALSE(Covers(extent, boxes));
  boxes[2].off[0] = big / 2 + 1;  // gap of one, out of bounds
  EXPECT_FALSE(Covers(extent, boxes));
}

// KNOWN BUG (disabled until box_cover.cc is fixed): the extent's volume is
// computed in unsigned __int128 without an overflow check. For these int64
// extents the product is about 2^189 and wraps to exactly the volume of one
// 1x1xV box, so the single-box shortcut (and, for ndim > 8, the
// "disjoint + full volume" fallback) accepts a box that covers a ~1e-38
// fraction of the tensor. Found with a 2-D lattice reduction of
// x * (a * b) mod 2^128.
TEST(BoxCoverTest, VolumeOverflowDoesNotFakeCover) {
  const int64_t a = 5922139795108761373;
  const int64_t b = 9100938232759824033;
  const int64_t x = 5466526306856062697;
  const int64_t v = 2446371898050206853;  // == a * b * x mod 2^128
  ASSERT_EQ(static_cast<unsigned __int128>(static_cast<uint64_t>(a)) *
                static_cast<uint64_t>(b) * static_cast<uint64_t>(x),
            static_cast<unsigned __int128>(v));
  EXPECT_FALSE(Covers({a, b, x}, {{{0, 0, 0}, {1, 1, v}}}));
}

TEST(BoxCoverTest, FindOverlapTouchingIsNotOverlap) {
  // Boxes that share faces, edges or corners do not overlap.
  const std::vector<Box> touching = {
      {{0, 0}, {2, 2}}, {{2, 0}, {2, 2}}, {{0, 2}, {2, 2}}, {{2, 2}, {2, 2}}};
  EXPECT_FALSE(Overlap(2, touching).has_value());
  // Containment overlaps.
  const std::vector<Box> nested = {{{0, 0}, {4, 4}}, {{1, 1}, {1, 1}}};
  const auto pair = Overlap(2, nested);
  ASSERT_TRUE(pair.has_value());
  EXPECT_EQ(*pair, std::make_pair(size_t{0}, size_t{1}));
}

TEST(BoxCoverTest, FindOverlapAcrossLongSweep) {
  // Many disjoint boxes along dim 1 (the sweep dimension: most distinct
  // begins) with a single overlap hidden between a long box and a late one.
  std::vector<Box> boxes;
  for (int64_t i = 0; i < 100; ++i) boxes.push_back({{0, i}, {1, 1}});
  boxes.push_back({{1, 0}, {1, 100}});  // long box in row 1
  boxes.push_back({{1, 97}, {1, 1}});   // overlaps it near the end
  const auto pair = Overlap(2, boxes);
  ASSERT_TRUE(pair.has_value());
  EXPECT_EQ(*pair, std::make_pair(size_t{100}, size_t{101}));
  boxes.back().off[0] = 2;
  EXPECT_FALSE(Overlap(2, boxes).has_value());
}

// ---------------------------------------------------------------------------
// Randomized comparison against the brute-force oracle
// ---------------------------------------------------------------------------

void SplitRecursively(std::mt19937_64& rng, Box box, int depth,
                      std::vector<Box>* out) {
  std::vector<size_t> splittable;
  for (size_t d = 0; d < box.shape.size(); ++d) {
    if (box.shape[d] > 1) splittable.push_back(d);
  }
  const bool stop = splittable.empty() || depth > 6 ||
                    std::uniform_int_distribution<int>(0, 9)(rng) < depth;
  if (stop) {
    out->push_back(std::move(box));
    return;
  }
  const size_t d = splittable[std::uniform_int_distribution<size_t>(
      0, splittable.size() - 1)(rng)];
  const int64_t cut =
      std::uniform_int_distribution<int64_t>(1, box.shape[d] - 1)(rng);
  Box lo = box;
  Box hi = box;
  lo.shape[d] = cut;
  hi.off[d] += cut;
  hi.shape[d] -= cut;
  SplitRecursively(rng, std::move(lo), depth + 1, out);
  SplitRecursively(rng, std::move(hi), depth + 1, out);
}

// Makes a grid tiling by cutting every dimension at random points.
std::vector<Box> RandomGrid(std::mt19937_64& rng,
                            const std::vector<int64_t>& extent) {
  std::vector<std::vector<int64_t>> cuts;
  for (int64_t e : extent) {
    std::vector<int64_t> c = {0, e};
    for (int64_t x = 1; x < e; ++x) {
      if (std::uniform_int_distribution<int>(0, 2)(rng) == 0) c.push_back(x);
    }
    std::sort(c.begin(), c.end());
    cuts.push_back(std::move(c));
  }
  return Grid(cuts);
}

enum class Perturb {
  kNone,
  kDrop,
  kDuplicate,
  kShift,
  kReplaceWithCopy,
  kRelocate,
  kGrowShrink,
  kCount
};

std::string Describe(const std::vector<int64_t>& extent,
                     const std::vector<Box>& boxes) {
  std::string s = "extent [";
  for (int64_t e : extent) s += std::to_string(e) + " ";
  s += "] boxes:";
  for (const Box& b : boxes) {
    s += " (";
    for (size_t d = 0; d < b.off.size(); ++d) {
      s += std::to_string(b.off[d]) + "+" + std::to_string(b.shape[d]) +
           (d + 1 < b.off.size() ? "," : "");
    }
    s += ")";
  }
  return s;
}

TEST(BoxCoverTest, RandomizedAgainstBruteForce) {
  std::mt19937_64 rng(0x5eed'b0c5ULL);
  int covered = 0;
  int not_covered = 0;
  int equal_volume_defects = 0;
  for (int iter = 0; iter < 2000; ++iter) {
    // Mostly 1-5 dims; sometimes 9 to exercise the sweep fallback.
    const bool nine = iter % 10 == 9;
    const size_t ndim =
        nine ? 9 : std::uniform_int_distribution<size_t>(1, 5)(rng);
    std::vector<int64_t> extent(ndim);
    for (auto& e : extent) {
      e = nine ? std::uniform_int_distribution<int64_t>(1, 2)(rng)
               : std::uniform_int_distribution<int64_t>(
                     1, ndim <= 2 ? 8 : (ndim == 3 ? 5 : 3))(rng);
    }
    std::vector<Box> boxes;
    if (iter % 4 == 0) {
      boxes = RandomGrid(rng, extent);
    } else {
      SplitRecursively(rng, Box{std::vector<int64_t>(ndim, 0), extent}, 0,
                       &boxes);
    }
    ASSERT_TRUE(OracleCovers(extent, boxes)) << Describe(extent, boxes);

    const auto kind = static_cast<Perturb>(std::uniform_int_distribution<int>(
        0, static_cast<int>(Perturb::kCount) - 1)(rng));
    auto pick = [&]() {
      return std::uniform_int_distribution<size_t>(0, boxes.size() - 1)(rng);
    };
    switch (kind) {
      case Perturb::kNone:
        break;
      case Perturb::kDrop:
        boxes.erase(boxes.begin() + static_cast<ptrdiff_t>(pick()));
        break;
      case Perturb::kDuplicate:
        boxes.push_back(boxes[pick()]);
        break;
      case Perturb::kShift: {
        Box& b = boxes[pick()];
        const size_t d =
            std::uniform_int_distribution<size_t>(0, ndim - 1)(rng);
        b.off[d] += std::uniform_int_distribution<int>(0, 1)(rng) ? 1 : -1;
        break;
      }
      case Perturb::kReplaceWithCopy: {
        // A box duplicated in place of another one (equal volume when the
        // two shapes have equal volume).
        const size_t i = pick();
        const size_t j = pick();
        boxes[j] = boxes[i];
        break;
      }
      case Perturb::kRelocate: {
        // Same shape moved to a random in-bounds position: equal volume.
        Box& b = boxes[pick()];
        for (size_t d = 0; d < ndim; ++d) {
          b.off[d] = std::uniform_int_distribution<int64_t>(
              0, extent[d] - b.shape[d])(rng);
        }
        break;
      }
      case Perturb::kGrowShrink: {
        // Grow one box by a slab and shrink another by the same volume when
        // possible: the total volume is unchanged.
        const size_t i = pick();
        const size_t d =
            std::uniform_int_distribution<size_t>(0, ndim - 1)(rng);
        Box& b = boxes[i];
        if (b.off[d] + b.shape[d] < extent[d]) {
          ++b.shape[d];
        } else if (b.off[d] > 0) {
          --b.off[d];
          ++b.shape[d];
        }
        break;
      }
      case Perturb::kCount:
        break;
    }
    if (boxes.empty()) continue;
    // Shuffle so the result never depends on input order.
    std::shuffle(boxes.begin(), boxes.end(), rng);

    const std::string what =
        "iter " + std::to_string(iter) + " " + Describe(extent, boxes);
    const bool want = OracleCovers(extent, boxes);
    ASSERT_EQ(Covers(extent, boxes), want) << what;
    (want ? covered : not_covered) += 1;

    int64_t total = 1;
    for (int64_t e : extent) total *= e;
    int64_t sum = 0;
    bool in_bounds = true;
    for (const Box& b : boxes) {
      int64_t v = 1;
      for (size_t d = 0; d < ndim; ++d) {
        v *= b.shape[d];
        in_bounds &= b.off[d] >= 0 && b.off[d] + b.shape[d] <= extent[d];
      }
      sum += v;
    }
    if (!want && sum == total && in_bounds) ++equal_volume_defects;

    ASSERT_NO_FATAL_FAILURE(ExpectOverlapResult(ndim, boxes, what));
    // An in-bounds, full-volume list covers iff it has no overlap.
    if (sum == total && in_bounds) {
      EXPECT_EQ(want, !AnyPairIntersects(boxes)) << what;
    }
  }
  // The generator must exercise both outcomes and the hard case (overlap
  // hidden behind an exact volume match).
  EXPECT_GT(covered, 300);
  EXPECT_GT(not_covered, 800);
  EXPECT_GT(equal_volume_defects, 100);
}

TEST(BoxCoverTest, RandomizedFindOverlapOnArbitraryBoxes) {
  // Independent boxes, not tilings: FindOverlap must agree with all-pairs.
  std::mt19937_64 rng(20240611);
  int with_overlap = 0;
  for (int iter = 0; iter < 2000; ++iter) {
    const size_t ndim = std::uniform_int_distribution<size_t>(1, 9)(rng);
    const size_t n = std::uniform_int_distribution<size_t>(0, 12)(rng);
    std::vector<Box> boxes(n);
    for (Box& b : boxes) {
      for (size_t d = 0; d < ndim; ++d) {
        b.off.push_back(std::uniform_int_distribution<int64_t>(0, 9)(rng));
        b.shape.push_back(
            std::uniform_int_distribution<int64_t>(1, ndim <= 2 ? 3 : 6)(rng));
      }
    }
    ASSERT_NO_FATAL_FAILURE(
        ExpectOverlapResult(ndim, boxes, "iter " + std::to_string(iter)));
    with_overlap += AnyPairIntersects(boxes);
  }
  EXPECT_GT(with_overlap, 200);
  EXPECT_LT(with_overlap, 1800);
}

}  // namespace
}  // namespace reshard::internal
