// LowerRegion: which copies (or the kernel) move a region, and exactly
// their descriptors.
#include "exec_cuda/copy_lowering.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "testing/status_testing.h"

namespace reshard::cuda {
namespace {

constexpr uint64_t kSrc = 0x100000;
constexpr uint64_t kDst = 0x900000;

BoundRegion Region(uint64_t inner, std::vector<OuterLoop> loops) {
  BoundRegion r;
  r.source_address = kSrc;
  r.target_address = kDst;
  r.inner_bytes = inner;
  r.loops = std::move(loops);
  r.bytes = inner;
  for (const OuterLoop& l : r.loops) r.bytes *= l.count;
  r.region = 7;
  return r;
}

uint64_t Addr(const void* p) { return reinterpret_cast<uintptr_t>(p); }

std::string Describe(const Copy3D& c) {
  return std::to_string(Addr(c.src.ptr) - kSrc) + "->" +
         std::to_string(Addr(c.dst.ptr) - kDst) + " " +
         std::to_string(c.extent.width) + "x" +
         std::to_string(c.extent.height) + "x" +
         std::to_string(c.extent.depth) + " pitch " +
         std::to_string(c.src.pitch) + "/" + std::to_string(c.dst.pitch) +
         " ysize " + std::to_string(c.src.ysize) + "/" +
         std::to_string(c.dst.ysize);
}

std::vector<std::string> Copies(const RegionWork& w) {
  std::vector<std::string> out;
  for (const Copy3D& c : w.copies) out.push_back(Describe(c));
  return out;
}

TEST(CopyLoweringTest, FoldingKeepsTheBytesInFewerLongerRows) {
  // 1-iteration loops go; a contiguous innermost loop joins the rows; a
  // loop stepping over exactly the next one's extent joins it.
  const FoldedLoops f = FoldLoops(
      Region(16, {{3, 256, 96}, {1, 9, 9}, {2, 128, 48}, {3, 16, 16}}));
  EXPECT_EQ(f.inner_bytes, 48u);
  ASSERT_EQ(f.loops.size(), 1u);
  EXPECT_EQ(f.loops[0], (OuterLoop{6, 128, 48}))
      << f.loops[0].count << " " << f.loops[0].source_stride;
}

TEST(CopyLoweringTest, ContiguousRowsAndPlanesAreOneCopy) {
  EXPECT_EQ(
      Copies(*LowerRegion(Region(4096, {}), {})),
      std::vector<std::string>{"0->0 4096x1x1 pitch 4096/4096 ysize 1/1"});
  EXPECT_EQ(Copies(*LowerRegion(Region(64, {{8, 256, 64}}), {})),
            std::vector<std::string>{"0->0 64x8x1 pitch 256/64 ysize 8/8"});
  // Slices a whole number of pitches apart: one 3D copy, the slice height
  // of each side its own.
  EXPECT_EQ(
      Copies(*LowerRegion(Region(64, {{3, 4096, 1024}, {8, 256, 128}}), {})),
      std::vector<std::string>{"0->0 64x8x3 pitch 256/128 ysize 16/8"});
}

TEST(CopyLoweringTest, SlicesNoPitchDescribesAreCopiesOfTheirOwn) {
  // 1000 is no multiple of 256: three 2D copies.
  EXPECT_EQ(
      Copies(*LowerRegion(Region(64, {{3, 1000, 512}, {8, 256, 64}}), {})),
      (std::vector<std::string>{"0->0 64x8x1 pitch 256/64 ysize 8/8",
                                "1000->512 64x8x1 pitch 256/64 ysize 8/8",
                                "2000->1024 64x8x1 pitch 256/64 ysize 8/8"}));
  // A slice height below the rows per slice (the slices overlap).
  const RegionWork w =
      *LowerRegion(Region(64, {{2, 512, 512}, {4, 256, 128}}), {});
  EXPECT_EQ(w.copies.size(), 2u);
}

TEST(CopyLoweringTest, BeyondTheCopyLimitTheKernelMovesTheRegion) {
  LoweringLimits limits;
  limits.max_copies = 2;
  const RegionWork w = *LowerRegion(
      Region(8, {{3, 1000, 512}, {5, 100, 48}, {4, 20, 8}}), limits);
  EXPECT_TRUE(w.copies.empty());
  ASSERT_TRUE(w.kernel.has_value());
  EXPECT_EQ(w.kernel->loops, 3u);
  EXPECT_EQ(w.kernel->rows, 60u);
  EXPECT_EQ(w.kernel->inner_bytes, 8u);
  EXPECT_EQ(w.kernel->counts[1], 5u);
  EXPECT_EQ(w.kernel->src_strides[2], 20u);
  EXPECT_EQ(w.kernel->dst_strides[0], 512u);
  EXPECT_EQ(Addr(w.kernel->src), kSrc);
  EXPECT_EQ(Addr(w.kernel->dst), kDst);
}

TEST(CopyLoweringTest, PitchesTheDeviceRefusesGoToTheKernel) {
  LoweringLimits limits;
  limits.max_pitch = 255;
  const RegionWork w = *LowerRegion(Region(64, {{8, 256, 64}}), limits);
  // A copy of single rows needs no pitch: 8 copies fit the limit.
  EXPECT_EQ(w.copies.size(), 8u);
  limits.max_copies = 4;
  EXPECT_TRUE(LowerRegion(Region(64, {{8, 256, 64}}), limits)->kernel);
  // Rows that overlap (a pitch below the row) likewise.
  EXPECT_TRUE(LowerRegion(Region(64, {{80, 0, 64}}), {})->kernel);
}

TEST(CopyLoweringTest, WithoutTheKernelEveryRowIsACopy) {
  LoweringLimits limits;
  limits.max_copies = 2;
  limits.kernel_allowed = false;
  const RegionWork w = *LowerRegion(
      Region(8, {{3, 1000, 512}, {5, 100, 48}, {4, 20, 8}}), limits);
  EXPECT_FALSE(w.kernel);
  ASSERT_EQ(w.copies.size(), 60u);
  EXPECT_EQ(Describe(w.copies[59]), "2460->1240 8x1x1 pitch 8/8 ysize 1/1");
}

TEST(CopyLoweringTest, TooManyLoopsForTheKernelNameTheRegion) {
  std::vector<OuterLoop> loops;
  for (int i = 0; i < 9; ++i) loops.push_back({2, 1000u << i, 999u << i});
  LoweringLimits limits;
  limits.max_copies = 1;
  EXPECT_THAT(LowerRegion(Region(1, loops), limits).status(),
              testing::StatusIs(StatusCode::kInvalidArgument,
                                "region 7 has 9 outer loops after folding; "
                                "the gather/scatter kernel takes at most 8"));
}

TEST(CopyLoweringTest, AnEmptyRegionIsNoWork) {
  const RegionWork w = *LowerRegion(Region(0, {{4, 8, 8}}), {});
  EXPECT_TRUE(w.copies.empty());
  EXPECT_FALSE(w.kernel);
}

}  // namespace
}  // namespace reshard::cuda
