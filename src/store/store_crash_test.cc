// Crash safety and races of the weight store with real processes, on each
// backend (fs, and redis on a private test server). Children are forked and
// either _exit or die by SIGKILL; they never return into gtest. Covered:
//  - deterministic kill points (WeightStoreOptions::on_stage raising
//    SIGKILL at the Nth "payload", at "decision" and at "published"): no
//    partial revision is ever visible; recovery completes either by a retry
//    (Upload again, which re-checks existing checksum records, then Commit)
//    or by Abort (which must fail once a commit was decided, and Commit
//    then finishes); Gc with no grace then leaves exactly the committed
//    revision's keys, which load byte-exactly into another layout;
//  - 20 random kill points (SIGKILL after a random delay up to an unkilled
//    run's duration) of a few-MiB upload, with the same invariants;
//  - racing writers of one revision started together: exactly one commit
//    succeeds, the others get "conflicting weight revision", no loser's
//    payload survives Gc, the revision loads byte-exactly;
//  - processes forked from a process that already prepared an upload get
//    their own transaction ids (see the comment there).
// The plan of a killed writer is shared by preparing it in the parent
// before forking; the parent is the one that recovers.

#include <fcntl.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <map>
#include <random>
#include <set>
#include <stdexcept>
#include <string>
#include <thread>
#include <tuple>
#include <unordered_map>
#include <vector>

#include "reshard/placement.h"
#include "reshard/weight_store.h"
#include "selftest/host_buffers.h"
#include "selftest/pattern.h"
#include "store/keys.h"
#include "testing/must.h"
#include "testing/placement_builders.h"
#include "testing/status_testing.h"
#include "testing/store_backends.h"
#include "testing/store_testing.h"
#include "testing/temp_dir.h"

