// The fs ObjectStore: runs the backend conformance suite over fresh
// temporary directories, then the fs-specific behaviour: URI parsing and
// errors, plain paths, the normalized absolute uri(), objects as plain files
// under the root, the exact short-read error, Delete pruning emptied
// directories (never the root), a Delete/Put storm on sibling keys that
// never fails a Put (also nested and non-durable, also while List walks),
// and no ".tmp." file left behind by any test. Links inside the store:
// src/store/store_confinement_test.cc.

#include <gtest/gtest.h>
#include <stdlib.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <latch>
#include <memory>
#include <set>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "reshard/sdk/object_store.h"
#include "reshard/status.h"
#include "reshard/store_uri.h"
#include "testing/object_store_conformance.h"
#include "testing/status_testing.h"
#include "testing/temp_dir.h"

namespace reshard::internal {
namespace {

namespace fs = std::filesystem;

using ::reshard::testing::ObjectStoreConformance;
using ::reshard::testing::ObjectStoreFactory;
using ::reshard::testing::StatusIs;
using Keys = std::vector<std::string>;

// A fresh directory under /tmp; empty on failure.
std::string MakeTempDir() {
  char tmpl[] = "/tmp/reshard_object_store_test_XXXXXX";
  return ::mkdtemp(tmpl) == nullptr ? "" : tmpl;
}

// Every entry under `dir` (hidden ones included) whose name holds ".tmp.".
Keys Temporaries(const std::string& dir) {
  Keys out;
  std::error_code ec;
  for (auto it = fs::recursive_directory_iterator(dir, ec);
       !ec && it != fs::recursive_directory_iterator(); it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (name.find(".tmp.") != std::string::npos) {
      out.push_back(fs::relative(it->path(), dir).string());
    }
  }
  EXPECT_FALSE(ec) << "cannot walk " << dir << ": " << ec.message();
  return out;
}

ConstBuffer Buf(std::string_view s) { return ConstBuffer{s.data(), s.size()}; }

// An fs store over its own temporary directory: forwards every call, and
// when destroyed checks that no temporary is left and removes the directory.
class TempDirStore : public ObjectStore {
 public:
  TempDirStore(std::string dir, std::unique_ptr<ObjectStore> store)
      : dir_(std::move(dir)), store_(std::move(store)) {}
  ~TempDirStore() override {
    store_.reset();
    EXPECT_EQ(Temporaries(dir_), Keys{}) << "in " << dir_;
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }

  Status Put(std::string_view key, std::string_view value) override {
    return store_->Put(key, value);
  }
  Result<std::string> Get(std::string_view key) override {
    return store_->Get(key);
  }
  Result<std::vector<std::string>> List(std::string_view prefix) override {
    return store_->List(prefix);
  }
  Status Delete(std::string_view key) override { return store_->Delete(key); }
  Status PutObject(std::string_view key, const std::vector<ConstBuffer>& parts,
                   Durability durability = Durability::kDurable) override {
    return store_->PutObject(key, parts, durability);
  }
  Status Sync() override { return store_->Sync(); }
  Result<uint64_t> RemoveStaleTemporaries(
      std::chrono::seconds older_than) override {
    return store_->RemoveStaleTemporaries(older_than);
  }
  Status ReadRanges(const std::vector<ReadRange>& ranges) override {
    return store_->ReadRanges(ranges);
  }
  Result<uint64_t> ObjectSize(std::string_view key) override {
    return store_->ObjectSize(key);
  }
  const std::string& uri() const override { return store_->uri(); }

