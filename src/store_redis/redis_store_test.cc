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

#include "reshard/backends/redis_store.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "reshard/store_uri.h"
#include "reshard/weight_store.h"
#include "store_redis/redis_descriptor.h"
#include "store_redis/redis_uri.h"
#include "testing/object_store_conformance.h"
#include "testing/redis_server.h"
#include "testing/sanitizer.h"
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
          o.chunk_bytes = 4099;  // the least allowed is 4096
          o.connections = 3;
          o.write_connections = 3;
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
       "characters of [A-Za-z0-9._~/-] (no ':', which separates a prefix "
       "from the store's own keys)"},
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

// ---- Issue 38 ----------------------------------------------------------

const std::string kToken = "1a2b-0123456789abcdef0123456789abcdef";
const std::string kManifestKey = "weights/default/r/1/0/manifest";

// Plants `value` at `key` of the store under `prefix`, as a tampering
// server (or user) could: the value and its index entry.
void Plant(const std::string& prefix, const std::string& key,
           const std::string& value) {
  RawCommand({"SET", prefix + ":k:" + key, value});
  RawCommand({"ZADD", prefix + ":index", "0", key});
}

// Finding 2: a redis value's stored size is trusted. Sizes, chunk sizes and
// chunk counts past the limits are malformed before anything is allocated;
// the key can still be deleted, and nothing else changes.
TEST(RedisStoreTest, StoredSizeIsNotTrusted) {
  const std::string prefix = FreshRedisPrefix();
  const std::string uri = SharedRedisServer().Uri(prefix);
  auto s = Open(uri);
  ASSERT_OK(s->Put("keep", "kept"));
  const std::string malformed =
      "object " + kManifestKey + " in " + uri + " has a malformed descriptor";
  for (const std::string& value : std::vector<std::string>{
           "c99999999999999999 4194304 tok", "c524288 1 " + kToken,
           "c99999999999999999 4194304 " + kToken}) {
    SCOPED_TRACE(value);
    Plant(prefix, kManifestKey, value);
    auto got = s->Get(kManifestKey);
    EXPECT_EQ(got.status().code(), StatusCode::kDataLoss);
    EXPECT_EQ(got.status().message(), malformed);
    EXPECT_EQ(s->ObjectSize(kManifestKey).status().message(), malformed);
    char buf[16];
    EXPECT_EQ(s->ReadRanges({{kManifestKey, 0, 16, buf}}).message(), malformed);
    const auto start = std::chrono::steady_clock::now();
    ASSERT_OK(s->Delete(kManifestKey));
    EXPECT_LT(std::chrono::steady_clock::now() - start,
              std::chrono::seconds(2));
    EXPECT_EQ(*s->List(""), std::vector<std::string>{"keep"});
  }
  // A real object whose descriptor is rewritten to 1-byte chunks: refused
  // at once (it took 392 MB and 6.8 s), and Delete still finds its chunk.
  const std::string half(512u << 10, 'h');
  ASSERT_OK(s->PutObject("obj", {{half.data(), half.size()}}));
  const std::string descriptor = RawCommand({"GET", prefix + ":k:obj"});
  const std::string token = descriptor.substr(descriptor.rfind(' ') + 1);
  EXPECT_EQ(descriptor, "c524288 4194304 " + token);
  RawCommand({"SET", prefix + ":k:obj", "c524288 1 " + token});
  std::string back(half.size(), '\0');
  EXPECT_EQ(s->ReadRanges({{"obj", 0, back.size(), back.data()}}).code(),
            StatusCode::kDataLoss);
  ASSERT_OK(s->Delete("obj"));
  EXPECT_EQ(RawCommand({"EXISTS", prefix + ":d:" + token + ":0"}), "0");
  // Within the limits but more than a whole read returns: refused before
  // allocating; its size is still reported, and Delete is bounded.
  Plant(prefix, kManifestKey, "c1099511627776 4194304 " + kToken);
  auto big = s->Get(kManifestKey);
  EXPECT_EQ(big.status().code(), StatusCode::kResourceExhausted);
  EXPECT_EQ(big.status().message(),
            "object " + kManifestKey + " in " + uri +
                " holds 1099511627776 bytes, more than a whole read returns "
                "(536870912); read it by ranges");
  EXPECT_EQ(*s->ObjectSize(kManifestKey), uint64_t{1} << 40);
  ASSERT_OK(s->Delete(kManifestKey));
  // A pending upload claiming endless chunks is never looped over.
  RawCommand({"ZADD", prefix + ":pending", "0", kToken + " 99999999999999"});
  EXPECT_EQ(*s->RemoveStaleTemporaries(std::chrono::seconds(0)), 0u);
  EXPECT_EQ(*s->List(""), std::vector<std::string>{"keep"});
  EXPECT_EQ(*s->Get("keep"), "kept");
}

