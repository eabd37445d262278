// The directory RecordStore: byte-exact Put/Get, create-only publication
// (also across racing processes), List/Delete semantics and key validation;
// records past the read cap (a peer's 10 TB sparse record) refused by size,
// also under an address-space limit; read-only opens never create.

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/resource.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <random>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "reshard/backends/fs_store.h"
#include "reshard/sdk/record_store.h"
#include "reshard/status.h"
#include "reshard/store_uri.h"
#include "testing/sanitizer.h"
#include "testing/status_testing.h"
#include "util/printable.h"

namespace reshard::internal {
namespace {

using ::reshard::testing::StatusIs;

namespace fs = std::filesystem;

using Keys = std::vector<std::string>;

class DirectoryRecordStoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/reshard_record_store_test_XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    ASSERT_OK_AND_ASSIGN(auto store, OpenDirectoryRecordStore(dir_));
    store_ = std::move(store);
  }

  void TearDown() override {
    store_.reset();
    std::error_code ec;
    if (!dir_.empty()) fs::remove_all(dir_, ec);
  }

  // Every path under the store directory, relative to it, sorted.
  std::set<std::string> AllPaths() const {
    std::set<std::string> out;
    for (const auto& e : fs::recursive_directory_iterator(dir_)) {
      out.insert(fs::relative(e.path(), dir_).string());
    }
    return out;
  }

  Keys ListOrDie(std::string_view prefix) {
    auto keys = store_->List(prefix);
    EXPECT_OK(keys);
    return keys.ok() ? *keys : Keys{};
  }

  std::string dir_;
  std::unique_ptr<RecordStore> store_;
};

TEST_F(DirectoryRecordStoreTest, PutThenGetReturnsExactBytes) {
  ASSERT_OK(store_->Put("a", "hello"));
  auto got = store_->Get("a");
  ASSERT_OK(got);
  EXPECT_EQ(*got, "hello");

  // Nested key: parent directories are created.
  ASSERT_OK(store_->Put("s/x/y", "nested"));
  got = store_->Get("s/x/y");
  ASSERT_OK(got);
  EXPECT_EQ(*got, "nested");

  // Empty value.
  ASSERT_OK(store_->Put("empty", ""));
  got = store_->Get("empty");
  ASSERT_OK(got);
  EXPECT_EQ(*got, "");
}

TEST_F(DirectoryRecordStoreTest, BinaryValuesWithNulRoundTrip) {
  std::string binary;
  for (int i = 0; i < 256; ++i) binary.push_back(static_cast<char>(i));
  binary += std::string("\0\0\xff\0", 4);
  ASSERT_EQ(binary.size(), 260u);
  ASSERT_OK(store_->Put("bin", binary));
  ASSERT_OK_AND_ASSIGN(auto got, store_->Get("bin"));
  EXPECT_EQ(got.size(), binary.size());
  EXPECT_EQ(got, binary);
}

TEST_F(DirectoryRecordStoreTest, OneMebibyteValueRoundTrips) {
  std::mt19937_64 rng(42);
  std::string big(1 << 20, '\0');
  for (char& c : big) c = static_cast<char>(rng());
  ASSERT_OK(store_->Put("big/value", big));
  auto got = store_->Get("big/value");
  ASSERT_OK(got);
  ASSERT_EQ(got->size(), big.size());
  EXPECT_TRUE(*got == big);
  // Also bigger than one read buffer and not a multiple of it.
  std::string odd = big.substr(0, (1 << 20) - 7) + std::string(3, '\0');
  ASSERT_OK(store_->Put("big/odd", odd));
  got = store_->Get("big/odd");
  ASSERT_OK(got);
  EXPECT_TRUE(*got == odd);
}

