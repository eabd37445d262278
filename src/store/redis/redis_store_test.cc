// The Redis ObjectStore against a private redis-server (testing/
// redis_server.h): the backend conformance suite over TCP, over a unix
// socket and with tiny chunks on three connections; then what is Redis's
// own: URI parsing and its messages (never the password), an unreachable
// server and a wrong password failing within the timeout, durability
// refused on a server without fsync unless sync=none, prefixes isolating
// stores, committed objects surviving a restart (AOF), a server killed
// mid-upload leaving nothing visible and its leftovers removable, a server
// killed mid-load failing cleanly (the object whole after a restart), and a
// damaged chunk caught by reads.

#include "reshard/redis_store.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "store/redis/redis_uri.h"
#include "testing/object_store_conformance.h"
#include "testing/redis_server.h"
#include "testing/status_testing.h"

namespace reshard {
namespace {

using ::reshard::testing::FreshRedisPrefix;
using ::reshard::testing::ObjectStoreConformance;
using ::reshard::testing::ObjectStoreFactory;
using ::reshard::testing::RedisServer;
using ::reshard::testing::SharedRedisServer;
using ::testing::HasSubstr;
using ::testing::Not;

std::unique_ptr<ObjectStore> Open(const std::string& uri,
                                  const RedisStoreOptions& options = {}) {
  auto store = OpenRedisStore(uri, options);
  if (!store.ok()) {
    ADD_FAILURE() << store.status().ToString();
    return nullptr;
  }
  return std::move(store).ValueOrDie();
}

INSTANTIATE_TEST_SUITE_P(
    RedisObjectStore, ObjectStoreConformance,
    ::testing::Values(
        ObjectStoreFactory([] {
          return Open(SharedRedisServer().Uri(FreshRedisPrefix()));
        }),
        ObjectStoreFactory([] {
          return Open(SharedRedisServer().UnixUri(FreshRedisPrefix()));
        }),
        ObjectStoreFactory([] {
          RedisStoreOptions o;
          o.chunk_bytes = 4093;
          o.connections = 3;
          o.pipeline_depth = 3;
          return Open(SharedRedisServer().Uri(FreshRedisPrefix()), o);
        })),
    [](const auto& info) {
      return std::string(info.index == 0   ? "tcp"
                         : info.index == 1 ? "unix"
                                           : "tiny_chunks");
    });

// A raw command on the shared server (for what tests inspect or damage).
std::string RawCommand(const std::vector<std::string>& args) {
  return SharedRedisServer().Command(args);
}

TEST(RedisUriTest, ParsesEveryPart) {
  ASSERT_OK_AND_ASSIGN(
      internal::RedisUri u,
      internal::ParseRedisUri(
          "redis://al%40ice:p%3Ass@db.example:6390/3?prefix=w/q1&replicas=2"));
  EXPECT_EQ(u.host, "db.example");
  EXPECT_EQ(u.port, 6390);
  EXPECT_EQ(u.user, "al@ice");
  EXPECT_EQ(u.password, "p:ss");
  EXPECT_EQ(u.db, 3u);
  EXPECT_EQ(u.prefix, "w/q1");
  EXPECT_EQ(u.replicas, 2u);
  EXPECT_TRUE(u.require_fsync);
  EXPECT_EQ(u.redacted,
            "redis://al%40ice:***@db.example:6390/3?prefix=w/q1&replicas=2");

  ASSERT_OK_AND_ASSIGN(u, internal::ParseRedisUri("redis://secret@[::1]"));
  EXPECT_EQ(u.host, "::1");
  EXPECT_EQ(u.port, 6379);
  EXPECT_EQ(u.user, "");
  EXPECT_EQ(u.password, "secret");
  EXPECT_EQ(u.redacted, "redis://***@[::1]");

  ASSERT_OK_AND_ASSIGN(
      u, internal::ParseRedisUri("unix:///run/redis.sock?db=2&sync=none"));
  EXPECT_EQ(u.socket_path, "/run/redis.sock");
  EXPECT_EQ(u.db, 2u);
  EXPECT_FALSE(u.require_fsync);
  EXPECT_EQ(u.prefix, "reshard");
}

TEST(RedisUriTest, RejectsWithExactMessagesAndNeverThePassword) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"redis://h:0",
       "invalid Redis URI \"redis://h:0\": port must be an "
       "integer in [1, 65535]"},
      {"redis://h:99999",
       "invalid Redis URI \"redis://h:99999\": port must "
       "be an integer in [1, 65535]"},
      {"redis://:1", "invalid Redis URI \"redis://:1\": no host"},
      {"redis://u:hunter2@h:1/x",
       "invalid Redis URI \"redis://u:***@h:1/x\": database \"x\" is not a "
       "number"},
      {"redis://u:hunter2@h:1?colour=red",
       "invalid Redis URI \"redis://u:***@h:1?colour=red\": unknown option "
       "\"colour\" (supported: prefix, sync, replicas)"},
      {"redis://h:1?prefix=a*b",
       "invalid Redis URI \"redis://h:1?prefix=a*b\": prefix must be 1-128 "
       "characters of [A-Za-z0-9._~:/-]"},
      {"redis://h:1?prefix=a&prefix=b",
       "invalid Redis URI \"redis://h:1?prefix=a&prefix=b\": option "
       "\"prefix\" given twice"},
      {"redis://h:1?sync=maybe",
       "invalid Redis URI \"redis://h:1?sync=maybe\": sync must be fsync or "
       "none"},
      {"unix://relative.sock",
       "invalid Redis URI \"unix://relative.sock\": "
       "the socket path must be absolute "
       "(unix:///path/to/redis.sock)"},
      {"redis://h:1\n",
       "invalid Redis URI \"redis://h:1\\n\": contains a "
       "space or control character"},
      {"rediss://h:1",
       "invalid Redis URI \"rediss://h:1\": scheme must be "
       "redis:// or unix://"},
  };
  for (const auto& [uri, message] : cases) {
    auto parsed = internal::ParseRedisUri(uri);
    ASSERT_FALSE(parsed.ok()) << uri;
    EXPECT_EQ(parsed.status().code(), StatusCode::kInvalidArgument);
    EXPECT_EQ(parsed.status().message(), message);
    EXPECT_THAT(parsed.status().message(), Not(HasSubstr("hunter2")));
  }
}