 private:
  std::string dir_;
  std::unique_ptr<ObjectStore> store_;
};

std::unique_ptr<ObjectStore> NewTempDirStore() {
  const std::string dir = MakeTempDir();
  if (dir.empty()) {
    ADD_FAILURE() << "mkdtemp failed";
    return nullptr;
  }
  auto store = OpenObjectStore("fs://" + dir);
  if (!store.ok()) {
    ADD_FAILURE() << store.status().ToString();
    std::error_code ec;
    fs::remove_all(dir, ec);
    return nullptr;
  }
  return std::make_unique<TempDirStore>(dir, std::move(store).ValueOrDie());
}

INSTANTIATE_TEST_SUITE_P(FsObjectStore, ObjectStoreConformance,
                         ::testing::Values(ObjectStoreFactory(NewTempDirStore)),
                         [](const auto&) { return std::string("fs"); });

// kThreads threads each Put, Get and Delete their own key in directory
// `dir` `iterations` times, so that siblings keep pruning and recreating
// it; with `list`, one more thread Lists all along. Returns the failures.
Keys Storm(ObjectStore& store, const std::string& dir, bool durable,
           int iterations, bool list) {
  constexpr int kThreads = 8;
  std::vector<Keys> errors(kThreads + 1);
  std::latch start(kThreads + 1);
  std::atomic<int> running = kThreads;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      const std::string key = dir + "/k" + std::to_string(t);
      const std::string value(100 + t, static_cast<char>('a' + t));
      start.arrive_and_wait();
      for (int i = 0; i < iterations; ++i) {
        if (Status st = store.PutObject(
                key, {Buf(value)},
                durable ? Durability::kDurable : Durability::kAtNextSync);
            !st.ok()) {
          errors[t].push_back("Put " + key + ": " + st.ToString());
          continue;
        }
        auto got = store.Get(key);
        if (!got.ok() || *got != value) errors[t].push_back("Get " + key);
        if (Status st = store.Delete(key); !st.ok()) {
          errors[t].push_back("Delete " + key + ": " + st.ToString());
        }
      }
      --running;
    });
  }
  threads.emplace_back([&] {
    start.arrive_and_wait();
    while (list && running > 0) {
      if (auto keys = store.List(""); !keys.ok()) {
        errors[kThreads].push_back("List: " + keys.status().ToString());
      }
    }
  });
  for (std::thread& thread : threads) thread.join();
  Keys all;
  for (const Keys& e : errors) all.insert(all.end(), e.begin(), e.end());
  return all;
}

class FsObjectStoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = MakeTempDir();
    ASSERT_FALSE(dir_.empty()) << "mkdtemp failed";
  }

  void TearDown() override {
    EXPECT_EQ(Temporaries(dir_), Keys{});
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }

  std::unique_ptr<ObjectStore> OpenOrDie(const std::string& uri) {
    auto store = OpenObjectStore(uri);
    EXPECT_OK(store) << uri;
    return store.ok() ? std::move(store).ValueOrDie() : nullptr;
  }

  // The uri() of the store `uri` opens, or the error.
  std::string UriOf(const std::string& uri) {
    auto store = OpenObjectStore(uri);
    return store.ok() ? (*store)->uri() : store.status().ToString();
  }

  // Every path under the store directory, relative to it.
  std::set<std::string> AllPaths() const {
    std::set<std::string> out;
    for (const auto& e : fs::recursive_directory_iterator(dir_)) {
      out.insert(fs::relative(e.path(), dir_).string());
    }
    return out;
  }

  std::string dir_;
};

TEST_F(FsObjectStoreTest, OpenRejectsMissingDirectoryAndOtherSchemes) {
  const struct {
    std::string uri;
    std::string message;
  } cases[] = {
      {"fs://", "store URI \"fs://\" names no directory"},
      {"", "store URI \"\" names no directory"},
      {"rediss://x",
       "unsupported store URI \"rediss://x\" (supported: fs://PATH, "
       "redis://HOST:PORT, unix:///PATH)"},
      {"s3://bucket/p",
       "unsupported store URI \"s3://bucket/p\" (supported: fs://PATH, "
       "redis://HOST:PORT, unix:///PATH)"},
  };
  for (const auto& c : cases) {
    auto store = OpenObjectStore(c.uri);
    ASSERT_FALSE(store.ok()) << c.uri;
    EXPECT_EQ(store.status().code(), StatusCode::kInvalidArgument) << c.uri;
    EXPECT_EQ(store.status().message(), c.message);
  }
}