TEST_F(DirectoryRecordStoreTest, PutExistingKeyIsAlreadyExistsAndKeepsFirst) {
  ASSERT_OK(store_->Put("s/k", "first"));
  const Status st = store_->Put("s/k", "second value");
  EXPECT_THAT(st, StatusIs(StatusCode::kAlreadyExists, "record exists: s/k"));
  ASSERT_OK_AND_ASSIGN(auto got, store_->Get("s/k"));
  EXPECT_EQ(got, "first");
  // The losing writer's temporary is gone.
  EXPECT_EQ(AllPaths(), (std::set<std::string>{"s", "s/k"}));
}

TEST_F(DirectoryRecordStoreTest, GetMissingKeyIsNotFound) {
  auto got = store_->Get("no/such");
  ASSERT_THAT(got, StatusIs(StatusCode::kNotFound, "no record no/such"));

  got = store_->Get("missing");
  ASSERT_THAT(got, StatusIs(StatusCode::kNotFound, "no record missing"));
}

TEST_F(DirectoryRecordStoreTest, GetAndPutValidateTheKey) {
  auto got = store_->Get("a//b");
  ASSERT_FALSE(got.ok());
  EXPECT_EQ(got.status().code(), StatusCode::kInvalidArgument);
  const Status st = store_->Put(".x", "v");
  EXPECT_THAT(st,
              StatusIs(StatusCode::kInvalidArgument,
                       "invalid record key \".x\": component starts with '.'"));
  EXPECT_EQ(store_->Delete("a b").code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(AllPaths().empty());
}

TEST_F(DirectoryRecordStoreTest, ListReturnsSortedMatchingKeys) {
  for (const char* key :
       {"s/done/2", "s/done/1", "s/doing", "s/a", "t/x", "s2/y", "top"}) {
    ASSERT_OK(store_->Put(key, key)) << key;
  }
  EXPECT_EQ(ListOrDie(""), (Keys{"s/a", "s/doing", "s/done/1", "s/done/2",
                                 "s2/y", "t/x", "top"}));
  EXPECT_EQ(ListOrDie("s/"), (Keys{"s/a", "s/doing", "s/done/1", "s/done/2"}));
  EXPECT_EQ(ListOrDie("s"),
            (Keys{"s/a", "s/doing", "s/done/1", "s/done/2", "s2/y"}));
  EXPECT_EQ(ListOrDie("s/do"), (Keys{"s/doing", "s/done/1", "s/done/2"}));
  EXPECT_EQ(ListOrDie("s/done"), (Keys{"s/done/1", "s/done/2"}));
  EXPECT_EQ(ListOrDie("s/done/"), (Keys{"s/done/1", "s/done/2"}));
  EXPECT_EQ(ListOrDie("s/done/1"), (Keys{"s/done/1"}));
  EXPECT_EQ(ListOrDie("t"), (Keys{"t/x", "top"}));
  EXPECT_EQ(ListOrDie("to"), (Keys{"top"}));
  EXPECT_EQ(ListOrDie("s/z"), Keys{});
  EXPECT_EQ(ListOrDie("u"), Keys{});
}

TEST_F(DirectoryRecordStoreTest, ListOfMissingDirectoryIsEmpty) {
  ASSERT_OK(store_->Put("a/b", "v"));
  EXPECT_EQ(ListOrDie("missing/"), Keys{});
  EXPECT_EQ(ListOrDie("missing/deeper/x"), Keys{});
  EXPECT_EQ(ListOrDie("a/b/c/"), Keys{});  // a/b is a record, not a dir
  // An empty store lists nothing at all.
  ASSERT_OK(store_->Delete("a/b"));
  EXPECT_EQ(ListOrDie(""), Keys{});
}

TEST_F(DirectoryRecordStoreTest, ListNeverShowsTemporariesOrHiddenFiles) {
  ASSERT_OK(store_->Put("s/k", "v"));
  // Simulate a writer caught mid-publication and other dot entries.
  std::ofstream(dir_ + "/s/.tmp.12345.0") << "partial";
  std::ofstream(dir_ + "/.tmp.999.3") << "partial";
  fs::create_directories(dir_ + "/.hidden/sub");
  std::ofstream(dir_ + "/.hidden/sub/file") << "x";
  std::ofstream(dir_ + "/s/.other") << "x";
  EXPECT_EQ(ListOrDie(""), (Keys{"s/k"}));
  EXPECT_EQ(ListOrDie("s/"), (Keys{"s/k"}));
  // Prefixes are checked like keys: hidden names and ".." never list.
  for (std::string_view bad : {"s/.", ".", "../", "s/../x"}) {
    auto keys = store_->List(bad);
    EXPECT_EQ(keys.status().code(), StatusCode::kInvalidArgument) << bad;
  }
}

TEST_F(DirectoryRecordStoreTest, PutsLeaveNoTemporaries) {
  for (int i = 0; i < 20; ++i) {
    ASSERT_OK(store_->Put("k/" + std::to_string(i), "v"));
    EXPECT_EQ(store_->Put("k/" + std::to_string(i), "w").code(),
              StatusCode::kAlreadyExists);
  }
  const std::set<std::string> paths = AllPaths();
  EXPECT_EQ(paths.size(), 21u);  // "k" and its 20 records
  for (const std::string& p : paths) {
    EXPECT_EQ(p.find(".tmp."), std::string::npos) << p;
  }
}

TEST_F(DirectoryRecordStoreTest, DeleteRemovesAndMissingIsOk) {
  ASSERT_OK(store_->Put("d/one", "1"));
  ASSERT_OK(store_->Put("d/two", "2"));
  ASSERT_OK(store_->Delete("d/one"));
  auto got = store_->Get("d/one");
  ASSERT_FALSE(got.ok());
  EXPECT_EQ(got.status().code(), StatusCode::kNotFound);
  EXPECT_EQ(ListOrDie("d/"), (Keys{"d/two"}));
  got = store_->Get("d/two");
  ASSERT_OK(got);
  EXPECT_EQ(*got, "2");

  // Deleting again, or a key that never existed, is OK.
  EXPECT_OK(store_->Delete("d/one"));
  EXPECT_OK(store_->Delete("never/was"));

  // A deleted key can be published again.
  ASSERT_OK(store_->Put("d/one", "again"));
  got = store_->Get("d/one");
  ASSERT_OK(got);
  EXPECT_EQ(*got, "again");
}

TEST(DirectoryRecordStoreKeyTest, ValidateRecordKeyAcceptsGoodKeys) {
  for (const char* key : {"a", "a/b", "A-Z_0.9/x.y/z-", "s/done/1", "a./b."}) {
    const Status st = ValidateRecordKey(key);
    EXPECT_OK(st) << key;
  }
}

TEST(DirectoryRecordStoreKeyTest, ValidateRecordKeyRejectsWithExactMessage) {
  struct Case {
    std::string key;
    std::string reason;
  };
  const std::string chars = "characters other than [A-Za-z0-9._~%-]";
  const std::vector<Case> cases = {
      {"", "empty"},
      {"a//b", "empty component"},
      {"/a", "empty component"},
      {"a/", "empty component"},
      {"/", "empty component"},
      {".hidden", "component starts with '.'"},
      {"a/.b", "component starts with '.'"},
      {"a/..", "component starts with '.'"},
      {"a b", chars},
      {"a\n", chars},
      {"a/b\\c", chars},
      {std::string("a\0b", 3), chars},
  };
  for (const Case& c : cases) {
    const Status st = ValidateRecordKey(c.key);
    EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << c.key;
    // Control bytes in the key are shown escaped.
    EXPECT_EQ(st.message(), "invalid record key \"" +
                                internal::Printable(c.key) + "\": " + c.reason);
  }
}

TEST(DirectoryRecordStoreOpenTest, EmptyRootIsInvalidArgument) {
  auto store = OpenDirectoryRecordStore("");
  ASSERT_FALSE(store.ok());
  EXPECT_EQ(store.status().code(), StatusCode::kInvalidArgument);
}

TEST(DirectoryRecordStoreOpenTest, CreatesMissingRootAndRejectsAFile) {
  char tmpl[] = "/tmp/reshard_record_store_open_XXXXXX";
  ASSERT_NE(::mkdtemp(tmpl), nullptr);
  const std::string dir = tmpl;
  {
    ASSERT_OK_AND_ASSIGN(auto store, OpenDirectoryRecordStore(dir + "/x/y"));
    EXPECT_TRUE(fs::is_directory(dir + "/x/y"));
    ASSERT_OK((store)->Put("k", "v"));
    EXPECT_TRUE(fs::is_regular_file(dir + "/x/y/k"));
    // A second store over the same root sees the record.
    ASSERT_OK_AND_ASSIGN(auto again, OpenDirectoryRecordStore(dir + "/x/y/"));
    ASSERT_OK_AND_ASSIGN(auto got, (again)->Get("k"));
    EXPECT_EQ(got, "v");
    EXPECT_EQ((again)->Put("k", "w").code(), StatusCode::kAlreadyExists);
  }
  std::ofstream(dir + "/file") << "x";
  auto bad = OpenDirectoryRecordStore(dir + "/file");
  EXPECT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), StatusCode::kIOError);
  std::error_code ec;
  fs::remove_all(dir, ec);
}