TEST(RedisStoreTest, UnreachableServerFailsWithinTheTimeoutNamingTheUri) {
  RedisStoreOptions o;
  o.timeout = std::chrono::milliseconds(500);
  // A port nobody listens on: a fresh server's, after it was killed.
  ASSERT_OK_AND_ASSIGN(auto server, RedisServer::Start());
  const uint16_t port = server->port();
  server->Kill();
  const std::string uri =
      "redis://admin:hunter2@127.0.0.1:" + std::to_string(port);
  const auto start = std::chrono::steady_clock::now();
  auto store = OpenRedisStore(uri, o);
  const auto took = std::chrono::steady_clock::now() - start;
  ASSERT_FALSE(store.ok());
  EXPECT_EQ(store.status().code(), StatusCode::kIOError);
  EXPECT_THAT(store.status().message(),
              HasSubstr("cannot connect to redis://admin:***@127.0.0.1:" +
                        std::to_string(port)));
  EXPECT_THAT(store.status().message(), Not(HasSubstr("hunter2")));
  EXPECT_LT(took, std::chrono::seconds(2));

  // A routable address that drops packets is bounded by the timeout too.
  const auto start2 = std::chrono::steady_clock::now();
  auto blackhole = OpenRedisStore("redis://10.255.255.1:6379", o);
  EXPECT_FALSE(blackhole.ok());
  EXPECT_LT(std::chrono::steady_clock::now() - start2, std::chrono::seconds(3));
}

TEST(RedisStoreTest, WrongPasswordIsRefusedWithoutShowingIt) {
  ASSERT_OK_AND_ASSIGN(auto server,
                       RedisServer::Start({.aof = true, .password = "right"}));
  const std::string uri =
      "redis://:wrong-one@127.0.0.1:" + std::to_string(server->port());
  auto store = OpenRedisStore(uri);
  ASSERT_FALSE(store.ok());
  EXPECT_THAT(store.status().message(),
              HasSubstr("AUTH on redis://:***@127.0.0.1:"));
  EXPECT_THAT(store.status().message(), Not(HasSubstr("wrong-one")));
  ASSERT_OK_AND_ASSIGN(auto good, OpenRedisStore(server->Uri("p")));
  ASSERT_OK(good->Put("k", "v"));
  EXPECT_EQ(*good->Get("k"), "v");
}