// Finding 2, through the weight store: a revision whose manifest key holds
// a corrupt descriptor is listed CORRUPT, fails verify, and is removable.
TEST(RedisStoreTest, StoredSizeIsNotTrustedByTheWeightStore) {
  const std::string prefix = FreshRedisPrefix();
  const std::string uri = SharedRedisServer().Uri(prefix);
  Plant(prefix, kManifestKey, "c99999999999999999 4194304 tok");
  ASSERT_OK_AND_ASSIGN(WeightStore store, WeightStore::Open(uri));
  ASSERT_OK_AND_ASSIGN(auto listed, store.List());
  ASSERT_EQ(listed.size(), 1u);
  EXPECT_EQ(listed[0].state, "CORRUPT");
  EXPECT_EQ(listed[0].manifest_key, kManifestKey);
  const std::string malformed =
      "object " + kManifestKey + " in " + uri + " has a malformed descriptor";
  EXPECT_EQ(listed[0].error, malformed);
  EXPECT_EQ(store.Verify(kManifestKey).status().message(), malformed);
  ASSERT_OK(store.Remove(kManifestKey));
  EXPECT_TRUE(store.List()->empty());
  EXPECT_EQ(RawCommand({"ZCARD", prefix + ":index"}), "0");
}

// Finding 2 under an address-space limit: a child with RLIMIT_AS of 4 GiB
// (above what the process maps already) reads, sizes, lists and removes
// descriptors at and past every limit; it must exit 0, never abort on
// bad_alloc nor die of a signal.
TEST(RedisStoreTest, StoredSizeIsNotTrustedUnderAnAddressSpaceLimit) {
  if (::reshard::testing::kSanitized) {
    GTEST_SKIP() << "sanitizers reserve more address space than the limit";
  }
  const std::string prefix = FreshRedisPrefix();
  const std::string uri = SharedRedisServer().Uri(prefix);
  const std::vector<std::string> values = {
      "c99999999999999999 4194304 tok",
      "c18446744073709551615 4194304 " + kToken,
      "c524288 1 " + kToken,
      "c4398046511104 4194304 " + kToken,  // 4 TiB: the most chunks
      "c1099511627776 536870912 " + kToken,
      "c536870912 4194304 " + kToken,  // exactly a whole read's limit
      "c536870913 4194304 " + kToken};
  std::vector<std::string> keys;
  for (size_t i = 0; i < values.size(); ++i) {
    keys.push_back("weights/default/r/" + std::to_string(i) + "/0/manifest");
    Plant(prefix, keys.back(), values[i]);
  }
  const pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    const rlimit limit{uint64_t{4} << 30, uint64_t{4} << 30};
    if (::setrlimit(RLIMIT_AS, &limit) != 0) ::_exit(3);
    int wrong = 0;
    auto opened = OpenRedisStore(uri);
    if (!opened.ok()) ::_exit(2);
    ObjectStore& s = **opened;
    std::vector<char> buf(1 << 20);
    for (const std::string& key : keys) {
      wrong += s.Get(key).ok();  // every one is malformed, large or short
      (void)s.ObjectSize(key);
      wrong += s.ReadRanges({{key, 0, buf.size(), buf.data()}}).ok();
    }
    auto store = WeightStore::Open(uri);
    if (!store.ok()) ::_exit(4);
    auto listed = store->List();
    if (!listed.ok() || listed->size() != keys.size()) ::_exit(5);
    for (const RevisionInfo& r : *listed) wrong += r.state != "CORRUPT";
    for (const std::string& key : keys) wrong += !store->Remove(key).ok();
    ::_exit(wrong == 0 ? 0 : 1);
  }
  int status = 0;
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status)) << "child died of signal " << WTERMSIG(status);
  EXPECT_EQ(WEXITSTATUS(status), 0);
  EXPECT_EQ(RawCommand({"ZCARD", prefix + ":index"}), "0");
}

