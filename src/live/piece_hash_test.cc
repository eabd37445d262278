// PieceHasher: regions hashed from the pieces of their operations'
// streams equal the XXH3-64 of each region's bytes, however the pieces cut
// the stream; a piece out of order gives the operation up.
#include "live/piece_hash.h"

#include <gtest/gtest.h>
#include <xxhash.h>

#include <cstdint>
#include <map>
#include <numeric>
#include <vector>

namespace reshard::live_internal {
namespace {

// One operation over regions of these sizes (numbered from 10), and its
// stream: byte i is (i * 7 + 3) mod 251.
struct OneOp {
  explicit OneOp(const std::vector<uint64_t>& sizes) {
    regions.resize(sizes.size());
    for (size_t k = 0; k < sizes.size(); ++k) {
      regions[k].bytes = sizes[k];
      regions[k].region = static_cast<uint32_t>(10 + k);
    }
    ExchangeOp op{&regions[0], {}, 1, ExchangeOp::Kind::kReceive};
    for (size_t k = 1; k < regions.size(); ++k) op.more.push_back(&regions[k]);
    ops.push_back(op);
    stream.resize(std::accumulate(sizes.begin(), sizes.end(), uint64_t{0}));
    for (size_t i = 0; i < stream.size(); ++i) {
      stream[i] = static_cast<uint8_t>((i * 7 + 3) % 251);
    }
  }

  // The expected hash of each region, by region number.
  std::map<uint32_t, uint64_t> Expected() const {
    std::map<uint32_t, uint64_t> out;
    uint64_t at = 0;
    for (const BoundRegion& r : regions) {
      out[r.region] = XXH3_64bits(stream.data() + at, r.bytes);
      at += r.bytes;
    }
    return out;
  }

  // Feeds the stream in pieces of `piece` bytes.
  std::map<uint32_t, uint64_t> Feed(PieceHasher& hasher, uint64_t piece) {
    std::map<uint32_t, uint64_t> got;
    for (uint64_t at = 0; at < stream.size(); at += piece) {
      const uint64_t n = std::min<uint64_t>(piece, stream.size() - at);
      hasher.Piece(0, at, stream.data() + at, n,
                   [&](const BoundRegion& r, uint64_t hash) {
                     EXPECT_EQ(got.count(r.region), 0u) << r.region;
                     got[r.region] = hash;
                   });
    }
    return got;
  }

  std::vector<BoundRegion> regions;
  std::vector<ExchangeOp> ops;
  std::vector<uint8_t> stream;
};

TEST(PieceHasherTest, AnyCutOfTheStreamGivesEachRegionsHash) {
  for (uint64_t piece : {1u, 3u, 64u, 1000u, 5000u, 100000u}) {
    // Regions of no bytes at the start, between and at the end.
    OneOp one({0, 700, 1, 0, 2048, 333, 0});
    PieceHasher hasher;
    hasher.Reset(&one.ops);
    EXPECT_EQ(one.Feed(hasher, piece), one.Expected()) << piece;
    EXPECT_EQ(hasher.Hashed(0), 7u);
  }
}

TEST(PieceHasherTest, APieceOutOfOrderGivesTheOperationUp) {
  OneOp one({100, 100, 100});
  PieceHasher hasher;
  hasher.Reset(&one.ops);
  std::map<uint32_t, uint64_t> got;
  auto keep = [&](const BoundRegion& r, uint64_t hash) {
    got[r.region] = hash;
  };
  hasher.Piece(0, 0, one.stream.data(), 150, keep);
  EXPECT_EQ(hasher.Hashed(0), 1u);
  // The same bytes again (a resend): given up, whatever came before.
  hasher.Piece(0, 100, one.stream.data() + 100, 50, keep);
  EXPECT_EQ(hasher.Hashed(0), 0u);
  hasher.Piece(0, 150, one.stream.data() + 150, 150, keep);
  EXPECT_EQ(got.size(), 1u);
  EXPECT_EQ(hasher.Hashed(0), 0u);
  // A new run starts over.
  hasher.Reset(&one.ops);
  EXPECT_EQ(one.Feed(hasher, 64), one.Expected());
}

TEST(PieceHasherTest, AChangedByteChangesOnlyItsRegionsHash) {
  OneOp one({256, 256});
  one.stream[300] ^= 0x5A;
  PieceHasher hasher;
  hasher.Reset(&one.ops);
  const auto got = one.Feed(hasher, 100);
  one.stream[300] ^= 0x5A;
  const auto clean = one.Expected();
  EXPECT_EQ(got.at(10), clean.at(10));
  EXPECT_NE(got.at(11), clean.at(11));
}

TEST(PieceHasherTest, GivenUpAndBufferOperationsAreNotHashed) {
  OneOp one({64});
  uint64_t scratch[4] = {};
  ExchangeOp buffered = one.ops[0];
  buffered.buffer = reinterpret_cast<uint8_t*>(scratch);
  buffered.buffer_bytes = sizeof scratch;
  one.ops.push_back(buffered);
  PieceHasher hasher;
  hasher.Reset(&one.ops);
  hasher.GiveUp(0);
  int calls = 0;
  auto count = [&](const BoundRegion&, uint64_t) { ++calls; };
  hasher.Piece(0, 0, one.stream.data(), 64, count);
  hasher.Piece(1, 0, one.stream.data(), 32, count);
  EXPECT_EQ(calls, 0);
  EXPECT_EQ(hasher.Hashed(0), 0u);
  EXPECT_EQ(hasher.Hashed(1), 0u);
}

}  // namespace
}  // namespace reshard::live_internal