TEST_F(FsObjectStoreTest, PlainPathWorksLikeFsUri) {
  auto plain = OpenOrDie(dir_);
  ASSERT_NE(plain, nullptr);
  ASSERT_OK(plain->PutObject("a/obj", {Buf("plain "), Buf("path")}));
  auto with_scheme = OpenOrDie("fs://" + dir_);
  ASSERT_NE(with_scheme, nullptr);
  EXPECT_EQ(plain->uri(), with_scheme->uri());
  EXPECT_EQ(*with_scheme->Get("a/obj"), "plain path");
  ASSERT_OK(with_scheme->Put("b", "record"));
  EXPECT_EQ(*plain->List(""), (Keys{"a/obj", "b"}));
}

TEST_F(FsObjectStoreTest, UriIsFsPlusTheNormalizedAbsolutePath) {
  EXPECT_EQ(UriOf("fs://" + dir_), "fs://" + dir_);
  EXPECT_EQ(UriOf(dir_ + "/"), "fs://" + dir_);
  // Missing directories are created.
  EXPECT_EQ(UriOf("fs://" + dir_ + "/new//sub/./"),
            "fs://" + dir_ + "/new/sub");
  EXPECT_TRUE(fs::is_directory(dir_ + "/new/sub"));
  // A relative path is resolved against the working directory.
  const fs::path relative =
      fs::relative(fs::path(dir_) / "rel", fs::current_path());
  ASSERT_TRUE(relative.is_relative()) << relative;
  EXPECT_EQ(UriOf(relative.string()),
            "fs://" + (fs::canonical(dir_) / "rel").string());
}

TEST_F(FsObjectStoreTest, ObjectsAndRecordsArePlainFilesUnderTheRoot) {
  auto store = OpenOrDie("fs://" + dir_);
  ASSERT_NE(store, nullptr);
  ASSERT_OK(store->PutObject("a/b/obj", {Buf("multi"), Buf(""), Buf("part")}));
  ASSERT_OK(store->Put("rec", "record"));
  EXPECT_EQ(AllPaths(), (std::set<std::string>{"a", "a/b", "a/b/obj", "rec"}));
  std::ifstream in(dir_ + "/a/b/obj", std::ios::binary);
  EXPECT_EQ(std::string(std::istreambuf_iterator<char>(in), {}), "multipart");
}

TEST_F(FsObjectStoreTest, ShortReadIsDataLossNamingKeyAndRange) {
  auto store = OpenOrDie("fs://" + dir_);
  ASSERT_NE(store, nullptr);
  ASSERT_OK(store->PutObject("s/obj", {Buf("0123456789")}));
  char dest[32];
  Status st = store->ReadRanges({{"s/obj", 4, 10, dest}});
  EXPECT_THAT(
      st,
      StatusIs(
          StatusCode::kDataLoss,
          "object s/obj is short: range [4, 14) is past its end (10 bytes)"));
  st = store->ReadRanges({{"s/obj", 20, 1, dest}});
  EXPECT_THAT(
      st,
      StatusIs(
          StatusCode::kDataLoss,
          "object s/obj is short: range [20, 21) is past its end (10 bytes)"));
  // A zero-length range past the end is as wrong as a long one.
  st = store->ReadRanges({{"s/obj", 200, 0, dest}});
  EXPECT_EQ(st.code(), StatusCode::kDataLoss);
}