TEST_F(DirectoryRecordStoreTest, RacingProcessesPublishExactlyOnce) {
  constexpr int kChildren = 8;
  auto value_of = [](int i) {
    // Distinct, self-identifying and large enough to widen the race window.
    return "child " + std::to_string(i) + ":" +
           std::string(256 * 1024, static_cast<char>('a' + i));
  };
  int start[2];
  ASSERT_EQ(::pipe(start), 0);
  std::vector<pid_t> pids;
  for (int i = 0; i < kChildren; ++i) {
    const pid_t pid = ::fork();
    if (pid < 0) {
      ::close(start[1]);  // release the children already started
      FAIL() << "fork failed";
    }
    if (pid == 0) {
      ::close(start[1]);
      char c;
      // Blocks until the parent closes the write end (EOF for everyone).
      while (::read(start[0], &c, 1) > 0) {
      }
      const Status st = store_->Put("race", value_of(i));
      ::_exit(st.ok() ? 0 : st.IsAlreadyExists() ? 1 : 2);
    }
    pids.push_back(pid);
  }
  ::close(start[0]);
  ::close(start[1]);  // go

  int winners = 0;
  int losers = 0;
  int winner = -1;
  for (int i = 0; i < kChildren; ++i) {
    int wstatus = 0;
    ASSERT_EQ(::waitpid(pids[i], &wstatus, 0), pids[i]);
    ASSERT_TRUE(WIFEXITED(wstatus)) << "child " << i;
    const int code = WEXITSTATUS(wstatus);
    if (code == 0) {
      ++winners;
      winner = i;
    } else if (code == 1) {
      ++losers;
    } else {
      ADD_FAILURE() << "child " << i << " exited " << code;
    }
  }
  EXPECT_EQ(winners, 1);
  EXPECT_EQ(losers, kChildren - 1);
  ASSERT_GE(winner, 0);
  ASSERT_OK_AND_ASSIGN(auto got, store_->Get("race"));
  EXPECT_TRUE(got == value_of(winner))
      << "record starts with " << got.substr(0, 16);
  EXPECT_EQ(AllPaths(), (std::set<std::string>{"race"}));
  EXPECT_EQ(ListOrDie(""), (Keys{"race"}));
}

