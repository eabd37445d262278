// The weight store under injected backend faults (testing/
// fault_injection_store.h) over the fs backend. For every operation --
// upload + commit (in one process, and the multi-process protocol with its
// plan and receipts records), load, verify, gc, remove, abort -- and every
// fault kind, the fault hits the N-th applicable backend call for every N
// from 1 to the number of such calls the operation makes without faults
// (latency: every third N and the last). Each run checks:
//  - the operation succeeds, or fails with a non-OK Status whose message
//    says what failed (no crash, no hang);
//  - no revision is partly visible: every READY revision in List loads
//    byte-exactly, or (only after a fault that silently corrupts a write)
//    its load and Verify fail with an error -- no unchecked byte is ever
//    delivered;
//  - a successful load delivered every target byte of the pattern;
//  - after the fault, a retry without faults of the same operation, or
//    abort + gc + a fresh upload, recovers: the revision loads byte-exactly
//    and gc without grace leaves exactly the committed revisions' keys.
// The sweep prints (and records as test properties) how many faults of
// each kind were injected per operation and how the runs ended.

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <stdlib.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <stdexcept>
#include <string>
#include <unordered_map>
#include <vector>

#include "reshard/placement.h"
#include "reshard/weight_store.h"
#include "selftest/host_buffers.h"
#include "selftest/pattern.h"
#include "store/keys.h"
#include "testing/fault_injection_store.h"
#include "testing/must.h"
#include "testing/placement_builders.h"
#include "testing/status_testing.h"
#include "testing/store_testing.h"

namespace reshard {
namespace {

using ::reshard::internal::AllocateHostBuffers;
using ::reshard::internal::HostBuffers;
using ::reshard::testing::CommittedKeys;
using ::reshard::testing::FaultInjectionStore;
using ::reshard::testing::FaultKind;
using ::reshard::testing::FaultKindName;
using ::reshard::testing::FaultSpec;
using ::reshard::testing::Must;
using ::reshard::testing::MustOk;
using ::reshard::testing::PayloadTransaction;
using ::reshard::testing::StatusIs;

// ---------------------------------------------------------------- model

struct Side {
  WeightPlacementManifest placement;
  std::unordered_map<std::string_view, uint64_t> tensors;
  HostBuffers buffers;
};

// The model on TP`tp`: a [8, 24] matrix "w" split on `w_dim`, a row-split
// float32 vector "b" and a replicated "norm".
WeightPlacementManifest Model(int64_t tp, int64_t w_dim,
                              const std::string& revision) {
  auto d = testing::GridDraft({.tp = tp});
  d.header.revision = revision;
  testing::AddTensor(&d, {.tensor_id = "w", .shape = {8, 24}, .tp_dim = w_dim});
  testing::AddTensor(&d, {.tensor_id = "b",
                          .shape = {16},
                          .dtype = "float32",
                          .itemsize = 4,
                          .tp_dim = 0});
  testing::AddTensor(&d, {.tensor_id = "norm", .shape = {24}});
  return Must(d.Build());
}

// A TP2 source: a column-split matrix, a row-split vector and a replicated
// one (written by either TP rank) -- 4 stored fragments, 840 bytes.
WeightPlacementManifest Source(const std::string& revision) {
  return Model(2, 1, revision);
}

// The same tensors on TP4, "w" split by rows: loads mix staged (strided)
// and direct regions.
WeightPlacementManifest Target(const std::string& revision) {
  return Model(4, 0, revision);
}

Side SourceSide(const WeightPlacementManifest& m) {
  Side s{m, internal::TensorIndex(m), Must(AllocateHostBuffers(m, "source"))};
  internal::FillPattern(s.placement, s.tensors, s.buffers);
  return s;
}

Side TargetSide(const WeightPlacementManifest& m) {
  Side t{m, internal::TensorIndex(m), Must(AllocateHostBuffers(m, "target"))};
  for (const auto& [id, p] : t.buffers.data) {
    std::memset(p, 0xD7, m.FindFragment(id)->nbytes());
  }
  return t;
}

// Small chunks, staging and requests, so that a load makes several ranged
// reads of whole chunks, chunk edges and staged spans.
WeightStoreOptions Options() {
  WeightStoreOptions o;
  o.chunk_bytes = 64;
  o.staging_bytes = 128;
  o.max_range_bytes = 128;
  o.max_ranges_per_request = 2;
  return o;
}

WeightStoreOptions NoGrace() {
  WeightStoreOptions o = Options();
  o.gc_grace = std::chrono::seconds(0);
  return o;
}

// ---------------------------------------------------------------- fixture

// A fresh directory for one store, on tmpfs where there is one (fsync is
// free there, which keeps the sweep's thousands of stores fast), removed
// with everything in it.
class StoreDir {
 public:
  StoreDir() {
    std::error_code ec;
    const bool shm = std::filesystem::is_directory("/dev/shm", ec);
    std::string t = std::string(shm ? "/dev/shm" : "/tmp") +
                    "/reshard-store-fault-test-XXXXXX";
    if (::mkdtemp(t.data()) == nullptr) throw std::runtime_error("mkdtemp");
    path_ = t;
  }
  StoreDir(const StoreDir&) = delete;
  StoreDir& operator=(const StoreDir&) = delete;
  ~StoreDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

// One fresh store: the fs backend, the fault injector over it, a weight
// store through the injector (the one under test) and a weight store on the
// backend itself for checks and recovery.
class FaultyStore {
 public:
  FaultyStore()
      : dir_(),
        backend_(Must(OpenObjectStore("fs://" + dir_.path()))),
        faults_(std::make_shared<FaultInjectionStore>(backend_)),
        faulty_(Must(WeightStore::Open(faults_, Options()))),
        clean_(Must(WeightStore::Open(backend_, Options()))),
        clean_no_grace_(Must(WeightStore::Open(backend_, NoGrace()))),
        faulty_no_grace_(Must(WeightStore::Open(faults_, NoGrace()))) {}