TEST_F(FsObjectStoreTest, DeletePrunesEmptiedDirectoriesButNeverTheRoot) {
  auto store = OpenOrDie("fs://" + dir_);
  ASSERT_NE(store, nullptr);
  ASSERT_OK(store->PutObject("a/b/c/obj", {Buf("x")}));
  ASSERT_OK(store->PutObject("a/keep", {Buf("y")}));
  ASSERT_OK(store->Put("top", "z"));
  ASSERT_OK(store->Delete("a/b/c/obj"));
  EXPECT_EQ(AllPaths(), (std::set<std::string>{"a", "a/keep", "top"}));
  ASSERT_OK(store->Delete("a/keep"));
  EXPECT_EQ(AllPaths(), (std::set<std::string>{"top"}));
  ASSERT_OK(store->Delete("top"));
  EXPECT_EQ(AllPaths(), std::set<std::string>{});
  EXPECT_TRUE(fs::is_directory(dir_));
  // Deleting missing keys, deep or not, keeps the root too.
  ASSERT_OK(store->Delete("no/such/key"));
  ASSERT_OK(store->Delete("none"));
  EXPECT_TRUE(fs::is_directory(dir_));
  // The store still works.
  ASSERT_OK(store->PutObject("a/b/again", {Buf("again")}));
  EXPECT_EQ(*store->Get("a/b/again"), "again");
}

TEST_F(FsObjectStoreTest, DeletePutStormOnSiblingKeysNeverFailsAPut) {
  auto store = OpenOrDie("fs://" + dir_);
  ASSERT_NE(store, nullptr);
  EXPECT_EQ(Storm(*store, "storm", /*durable=*/true, 100, /*list=*/false),
            Keys{});
  EXPECT_EQ(*store->List(""), Keys{});
  EXPECT_EQ(AllPaths(), std::set<std::string>{});
}

// A Delete that prunes a directory while a Put is creating the directories
// above its key (frequent with nested directories and durable=false) makes
// the Put retry, never fail.
TEST_F(FsObjectStoreTest, NestedNonDurableStormNeverFailsAPut) {
  auto store = OpenOrDie("fs://" + dir_);
  ASSERT_NE(store, nullptr);
  EXPECT_EQ(Storm(*store, "storm/a/b", /*durable=*/false, 500,
                  /*list=*/false),
            Keys{});
}

// A directory that a concurrent Delete prunes while List walks the tree is
// skipped, not an error.
TEST_F(FsObjectStoreTest, ListDuringDeleteStormNeverFails) {
  auto store = OpenOrDie("fs://" + dir_);
  ASSERT_NE(store, nullptr);
  EXPECT_EQ(Storm(*store, "storm", /*durable=*/false, 500, /*list=*/true),
            Keys{});
}

}  // namespace
}  // namespace reshard::internal

namespace reshard::internal {
namespace {

// What an interrupted writer leaves (a hidden temporary file) is swept once
// older than the given age; published objects never are.
TEST(FsObjectStoreSweepTest, RemovesOnlyStaleTemporaries) {
  reshard::testing::TempDir dir("reshard-fs-sweep-test");
  ASSERT_OK_AND_ASSIGN(auto store, OpenObjectStore("fs://" + dir.path()));
  ASSERT_OK((store)->Put("a/b", "kept"));
  const std::string stale = dir.path() + "/a/.tmp.host.1.2.3";
  const std::string fresh = dir.path() + "/a/.tmp.host.1.2.4";
  { std::ofstream(stale) << "partial"; }
  { std::ofstream(fresh) << "partial"; }
  std::filesystem::last_write_time(
      stale,
      std::filesystem::file_time_type::clock::now() - std::chrono::hours(2));
  auto removed = (store)->RemoveStaleTemporaries(std::chrono::hours(1));
  ASSERT_OK(removed);
  EXPECT_EQ(*removed, 1u);
  EXPECT_FALSE(std::filesystem::exists(stale));
  EXPECT_TRUE(std::filesystem::exists(fresh));
  EXPECT_EQ(*(store)->Get("a/b"), "kept");
  removed = (store)->RemoveStaleTemporaries(std::chrono::seconds(0));
  ASSERT_OK(removed);
  EXPECT_EQ(*removed, 1u);
  EXPECT_EQ(*(store)->Get("a/b"), "kept");
}

}  // namespace
}  // namespace reshard::internal