// A misbehaving server on a loopback port: for each command it receives it
// sends the next of `replies`, then calls `tail` until it returns false or
// the client goes away (`tail` may stream forever).
class FakeRedis {
 public:
  FakeRedis(std::vector<std::string> replies,
            std::function<bool(int fd)> tail = {})
      : replies_(std::move(replies)), tail_(std::move(tail)) {
    listen_ = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof(a);
    if (::bind(listen_, reinterpret_cast<sockaddr*>(&a), len) != 0 ||
        ::listen(listen_, 1) != 0 ||
        ::getsockname(listen_, reinterpret_cast<sockaddr*>(&a), &len) != 0) {
      ADD_FAILURE() << "cannot listen on loopback";
    }
    port_ = ntohs(a.sin_port);
    thread_ = std::thread([this] { Serve(); });
  }
  ~FakeRedis() {
    stop_ = true;
    ::shutdown(listen_, SHUT_RDWR);
    if (conn_ >= 0) ::shutdown(conn_, SHUT_RDWR);
    thread_.join();
    ::close(listen_);
    if (conn_ >= 0) ::close(conn_);
  }
  std::string Uri() const {
    return "redis://127.0.0.1:" + std::to_string(port_) + "?prefix=p";
  }
  static bool Send(int fd, const std::string& bytes) {
    return ::send(fd, bytes.data(), bytes.size(), MSG_NOSIGNAL) ==
           static_cast<ssize_t>(bytes.size());
  }

 private:
  void Serve() {
    conn_ = ::accept(listen_, nullptr, nullptr);
    if (conn_ < 0) return;
    for (const std::string& reply : replies_) {
      char buf[64 << 10];
      if (::recv(conn_, buf, sizeof(buf), 0) <= 0 || !Send(conn_, reply)) {
        return;
      }
    }
    while (!stop_ && tail_ && tail_(conn_)) {
    }
  }

  std::vector<std::string> replies_;
  std::function<bool(int)> tail_;
  int listen_ = -1;
  int conn_ = -1;
  uint16_t port_ = 0;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

std::unique_ptr<ObjectStore> OpenFake(const FakeRedis& fake) {
  return Open(fake.Uri(), {.timeout = std::chrono::milliseconds(500),
                           .require_durable = false});
}

// Streams filler as fast as the client takes it.
std::function<bool(int)> Flood() {
  return [](int fd) { return FakeRedis::Send(fd, std::string(64 << 10, 'x')); };
}

// Sends one byte every 20 ms: every socket read succeeds well within the
// timeout, only the whole reply is late.
std::function<bool(int)> Trickle() {
  return [](int fd) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    return FakeRedis::Send(fd, "x");
  };
}

