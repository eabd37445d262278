// The connection's pipelined SET from caller memory, against a real
// redis-server on loopback.

#include "store_redis/redis_connection.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "store_redis/redis_uri.h"
#include "testing/redis_server.h"
#include "testing/status_testing.h"

namespace reshard {
namespace internal {
namespace {

using ::reshard::testing::SharedRedisServer;
using Type = RedisReply::Type;

Result<std::unique_ptr<RedisConnection>> Connect() {
  RESHARD_ASSIGN_OR_RETURN(RedisUri uri,
                           ParseRedisUri(SharedRedisServer().Uri("conn")));
  return RedisConnection::Connect(uri, std::chrono::seconds(10));
}

// A value taken from the middle of several parts, sent with and without an
// expiry (PSETEX, value last): the server holds exactly those bytes, with
// the expiry where one was asked and none otherwise.
TEST(RedisConnectionTest, SetFromPartsStoresTheRangeWithItsExpiry) {
  std::vector<std::string> parts = {std::string(100000, '\0'),
                                    std::string(3, '\0'),
                                    std::string(200000, '\0')};
  std::string all;
  for (auto& p : parts) {
    for (size_t i = 0; i < p.size(); ++i) {
      p[i] = static_cast<char>(((all.size() + i) * 7 + 3) % 251);
    }
    all += p;
  }
  std::vector<ConstBuffer> buffers;
  for (const auto& p : parts) buffers.push_back({p.data(), p.size()});
  ASSERT_OK_AND_ASSIGN(auto conn, Connect());
  const uint64_t offset = 99990, length = 150000;
  ASSERT_OK(
      conn->AppendSetFrom("conn:expiring", buffers, offset, length, "600000"));
  ASSERT_OK(conn->AppendSetFrom("conn:lasting", buffers, 0, all.size(), ""));
  for (int i = 0; i < 2; ++i) {
    ASSERT_OK_AND_ASSIGN(RedisReply ok, conn->Read());
    ASSERT_EQ(ok.type(), Type::kStatus);
    EXPECT_EQ(ok.str(), "OK");
  }

  ASSERT_OK_AND_ASSIGN(RedisReply got, conn->Command({"GET", "conn:expiring"}));
  ASSERT_EQ(got.type(), Type::kString);
  EXPECT_EQ(got.str(), all.substr(offset, length));
  ASSERT_OK_AND_ASSIGN(RedisReply ttl,
                       conn->Command({"PTTL", "conn:expiring"}));
  ASSERT_EQ(ttl.type(), Type::kInteger);
  EXPECT_GT(ttl.integer(), 500000);
  EXPECT_LE(ttl.integer(), 600000);

  ASSERT_OK_AND_ASSIGN(got, conn->Command({"GET", "conn:lasting"}));
  ASSERT_EQ(got.type(), Type::kString);
  EXPECT_EQ(got.str(), all);
  ASSERT_OK_AND_ASSIGN(ttl, conn->Command({"PTTL", "conn:lasting"}));
  ASSERT_EQ(ttl.type(), Type::kInteger);
  EXPECT_EQ(ttl.integer(), -1);  // no expiry
  ASSERT_OK(conn->Command({"DEL", "conn:expiring", "conn:lasting"}).status());
}

}  // namespace
}  // namespace internal
}  // namespace reshard