TEST(RedisStoreTest, DurabilityIsRefusedOnAServerWithoutFsyncUnlessWaived) {
  ASSERT_OK_AND_ASSIGN(auto server, RedisServer::Start({.aof = false}));
  auto store = OpenRedisStore(server->Uri("p"));
  ASSERT_FALSE(store.ok());
  EXPECT_EQ(store.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(store.status().message(),
            "redis " + server->Uri("p") +
                " does not make writes durable before acknowledging them "
                "(appendonly no, appendfsync always; durable needs appendonly "
                "yes and appendfsync always); open it with ?sync=none to "
                "accept losing recent writes when the server restarts");
  ASSERT_OK_AND_ASSIGN(auto waived,
                       OpenRedisStore(server->Uri("p") + "&sync=none"));
  ASSERT_OK(waived->PutObject("o", {{"abc", 3}}));
  ASSERT_OK(waived->Sync());
  // A rendezvous asks for no durability.
  RedisStoreOptions o;
  o.require_durable = false;
  ASSERT_OK_AND_ASSIGN(auto rendezvous, OpenRedisStore(server->Uri("q"), o));
  ASSERT_OK(rendezvous->Put("s/r", "x"));
  // Replicas that do not exist are never waited for silently.
  auto replicas = OpenRedisStore(server->Uri("p") + "&sync=none&replicas=1",
                                 {.timeout = std::chrono::milliseconds(1000)});
  ASSERT_FALSE(replicas.ok());
  EXPECT_THAT(replicas.status().message(),
              HasSubstr("only 0 of 1 replicas acknowledged the writes"));
}

TEST(RedisStoreTest, PrefixesAreSeparateStores) {
  const std::string a = FreshRedisPrefix(), b = FreshRedisPrefix();
  auto sa = Open(SharedRedisServer().Uri(a));
  auto sb = Open(SharedRedisServer().Uri(b));
  ASSERT_OK(sa->Put("k", "from a"));
  ASSERT_OK(sb->Put("k", "from b"));
  const std::string big(100000, 'x');
  ASSERT_OK(sa->PutObject("big", {{big.data(), big.size()}}));
  EXPECT_EQ(*sa->Get("k"), "from a");
  EXPECT_EQ(*sb->Get("k"), "from b");
  EXPECT_EQ(*sa->List(""), (std::vector<std::string>{"big", "k"}));
  EXPECT_EQ(*sb->List(""), (std::vector<std::string>{"k"}));
  EXPECT_EQ(sb->Get("big").status().code(), StatusCode::kNotFound);
}

TEST(RedisStoreTest, AKeyIsARecordOrADirectoryNeverBoth) {
  auto s = Open(SharedRedisServer().Uri(FreshRedisPrefix()));
  ASSERT_OK(s->Put("a/b", "x"));
  Status st = s->Put("a", "y");
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(st.message(), "key \"a\" names a directory of records");
  st = s->PutObject("a/b/c/d", {{"z", 1}});
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(st.message(), "key \"a/b/c/d\" is below record \"a/b\"");
  EXPECT_EQ(*s->List(""), std::vector<std::string>{"a/b"});
}

TEST(RedisStoreTest, CommittedObjectsSurviveARestart) {
  ASSERT_OK_AND_ASSIGN(auto server, RedisServer::Start());
  std::string big(3 * 1000 * 1000 + 17, '\0');
  for (size_t i = 0; i < big.size(); ++i) big[i] = static_cast<char>(i * 7);
  {
    auto s = Open(server->Uri("p"), {.chunk_bytes = 1 << 20});
    ASSERT_OK(s->PutObject("rev/payload", {{big.data(), big.size()}}));
    ASSERT_OK(s->Put("rev/manifest", "manifest bytes"));
  }
  ASSERT_OK(server->Restart());
  auto s = Open(server->Uri("p"), {.chunk_bytes = 1 << 20});
  EXPECT_EQ(*s->Get("rev/manifest"), "manifest bytes");
  std::string back(big.size(), '\0');
  ASSERT_OK(s->ReadRanges({{"rev/payload", 0, big.size(), back.data()}}));
  EXPECT_EQ(back, big);
}

TEST(RedisStoreTest, ServerKilledMidUploadLeavesNothingVisible) {
  ASSERT_OK_AND_ASSIGN(auto server, RedisServer::Start());
  const std::string big(256u << 20, 'q');
  auto s = Open(server->Uri("p"),
                {.chunk_bytes = 1 << 20, .timeout = std::chrono::seconds(2)});
  ASSERT_OK(s->Put("before", "kept"));
  std::thread killer([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(30));
    server->Kill();
  });
  const Status st = s->PutObject("victim", {{big.data(), big.size()}});
  killer.join();
  ASSERT_FALSE(st.ok()) << "the upload finished before the kill; enlarge it";
  EXPECT_THAT(st.message(), HasSubstr("victim"));
  EXPECT_THAT(st.message(), HasSubstr("127.0.0.1:"));

  ASSERT_OK(server->Restart());
  auto after = Open(server->Uri("p"));
  EXPECT_EQ(*after->List(""), std::vector<std::string>{"before"});
  EXPECT_EQ(after->ObjectSize("victim").status().code(), StatusCode::kNotFound);
  // The chunks written before the kill are pending leftovers; gc-style
  // removal takes them (and they would expire by themselves).
  ASSERT_OK_AND_ASSIGN(uint64_t removed,
                       after->RemoveStaleTemporaries(std::chrono::seconds(0)));
  EXPECT_LE(removed, 1u);
  ASSERT_OK(after->PutObject("victim", {{big.data(), 5u << 20}}));
  EXPECT_EQ(*after->ObjectSize("victim"), 5u << 20);
}

