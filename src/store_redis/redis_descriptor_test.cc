// The limits on a chunked object's descriptor (redis_descriptor.h): every
// size a server returns is checked before it sizes anything.

#include "store_redis/redis_descriptor.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace reshard::internal {
namespace {

const std::string kToken = "1a2b-0123456789abcdef0123456789abcdef";

TEST(RedisDescriptorTest, AcceptsWhatAWriterWritesAndRendersItBack) {
  for (const std::string& v : std::vector<std::string>{
           "c65537 4194304 " + kToken, "c4398046511104 4194304 " + kToken,
           "c1 4096 " + kToken, "c536870912 536870912 " + kToken}) {
    const auto d = ParseRedisDescriptor(v);
    ASSERT_TRUE(d.has_value()) << v;
    EXPECT_EQ(RenderRedisDescriptor(*d), v);
    EXPECT_LE(d->chunks(), kMaxRedisChunks);
  }
}

// Issue 38 item 2: a descriptor's size, chunk size and chunk count are
// bounded (a 1e17-byte size, 1-byte chunks, more than 2^20 chunks).
TEST(RedisDescriptorTest, SizesPastTheLimitsAreMalformed) {
  for (const std::string& v : std::vector<std::string>{
           "c99999999999999999 4194304 tok",        // the value
           "c99999999999999999 4194304 " + kToken,  // too many chunks
           "c4398046511105 4194304 " + kToken,      // 2^20 chunks + 1 byte
           "c524288 1 " + kToken,                   // 1-byte chunks
           "c524288 4095 " + kToken,                // below the least chunk
           "c524288 536870913 " + kToken,           // above Redis's value
           "c0 4096 " + kToken,                     // no bytes
           "c18446744073709551615 536870912 " + kToken,
           "c18446744073709551616 4096 " + kToken,  // past 64 bits
           "c065537 4096 " + kToken,                // a second spelling
           "c+65537 4096 " + kToken,
           "c65537 4096",
           "c65537 4096 ",
           "c65537  4096 " + kToken,
           "r65537 4096 " + kToken,
           "c65537 4096 " + kToken + " ",
           "c65537 4096 1a2b-0123456789ABCDEF0123456789abcdef",
           "c65537 4096 123456789-0123456789abcdef0123456789abcdef",
           "c65537 4096 -0123456789abcdef0123456789abcdef",
           "c65537 4096 1a2b-0123456789abcdef0123456789abcde:"}) {
    EXPECT_FALSE(ParseRedisDescriptor(v).has_value()) << v;
  }
}

}  // namespace
}  // namespace reshard::internal
