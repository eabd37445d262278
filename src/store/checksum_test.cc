// Payload checksums (store/checksum.h): the exact text of ChecksumRecord
// (header and one XXH3-64 hex line per chunk, computed here independently),
// chunk boundaries, the ParseChecksumRecord round trip and its rejection of
// malformed records, and VerifyChunks: aligned ranges including the short
// last chunk, every single-byte corruption reported as DataLoss with the
// exact message and chunk range, misuse (unaligned or partial) as Internal,
// and the chunks_verified count.

#include "store/checksum.h"

#include <gtest/gtest.h>
#include <xxhash.h>

#include <algorithm>
#include <cinttypes>
#include <cstdint>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "reshard/status.h"
#include "testing/status_testing.h"

namespace reshard::internal {
namespace {

constexpr uint64_t kChunk = 64;
constexpr char kKey[] = "model/layer.0/weight";
constexpr char kFragment[] = "frag-7";

std::vector<uint8_t> Pattern(uint64_t seed, size_t n) {
  std::mt19937_64 rng(seed);
  std::vector<uint8_t> out(n);
  for (uint8_t& b : out) b = static_cast<uint8_t>(rng());
  return out;
}

std::string Hex(uint64_t v) {
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016" PRIx64, v);
  return buf;
}

// XXH3-64 of each chunk of data, computed independently of checksum.cc.
std::vector<uint64_t> Sums(const std::vector<uint8_t>& data, uint64_t chunk) {
  std::vector<uint64_t> sums;
  for (uint64_t at = 0; at < data.size(); at += chunk) {
    sums.push_back(
        XXH3_64bits(data.data() + at, std::min(chunk, data.size() - at)));
  }
  return sums;
}

std::string ExpectedRecord(const std::vector<uint8_t>& data, uint64_t chunk) {
  std::string out = "xxh3-64 v1 chunk_bytes=" + std::to_string(chunk) +
                    " size=" + std::to_string(data.size()) + "\n";
  for (uint64_t sum : Sums(data, chunk)) out += Hex(sum) + "\n";
  return out;
}

std::string Record(const std::vector<uint8_t>& data, uint64_t chunk) {
  return ChecksumRecord(data.data(), data.size(), chunk);
}

ChunkSums ParseOrDie(const std::string& record) {
  auto sums = ParseChecksumRecord(record);
  EXPECT_OK(sums) << record;
  return sums.ok() ? *sums : ChunkSums{};
}

TEST(ChecksumRecordTest, HeaderAndOneLowercaseHexLinePerChunk) {
  const std::vector<uint8_t> data = {'a', 'b', 'c', 'd', 'e',
                                     'f', 'g', 'h', 'i', 'j'};
  const std::string want = "xxh3-64 v1 chunk_bytes=4 size=10\n" +
                           Hex(XXH3_64bits("abcd", 4)) + "\n" +
                           Hex(XXH3_64bits("efgh", 4)) + "\n" +
                           Hex(XXH3_64bits("ij", 2)) + "\n";
  EXPECT_EQ(Record(data, 4), want);
  // XXH3-64 of one zero byte is a known vector.
  EXPECT_EQ(ChecksumRecord(std::vector<uint8_t>{0}.data(), 1, 1),
            "xxh3-64 v1 chunk_bytes=1 size=1\nc44bdff4074eecdb\n");
  EXPECT_EQ(ChecksumRecord(nullptr, 0, 1 << 20),
            "xxh3-64 v1 chunk_bytes=1048576 size=0\n");
}

TEST(ChecksumRecordTest, ChunkBoundaries) {
  for (uint64_t size : {uint64_t{0}, uint64_t{1}, kChunk - 1, kChunk,
                        kChunk + 1, 2 * kChunk, 37 * kChunk + 5}) {
    const std::vector<uint8_t> data = Pattern(size, size);
    const std::string record = Record(data, kChunk);
    EXPECT_EQ(record, ExpectedRecord(data, kChunk)) << "size " << size;
    EXPECT_EQ(std::count(record.begin(), record.end(), '\n'),
              1 + static_cast<int64_t>((size + kChunk - 1) / kChunk))
        << "size " << size;
  }
}

TEST(ChecksumParseTest, RoundTrips) {
  for (uint64_t size :
       {uint64_t{0}, uint64_t{1}, kChunk, kChunk + 1, 37 * kChunk + 5}) {
    const std::vector<uint8_t> data = Pattern(size + 1, size);
    const ChunkSums sums = ParseOrDie(Record(data, kChunk));
    EXPECT_EQ(sums.chunk_bytes, kChunk);
    EXPECT_EQ(sums.size, size);
    EXPECT_EQ(sums.sums, Sums(data, kChunk)) << "size " << size;
  }
  const ChunkSums sums = ParseOrDie(
      "xxh3-64 v1 chunk_bytes=4 size=5\n0123456789abcdef\nfedcba9876543210\n");
  EXPECT_EQ(sums.chunk_bytes, 4u);
  EXPECT_EQ(sums.size, 5u);
  EXPECT_EQ(sums.sums,
            (std::vector<uint64_t>{0x0123456789abcdef, 0xfedcba9876543210}));
}

TEST(ChecksumParseTest, RejectsMalformedRecordsWithDataLoss) {
  const std::string h = "xxh3-64 v1 chunk_bytes=4 size=5\n";
  const std::string line = "0123456789abcdef\n";
  const std::string good = Record(Pattern(3, 200), kChunk);
  const std::vector<std::string> bad = {
      "",
      "xxh3-64 v1 chunk_bytes=4 size=0",  // header without newline
      "xxh3-64 v2 chunk_bytes=4 size=0\n",
      "xxh3-128 v1 chunk_bytes=4 size=0\n",
      "XXH3-64 v1 chunk_bytes=4 size=0\n",
      "xxh3-64 v1 chunk=4 size=0\n",
      "xxh3-64 v1 chunk_bytes=4\n",
      "xxh3-64 v1 size=0 chunk_bytes=4\n",
      "xxh3-64 v1 chunk_bytes=x size=0\n",
      "xxh3-64 v1 chunk_bytes=0 size=0\n",
      "xxh3-64 v1 chunk_bytes=0 size=5\n" + line + line,
      h,                       // no lines
      h + line,                // one line short
      h + line + line + line,  // one line too many
      "xxh3-64 v1 chunk_bytes=4 size=0\n" + line,
      h + line + "0123456789abcdeg\n",   // non-hex
      h + line + "0123456789ABCDEF\n",   // uppercase hex
      h + line + "0123456789abcde\n",    // 15 digits
      h + line + "0123456789abcdef0\n",  // 17 digits
      h + line + " 123456789abcdef\n",
      h + line + "0123456789abcdef\r\n",
      h + line + "0123456789abcdef",  // missing trailing newline
      h + line + line + "\n",         // trailing empty line
      good.substr(0, good.size() - 1),
      good + line,
  };
  for (const std::string& record : bad) {
    auto sums = ParseChecksumRecord(record);
    ASSERT_FALSE(sums.ok()) << record;
    EXPECT_EQ(sums.status().code(), StatusCode::kDataLoss) << record;
    EXPECT_EQ(sums.status().message(), "malformed checksum record");
  }
}

// DISABLED: fails today. The header is parsed with sscanf, which accepts
// trailing text, blanks, signs and out-of-range numbers, and the expected
// line count (size + chunk_bytes - 1) / chunk_bytes overflows, so that
// "chunk_bytes=2 size=18446744073709551615" with no lines parses and
// VerifyChunks then reads past the empty sums.
TEST(ChecksumParseTest, RejectsLaxOrOverflowingHeaders) {
  const std::string bad[] = {
      "xxh3-64 v1 chunk_bytes=4 size=0 junk\n",
      "xxh3-64 v1 chunk_bytes= 4 size=0\n",
      "xxh3-64 v1 chunk_bytes=+4 size=0\n",
      "xxh3-64 v1 chunk_bytes=-1 size=0\n",
      "xxh3-64 v1 chunk_bytes=99999999999999999999 size=0\n",
      "xxh3-64 v1 chunk_bytes=2 size=18446744073709551615\n",
      // Leading zeros: a second spelling of a number (found by
      // fuzz_checksum; fuzz/corpus/fuzz_checksum keeps the input).
      "xxh3-64 v1 chunk_bytes=32 size=08\n3aa61af11e1d7c7b\n",
      "xxh3-64 v1 chunk_bytes=032 size=8\n3aa61af11e1d7c7b\n",
  };
  for (const std::string& record : bad) {
    EXPECT_EQ(ParseChecksumRecord(record).status().code(),
              StatusCode::kDataLoss)
        << record;
  }
}

class ChecksumVerifyTest : public ::testing::Test {
 protected:
  // Ten full chunks and a short last one.
  const std::vector<uint8_t> data_ = Pattern(99, 10 * kChunk + 7);
  const ChunkSums sums_ = ParseOrDie(Record(data_, kChunk));