namespace reshard {
namespace {

using ::reshard::internal::AllocateHostBuffers;
using ::reshard::internal::HostBuffers;
using ::reshard::testing::CommittedKeys;
using ::reshard::testing::Must;
using ::reshard::testing::MustOk;
using ::reshard::testing::StatusIs;
using ::testing::HasSubstr;
using Clock = std::chrono::steady_clock;

double SecondsSince(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

// A store or rendezvous directory of its own.
class TempDir : public testing::TempDir {
 public:
  TempDir() : testing::TempDir("reshard-store-crash-test") {}
};

// ---------------------------------------------------------------- processes

// Forks; the child runs `body` and _exits with its result (101 on an
// exception). Never returns in the child.
pid_t Spawn(const std::function<int()>& body) {
  std::fflush(nullptr);
  const pid_t pid = ::fork();
  if (pid < 0) throw std::runtime_error("fork failed");
  if (pid == 0) {
    int rc = 100;
    try {
      rc = body();
    } catch (...) {
      rc = 101;
    }
    ::_exit(rc);
  }
  return pid;
}

// The wait status of `pid`; kills it (and fails) after `limit`.
int WaitFor(pid_t pid, std::chrono::seconds limit = std::chrono::seconds(60)) {
  const auto deadline = Clock::now() + limit;
  int status = 0;
  while (true) {
    const pid_t r = ::waitpid(pid, &status, WNOHANG);
    if (r == pid) return status;
    if (r < 0) {
      ADD_FAILURE() << "waitpid: " << std::strerror(errno);
      return -1;
    }
    if (Clock::now() > deadline) {
      ADD_FAILURE() << "child " << pid << " hung; killing it";
      ::kill(pid, SIGKILL);
      ::waitpid(pid, &status, 0);
      return status;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
}

bool KilledBySigkill(int status) {
  return WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL;
}

int ExitCode(int status) {
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in),
                     std::istreambuf_iterator<char>());
}

void WriteFile(const std::string& path, const std::string& text) {
  std::ofstream(path, std::ios::binary) << text;
}

// ---------------------------------------------------------------- model

struct Side {
  WeightPlacementManifest placement;
  std::unordered_map<std::string_view, uint64_t> tensors;
  HostBuffers buffers;
};

// Four [rows, 1024] bf16 tensors split alternately by rows and columns, and
// a replicated norm: 4 * rows * 2 KiB bytes plus 2 KiB.
WeightPlacementManifest Model(int64_t dp, int64_t tp, int64_t rows) {
  auto d = testing::GridDraft({.dp = dp, .tp = tp});
  for (int i = 0; i < 4; ++i) {
    testing::AddTensor(&d, {.tensor_id = "layers." + std::to_string(i) + ".w",
                            .shape = {rows, 1024},
                            .tp_dim = i % 2});
  }
  testing::AddTensor(&d, {.tensor_id = "norm", .shape = {1024}});
  return Must(d.Build());
}

// The backend of the running test (fs or redis), set by its fixture.
std::string& CurrentBackend() {
  static std::string backend = "fs";
  return backend;
}

// A fresh store on the running test's backend, a scratch directory, a
// pattern-filled DP2/TP2 source and a DP1/TP4 target layout.
class Fixture {
 public:
  Fixture(int64_t rows, WeightStoreOptions options)
      : store_(CurrentBackend()),
        backend_(store_.backend()),
        options_(std::move(options)),
        source_{Model(2, 2, rows), {}, {}},
        target_(Model(1, 4, rows)) {
    source_.tensors = internal::TensorIndex(source_.placement);
    source_.buffers = Must(AllocateHostBuffers(source_.placement, "source"));
    internal::FillPattern(source_.placement, source_.tensors, source_.buffers);
  }

  const std::string& dir() const { return dir_.path(); }
  const std::string& uri() const { return store_.uri(); }
  ObjectStore& backend() const { return *backend_; }
  const Side& source() const { return source_; }
  const WeightStoreOptions& options() const { return options_; }
  // A store without hooks (the parent's), or with other options.
  WeightStore Open() const { return Open(options_); }
  WeightStore Open(const WeightStoreOptions& o) const {
    return Must(WeightStore::Open(backend_, o));
  }
  std::set<std::string> Keys(const std::string& prefix = "weights/") const {
    const auto keys = Must(backend_->List(prefix));
    return {keys.begin(), keys.end()};
  }
  // What killed writers left behind in the backend: temporary files (fs),
  // uploads still pending (redis).
  size_t TempFiles() const { return store_.Temporaries(); }

  // Loads the published revision into the target layout and checks every
  // byte; also Verify.
  void ExpectLoadsByteExactly(const std::string& manifest_key) const {
    WeightStore store = Open();
    ASSERT_OK_AND_ASSIGN(auto manifest, store.ReadManifest(manifest_key));
    HostBuffers dst = Must(AllocateHostBuffers(target_, "target"));
    for (const auto& [id, p] : dst.data) {
      std::memset(p, 0xD7, target_.FindFragment(id)->nbytes());
    }
    ASSERT_OK_AND_ASSIGN(auto report,
                         store.Load(manifest, target_, dst.bindings));
    EXPECT_EQ(internal::VerifyPattern(target_, source_.tensors, dst), "");
    EXPECT_GT(report.chunks_verified, 0u);
    auto verified = store.Verify(manifest_key);
    EXPECT_OK(verified);
  }

 private:
  TempDir dir_;
  testing::BackendStore store_;
  std::shared_ptr<ObjectStore> backend_;
  WeightStoreOptions options_;
  Side source_;
  WeightPlacementManifest target_;
};

std::string BaseOf(const StoredWeightManifest& m) { return m.group_id(); }

// Upload of every source binding plus Commit; a non-zero result says where
// it failed. With `kill_stage`, SIGKILL at its `kill_at`th occurrence.
int UploadAndCommit(const Fixture& f, const UploadPlan& plan,
                    const std::string& kill_stage = "", int kill_at = 0) {
  WeightStoreOptions o = f.options();
  int seen = 0;
  if (!kill_stage.empty()) {
    o.on_stage = [&](std::string_view stage) {
      if (stage == kill_stage && ++seen == kill_at) ::raise(SIGKILL);
    };
  }
  auto store = WeightStore::Open(f.uri(), o);
  if (!store.ok()) return 2;
  std::vector<UploadReceipt> receipts;
  for (const auto& b : f.source().buffers.bindings) {
    auto r = store->Upload(plan, f.source().placement, b);
    if (!r.ok()) return 3;
    receipts.insert(receipts.end(), r->begin(), r->end());
  }
  return store->Commit(plan, receipts).ok() ? 0 : 4;
}

// The receipts of `plan`, by uploading again (idempotent).
std::vector<UploadReceipt> UploadAgain(const Fixture& f, WeightStore& store,
                                       const UploadPlan& plan) {
  std::vector<UploadReceipt> receipts;
  for (const auto& b : f.source().buffers.bindings) {
    auto r = store.Upload(plan, f.source().placement, b);
    if (!r.ok()) {
      ADD_FAILURE() << "upload retry: " << r.status().ToString();
      continue;
    }
    receipts.insert(receipts.end(), r->begin(), r->end());
  }
  return receipts;
}

// After a writer died: the revision is absent (IMPORTING, not loadable) or
// complete and byte-exact. Returns whether it is published.
bool ExpectNoPartialRevision(const Fixture& f, const UploadPlan& plan) {
  WeightStore store = f.Open();
  const std::string key = plan.manifest().manifest_key();
  auto m = store.ReadManifest(key);
  if (m.ok()) {
    EXPECT_EQ(m->manifest_digest(), plan.manifest().manifest_digest());
    f.ExpectLoadsByteExactly(key);
    const auto list = Must(store.List());
    EXPECT_EQ(list.size(), 1u);
    if (!list.empty()) {
      EXPECT_EQ(list[0].state, "READY");
    }
    return true;
  }
  EXPECT_EQ(m.status().code(), StatusCode::kNotFound) << m.status().ToString();
  const auto list = Must(store.List());
  EXPECT_EQ(list.size(), 1u);
  if (!list.empty()) {
    EXPECT_EQ(list[0].state, "IMPORTING");
  }
  HostBuffers dst = Must(AllocateHostBuffers(f.source().placement, "t"));
  auto loaded = store.Load(plan.manifest(), f.source().placement, dst.bindings);
  EXPECT_THAT(loaded, StatusIs(StatusCode::kFailedPrecondition,
                               "weight manifest is not committed: " + key));
  return false;
}

enum class Recovery { kRetry, kAbort };

// Recovers the dead writer's transaction; returns the manifest key of the
// revision that ends up committed (re-uploading after a successful abort).
std::string Recover(const Fixture& f, const UploadPlan& plan,
                    Recovery recovery) {
  WeightStore store = f.Open();
  const std::string key = plan.manifest().manifest_key();
  if (recovery == Recovery::kRetry) {
    const auto receipts = UploadAgain(f, store, plan);
    const Status st = store.Commit(plan, receipts);
    EXPECT_OK(st) << "commit retry";
    return key;
  }
  const std::string decision = BaseOf(plan.manifest()) + "/transactions/" +
                               plan.transaction_id() + "/decision";
  const bool published = store.ReadManifest(key).ok();
  const bool decided_commit = f.backend().Get(decision).ok();
  const Status aborted = store.Abort(plan);
  if (published) {
    EXPECT_THAT(aborted,
                StatusIs(StatusCode::kFailedPrecondition,
                         "cannot abort a published weight revision: " + key));
  } else if (decided_commit) {
    EXPECT_THAT(aborted, StatusIs(StatusCode::kFailedPrecondition,
                                  "weight upload already chose commit"));
  } else {
    EXPECT_OK(aborted);
  }
  if (!aborted.ok()) {
    // A decided commit must be finished.
    const Status st = store.Commit(plan, UploadAgain(f, store, plan));
    EXPECT_OK(st) << "commit after refused abort";
    return key;
  }
  // Aborted for good: commit is refused, and once Gc ran nothing of the
  // transaction is left; a new upload of the revision then commits.
  std::vector<UploadReceipt> receipts;
  for (const auto& op : plan.operations()) {
    const auto& s = plan.manifest().fragments()[op.stored_fragment];
    receipts.push_back({s.stored_fragment_id, s.object_key, op.participant_id});
  }
  const Status st = store.Commit(plan, receipts);
  EXPECT_THAT(st, StatusIs(StatusCode::kFailedPrecondition,
                           "weight upload already chose abort"));
  EXPECT_TRUE(f.Keys(BaseOf(plan.manifest()) + "/payload/").empty());
  EXPECT_TRUE(f.Keys(BaseOf(plan.manifest()) + "/checksums/").empty());
  WeightStoreOptions no_grace = f.options();
  no_grace.gc_grace = std::chrono::seconds(0);
  Must(f.Open(no_grace).Gc());
  EXPECT_EQ(f.Keys(), std::set<std::string>{});
  auto again = Must(
      store.PrepareUpload(f.source().placement, f.source().buffers.bindings));
  EXPECT_EQ(UploadAndCommit(f, again), 0);
  return key;
}

// Gc without grace leaves exactly the committed revision, which loads.
void ExpectOnlyCommittedAfterGc(const Fixture& f, const std::string& key) {
  WeightStoreOptions no_grace = f.options();
  no_grace.gc_grace = std::chrono::seconds(0);
  WeightStore gc = f.Open(no_grace);
  Must(gc.Gc());
  ASSERT_OK_AND_ASSIGN(const auto manifest, gc.ReadManifest(key));
  EXPECT_EQ(f.Keys(), CommittedKeys(manifest));
  f.ExpectLoadsByteExactly(key);
}

// ---------------------------------------------------------------- kill points

struct KillCase {
  std::string name;
  std::string stage;
  int at = 1;
  Recovery recovery = Recovery::kRetry;
};

class StoreCrashKillPointTest
    : public ::testing::TestWithParam<std::tuple<KillCase, std::string>> {
 protected:
  void SetUp() override { CurrentBackend() = std::get<1>(GetParam()); }
};

TEST_P(StoreCrashKillPointTest, NoPartialRevisionAndRecoveryCompletes) {
  const KillCase& c = std::get<0>(GetParam());
  // 512 KiB in 9 stored fragments, 16 KiB chunks.
  Fixture f(64, {.chunk_bytes = 16 << 10, .staging_bytes = 64 << 10});
  WeightStore store = f.Open();
  const auto plan = Must(
      store.PrepareUpload(f.source().placement, f.source().buffers.bindings));
  ASSERT_EQ(plan.operations().size(), 9u);
  const pid_t pid =
      Spawn([&] { return UploadAndCommit(f, plan, c.stage, c.at); });
  const int status = WaitFor(pid);
  ASSERT_TRUE(KilledBySigkill(status)) << "status " << status;
  const bool published = ExpectNoPartialRevision(f, plan);
  EXPECT_EQ(published, c.stage == "published");
  const std::string base = BaseOf(plan.manifest());
  const std::string txn = plan.transaction_id();
  if (c.stage == "payload") {
    // Exactly the first `at` payloads (and their checksum records) exist.
    EXPECT_EQ(f.Keys(base + "/payload/" + txn + "/").size(),
              static_cast<size_t>(c.at));
    EXPECT_EQ(f.Keys(base + "/checksums/" + txn + "/").size(),
              static_cast<size_t>(c.at));
  }
  const std::string key = Recover(f, plan, c.recovery);
  ExpectOnlyCommittedAfterGc(f, key);
  EXPECT_EQ(f.TempFiles(), 0u);
}

INSTANTIATE_TEST_SUITE_P(
    StoreCrash, StoreCrashKillPointTest,
    ::testing::Combine(
        ::testing::Values(
            KillCase{"FirstPayloadRetry", "payload", 1, Recovery::kRetry},
            KillCase{"FirstPayloadAbort", "payload", 1, Recovery::kAbort},
            KillCase{"FifthPayloadRetry", "payload", 5, Recovery::kRetry},
            KillCase{"FifthPayloadAbort", "payload", 5, Recovery::kAbort},
            KillCase{"LastPayloadRetry", "payload", 9, Recovery::kRetry},
            KillCase{"LastPayloadAbort", "payload", 9, Recovery::kAbort},
            KillCase{"DecisionRetry", "decision", 1, Recovery::kRetry},
            KillCase{"DecisionAbort", "decision", 1, Recovery::kAbort},
            KillCase{"PublishedRetry", "published", 1, Recovery::kRetry},
            KillCase{"PublishedAbort", "published", 1, Recovery::kAbort}),
        ::testing::ValuesIn(testing::StoreBackendNames())),
    [](const auto& info) {
      return std::get<0>(info.param).name + "_" + std::get<1>(info.param);
    });

// The other suites run on both backends too.
class BackendSuite : public testing::StoreBackendTest {
 protected:
  void SetUp() override { CurrentBackend() = GetParam(); }
};
class StoreCrashRandomTest : public BackendSuite {};
class StoreCrashRaceTest : public BackendSuite {};
INSTANTIATE_TEST_SUITE_P(, StoreCrashRandomTest,
                         ::testing::ValuesIn(testing::StoreBackendNames()),
                         testing::StoreBackendCaseName);
INSTANTIATE_TEST_SUITE_P(, StoreCrashRaceTest,
                         ::testing::ValuesIn(testing::StoreBackendNames()),
                         testing::StoreBackendCaseName);

// ---------------------------------------------------------------- random

TEST_P(StoreCrashRandomTest, RandomKillPointsKeepTheStoreConsistent) {
  // 4 MiB in 9 stored fragments, 64 KiB chunks.
  constexpr int64_t kRows = 512;
  const WeightStoreOptions options{.chunk_bytes = 64 << 10,
                                   .staging_bytes = 1 << 20};
  // An unkilled run's duration (fork to exit; the median of three), the
  // upper bound of the random delays.
  std::vector<double> runs;
  for (int i = 0; i < 3; ++i) {
    Fixture f(kRows, options);
    WeightStore store = f.Open();
    const auto plan = Must(
        store.PrepareUpload(f.source().placement, f.source().buffers.bindings));
    const auto t0 = Clock::now();
    const int status = WaitFor(Spawn([&] { return UploadAndCommit(f, plan); }));
    runs.push_back(SecondsSince(t0));
    ASSERT_EQ(ExitCode(status), 0);
    if (i == 0) f.ExpectLoadsByteExactly(plan.manifest().manifest_key());
  }
  std::sort(runs.begin(), runs.end());
  const double unkilled = runs[1];
  std::mt19937_64 rng(20260723);
  std::uniform_real_distribution<double> delay(0, unkilled);
  std::map<std::string, int> outcomes;
  size_t temp_files = 0;
  for (int i = 0; i < 20; ++i) {
    SCOPED_TRACE("iteration " + std::to_string(i));
    Fixture f(kRows, options);
    WeightStore store = f.Open();
    const auto plan = Must(
        store.PrepareUpload(f.source().placement, f.source().buffers.bindings));
    const double d = delay(rng);
    const pid_t pid = Spawn([&] { return UploadAndCommit(f, plan); });
    std::this_thread::sleep_for(std::chrono::duration<double>(d));
    ::kill(pid, SIGKILL);
    const int status = WaitFor(pid);
    ASSERT_TRUE(KilledBySigkill(status) || ExitCode(status) == 0)
        << "status " << status;
    const std::string base = BaseOf(plan.manifest());
    const std::string txn = plan.transaction_id();
    const bool published = ExpectNoPartialRevision(f, plan);
    const size_t payloads = f.Keys(base + "/payload/" + txn + "/").size();
    const std::string outcome =
        !KilledBySigkill(status) ? "finished"
        : published              ? "killed-after-publish"
        : f.backend().Get(base + "/transactions/" + txn + "/decision").ok()
            ? "killed-after-decision"
            : "killed-with-" + std::to_string(payloads) + "-payloads";
    ++outcomes[outcome];
    const std::string key =
        Recover(f, plan, i % 2 == 0 ? Recovery::kRetry : Recovery::kAbort);
    ExpectOnlyCommittedAfterGc(f, key);
    temp_files += f.TempFiles();
  }
  std::string summary;
  for (const auto& [o, n] : outcomes) {
    summary += " " + o + "=" + std::to_string(n);
  }
  std::printf("unkilled run %.3f s; outcomes:%s; fs temp files left: %zu\n",
              unkilled, summary.c_str(), temp_files);
}

// ---------------------------------------------------------------- races

struct WriterResult {
  int rc = -1;  // 0: committed, 10: AlreadyExists on commit, 11: other
  std::string transaction;
  std::string message;
};

// Runs `writers` processes that each prepare, upload and commit the same
// revision, released together by closing a pipe; each child writes
// "<rc>\n<transaction>\n<message>" to <dir>/writer-<i>. With
// `fresh_thread`, each writer runs on a new thread of its process (its own
// transaction randomness, as an independent process would have).
std::vector<WriterResult> RunWriters(const Fixture& f, int writers,
                                     bool fresh_thread) {
  int go[2];
  if (::pipe(go) != 0) throw std::runtime_error("pipe");
  std::vector<pid_t> pids;
  for (int i = 0; i < writers; ++i) {
    const std::string out = f.dir() + "/writer-" + std::to_string(i);
    pids.push_back(Spawn([&, out] {
      ::close(go[1]);
      char c;
      while (::read(go[0], &c, 1) < 0 && errno == EINTR) {
      }
      int rc = 11;
      auto write = [&] {
        WeightStore store = f.Open();
        auto plan = store.PrepareUpload(f.source().placement,
                                        f.source().buffers.bindings);
        if (!plan.ok()) {
          WriteFile(out, "11\n\nprepare: " + plan.status().ToString());
          return;
        }
        std::vector<UploadReceipt> receipts;
        for (const auto& b : f.source().buffers.bindings) {
          auto r = store.Upload(*plan, f.source().placement, b);
          if (!r.ok()) {
            WriteFile(out, "11\n" + plan->transaction_id() +
                               "\nupload: " + r.status().ToString());
            return;
          }
          receipts.insert(receipts.end(), r->begin(), r->end());
        }
        const Status st = store.Commit(*plan, receipts);
        rc = st.ok() ? 0 : st.IsAlreadyExists() ? 10 : 11;
        WriteFile(out, std::to_string(rc) + "\n" + plan->transaction_id() +
                           "\n" + st.message());
      };
      if (fresh_thread) {
        std::thread t(write);
        t.join();
      } else {
        write();
      }
      return rc;
    }));
  }
  ::close(go[0]);
  ::close(go[1]);  // releases every writer at once
  std::vector<WriterResult> results;
  for (int i = 0; i < writers; ++i) {
    const int status = WaitFor(pids[i]);
    EXPECT_TRUE(WIFEXITED(status)) << "writer " << i << " status " << status;
    const std::string text = ReadFile(f.dir() + "/writer-" + std::to_string(i));
    const size_t a = text.find('\n');
    const size_t b = text.find('\n', a + 1);
    WriterResult r;
    if (a != std::string::npos && b != std::string::npos) {
      r.rc = std::stoi(text.substr(0, a));
      r.transaction = text.substr(a + 1, b - a - 1);
      r.message = text.substr(b + 1);
    }
    EXPECT_EQ(r.rc, ExitCode(status)) << "writer " << i << ": " << text;
    results.push_back(std::move(r));
  }
  return results;
}

std::string ManifestKeyOf(const Fixture& f) {
  const auto& p = f.source().placement;
  const WeightStore store = f.Open();
  const internal::StoreKeys keys(store.options().key_prefix,
                                 store.options().namespace_);
  return keys.Revision(p.resource_id(), p.revision(), p.weight_generation())
      .Manifest();
}

TEST_P(StoreCrashRaceTest, RacingWritersExactlyOneCommits) {
  for (int writers : {4, 6}) {
    SCOPED_TRACE(std::to_string(writers) + " writers");
    Fixture f(128, {.chunk_bytes = 16 << 10, .staging_bytes = 64 << 10});
    const std::string key = ManifestKeyOf(f);
    const auto results = RunWriters(f, writers, /*fresh_thread=*/true);
    std::string winner;
    std::set<std::string> txns;
    for (const WriterResult& r : results) {
      SCOPED_TRACE(r.transaction + ": " + r.message);
      txns.insert(r.transaction);
      if (r.rc == 0) {
        EXPECT_TRUE(winner.empty());
        winner = r.transaction;
      } else {
        EXPECT_EQ(r.rc, 10);
        EXPECT_EQ(r.message, "conflicting weight revision: " + key);
      }
    }
    EXPECT_FALSE(winner.empty());
    EXPECT_EQ(txns.size(), static_cast<size_t>(writers));
    // The losers removed their own payloads already; Gc removes their
    // transaction records.
    const auto manifest = Must(f.Open().ReadManifest(key));
    std::set<std::string> committed;
    for (const auto& s : manifest.fragments()) {
      committed.insert(s.object_key);
      EXPECT_THAT(s.object_key, HasSubstr("/payload/" + winner + "/"));
    }
    EXPECT_EQ(f.Keys(BaseOf(manifest) + "/payload/"), committed);
    // started, decision and pending-manifest per writer.
    EXPECT_EQ(f.Keys(BaseOf(manifest) + "/transactions/").size(), 3u * writers);
    ExpectOnlyCommittedAfterGc(f, key);
  }
}

// Regression: transaction ids once came from a generator seeded once per
// thread, so writers forked after a PrepareUpload drew the same id. Ids are
// now reseeded in every process.
TEST_P(StoreCrashRaceTest, ForkedWritersGetDistinctTransactions) {
  Fixture f(16, {.chunk_bytes = 4 << 10, .staging_bytes = 16 << 10});
  // This process prepares (and aborts) an upload first, as a trainer that
  // stores weights and then forks workers would.
  const auto first = Must(f.Open().PrepareUpload(f.source().placement,
                                                 f.source().buffers.bindings));
  MustOk(f.Open().Abort(first));
  const std::string key = ManifestKeyOf(f);
  const auto results = RunWriters(f, 4, /*fresh_thread=*/false);
  std::set<std::string> txns;
  int committed = 0;
  for (const WriterResult& r : results) {
    SCOPED_TRACE(r.transaction + ": " + r.message);
    EXPECT_TRUE(
        r.rc == 0 ||
        (r.rc == 10 && r.message == "conflicting weight revision: " + key));
    committed += r.rc == 0;
    txns.insert(r.transaction);
  }
  EXPECT_EQ(committed, 1);
  EXPECT_EQ(txns.size(), 4u);
  EXPECT_EQ(txns.count(first.transaction_id()), 0u);
  // Whatever happened, the published revision is intact.
  if (f.Open().ReadManifest(key).ok()) ExpectOnlyCommittedAfterGc(f, key);
}

}  // namespace
}  // namespace reshard