  FaultInjectionStore& faults() { return *faults_; }
  WeightStore& faulty() { return faulty_; }
  WeightStore& faulty_no_grace() { return faulty_no_grace_; }
  WeightStore& clean() { return clean_; }
  WeightStore& clean_no_grace() { return clean_no_grace_; }

  ObjectStore& backend() const { return *backend_; }
  std::set<std::string> Keys() const {
    auto keys = Must(backend_->List(""));
    return {keys.begin(), keys.end()};
  }

 private:
  StoreDir dir_;
  std::shared_ptr<ObjectStore> backend_;
  std::shared_ptr<FaultInjectionStore> faults_;
  WeightStore faulty_, clean_, clean_no_grace_, faulty_no_grace_;
};

// The sources and targets of two revisions, shared by every run.
struct Models {
  Side source = SourceSide(Source("step-1"));
  Side source2 = SourceSide(Source("step-2"));
  WeightPlacementManifest target = Target("step-1");
  WeightPlacementManifest target2 = Target("step-2");
};

const Models& TheModels() {
  static const Models* models = new Models();
  return *models;
}

const WeightPlacementManifest& TargetOf(const Side& source) {
  return source.placement.revision() == "step-1" ? TheModels().target
                                                 : TheModels().target2;
}

// Upload from every binding with an existing plan; the receipts of them
// all.
Result<std::vector<UploadReceipt>> UploadEach(WeightStore& store,
                                              const Side& source,
                                              const UploadPlan& plan) {
  std::vector<UploadReceipt> receipts;
  for (const auto& b : source.buffers.bindings) {
    RESHARD_ASSIGN_OR_RETURN(auto r, store.Upload(plan, source.placement, b));
    receipts.insert(receipts.end(), r.begin(), r.end());
  }
  return receipts;
}

// Upload from every binding with an existing plan, then commit.
Status UploadWithPlan(WeightStore& store, const Side& source,
                      const UploadPlan& plan) {
  RESHARD_ASSIGN_OR_RETURN(auto receipts, UploadEach(store, source, plan));
  return store.Commit(plan, receipts);
}

// Prepare, upload from every binding, commit; the plan (when prepared) is
// returned through `plan`.
Status UploadAndCommit(WeightStore& store, const Side& source,
                       std::optional<UploadPlan>* plan) {
  RESHARD_ASSIGN_OR_RETURN(
      auto p, store.PrepareUpload(source.placement, source.buffers.bindings));
  *plan = p;
  return UploadWithPlan(store, source, p);
}

Status UploadOnly(WeightStore& store, const Side& source,
                  std::optional<UploadPlan>* plan) {
  RESHARD_ASSIGN_OR_RETURN(
      auto p, store.PrepareUpload(source.placement, source.buffers.bindings));
  *plan = p;
  return UploadEach(store, source, p).status();
}

// The multi-process upload, in one process: the coordinator prepares and
// publishes the plan, each participant loads it, uploads and publishes its
// receipts, the coordinator gathers them and commits. With `retry`, records
// an earlier attempt published already count as published.
Status DistributedWithPlan(WeightStore& store, const Side& source,
                           const UploadPlan& plan, bool retry) {
  auto published = [retry](const Status& st) {
    return retry && st.IsAlreadyExists() ? Status::OK() : st;
  };
  RESHARD_RETURN_NOT_OK(published(store.PublishUploadPlan(plan)));
  for (const auto& b : source.buffers.bindings) {
    RESHARD_ASSIGN_OR_RETURN(
        auto mine, store.ReadUploadPlan(plan.manifest().manifest_key(),
                                        plan.transaction_id()));
    RESHARD_ASSIGN_OR_RETURN(auto r, store.Upload(mine, source.placement, b));
    RESHARD_RETURN_NOT_OK(published(store.PublishReceipts(mine, r)));
  }
  RESHARD_ASSIGN_OR_RETURN(auto receipts, store.GatherReceipts(plan));
  return store.Commit(plan, receipts);
}

Status DistributedUpload(WeightStore& store, const Side& source,
                         std::optional<UploadPlan>* plan) {
  RESHARD_ASSIGN_OR_RETURN(
      auto p, store.PrepareUpload(source.placement, source.buffers.bindings));
  *plan = p;
  return DistributedWithPlan(store, source, p, /*retry=*/false);
}

// The manifest key of the revision of `source`.
std::string ManifestKeyOf(WeightStore& store, const Side& source) {
  const auto& p = source.placement;
  const internal::StoreKeys keys(store.options().key_prefix,
                                 store.options().namespace_);
  return keys.Revision(p.resource_id(), p.revision(), p.weight_generation())
      .Manifest();
}

// Loads the revision of `source` into a fresh target; "" when every target
// byte holds the pattern, else the error (a failed load, or -- a defect --
// wrong bytes delivered by a successful one, prefixed "WRONG BYTES").
std::string LoadError(WeightStore& store, const Side& source) {
  auto manifest = store.ReadManifest(ManifestKeyOf(store, source));
  if (!manifest.ok()) return manifest.status().ToString();
  Side target = TargetSide(TargetOf(source));
  auto report =
      store.Load(*manifest, target.placement, target.buffers.bindings);
  if (!report.ok()) return report.status().ToString();
  const std::string wrong =
      internal::VerifyPattern(target.placement, target.tensors, target.buffers);
  return wrong.empty() ? "" : "WRONG BYTES: " + wrong;
}

// ---------------------------------------------------------------- sweep

// How one run ended.
enum class Outcome {
  kSucceeded,            // the operation succeeded under the fault
  kFailedRetried,        // failed cleanly; a retry recovered
  kFailedGcRecovered,    // failed cleanly; abort + gc + a fresh upload did
  kCorruptionCaught,     // a silently corrupt write, caught at load/verify
  kRecordRemovedByHand,  // a damaged control record had to be deleted
};

const char* OutcomeName(Outcome o) {
  switch (o) {
    case Outcome::kSucceeded:
      return "succeeded";
    case Outcome::kFailedRetried:
      return "failed-cleanly+retry-recovered";
    case Outcome::kFailedGcRecovered:
      return "failed-cleanly+gc-recovered";
    case Outcome::kCorruptionCaught:
      return "corruption-caught";
    case Outcome::kRecordRemovedByHand:
      return "damaged-record-removed-by-hand";
  }
  return "?";
}

struct Tally {
  uint64_t calls = 0;     // applicable calls of one fault-free run
  uint64_t injected = 0;  // faults injected
  std::map<Outcome, uint64_t> outcomes;
  // Load leases left behind by a failed lease write or delete (they expire
  // after lease_ttl; until then Remove refuses the revision).
  uint64_t leases_left = 0;
  // The faults after which a damaged record had to be deleted by hand.
  std::vector<std::string> by_hand;
};

// scenario -> fault kind -> tally.
std::map<std::string, std::map<std::string, Tally>>& Summary() {
  static auto* s = new std::map<std::string, std::map<std::string, Tally>>();
  return *s;
}

// A scenario: `setup` prepares the store without faults, `op` is the
// operation under test (run through the faulty weight store), `check`
// inspects and recovers after it (faults disarmed) and returns the outcome.
struct Scenario {
  std::string name;
  std::function<void(FaultyStore&)> setup;
  std::function<Status(FaultyStore&)> op;
  std::function<Outcome(FaultyStore&, const Status&, FaultKind)> check;
};

bool SilentCorruption(FaultKind k) {
  return k == FaultKind::kCorruptWrite || k == FaultKind::kTornWrite;
}

// A torn or corrupted Put of a control record (the backend contract rules
// such writes out) is refused by the store with an error naming the
// record. A corrupt manifest is removed with `rm`; a damaged decision,
// started or lease record (the upload's fate or age, or whether a load
// holds the revision, is unknown) is left to the operator, which the sweep
// does here and counts.
int& HandRepairs() {
  static int n = 0;
  return n;
}

// Gc carries on past what it cannot collect and lists it in `skipped`;
// the sweep counts anything skipped as a failure (naming the record).
Status GcStatus(WeightStore& store) {
  auto report = store.Gc();
  if (!report.ok()) return report.status();
  if (!report->skipped.empty()) {
    return Status::DataLoss(report->skipped.front().error);
  }
  return Status::OK();
}

// Runs `f`; while it fails naming a damaged record, deletes that record
// and runs `f` again.
Status WithHandRepair(FaultyStore& s, const std::function<Status()>& f) {
  for (int i = 0; i < 4; ++i) {
    Status st = f();
    if (st.ok()) return st;
    std::string key;
    for (const std::string marker :
         {"malformed upload decision record: ",
          "malformed upload started record: ", "malformed load lease record: ",
          "published weight manifest is damaged: ",
          "damaged pending weight manifest: "}) {
      const size_t p = st.message().find(marker);
      if (p != std::string::npos) key = st.message().substr(p + marker.size());
    }
    // A corrupt published manifest is what `rm` is for (it removes the
    // revision's own keys only); no hand repair needed.
    const std::string manifest_marker = "corrupt manifest ";
    const size_t p = st.message().find(manifest_marker);
    if (p != std::string::npos) {
      const size_t from = p + manifest_marker.size();
      MustOk(s.clean().Remove(
          st.message().substr(from, st.message().find(':', from) - from)));
      continue;
    }
    if (key.empty()) return st;
    MustOk(s.backend().Delete(key));
    ++HandRepairs();
  }
  return f();
}

// Every READY revision loads byte-exactly, or -- after a write fault that
// damaged stored bytes -- fails to load and to verify. Returns how many
// READY revisions failed that way.
int CheckVisible(FaultyStore& s, FaultKind kind) {
  auto listed = s.clean().List();
  if (!listed.ok()) {
    // A damaged manifest makes List fail; only a damaging write may.
    EXPECT_TRUE(SilentCorruption(kind)) << listed.status().ToString();
    EXPECT_FALSE(listed.status().message().empty());
    return 1;
  }
  int corrupt = 0;
  for (const RevisionInfo& r : *listed) {
    if (r.state == "CORRUPT") {
      // A damaged manifest is listed as such; only a damaging write may
      // leave one.
      EXPECT_TRUE(SilentCorruption(kind)) << r.error;
      EXPECT_FALSE(r.error.empty());
      ++corrupt;
      continue;
    }
    if (r.state != "READY") continue;
    const Side& source =
        r.revision == "step-1" ? TheModels().source : TheModels().source2;
    const std::string err = LoadError(s.clean(), source);
    EXPECT_EQ(err.find("WRONG BYTES"), std::string::npos) << err;
    if (err.empty()) {
      auto verified = s.clean().Verify(r.manifest_key);
      EXPECT_OK(verified);
      continue;
    }
    EXPECT_TRUE(SilentCorruption(kind))
        << "READY revision " << r.manifest_key << " does not load: " << err;
    auto verified = s.clean().Verify(r.manifest_key);
    EXPECT_FALSE(verified.ok())
        << "verify passes a revision that fails to load: " << err;
    ++corrupt;
  }
  return corrupt;
}

// Makes the store hold exactly the committed revisions of `sources`:
// aborts `plan` (when given), collects garbage and uploads afresh what does
// not load; then checks that every revision loads byte-exactly and that gc
// without grace leaves exactly the committed keys.
void RecoverTo(FaultyStore& s, const std::vector<const Side*>& sources,
               const std::optional<UploadPlan>& plan) {
  WeightStore& store = s.clean();
  if (plan) (void)store.Abort(*plan);
  MustOk(WithHandRepair(s, [&] { return GcStatus(s.clean_no_grace()); }));
  std::set<std::string> expected;
  for (const Side* source : sources) {
    if (!LoadError(store, *source).empty()) {
      std::optional<UploadPlan> fresh;
      MustOk(UploadAndCommit(store, *source, &fresh));
    }
    const std::string err = LoadError(store, *source);
    EXPECT_EQ(err, "");
    const auto manifest =
        Must(store.ReadManifest(ManifestKeyOf(store, *source)));
    auto keys = CommittedKeys(manifest);
    expected.insert(keys.begin(), keys.end());
    // A multi-process upload's plan and receipts stay with its revision.
    const std::string records =
        manifest.group_id() + "/transactions/" +
        PayloadTransaction(manifest, manifest.fragments().front().object_key) +
        "/";
    for (const std::string& k : s.Keys()) {
      if (k == records + "plan" || k.starts_with(records + "receipts/")) {
        expected.insert(k);
      }
    }
  }
  MustOk(WithHandRepair(s, [&] { return GcStatus(s.clean_no_grace()); }));
  EXPECT_EQ(s.Keys(), expected);
}

// A damaged revision is removed (and its garbage collected) so that a
// fresh upload can replace it.
void RemoveDamaged(FaultyStore& s, const Side& source) {
  const std::string key = ManifestKeyOf(s.clean(), source);
  if (LoadError(s.clean(), source).empty()) return;
  if (s.Keys().count(key) == 0) return;  // nothing visible to remove
  // `rm` removes a damaged revision, a corrupt manifest included.
  const Status st = s.clean().Remove(key);
  EXPECT_OK(st) << "a damaged revision cannot be removed";
}

void RunSweep(const Scenario& sc) {
  for (FaultKind kind : testing::AllFaultKinds()) {
    const std::string kname(FaultKindName(kind));
    uint64_t calls = 0;
    {
      FaultyStore s;
      sc.setup(s);
      s.faults().Arm({.kind = kind, .nth = 0});
      Status st = sc.op(s);
      s.faults().Disarm();
      ASSERT_OK(st) << sc.name << " fails without faults";
      calls = s.faults().calls();
    }
    Tally& tally = Summary()[sc.name][kname];
    tally.calls = calls;
    for (uint64_t n = 1; n <= calls; ++n) {
      // Latency changes no outcome: every third call and the last suffice.
      if (kind == FaultKind::kLatency && n % 3 != 1 && n != calls) continue;
      FaultyStore s;
      sc.setup(s);
      s.faults().Arm({.kind = kind, .nth = n, .seed = n});
      Status st = sc.op(s);
      s.faults().Disarm();
      const std::string fault = s.faults().last_fault();
      SCOPED_TRACE(sc.name + ", fault " + fault + " (call " +
                   std::to_string(n) + ")");
      ASSERT_EQ(s.faults().injected(), 1u);
      tally.injected += s.faults().injected();
      if (!st.ok()) {
        EXPECT_FALSE(st.message().empty());
      }
      if (kind == FaultKind::kLatency) {
        EXPECT_OK(st);
      }
      try {
        const int repairs = HandRepairs();
        Outcome o = sc.check(s, st, kind);
        if (HandRepairs() != repairs) {
          EXPECT_TRUE(SilentCorruption(kind) &&
                      fault.find(" in Put ") != std::string::npos)
              << "only a damaged control record may need removing by hand";
          o = Outcome::kRecordRemovedByHand;
          tally.by_hand.push_back(fault);
        }
        ++tally.outcomes[o];
      } catch (const std::exception& e) {
        ADD_FAILURE() << "recovery failed: " << e.what();
      }
    }
  }
}

void PrintSummary(const std::string& scenario) {
  for (const auto& [kind, t] : Summary()[scenario]) {
    std::string line = scenario + " " + kind + ": " +
                       std::to_string(t.injected) + " faults injected";
    for (const auto& [o, n] : t.outcomes) {
      line += ", " + std::to_string(n) + " " + OutcomeName(o);
      ::testing::Test::RecordProperty(
          scenario + "." + kind + "." + OutcomeName(o), std::to_string(n));
    }
    if (t.leases_left > 0) {
      line += " (" + std::to_string(t.leases_left) + " left a lease)";
    }
    std::printf("[ faults   ] %s\n", line.c_str());
    for (const std::string& fault : t.by_hand) {
      std::printf("[ faults   ]   deleted by hand after: %s\n", fault.c_str());
    }
  }
}

// ---------------------------------------------------------------- tests

// Upload scenarios: `op` uploads through the faulty store, `retry` repeats
// it without faults with the same plan (or afresh when none was prepared).
Scenario UploadScenario(
    const std::string& name,
    std::function<Status(WeightStore&, const Side&, std::optional<UploadPlan>*)>
        op,
    std::function<Status(WeightStore&, const Side&, const UploadPlan&)> retry) {
  auto plan = std::make_shared<std::optional<UploadPlan>>();
  Scenario sc;
  sc.name = name;
  sc.setup = [plan](FaultyStore&) { plan->reset(); };
  sc.op = [plan, op](FaultyStore& s) {
    return op(s.faulty(), TheModels().source, plan.get());
  };
  sc.check = [plan, op, retry](FaultyStore& s, const Status& st,
                               FaultKind kind) {
    const Side& src = TheModels().source;
    const int corrupt = CheckVisible(s, kind);
    Outcome o = Outcome::kSucceeded;
    if (st.ok()) {
      if (corrupt > 0 || !LoadError(s.clean(), src).empty()) {
        // Committed with damaged bytes: the loads refused them.
        EXPECT_TRUE(SilentCorruption(kind));
        RemoveDamaged(s, src);
        o = Outcome::kCorruptionCaught;
      }
    } else {
      Status again = *plan ? retry(s.clean(), src, **plan)
                           : op(s.clean(), src, plan.get());
      o = Outcome::kFailedRetried;
      if (!again.ok() || !LoadError(s.clean(), src).empty()) {
        EXPECT_TRUE(SilentCorruption(kind))
            << "retry after a clean failure: " << again.ToString();
        RemoveDamaged(s, src);
        o = Outcome::kFailedGcRecovered;
      }
    }
    RecoverTo(s, {&src}, *plan);
    return o;
  };
  return sc;
}

TEST(StoreFaultTest, UploadAndCommit) {
  const Scenario sc =
      UploadScenario("upload+commit", UploadAndCommit, UploadWithPlan);
  RunSweep(sc);
  PrintSummary(sc.name);
}

// The multi-process protocol: plan and receipts records in the store.
TEST(StoreFaultTest, DistributedUpload) {
  const Scenario sc = UploadScenario(
      "distributed-upload", DistributedUpload,
      [](WeightStore& store, const Side& source, const UploadPlan& plan) {
        return DistributedWithPlan(store, source, plan, /*retry=*/true);
      });
  RunSweep(sc);
  PrintSummary(sc.name);
}

// The setup of the scenarios that start from a committed source revision.
void CommitSource(FaultyStore& s) {
  std::optional<UploadPlan> plan;
  MustOk(UploadAndCommit(s.clean(), TheModels().source, &plan));
}

TEST(StoreFaultTest, Load) {
  Scenario sc;
  sc.name = "load";
  sc.setup = CommitSource;
  sc.op = [](FaultyStore& s) -> Status {
    const std::string err = LoadError(s.faulty(), TheModels().source);
    EXPECT_EQ(err.find("WRONG BYTES"), std::string::npos) << err;
    if (err.empty()) return Status::OK();
    return Status::Internal(err);
  };
  sc.check = [](FaultyStore& s, const Status& st, FaultKind kind) {
    // A lease whose write was acknowledged late or whose delete failed
    // stays until it expires; expire it now.
    for (const std::string& k : s.Keys()) {
      if (k.find("/leases/") == std::string::npos) continue;
      ++Summary()["load"][std::string(FaultKindName(kind))].leases_left;
      MustOk(s.backend().Delete(k));
    }
    CheckVisible(s, kind);
    EXPECT_EQ(LoadError(s.clean(), TheModels().source), "");
    RecoverTo(s, {&TheModels().source}, std::nullopt);
    return st.ok() ? Outcome::kSucceeded : Outcome::kFailedRetried;
  };
  RunSweep(sc);
  PrintSummary(sc.name);
}

TEST(StoreFaultTest, Verify) {
  Scenario sc;
  sc.name = "verify";
  sc.setup = CommitSource;
  sc.op = [](FaultyStore& s) -> Status {
    return s.faulty()
        .Verify(ManifestKeyOf(s.faulty(), TheModels().source))
        .status();
  };
  sc.check = [](FaultyStore& s, const Status& st, FaultKind kind) {
    CheckVisible(s, kind);
    RecoverTo(s, {&TheModels().source}, std::nullopt);
    return st.ok() ? Outcome::kSucceeded : Outcome::kFailedRetried;
  };
  RunSweep(sc);
  PrintSummary(sc.name);
}

// Gc over a store holding: a committed revision, an aborted and an
// abandoned upload of it, and an upload of a second revision that decided
// to commit but never published (Gc rolls it forward).
TEST(StoreFaultTest, Gc) {
  Scenario sc;
  sc.name = "gc";
  sc.setup = [](FaultyStore& s) {
    const Side& src = TheModels().source;
    std::optional<UploadPlan> plan;
    MustOk(UploadAndCommit(s.clean(), src, &plan));
    std::optional<UploadPlan> aborted, abandoned, decided;
    MustOk(UploadOnly(s.clean(), src, &aborted));
    MustOk(s.clean().Abort(*aborted));
    MustOk(UploadOnly(s.clean(), src, &abandoned));
    // The second revision's commit fails at its manifest Put (the second
    // Put of Commit, after the decision).
    decided = Must(s.clean().PrepareUpload(
        TheModels().source2.placement, TheModels().source2.buffers.bindings));
    std::vector<UploadReceipt> receipts;
    for (const auto& b : TheModels().source2.buffers.bindings) {
      auto r =
          Must(s.clean().Upload(*decided, TheModels().source2.placement, b));
      receipts.insert(receipts.end(), r.begin(), r.end());
    }
    s.faults().Arm(
        {.kind = FaultKind::kIOError, .nth = 2, .calls = testing::kCallPut});
    Status st = s.faulty().Commit(*decided, receipts);
    s.faults().Disarm();
    if (st.ok()) throw std::runtime_error("commit did not fail");
    if (s.clean().ReadManifest(decided->manifest().manifest_key()).ok()) {
      throw std::runtime_error("second revision published");
    }
  };
  sc.op = [](FaultyStore& s) { return GcStatus(s.faulty_no_grace()); };
  sc.check = [](FaultyStore& s, const Status& st, FaultKind kind) {
    CheckVisible(s, kind);
    Outcome o = Outcome::kSucceeded;
    if (!st.ok()) {
      Status retry =
          WithHandRepair(s, [&] { return GcStatus(s.clean_no_grace()); });
      EXPECT_OK(retry);
      o = Outcome::kFailedRetried;
    }
    if (!LoadError(s.clean(), TheModels().source2).empty()) {
      EXPECT_TRUE(SilentCorruption(kind));
      RemoveDamaged(s, TheModels().source2);
      if (o == Outcome::kSucceeded)
        o = Outcome::kCorruptionCaught;
      else
        o = Outcome::kFailedGcRecovered;
    }
    RecoverTo(s, {&TheModels().source, &TheModels().source2}, std::nullopt);
    return o;
  };
  RunSweep(sc);
  PrintSummary(sc.name);
}

TEST(StoreFaultTest, Remove) {
  Scenario sc;
  sc.name = "remove";
  sc.setup = CommitSource;
  sc.op = [](FaultyStore& s) {
    return s.faulty().Remove(ManifestKeyOf(s.faulty(), TheModels().source));
  };
  sc.check = [](FaultyStore& s, const Status& st, FaultKind kind) {
    CheckVisible(s, kind);
    const std::string key = ManifestKeyOf(s.clean(), TheModels().source);
    Outcome o = Outcome::kSucceeded;
    if (!st.ok()) {
      o = Outcome::kFailedRetried;
      // Retry while the revision is visible; then gc finishes the removal.
      if (s.clean().ReadManifest(key).ok()) MustOk(s.clean().Remove(key));
    }
    MustOk(GcStatus(s.clean_no_grace()));
    EXPECT_FALSE(s.clean().ReadManifest(key).ok())
        << "the removed revision is visible again";
    EXPECT_EQ(s.Keys(), std::set<std::string>{});
    RecoverTo(s, {&TheModels().source}, std::nullopt);
    return o;
  };
  RunSweep(sc);
  PrintSummary(sc.name);
}

TEST(StoreFaultTest, Abort) {
  auto plan = std::make_shared<std::optional<UploadPlan>>();
  Scenario sc;
  sc.name = "abort";
  sc.setup = [plan](FaultyStore& s) {
    plan->reset();
    MustOk(UploadOnly(s.clean(), TheModels().source, plan.get()));
  };
  sc.op = [plan](FaultyStore& s) { return s.faulty().Abort(**plan); };
  sc.check = [plan](FaultyStore& s, const Status& st, FaultKind kind) {
    CheckVisible(s, kind);
    EXPECT_FALSE(
        s.clean().ReadManifest((*plan)->manifest().manifest_key()).ok());
    Outcome o = Outcome::kSucceeded;
    if (!st.ok()) {
      // A torn decision record is refused (strictly parsed) until the
      // operator removes it.
      Status retry = WithHandRepair(s, [&] { return s.clean().Abort(**plan); });
      EXPECT_OK(retry);
      o = Outcome::kFailedRetried;
    }
    MustOk(GcStatus(s.clean_no_grace()));
    EXPECT_EQ(s.Keys(), std::set<std::string>{});
    // A fresh upload of the revision works.
    RecoverTo(s, {&TheModels().source}, std::nullopt);
    return o;
  };
  RunSweep(sc);
  PrintSummary(sc.name);
}

// ------------------------------------------------------- regressions
// Each of these failed before the store fix it names.

size_t CountKeys(FaultyStore& s, const std::string& part) {
  size_t n = 0;
  for (const std::string& k : s.Keys()) n += k.find(part) != std::string::npos;
  return n;
}

// Remove hid the revision, then failed among the deletions; Gc then
// published the removed revision again from its pending manifest, with
// some of its checksum records already gone.
TEST(StoreFaultRegressionTest, InterruptedRemoveIsNotRepublishedByGc) {
  FaultyStore s;
  const Side& src = TheModels().source;
  std::optional<UploadPlan> plan;
  MustOk(UploadAndCommit(s.clean(), src, &plan));
  const std::string key = ManifestKeyOf(s.clean(), src);
  // The second Delete (before the fix: the first checksum record after
  // the manifest).
  s.faults().Arm(
      {.kind = FaultKind::kIOError, .nth = 3, .calls = testing::kCallDelete});
  Status st = s.faulty().Remove(key);
  s.faults().Disarm();
  EXPECT_EQ(st.code(), StatusCode::kIOError) << st.ToString();
  MustOk(GcStatus(s.clean_no_grace()));
  EXPECT_EQ(s.clean().ReadManifest(key).status().code(), StatusCode::kNotFound);
  EXPECT_EQ(s.Keys(), std::set<std::string>{});
}

// A torn manifest publication made Commit's retry take the damaged bytes
// for another writer's revision and delete its own payloads.
TEST(StoreFaultRegressionTest, CommitRetryAfterTornManifestKeepsPayloads) {
  FaultyStore s;
  const Side& src = TheModels().source;
  std::optional<UploadPlan> plan;
  MustOk(UploadOnly(s.clean(), src, &plan));
  const auto receipts = Must(UploadEach(s.clean(), src, *plan));
  // Commit's Puts: the decision, then the manifest.
  s.faults().Arm(
      {.kind = FaultKind::kTornWrite, .nth = 2, .calls = testing::kCallPut});
  Status st = s.faulty().Commit(*plan, receipts);
  s.faults().Disarm();
  EXPECT_EQ(st.code(), StatusCode::kIOError) << st.ToString();
  const std::string key = ManifestKeyOf(s.clean(), src);
  Status retry = s.clean().Commit(*plan, receipts);
  EXPECT_EQ(retry.ToString(),
            "DataLoss: published weight manifest is damaged: " + key);
  EXPECT_EQ(CountKeys(s, "/payload/"), plan->manifest().fragments().size());
  EXPECT_EQ(CountKeys(s, "/checksums/"), plan->manifest().fragments().size());
  // Once the damaged manifest is gone, Gc publishes the decided upload.
  MustOk(s.backend().Delete(key));
  MustOk(GcStatus(s.clean_no_grace()));
  EXPECT_EQ(LoadError(s.clean(), src), "");
}

// Commit reported success over a manifest the backend stored damaged.
TEST(StoreFaultRegressionTest, CommitReadsBackItsManifest) {
  FaultyStore s;
  const Side& src = TheModels().source;
  std::optional<UploadPlan> plan;
  MustOk(UploadOnly(s.clean(), src, &plan));
  const auto receipts = Must(UploadEach(s.clean(), src, *plan));
  s.faults().Arm(
      {.kind = FaultKind::kCorruptWrite, .nth = 2, .calls = testing::kCallPut});
  Status st = s.faulty().Commit(*plan, receipts);
  s.faults().Disarm();
  EXPECT_EQ(st.ToString(),
            "DataLoss: manifest put failed: published weight manifest is "
            "damaged: " +
                ManifestKeyOf(s.clean(), src));
}

// A store holding an upload of the step-2 revision that decided to commit
// but never published its manifest.
UploadPlan DecidedUnpublished(FaultyStore& s) {
  const Side& src = TheModels().source2;
  std::optional<UploadPlan> plan;
  MustOk(UploadOnly(s.clean(), src, &plan));
  const auto receipts = Must(UploadEach(s.clean(), src, *plan));
  s.faults().Arm(
      {.kind = FaultKind::kIOError, .nth = 2, .calls = testing::kCallPut});
  Status st = s.faulty().Commit(*plan, receipts);
  s.faults().Disarm();
  if (st.ok()) throw std::runtime_error("commit did not fail");
  return *plan;
}

// Gc published a pending manifest it read short (a truncated manifest
// became the revision).
TEST(StoreFaultRegressionTest, GcPublishesOnlyAWholePendingManifest) {
  FaultyStore s;
  const UploadPlan plan = DecidedUnpublished(s);
  const std::string key = plan.manifest().manifest_key();
  const std::string pending = plan.manifest().group_id() + "/transactions/" +
                              plan.transaction_id() + "/pending-manifest";
  // Gc's Gets: the decision, then the pending manifest.
  s.faults().Arm(
      {.kind = FaultKind::kShortRead, .nth = 2, .calls = testing::kCallGet});
  auto gc = s.faulty_no_grace().Gc();
  s.faults().Disarm();
  ASSERT_OK(gc);
  ASSERT_EQ(gc->skipped.size(), 1u);
  EXPECT_EQ(gc->skipped[0].error,
            "damaged pending weight manifest: " + pending);
  EXPECT_EQ(s.clean().ReadManifest(key).status().code(), StatusCode::kNotFound);
  ASSERT_OK_AND_ASSIGN(auto again, s.clean_no_grace().Gc());
  EXPECT_EQ(again.transactions_completed.size(), 1u);
  EXPECT_EQ(LoadError(s.clean(), TheModels().source2), "");
}

// Gc reported success when publishing a decided upload failed.
TEST(StoreFaultRegressionTest, GcReportsAFailedRollForward) {
  FaultyStore s;
  const UploadPlan plan = DecidedUnpublished(s);
  s.faults().Arm(
      {.kind = FaultKind::kIOError, .nth = 1, .calls = testing::kCallPut});
  auto gc = s.faulty_no_grace().Gc();
  s.faults().Disarm();
  ASSERT_OK(gc);
  ASSERT_EQ(gc->skipped.size(), 1u);
  EXPECT_THAT(gc->skipped[0].error,
              ::testing::HasSubstr("/pending-manifest: injected fault"));
  ASSERT_OK_AND_ASSIGN(auto again, s.clean_no_grace().Gc());
  EXPECT_EQ(LoadError(s.clean(), TheModels().source2), "");
}

// A decision record that says neither "commit" nor "abort" was taken for
// a decision, and Gc then kept the upload's keys forever without a word.
TEST(StoreFaultRegressionTest, GcRefusesAMalformedDecision) {
  FaultyStore s;
  const Side& src = TheModels().source;
  std::optional<UploadPlan> plan;
  MustOk(UploadOnly(s.clean(), src, &plan));
  const std::string decision = plan->manifest().group_id() + "/transactions/" +
                               plan->transaction_id() + "/decision";
  MustOk(s.backend().Put(
      decision,
      R"({"decision":"commkt","plan_digest":"x","record_type":"weight-upload-decision"})"));
  ASSERT_OK_AND_ASSIGN(auto gc, s.clean_no_grace().Gc());
  ASSERT_EQ(gc.skipped.size(), 1u);
  EXPECT_EQ(gc.skipped[0].key,
            plan->manifest().group_id() + "/" + plan->transaction_id());
  EXPECT_EQ(gc.skipped[0].error,
            "malformed upload decision record: " + decision);
}

// A manifest whose contents name another revision than its key was
// accepted: Verify passed it while every load failed.
TEST(StoreFaultRegressionTest, ManifestMustDescribeTheRevisionOfItsKey) {
  FaultyStore s;
  const Side& src = TheModels().source;
  std::optional<UploadPlan> plan;
  MustOk(UploadAndCommit(s.clean(), src, &plan));
  const std::string key = ManifestKeyOf(s.clean(), src);
  std::string text = Must(s.backend().Get(key));
  const size_t at = text.find("\"step-1\"");
  ASSERT_NE(at, std::string::npos);
  text.replace(at, 8, "\"stdp-1\"");
  MustOk(s.backend().Delete(key));
  MustOk(s.backend().Put(key, text));
  const std::string want = "DataLoss: corrupt manifest " + key +
                           ": it describes demo-model@stdp-1/1";
  EXPECT_EQ(s.clean().ReadManifest(key).status().ToString(), want);
  EXPECT_EQ(s.clean().Verify(key).status().ToString(), want);
}

// A manifest that does not parse was reported without its key.
TEST(StoreFaultRegressionTest, UnparsableManifestIsNamed) {
  FaultyStore s;
  const Side& src = TheModels().source;
  std::optional<UploadPlan> plan;
  MustOk(UploadAndCommit(s.clean(), src, &plan));
  const std::string key = ManifestKeyOf(s.clean(), src);
  MustOk(s.backend().Delete(key));
  MustOk(s.backend().Put(key, "{\"manifest_key\":"));
  const Status st = s.clean().ReadManifest(key).status();
  EXPECT_THAT(
      st, StatusIs(StatusCode::kDataLoss,
                   ::testing::StartsWith("corrupt manifest " + key + ": ")));
}

}  // namespace
}  // namespace reshard