  Status Verify(uint64_t offset, uint64_t n, uint64_t* verified) {
    return VerifyChunks(sums_, offset, data_.data() + offset, n, kKey,
                        kFragment, verified);
  }
};

TEST_F(ChecksumVerifyTest, AcceptsCorrectDataAtEveryAlignedOffset) {
  const uint64_t size = data_.size();
  for (uint64_t offset = 0; offset <= size; offset += kChunk) {
    const uint64_t left = (size - offset + kChunk - 1) / kChunk;
    for (uint64_t chunks = 0; chunks <= left; ++chunks) {
      const uint64_t n = std::min(chunks * kChunk, size - offset);
      uint64_t verified = 5;
      const Status st = Verify(offset, n, &verified);
      EXPECT_OK(st) << offset << "+" << n;
      EXPECT_EQ(verified, 5 + chunks) << offset << "+" << n;
    }
  }
  // The short last chunk alone, and the counter is optional.
  EXPECT_OK(Verify(10 * kChunk, 7, nullptr));
  EXPECT_OK(Verify(0, size, nullptr));
}

TEST_F(ChecksumVerifyTest, EverySingleByteFlipIsDataLossWithExactMessage) {
  std::vector<uint8_t> bad = data_;
  for (uint64_t at = 0; at < bad.size(); ++at) {
    bad[at] ^= static_cast<uint8_t>(1u << (at % 8));
    const uint64_t chunk = at / kChunk;
    const uint64_t begin = chunk * kChunk;
    const uint64_t end = std::min<uint64_t>(begin + kChunk, bad.size());
    const std::string want =
        "checksum mismatch in stored fragment frag-7 (object " +
        std::string(kKey) + ") at bytes [" + std::to_string(begin) + ", " +
        std::to_string(end) + "): expected " + Hex(sums_.sums[chunk]) +
        ", got " + Hex(XXH3_64bits(bad.data() + begin, end - begin));
    // The whole object: the chunks before the bad one count as verified.
    uint64_t verified = 0;
    Status st = VerifyChunks(sums_, 0, bad.data(), bad.size(), kKey, kFragment,
                             &verified);
    EXPECT_EQ(st.code(), StatusCode::kDataLoss) << "byte " << at;
    EXPECT_EQ(st.message(), want);
    EXPECT_EQ(verified, chunk);
    // Just the bad chunk, at its own offset.
    verified = 0;
    st = VerifyChunks(sums_, begin, bad.data() + begin, end - begin, kKey,
                      kFragment, &verified);
    EXPECT_EQ(st.code(), StatusCode::kDataLoss) << "byte " << at;
    EXPECT_EQ(st.message(), want);
    EXPECT_EQ(verified, 0u);
    bad[at] = data_[at];
  }
}

// The object split into separately allocated parts (a load that read its
// rows straight into their targets): random cuts, empty parts, parts
// longer than a chunk and chunks spread over many parts verify as the
// contiguous bytes do, and every flipped byte gives the same message.
TEST_F(ChecksumVerifyTest, ScatteredPartsVerifyLikeOneBuffer) {
  std::mt19937_64 rng(5);
  for (int split = 0; split < 20; ++split) {
    SCOPED_TRACE(split);
    std::vector<std::vector<uint8_t>> storage;
    for (uint64_t at = 0; at < data_.size();) {
      uint64_t n = rng() % (split % 2 == 0 ? 9 : 3 * kChunk);
      n = std::min<uint64_t>(n, data_.size() - at);
      storage.emplace_back(data_.begin() + at, data_.begin() + at + n);
      at += n;
    }
    std::vector<ConstBuffer> parts;
    for (const auto& v : storage) parts.push_back({v.data(), v.size()});
    uint64_t verified = 0;
    ASSERT_OK(VerifyChunks(sums_, 0, parts, kKey, kFragment, &verified));
    EXPECT_EQ(verified, 11u);
    // One flipped byte per part.
    uint64_t base = 0;
    for (auto& v : storage) {
      if (!v.empty()) {
        const uint64_t in = rng() % v.size();
        const uint64_t at = base + in;
        v[in] ^= 0x10;
        const uint64_t begin = at / kChunk * kChunk;
        const uint64_t end = std::min<uint64_t>(begin + kChunk, data_.size());
        std::vector<uint8_t> bad = data_;
        bad[at] ^= 0x10;
        verified = 0;
        const Status st =
            VerifyChunks(sums_, 0, parts, kKey, kFragment, &verified);
        EXPECT_EQ(st.code(), StatusCode::kDataLoss) << "byte " << at;
        EXPECT_EQ(st.message(),
                  "checksum mismatch in stored fragment frag-7 (object " +
                      std::string(kKey) + ") at bytes [" +
                      std::to_string(begin) + ", " + std::to_string(end) +
                      "): expected " + Hex(sums_.sums[begin / kChunk]) +
                      ", got " +
                      Hex(XXH3_64bits(bad.data() + begin, end - begin)));
        EXPECT_EQ(verified, begin / kChunk);
        v[in] ^= 0x10;
      }
      base += v.size();
    }
  }
  // Parts that end short of a chunk, or run past the object, are refused.
  std::vector<ConstBuffer> part = {{data_.data(), kChunk - 1}};
  EXPECT_EQ(VerifyChunks(sums_, 0, part, kKey, kFragment, nullptr).code(),
            StatusCode::kInternal);
  part = {{data_.data(), data_.size()}, {data_.data(), 1}};
  EXPECT_EQ(VerifyChunks(sums_, 0, part, kKey, kFragment, nullptr).code(),
            StatusCode::kInternal);
}

TEST_F(ChecksumVerifyTest, UnalignedOrPartialRangesAreInternal) {
  const uint64_t size = data_.size();
  const struct {
    uint64_t offset;
    uint64_t n;
  } cases[] = {
      {1, kChunk},       // unaligned offset
      {kChunk - 1, 1},   // unaligned offset
      {kChunk + 3, 0},   // unaligned, even if empty
      {0, kChunk - 1},   // partial first chunk
      {0, kChunk + 1},   // partial second chunk
      {3 * kChunk, 10},  // partial non-final chunk
      {10 * kChunk, 6},  // short of the object's end
      {10 * kChunk, 8},  // past the object's end
      {0, size + 1},     // past the object's end
      {11 * kChunk, 0},  // aligned but past the end
  };
  for (const auto& c : cases) {
    uint64_t verified = 0;
    const Status st = VerifyChunks(sums_, c.offset, data_.data(), c.n, kKey,
                                   kFragment, &verified);
    EXPECT_EQ(st.code(), StatusCode::kInternal) << c.offset << "+" << c.n;
    EXPECT_NE(st.message().find(kKey), std::string::npos) << st.ToString();
  }
  // An unaligned offset is refused before any chunk is verified.
  uint64_t verified = 0;
  EXPECT_EQ(Verify(kChunk + 1, kChunk, &verified).code(),
            StatusCode::kInternal);
  EXPECT_EQ(verified, 0u);
}

TEST(ChecksumVerifyEmptyTest, EmptyObjectVerifiesNothing) {
  const ChunkSums sums = ParseOrDie(ChecksumRecord(nullptr, 0, kChunk));
  EXPECT_TRUE(sums.sums.empty());
  uint64_t verified = 0;
  const uint8_t byte = 0;
  EXPECT_OK(VerifyChunks(sums, 0, &byte, 0, kKey, kFragment, &verified));
  EXPECT_EQ(verified, 0u);
  EXPECT_EQ(VerifyChunks(sums, 0, &byte, 1, kKey, kFragment, &verified).code(),
            StatusCode::kInternal);
}

}  // namespace
}  // namespace reshard::internal
