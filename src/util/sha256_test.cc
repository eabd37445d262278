#include "util/sha256.h"

#include <gtest/gtest.h>

#include <string>

namespace reshard::internal {
namespace {

// Bytes that differ along their length, so a chunk hashed twice or skipped
// changes the digest.
std::string Pattern(size_t n) {
  std::string s(n, '\0');
  for (size_t i = 0; i < n; ++i)
    s[i] = static_cast<char>((i * 131 + i / 7) & 0xFF);
  return s;
}

TEST(Sha256Test, KnownVectors) {
  EXPECT_EQ(Sha256Hex(""),
            "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(Sha256Hex("abc"),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  EXPECT_EQ(Sha256Id("abc"),
            "sha256:"
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  // One million 'a' (FIPS 180-2): long enough for the chunked path.
  EXPECT_EQ(Sha256Hex(std::string(1000000, 'a')),
            "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
}

// Long inputs are hashed in prefetched chunks: the digest must equal the
// one of the same bytes fed in pieces too short to be chunked, at and
// around every chunk and threshold edge.
TEST(Sha256Test, ChunkedUpdatesEqualShortUpdates) {
  for (size_t n :
       {size_t{65535}, size_t{65536}, size_t{65537}, size_t{8192 * 9 + 1},
        size_t{1 << 20}, size_t{(1 << 20) + 63}}) {
    SCOPED_TRACE(n);
    const std::string s = Pattern(n);
    Sha256 pieces;
    for (size_t at = 0; at < n; at += 1000) {
      pieces.Update(std::string_view(s).substr(at, 1000));
    }
    Sha256 whole;
    whole.Update(s);
    EXPECT_EQ(whole.FinishHex(), pieces.FinishHex());
  }
  // A long update after a short one (the hasher's state is not aligned).
  const std::string s = Pattern(300000);
  Sha256 split;
  split.Update(std::string_view(s).substr(0, 3));
  split.Update(std::string_view(s).substr(3));
  EXPECT_EQ(split.FinishHex(), Sha256Hex(s));
}

TEST(Sha256Test, CloneContinuesIndependently) {
  Sha256 a;
  a.Update("ab");
  Sha256 b = a.Clone();
  a.Update("c");
  b.Update("c");
  EXPECT_EQ(a.FinishHex(), b.FinishHex());
}

}  // namespace
}  // namespace reshard::internal