TEST(RedisStoreTest, ServerKilledMidLoadFailsCleanlyAndTheObjectSurvives) {
  ASSERT_OK_AND_ASSIGN(auto server, RedisServer::Start());
  std::string big(192u << 20, '\0');
  for (size_t i = 0; i < big.size(); i += 4096)
    big[i] = static_cast<char>(i >> 12);
  {
    auto s = Open(server->Uri("p"), {.chunk_bytes = 1 << 20});
    ASSERT_OK(s->PutObject("obj", {{big.data(), big.size()}}));
  }
  auto s = Open(server->Uri("p"),
                {.chunk_bytes = 1 << 20, .timeout = std::chrono::seconds(2)});
  std::string back(big.size(), '\0');
  std::thread killer([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    server->Kill();
  });
  const Status st = s->ReadRanges({{"obj", 0, big.size(), back.data()}});
  killer.join();
  ASSERT_FALSE(st.ok()) << "the load finished before the kill; enlarge it";
  EXPECT_EQ(st.code(), StatusCode::kIOError) << st.ToString();
  EXPECT_THAT(st.message(), HasSubstr("redis " + server->Uri("p")));
  ASSERT_OK(server->Restart());
  // The same store reconnects; the object is whole.
  std::fill(back.begin(), back.end(), '\x7f');
  ASSERT_OK(s->ReadRanges({{"obj", 0, big.size(), back.data()}}));
  EXPECT_TRUE(back == big);
}

TEST(RedisStoreTest, ADamagedChunkIsCaughtNamingObjectAndChunk) {
  const std::string prefix = FreshRedisPrefix();
  auto s = Open(SharedRedisServer().Uri(prefix), {.chunk_bytes = 100000});
  const std::string big(250000, 'b');
  ASSERT_OK(s->PutObject("w/obj", {{big.data(), big.size()}}));
  const std::string descriptor = RawCommand({"GET", prefix + ":k:w/obj"});
  const std::string token = descriptor.substr(descriptor.rfind(' ') + 1);
  // Chunk 1 truncated by someone else.
  RawCommand({"SET", prefix + ":d:" + token + ":1", "short"});
  std::string back(big.size(), '\0');
  Status st = s->ReadRanges({{"w/obj", 0, big.size(), back.data()}});
  EXPECT_EQ(st.code(), StatusCode::kDataLoss);
  EXPECT_EQ(st.message(),
            "object w/obj chunk 1 holds 5 bytes where 100000 were expected");
  // Chunk 2 gone: the same, and the store keeps working afterwards.
  RawCommand({"DEL", prefix + ":d:" + token + ":2"});
  st = s->ReadRanges({{"w/obj", 200000, 10, back.data()}});
  EXPECT_EQ(st.message(),
            "object w/obj chunk 2 holds 0 bytes where 10 were expected");
  ASSERT_OK(s->ReadRanges({{"w/obj", 5, 10, back.data()}}));
  EXPECT_EQ(back.substr(0, 10), std::string(10, 'b'));
  // A descriptor overwritten with garbage.
  RawCommand({"SET", prefix + ":k:w/obj", "c12 x y"});
  EXPECT_EQ(s->ObjectSize("w/obj").status().message(),
            "object w/obj in " + SharedRedisServer().Uri(prefix) +
                " has a malformed descriptor");
}

TEST(RedisStoreTest, DeleteRemovesEveryChunk) {
  const std::string prefix = FreshRedisPrefix();
  auto s = Open(SharedRedisServer().Uri(prefix), {.chunk_bytes = 10000});
  const std::string big(100500, 'd');
  ASSERT_OK(s->PutObject("x/obj", {{big.data(), big.size()}}));
  const std::string descriptor = RawCommand({"GET", prefix + ":k:x/obj"});
  const std::string token = descriptor.substr(descriptor.rfind(' ') + 1);
  EXPECT_EQ(RawCommand({"EXISTS", prefix + ":d:" + token + ":10"}), "1");
  ASSERT_OK(s->Delete("x/obj"));
  for (int i = 0; i <= 10; ++i) {
    EXPECT_EQ(RawCommand(
                  {"EXISTS", prefix + ":d:" + token + ":" + std::to_string(i)}),
              "0");
  }
  EXPECT_EQ(RawCommand({"ZCARD", prefix + ":index"}), "0");
}

}  // namespace
}  // namespace reshard