// Plants a sparse file of `size` bytes at `rel` under `dir`; false when
// the filesystem cannot hold one that large.
bool PlantSparse(const std::string& dir, const std::string& rel, off_t size) {
  const fs::path path = fs::path(dir) / rel;
  fs::create_directories(path.parent_path());
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT, 0644);
  if (fd < 0) return false;
  const bool ok = ::ftruncate(fd, size) == 0;
  ::close(fd);
  return ok;
}

constexpr off_t kTenTerabytes = off_t{10} << 40;

// Sanitizers reserve terabytes of shadow memory: no address-space limit
// can be set under them.
using ::reshard::testing::kSanitized;

TEST_F(DirectoryRecordStoreTest, UnboundedReadsRecordPastTheCapIsDataLoss) {
  ASSERT_OK_AND_ASSIGN(
      auto small, OpenDirectoryRecordStore(dir_, {.max_record_bytes = 1000}));
  ASSERT_OK(small->Put("s/fits", std::string(1000, 'a')));
  ASSERT_OK(small->Put("s/over", std::string(1001, 'a')));
  ASSERT_OK_AND_ASSIGN(std::string fits, small->Get("s/fits"));
  EXPECT_EQ(fits.size(), 1000u);
  EXPECT_THAT(small->Get("s/over").status(),
              StatusIs(StatusCode::kDataLoss,
                       "record s/over is larger than 1000 bytes (a corrupt "
                       "record or manifest)"));
}