// Finding 8: a malicious redis server can grow client memory without bound.
// A reply announced or streamed past the limit is refused (the connection
// dropped, nothing buffered), and the whole reply has one deadline.
TEST(RedisStoreTest, MaliciousServerCannotGrowClientMemory) {
  const std::string limit =
      "a reply holds more than 537919488 bytes (the limit of a reply read "
      "whole)";
  {  // the reply: a bulk string of 99999999999 bytes, streamed
    FakeRedis fake({"$99999999999\r\n"}, Flood());
    auto s = OpenFake(fake);
    const auto start = std::chrono::steady_clock::now();
    auto got = s->Get("k");
    EXPECT_EQ(got.status().code(), StatusCode::kIOError);
    EXPECT_EQ(got.status().message(),
              "read k: redis " + fake.Uri() + ": " + limit);
    EXPECT_LT(std::chrono::steady_clock::now() - start,
              std::chrono::seconds(1));
  }
  {  // an array whose header alone would allocate 800 MB
    FakeRedis fake({"*100000000\r\n"}, Flood());
    auto s = OpenFake(fake);
    EXPECT_EQ(s->Get("k").status().message(),
              "read k: redis " + fake.Uri() + ": " + limit);
  }
  {  // a bulk string inside an array, announced past the limit
    FakeRedis fake({"*1\r\n$600000000\r\n"}, Flood());
    auto s = OpenFake(fake);
    EXPECT_EQ(s->List("").status().message(),
              "list keys: redis " + fake.Uri() + ": " + limit);
  }
  {  // small strings, each within the limit, streamed past it
    std::string element = "$60000\r\n" + std::string(60000, 'e') + "\r\n";
    FakeRedis fake({"*1000000\r\n"},
                   [element](int fd) { return FakeRedis::Send(fd, element); });
    auto s = Open(fake.Uri(), {.timeout = std::chrono::seconds(60),
                               .require_durable = false});
    EXPECT_EQ(s->List("").status().message(),
              "list keys: redis " + fake.Uri() + ": " + limit);
  }
  {  // a trickled reply: each read is prompt, the reply never ends
    FakeRedis fake({"$1000000\r\n"}, Trickle());
    auto s = OpenFake(fake);
    const auto start = std::chrono::steady_clock::now();
    EXPECT_EQ(s->Get("k").status().message(),
              "read k: redis " + fake.Uri() +
                  ": no reply: the reply did not arrive whole within 500 ms");
    const auto took = std::chrono::steady_clock::now() - start;
    EXPECT_GE(took, std::chrono::milliseconds(450));
    EXPECT_LT(took, std::chrono::seconds(2));
  }
  // A value read into caller memory: one far longer than expected drops
  // the connection rather than being skipped; a trickled one times out.
  const std::string described = "*2\r\n$1\r\nr\r\n:100\r\n";
  {
    FakeRedis fake({described, "$99999999999\r\n"}, Flood());
    auto s = OpenFake(fake);
    char buf[100];
    const Status st = s->ReadRanges({{"k", 0, 100, buf}});
    EXPECT_EQ(st.code(), StatusCode::kIOError);
    EXPECT_EQ(st.message(),
              "redis " + fake.Uri() +
                  ": object k: a value of 99999999999 bytes where 100 were "
                  "expected (more than 536870912 bytes, the largest value a "
                  "store writes)");
  }
  {
    FakeRedis fake({described, "$100\r\n"}, Trickle());
    auto s = OpenFake(fake);
    char buf[100];
    EXPECT_EQ(s->ReadRanges({{"k", 0, 100, buf}}).message(),
              "redis " + fake.Uri() +
                  ": value cut short: the reply did not arrive whole within "
                  "500 ms");
  }
}

// Finding 4: passwords leak. An unencoded '/', '?', '#' or '@' in the
// password is refused with everything before the last '@' hidden, in the
// Redis parser and in the store and rendezvous openers.
TEST(RedisUriTest, PasswordsNeverLeak) {
  const std::string refused =
      "the user or password holds an unencoded '/', '?', '#' or '@'; "
      "percent-encode it (%2F, %3F, %23, %40)";
  for (const std::string& uri :
       std::vector<std::string>{"redis://admin:Sup3r/S3cret@127.0.0.1:6379",
                                "redis://admin:Sup3r?S3cret@127.0.0.1:6379",
                                "redis://admin:Sup3r#S3cret@127.0.0.1:6379",
                                "redis://admin:Sup3r@S3cret@127.0.0.1:6379"}) {
    SCOPED_TRACE(uri);
    auto parsed = OpenObjectStore(uri);
    ASSERT_FALSE(parsed.ok());
    EXPECT_EQ(parsed.status().message(),
              "invalid Redis URI \"redis://***@127.0.0.1:6379\": " + refused);
    EXPECT_THAT(parsed.status().message(), Not(HasSubstr("S3cret")));
    EXPECT_THAT(parsed.status().message(), Not(HasSubstr("Sup3r")));
  }
  EXPECT_EQ(
      OpenObjectStore("rediss://admin:Sup3r/S3cret@h:1").status().message(),
      "unsupported store URI \"rediss://***@h:1\" (supported: fs://PATH, "
      "redis://HOST:PORT, unix:///PATH)");
  EXPECT_EQ(RedactUriPassword("redis://admin:pw@h:1/2?prefix=a"),
            "redis://admin:***@h:1/2?prefix=a");
  EXPECT_EQ(RedactUriPassword("redis://pw@h:1"), "redis://***@h:1");
  EXPECT_EQ(RedactUriPassword("redis://a:b/c@d@h:1"), "redis://***@h:1");
  EXPECT_EQ(RedactUriPassword("redis://h:1?prefix=x"), "redis://h:1?prefix=x");
  EXPECT_EQ(RedactUriPassword("/plain/dir@x"), "/plain/dir@x");
}

// Finding 4: the password need not be in argv: RESHARD_REDIS_PASSWORD gives
// it when the URI has none (a URI's own password wins), and no message or
// uri() shows it.
TEST(RedisStoreTest, PasswordsNeverLeakAndNeedNoArgv) {
  ASSERT_OK_AND_ASSIGN(
      auto server, RedisServer::Start({.aof = true, .password = "env-s3cret"}));
  const std::string port = std::to_string(server->port());
  const std::string plain = "redis://127.0.0.1:" + port + "?prefix=p";
  ::setenv(internal::kRedisPasswordEnv, "env-s3cret", 1);
  {
    ASSERT_OK_AND_ASSIGN(auto s, OpenRedisStore(plain));
    ASSERT_OK(s->Put("k", "v"));
    EXPECT_EQ(s->uri(), plain);
    ASSERT_OK_AND_ASSIGN(auto named,
                         OpenRedisStore("redis://default:@127.0.0.1:" + port));
    EXPECT_EQ(named->uri(), "redis://default:***@127.0.0.1:" + port);
  }
  ::setenv(internal::kRedisPasswordEnv, "bad-env-pw", 1);
  EXPECT_OK(OpenRedisStore("redis://:env-s3cret@127.0.0.1:" + port).status());
  auto wrong = OpenRedisStore(plain);
  ASSERT_FALSE(wrong.ok());
  EXPECT_THAT(wrong.status().message(), HasSubstr("AUTH on " + plain));
  EXPECT_THAT(wrong.status().message(), Not(HasSubstr("bad-env-pw")));
  ::unsetenv(internal::kRedisPasswordEnv);
  auto none = OpenRedisStore(plain);
  ASSERT_FALSE(none.ok());
  EXPECT_THAT(none.status().message(), HasSubstr("NOAUTH"));
  EXPECT_THAT(none.status().message(), Not(HasSubstr("s3cret")));
}

// Finding 5: redis prefixes collide. A prefix holds no ':', so no store's
// own keys (index, pending, chunks) can be another prefix's records.
TEST(RedisStoreTest, PrefixesNeverCollide) {
  const std::string p = FreshRedisPrefix();
  auto refused = OpenRedisStore(SharedRedisServer().Uri(p + ":k"));
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().message(),
            "invalid Redis URI \"" + SharedRedisServer().Uri(p + ":k") +
                "\": prefix must be 1-128 characters of [A-Za-z0-9._~/-] (no "
                "':', which separates a prefix from the store's own keys)");
  auto outer = Open(SharedRedisServer().Uri(p));
  auto inner = Open(SharedRedisServer().Uri(p + "/k"), {.chunk_bytes = 4096});
  ASSERT_OK(outer->Put("index", "outer index record"));
  ASSERT_OK(outer->Put("pending", "outer pending record"));
  const std::string big(100000, 'i');
  ASSERT_OK(inner->PutObject("big", {{big.data(), big.size()}}));
  ASSERT_OK(inner->Put("index", "inner"));
  EXPECT_EQ(*outer->List(""), (std::vector<std::string>{"index", "pending"}));
  EXPECT_EQ(*inner->List(""), (std::vector<std::string>{"big", "index"}));
  EXPECT_EQ(*outer->Get("index"), "outer index record");
  ASSERT_OK(inner->Delete("big"));
  EXPECT_EQ(*outer->Get("pending"), "outer pending record");
}

// List pages through the index; a store larger than a page lists whole,
// in key order.
TEST(RedisStoreTest, ListPagesThroughALargeIndex) {
  const std::string p = FreshRedisPrefix();
  auto s = Open(SharedRedisServer().Uri(p));
  std::vector<std::string> expected;
  std::vector<std::string> zadd = {"ZADD", p + ":index"};
  for (int i = 0; i < 25001; ++i) {
    char key[16];
    std::snprintf(key, sizeof(key), "a/%06d", i);
    expected.push_back(key);
    zadd.push_back("0");
    zadd.push_back(key);
  }
  RawCommand(zadd);
  EXPECT_EQ(*s->List(""), expected);
  EXPECT_EQ(s->List("a/").ValueOrDie().size(), expected.size());
}

}  // namespace
}  // namespace reshard