TEST_F(DirectoryRecordStoreTest,
       UnboundedReadsSparseRendezvousRecordUnderAnAddressSpaceLimit) {
  if (kSanitized) GTEST_SKIP() << "no address-space limit under sanitizers";
  if (!PlantSparse(dir_, "step/rank/1", kTenTerabytes)) {
    GTEST_SKIP() << "no 10 TB sparse files here";
  }
  const auto before = AllPaths();
  // A child under RLIMIT_AS of 4 GiB: the record is refused by its size,
  // with no allocation, no bad_alloc and no signal.
  const pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    const rlimit limit{uint64_t{4} << 30, uint64_t{4} << 30};
    ::setrlimit(RLIMIT_AS, &limit);
    auto store = OpenDirectoryRecordStore(dir_);
    if (!store.ok()) std::_Exit(2);
    const Status st = (*store)->Get("step/rank/1").status();
    std::_Exit(st.code() == StatusCode::kDataLoss &&
                       st.message() ==
                           "record step/rank/1 is larger than 268435456 "
                           "bytes (a corrupt record or manifest)"
                   ? 0
                   : 1);
  }
  int status = 0;
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status)) << "signal " << WTERMSIG(status);
  EXPECT_EQ(WEXITSTATUS(status), 0);
  EXPECT_EQ(AllPaths(), before);
}

TEST_F(DirectoryRecordStoreTest, UnboundedReadsSparseManifestIsDataLoss) {
  if (!PlantSparse(dir_, "weights/ns/m/r/1/manifest", kTenTerabytes)) {
    GTEST_SKIP() << "no 10 TB sparse files here";
  }
  ASSERT_OK_AND_ASSIGN(auto store, OpenFsObjectStore(dir_));
  EXPECT_THAT(store->Get("weights/ns/m/r/1/manifest").status(),
              StatusIs(StatusCode::kDataLoss,
                       "record weights/ns/m/r/1/manifest is larger than "
                       "4294967296 bytes (a corrupt record or manifest)"));
}

TEST(ReadOnlyOpenTest, ReadOnlyOpenNeverCreatesAStore) {
  char tmpl[] = "/tmp/reshard_read_only_open_XXXXXX";
  ASSERT_NE(::mkdtemp(tmpl), nullptr);
  const std::string missing = std::string(tmpl) + "/deep/path";
  EXPECT_THAT(
      OpenObjectStore("fs://" + missing, {.create_if_missing = false}).status(),
      StatusIs(StatusCode::kNotFound,
               "store directory " + missing + " does not exist"));
  EXPECT_THAT(OpenFsObjectStore(missing, {.create_if_missing = false}).status(),
              StatusIs(StatusCode::kNotFound,
                       "store directory " + missing + " does not exist"));
  EXPECT_FALSE(fs::exists(std::string(tmpl) + "/deep"));
  // A writer still creates it.
  ASSERT_OK(OpenObjectStore("fs://" + missing).status());
  EXPECT_TRUE(fs::is_directory(missing));
  fs::remove_all(tmpl);
}

}  // namespace
}  // namespace reshard::internal
