// WeightStore end to end on each backend (fs and redis), with real
// pattern-filled host buffers (every target byte checked with VerifyPattern):
//  - round trips: TP2 -> TP4, DP2 TP2 -> DP3 TP4, TP4 -> TP2, cross-dim
//    dim0 -> dim2 (staged sweep), an EP/PP ownership swap, a generated
//    tiny-moe TP4/PP2/EP8/DP2 -> TP8/PP4/EP2/DP4 and every golden scenario
//    of tests/data/scenarios/expected.json up to 16 MiB, each with the
//    default options and with tiny chunks, staging and request limits;
//    LoadReport counts against the plan and the request limits;
//  - loads into one target participant (or a subset) fill exactly their
//    fragments;
//  - the stored payload is one logical model whatever the DP size, and the
//    upload plan spreads the writes over every replica;
//  - PrepareUpload / Upload / Commit / Abort semantics and their messages:
//    idempotent commit, bad receipts, abort vs commit, a second writer of a
//    published revision, stale leases, DP-owned and incomplete sources, an
//    upload retry after a crash between a checksum record and its payload,
//    a retry with other bytes;
//  - lifecycle: List states, leases vs Remove, Remove, Gc with and without
//    grace, and Gc during a commit;
//  - corruption: a flipped byte (Verify, touching and non-touching loads)
//    and a truncated payload.

#include "reshard/weight_store.h"

#include <fcntl.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <stdexcept>
#include <string>
#include <unordered_map>
#include <vector>

#include "reshard/gen.h"
#include "reshard/placement.h"
#include "reshard/plan.h"
#include "selftest/host_buffers.h"
#include "selftest/pattern.h"
#include "store/keys.h"
#include "store/records.h"
#include "testing/must.h"
#include "testing/placement_builders.h"
#include "testing/status_testing.h"
#include "testing/store_backends.h"
#include "testing/temp_dir.h"

namespace reshard {
namespace {

using ::reshard::internal::AllocateHostBuffers;
using ::reshard::internal::HostBuffers;
using ::reshard::testing::Must;
using ::reshard::testing::MustOk;
using ::reshard::testing::ReadTestData;
using ::reshard::testing::StatusIs;
using ::reshard::testing::TpLayout;
using ::reshard::testing::WithBindingChanges;
using ::testing::HasSubstr;
using ::testing::StartsWith;

// A fresh store on the backend of the running test (fs or redis), one
// backend object shared by every WeightStore opened on it (each with its
// own options).
class TestStore {
 public:
  TestStore() : store_(CurrentBackend()) {}
  WeightStore Open(WeightStoreOptions options = {}) const {
    return Must(WeightStore::Open(store_.backend(), std::move(options)));
  }
  ObjectStore& backend() const { return *store_.backend(); }
  const std::string& uri() const { return store_.uri(); }
  // Every key under `prefix`.
  std::vector<std::string> Keys(const std::string& prefix) const {
    return Must(store_.backend()->List(prefix));
  }
  void FlipByte(const std::string& key, uint64_t offset) {
    store_.FlipByte(key, offset);
  }
  void Truncate(const std::string& key, uint64_t size) {
    store_.Truncate(key, size);
  }

  // The backend of the running test, set by its fixture.
  static std::string& CurrentBackend() {
    static std::string backend = "fs";
    return backend;
  }

 private:
  testing::BackendStore store_;
};

// Every suite below runs on both backends: WeightStoreXTest.Name/fs and
// WeightStoreXTest.Name/redis.
class BackendSuite : public testing::StoreBackendTest {
 protected:
  void SetUp() override { TestStore::CurrentBackend() = GetParam(); }
};
#define RESHARD_BACKEND_SUITE(suite)                                          \
  class suite : public BackendSuite {};                                       \
  INSTANTIATE_TEST_SUITE_P(, suite,                                           \
                           ::testing::ValuesIn(testing::StoreBackendNames()), \
                           testing::StoreBackendCaseName)
RESHARD_BACKEND_SUITE(WeightStoreRoundTripTest);
RESHARD_BACKEND_SUITE(WeightStoreLoadTest);
RESHARD_BACKEND_SUITE(WeightStoreUploadTest);
RESHARD_BACKEND_SUITE(WeightStoreCommitTest);
RESHARD_BACKEND_SUITE(WeightStoreLifecycleTest);
RESHARD_BACKEND_SUITE(WeightStoreCorruptionTest);
RESHARD_BACKEND_SUITE(WeightStoreFenceTest);

// A placement with host buffers for its fragments (all, or a subset of its
// participants); a source gets the pattern, a target 0xD7 bytes.
struct Side {
  WeightPlacementManifest placement;
  std::unordered_map<std::string_view, uint64_t> tensors;
  HostBuffers buffers;
};

Side SourceSide(const WeightPlacementManifest& m) {
  Side s{m, internal::TensorIndex(m), Must(AllocateHostBuffers(m, "source"))};
  internal::FillPattern(s.placement, s.tensors, s.buffers);
  return s;
}

Side TargetSide(const WeightPlacementManifest& m,
                const std::vector<std::string>& participants = {}) {
  Side t{m, internal::TensorIndex(m),
         Must(AllocateHostBuffers(m, "target", participants))};
  for (const auto& [id, p] : t.buffers.data) {
    std::memset(p, 0xD7, m.FindFragment(id)->nbytes());
  }
  return t;
}

WeightPlacementManifest Build(const testing::PlacementDraft& d) {
  return Must(d.Build());
}

uint64_t ModelBytes(const WeightPlacementManifest& m) {
  uint64_t n = 0;
  for (const auto& t : m.tensors()) {
    n += t.num_elements() * static_cast<uint64_t>(t.itemsize());
  }
  return n;
}

// Prepare, upload from every binding, commit.
Result<UploadPlan> UploadAndCommit(WeightStore& store, const Side& source) {
  RESHARD_ASSIGN_OR_RETURN(
      auto plan,
      store.PrepareUpload(source.placement, source.buffers.bindings));
  std::vector<UploadReceipt> receipts;
  for (const auto& b : source.buffers.bindings) {
    RESHARD_ASSIGN_OR_RETURN(auto r, store.Upload(plan, source.placement, b));
    receipts.insert(receipts.end(), r.begin(), r.end());
  }
  RESHARD_RETURN_NOT_OK(store.Commit(plan, receipts));
  return plan;
}

// Prepare and upload only; the receipts are returned through `receipts`.
UploadPlan PrepareAndUpload(WeightStore& store, const Side& source,
                            std::vector<UploadReceipt>* receipts) {
  auto plan =
      Must(store.PrepareUpload(source.placement, source.buffers.bindings));
  for (const auto& b : source.buffers.bindings) {
    auto r = Must(store.Upload(plan, source.placement, b));
    receipts->insert(receipts->end(), r.begin(), r.end());
  }
  return plan;
}

std::string BaseOf(const UploadPlan& plan) {
  return plan.manifest().group_id();
}

// Loads `target` (its bound participants) and checks every bound byte and
// the report's counts.
LoadReport LoadAndVerify(WeightStore& store,
                         const StoredWeightManifest& manifest, Side& target) {
  auto report = store.Load(manifest, target.placement, target.buffers.bindings);
  if (!report.ok()) {
    ADD_FAILURE() << "load failed: " << report.status().ToString();
    return {};
  }
  EXPECT_EQ(
      internal::VerifyPattern(target.placement, target.tensors, target.buffers),
      "");
  PlanOptions po;
  if (target.buffers.bindings.size() == 1) {
    po.target_participant_id = target.buffers.bindings[0].participant_id();
  }
  const auto plan =
      Must(LogicalTransferPlan::MakeFromStored(manifest, target.placement, po));
  uint64_t bound_bytes = 0;
  for (const auto& r : plan.regions()) {
    const auto& tf = plan.target_fragments()[r.target_fragment];
    if (target.buffers.data.count(tf.fragment_id)) bound_bytes += r.bytes;
  }
  EXPECT_EQ(report->bytes, bound_bytes);
  if (target.buffers.bindings.size() ==
      static_cast<size_t>(std::count_if(
          target.placement.parts().begin(), target.placement.parts().end(),
          [](const auto& p) { return !p.fragments().empty(); }))) {
    EXPECT_EQ(report->bytes, plan.summary().bytes);
  }
  if (report->bytes > 0) {
    EXPECT_GT(report->chunks_verified, 0u);
    EXPECT_GT(report->read_requests, 0u);
    EXPECT_GT(report->bytes_read, 0u);
  }
  EXPECT_LE(report->ranges,
            report->read_requests * store.options().max_ranges_per_request);
  return *report;
}

// One uint8 tensor "w" of [rows, 4096, 128] split over tp ranks on `dim`.
WeightPlacementManifest ByteLayout(int64_t rows, int64_t tp, int64_t dim) {
  auto d = testing::GridDraft({.tp = tp});
  testing::AddTensor(&d, {.tensor_id = "w",
                          .shape = {rows, 4096, 128},
                          .dtype = "uint8",
                          .itemsize = 1,
                          .tp_dim = dim});
  return Build(d);
}

// Upload `source` into a fresh store, load it into `target` and verify.
LoadReport RoundTrip(const WeightPlacementManifest& source,
                     const WeightPlacementManifest& target,
                     const WeightStoreOptions& options) {
  TestStore dir;
  WeightStore store = dir.Open(options);
  Side src = SourceSide(source);
  auto plan = UploadAndCommit(store, src);
  if (!plan.ok()) {
    ADD_FAILURE() << "upload failed: " << plan.status().ToString();
    return {};
  }
  const auto manifest =
      Must(store.ReadManifest(plan->manifest().manifest_key()));
  EXPECT_EQ(manifest.manifest_digest(), plan->manifest().manifest_digest());
  Side dst = TargetSide(target);
  const LoadReport report = LoadAndVerify(store, manifest, dst);
  // Extra memory stays within the staging limit plus one chunk.
  EXPECT_LE(report.staging_bytes, options.staging_bytes + options.chunk_bytes);
  auto verified = store.Verify(manifest.manifest_key());
  EXPECT_OK(verified);
  if (verified.ok()) {
    EXPECT_EQ(verified->objects, manifest.fragments().size());
    EXPECT_EQ(verified->bytes, ModelBytes(source));
  }
  return report;
}

struct NamedOptions {
  std::string name;
  WeightStoreOptions options;
};

// Defaults, and tiny chunks / staging / requests so that chunk edges,
// multi-span sweeps and request splitting happen on small models.
std::vector<NamedOptions> OptionSets() {
  std::vector<NamedOptions> out;
  out.push_back({"defaults", {}});
  WeightStoreOptions tiny;
  tiny.chunk_bytes = 64;
  tiny.staging_bytes = 192;
  tiny.max_range_bytes = 128;
  tiny.max_ranges_per_request = 2;
  out.push_back({"chunk64-staging192-range128-req2", tiny});
  WeightStoreOptions small;
  small.chunk_bytes = 256;
  small.staging_bytes = 1024;
  small.max_ranges_per_request = 5;
  out.push_back({"chunk256-staging1024-req5", small});
  // Strided rows read in place whenever each stored byte has one target.
  tiny.min_scatter_bytes = 0;
  out.push_back({"chunk64-staging192-range128-req2-scatter", tiny});
  small.min_scatter_bytes = 0;
  out.push_back({"chunk256-staging1024-req5-scatter", small});
  WeightStoreOptions scatter;
  scatter.min_scatter_bytes = 0;
  out.push_back({"defaults-scatter", scatter});
  return out;
}

void RoundTripAllOptions(const WeightPlacementManifest& source,
                         const WeightPlacementManifest& target) {
  for (const NamedOptions& o : OptionSets()) {
    SCOPED_TRACE(o.name);
    RoundTrip(source, target, o.options);
  }
}

// ---------------------------------------------------------------- layouts

WeightPlacementManifest SmallTensor(int64_t dp, int64_t tp) {
  auto d = testing::GridDraft({.dp = dp, .tp = tp});
  testing::AddTensor(&d, {.tensor_id = "w", .shape = {6, 12}, .tp_dim = 1});
  return Build(d);
}

WeightPlacementManifest Cube(int64_t tp, int64_t dim) {
  auto d = testing::GridDraft({.tp = tp});
  testing::AddTensor(&d, {.tensor_id = "cube",
                          .shape = {8, 16, 64},
                          .dtype = "uint8",
                          .itemsize = 1,
                          .tp_dim = dim});
  return Build(d);
}

// 2 layers x 2 experts, each expert tensor owned by one PP and one EP rank;
// `swap` moves every tensor to the other PP and EP rank.
WeightPlacementManifest ExpertLayout(int64_t dp, int64_t tp, bool swap) {
  auto d = testing::GridDraft({.dp = dp, .pp = 2, .ep = 2, .tp = tp});
  for (int64_t layer = 0; layer < 2; ++layer) {
    const std::string prefix = "layers." + std::to_string(layer);
    testing::AddTensor(&d, {.tensor_id = prefix + ".attn",
                            .shape = {16, 32},
                            .tp_dim = 1,
                            .pp_owner = swap ? 1 - layer : layer,
                            .layer_id = layer});
    for (int64_t e = 0; e < 2; ++e) {
      testing::AddTensor(
          &d, {.tensor_id = prefix + ".experts." + std::to_string(e) + ".up",
               .shape = {16, 24},
               .tp_dim = 1,
               .pp_owner = swap ? 1 - layer : layer,
               .layer_id = layer,
               .expert_id = e,
               .ep_owner = swap ? 1 - e : e});
    }
  }
  testing::AddTensor(&d,
                     {.tensor_id = "embed", .shape = {32, 16}, .tp_dim = 0});
  return Build(d);
}

ModelSpec TinyMoe() {
  return Must(
      ModelSpecFromJson(ReadTestData("../../examples/models/tiny-moe.json")));
}

// ---------------------------------------------------------------- round trips

TEST_P(WeightStoreRoundTripTest, Tp2ToTp4) {
  RoundTripAllOptions(TpLayout(1, 2), TpLayout(1, 4));
}

TEST_P(WeightStoreRoundTripTest, Dp2Tp2ToDp3Tp4SmallTensor) {
  RoundTripAllOptions(SmallTensor(2, 2), SmallTensor(3, 4));
}

TEST_P(WeightStoreRoundTripTest, Tp4ToTp2Merge) {
  RoundTripAllOptions(TpLayout(1, 4), TpLayout(1, 2));
}

TEST_P(WeightStoreRoundTripTest, CrossDimDim0ToDim2UsesStagedSweeps) {
  const auto source = Cube(4, 0);
  const auto target = Cube(4, 2);
  for (const NamedOptions& o : OptionSets()) {
    SCOPED_TRACE(o.name);
    const LoadReport r = RoundTrip(source, target, o.options);
    // 4 stored [2, 16, 64] slabs x 4 targets of 16-byte rows: every region
    // is strided, served by sweeps of at most staging_bytes per read.
    EXPECT_EQ(r.regions, 16u);
    EXPECT_EQ(r.bytes, 8u * 16 * 64);
    const uint64_t span =
        o.options.staging_bytes / o.options.chunk_bytes * o.options.chunk_bytes;
    EXPECT_GE(r.read_requests, 4 * ((2048 + span - 1) / span));
    // Every stored byte is read at most once per load.
    EXPECT_EQ(r.bytes_read, 8u * 16 * 64);
  }
}

// A [32, 8192] byte matrix from TP2 rows to TP(2) columns: 4 KiB strided
// rows. At the default threshold each is read straight into its target
// (nothing copied); staged, every byte is copied; replicated targets (DP2)
// need each stored byte twice, so they are staged. Each stored byte is
// read once in every case.
TEST_P(WeightStoreRoundTripTest, LongStridedRowsAreReadInPlace) {
  auto layout = [](int64_t dp, int64_t dim) {
    auto d = testing::GridDraft({.dp = dp, .tp = 2});
    testing::AddTensor(&d, {.tensor_id = "w",
                            .shape = {32, 8192},
                            .dtype = "uint8",
                            .itemsize = 1,
                            .tp_dim = dim});
    return Build(d);
  };
  const uint64_t model = 32 * 8192;
  LoadReport r = RoundTrip(layout(1, 0), layout(1, 1), {});
  EXPECT_EQ(r.bytes, model);
  EXPECT_EQ(r.bytes_read, model);
  EXPECT_EQ(r.bytes_copied, 0u);
  EXPECT_EQ(r.staging_bytes, 0u);  // every byte in place: no staging
  r = RoundTrip(layout(1, 0), layout(1, 1), {.min_scatter_bytes = 8192});
  EXPECT_EQ(r.bytes_read, model);
  EXPECT_EQ(r.bytes_copied, model);
  // Each stored fragment (128 KiB, within one span) staged once.
  EXPECT_EQ(r.staging_bytes, model / 2);
  r = RoundTrip(layout(1, 0), layout(2, 1), {});
  EXPECT_EQ(r.bytes, 2 * model);
  EXPECT_EQ(r.bytes_read, model);
  EXPECT_EQ(r.bytes_copied, 2 * model);
  // Small chunks and windows: reads cut at window, range and request
  // limits, chunks verified across rows.
  r = RoundTrip(layout(1, 0), layout(1, 1),
                {.chunk_bytes = 1000,
                 .max_range_bytes = 3000,
                 .max_ranges_per_request = 7,
                 .staging_bytes = 20000,
                 .min_scatter_bytes = 0});
  EXPECT_EQ(r.bytes_read, model);
  EXPECT_EQ(r.bytes_copied, 0u);
}

// A [16, 4096, 128] byte tensor (8 MiB) from TP2 rows to TP4 columns: 32-
// byte strided rows, staged in windows of 1 MiB that two threads share
// (each reads, verifies and copies out its own). Every byte lands, every
// stored byte is read and verified once, and a corrupt chunk is reported
// whichever thread's window holds it.
TEST_P(WeightStoreRoundTripTest, StagedWindowsSharedByTwoThreads) {
  auto layout = [](int64_t tp, int64_t dim) { return ByteLayout(16, tp, dim); };
  const uint64_t model = 16 * 4096 * 128;
  const WeightStoreOptions options{.chunk_bytes = 64 << 10,
                                   .staged_window_bytes = 1 << 20};
  TestStore dir;
  const uint64_t window =
      std::max<uint64_t>(uint64_t{1} << 20, dir.backend().PreferredReadBytes());
  for (int run = 0; run < 3; ++run) {
    const LoadReport r = RoundTrip(layout(2, 0), layout(4, 2), options);
    EXPECT_EQ(r.bytes, model);
    EXPECT_EQ(r.bytes_read, model);
    EXPECT_EQ(r.bytes_copied, model);
    EXPECT_EQ(r.chunks_verified, model / (64 << 10));
    // At most one window per thread (a window is at least the backend's
    // preferred read: one value on Redis).
    EXPECT_GT(r.staging_bytes, 0u);
    EXPECT_LE(r.staging_bytes, 2 * window);
  }
  WeightStore store = dir.Open(options);
  const Side src = SourceSide(layout(2, 0));
  const auto plan = Must(UploadAndCommit(store, src));
  const auto manifest =
      Must(store.ReadManifest(plan.manifest().manifest_key()));
  const StoredFragment& f = manifest.fragments().front();
  // A byte in the first window, then one in the last.
  for (const uint64_t at : {uint64_t{100}, f.nbytes - 100}) {
    const uint64_t pos = f.object_offset + at;
    dir.FlipByte(f.object_key, pos);
    const uint64_t chunk = pos / (64 << 10) * (64 << 10);
    const std::string expected =
        "checksum mismatch in stored fragment " + f.stored_fragment_id +
        " (object " + f.object_key + ") at bytes [" + std::to_string(chunk) +
        ", " + std::to_string(chunk + (64 << 10)) + ")";
    Side dst = TargetSide(layout(4, 2));
    auto r = store.Load(manifest, layout(4, 2), dst.buffers.bindings);
    EXPECT_THAT(r, StatusIs(StatusCode::kDataLoss, HasSubstr(expected)));
    dir.FlipByte(f.object_key, pos);  // restored (the flip is an XOR)
  }
  Side dst = TargetSide(layout(4, 2));
  ASSERT_OK(store.Load(manifest, layout(4, 2), dst.buffers.bindings));
  EXPECT_EQ(internal::VerifyPattern(layout(4, 2), dst.tensors, dst.buffers),
            "");
}

// The backend of the running test with a preferred read size, recording
// the object byte span of every ReadRanges call.
class PreferredReadStore : public ObjectStore {
 public:
  PreferredReadStore(ObjectStore& inner, uint64_t preferred)
      : inner_(inner), preferred_(preferred) {}
  Status Put(std::string_view key, std::string_view value) override {
    return inner_.Put(key, value);
  }
  Result<std::string> Get(std::string_view key) override {
    return inner_.Get(key);
  }
  Result<std::vector<std::string>> List(std::string_view prefix) override {
    return inner_.List(prefix);
  }
  Status Delete(std::string_view key) override { return inner_.Delete(key); }
  Status PutObject(std::string_view key, const std::vector<ConstBuffer>& parts,
                   Durability durability) override {
    return inner_.PutObject(key, parts, durability);
  }
  Status Sync() override { return inner_.Sync(); }
  Status ReadRanges(const std::vector<ReadRange>& ranges) override {
    uint64_t lo = UINT64_MAX, hi = 0;
    for (const ReadRange& r : ranges) {
      lo = std::min(lo, r.offset);
      hi = std::max(hi, r.offset + r.length);
    }
    {
      std::lock_guard<std::mutex> lock(mu_);
      spans_.emplace_back(lo, hi);
    }
    return inner_.ReadRanges(ranges);
  }
  Result<uint64_t> ObjectSize(std::string_view key) override {
    return inner_.ObjectSize(key);
  }
  Result<uint64_t> RemoveStaleTemporaries(
      std::chrono::seconds older_than) override {
    return inner_.RemoveStaleTemporaries(older_than);
  }
  const std::string& uri() const override { return inner_.uri(); }
  uint64_t PreferredReadBytes() const override { return preferred_; }

  std::vector<std::pair<uint64_t, uint64_t>> spans() {
    std::lock_guard<std::mutex> lock(mu_);
    return spans_;
  }

 private:
  ObjectStore& inner_;
  const uint64_t preferred_;
  std::mutex mu_;
  std::vector<std::pair<uint64_t, uint64_t>> spans_;
};

// A backend that prefers reads of whole values (Redis) gets staged windows
// of whole aligned values, whatever staged_window_bytes says: each request
// of a strided load spans exactly one value (the last one of an object
// may be short), every byte still read and verified once.
TEST_P(WeightStoreRoundTripTest, StagedWindowsAreTheBackendsPreferredReads) {
  auto layout = [](int64_t tp, int64_t dim) { return ByteLayout(10, tp, dim); };
  const uint64_t model = 10 * 4096 * 128;  // two objects of 2.5 MiB
  const uint64_t value = uint64_t{1} << 20;
  TestStore dir;
  const WeightStoreOptions options{.chunk_bytes = 64 << 10,
                                   .staged_window_bytes = 128 << 10};
  WeightStore writer = dir.Open(options);
  const Side src = SourceSide(layout(2, 0));
  const auto plan = Must(UploadAndCommit(writer, src));
  // Whole chunks, larger than the option; not whole chunks; smaller than
  // the option (which then stands).
  for (const uint64_t preferred : {value, value + 1000, uint64_t{64} << 10}) {
    SCOPED_TRACE(preferred);
    auto backend =
        std::make_shared<PreferredReadStore>(dir.backend(), preferred);
    WeightStore store = Must(WeightStore::Open(backend, options));
    const auto manifest =
        Must(store.ReadManifest(plan.manifest().manifest_key()));
    Side dst = TargetSide(layout(4, 2));
    const LoadReport r = LoadAndVerify(store, manifest, dst);
    EXPECT_EQ(r.bytes_read, model);
    EXPECT_EQ(r.chunks_verified, model / (64 << 10));
    // The window: the preferred read rounded up to whole chunks, at least
    // the option.
    const uint64_t c = 64 << 10;
    const uint64_t window =
        std::max<uint64_t>((preferred + c - 1) / c * c, 128 << 10);
    EXPECT_LE(r.staging_bytes, 2 * window);
    uint64_t spanned = 0;
    for (const auto& [lo, hi] : backend->spans()) {
      spanned += hi - lo;
      // One whole window, or an object's tail.
      EXPECT_EQ(lo % window, 0u) << lo;
      EXPECT_TRUE(hi - lo == window || hi == model / 2) << lo << " " << hi;
    }
    EXPECT_EQ(spanned, model);  // each stored byte read once
  }
}

// A contiguous load larger than one direct read group: the groups are
// shared by two threads, every byte is read and verified once, and of two
// corrupt chunks the first in the object is the one reported, whichever
// thread finds its chunk first.
TEST_P(WeightStoreRoundTripTest, DirectReadGroupsSharedByTwoThreads) {
  auto layout = [](int64_t tp) {
    auto d = testing::GridDraft({.tp = tp});
    testing::AddTensor(&d, {.tensor_id = "w",
                            .shape = {32, 4096, 128},
                            .dtype = "uint8",
                            .itemsize = 1,
                            .tp_dim = 0});
    return Build(d);
  };
  const uint64_t model = 32 * 4096 * 128;  // 16 MiB, one stored object
  const uint64_t chunk = 64 << 10;
  const WeightStoreOptions options{.chunk_bytes = chunk};
  const LoadReport r = RoundTrip(layout(1), layout(4), options);
  EXPECT_EQ(r.bytes, model);
  EXPECT_EQ(r.bytes_read, model);
  EXPECT_EQ(r.bytes_copied, 0u);
  EXPECT_EQ(r.chunks_verified, model / chunk);
  EXPECT_GE(r.read_requests, 2u);
  TestStore dir;
  WeightStore store = dir.Open(options);
  const Side src = SourceSide(layout(1));
  const auto plan = Must(UploadAndCommit(store, src));
  const auto manifest =
      Must(store.ReadManifest(plan.manifest().manifest_key()));
  ASSERT_EQ(manifest.fragments().size(), 1u);
  const StoredFragment& f = manifest.fragments().front();
  auto mismatch = [&](uint64_t pos) {
    const uint64_t c = pos / chunk * chunk;
    return "checksum mismatch in stored fragment " + f.stored_fragment_id +
           " (object " + f.object_key + ") at bytes [" + std::to_string(c) +
           ", " + std::to_string(c + chunk) + ")";
  };
  const uint64_t base = f.object_offset;
  for (const auto& flips : std::vector<std::vector<uint64_t>>{
           {model - 100},                      // the last chunk only
           {5 << 20, model - 100},             // a middle one, the last
           {100, model / 2 + 7, model - 100},  // the first of three
           {(4 << 20) + 1, (4 << 20) + 2}}) {  // one chunk, twice
    for (uint64_t at : flips) dir.FlipByte(f.object_key, base + at);
    Side dst = TargetSide(layout(4));
    auto loaded = store.Load(manifest, layout(4), dst.buffers.bindings);
    EXPECT_THAT(loaded, StatusIs(StatusCode::kDataLoss,
                                 HasSubstr(mismatch(base + flips.front()))));
    for (uint64_t at : flips) dir.FlipByte(f.object_key, base + at);
  }
  Side dst = TargetSide(layout(4));
  ASSERT_OK(store.Load(manifest, layout(4), dst.buffers.bindings));
  EXPECT_EQ(internal::VerifyPattern(layout(4), dst.tensors, dst.buffers), "");
}

// Replicas of the stored tiling (three DP ranks, the TP-replicated norm on
// every TP rank) are read once and copied: the load reads the model once.
TEST_P(WeightStoreRoundTripTest, ReplicatedTargetsReadEachStoredByteOnce) {
  for (const NamedOptions& o : OptionSets()) {
    SCOPED_TRACE(o.name);
    const LoadReport r = RoundTrip(TpLayout(1, 2), TpLayout(3, 2), o.options);
    // The bf16 norm [96] sits on both TP ranks of each of the 3 replicas.
    EXPECT_EQ(r.bytes, 3 * ModelBytes(TpLayout(1, 2)) + 3 * 96 * 2);
    EXPECT_EQ(r.bytes_read, ModelBytes(TpLayout(1, 2)));
  }
}

TEST_P(WeightStoreRoundTripTest, EpPpOwnershipSwap) {
  RoundTripAllOptions(ExpertLayout(2, 2, false), ExpertLayout(3, 4, true));
}

TEST_P(WeightStoreRoundTripTest, GeneratedTinyMoe) {
  const ModelSpec model = TinyMoe();
  const auto source = Must(
      GenerateLayout(model, {.sizes = {.tp = 4, .pp = 2, .ep = 8, .dp = 2}}));
  const auto target = Must(
      GenerateLayout(model, {.sizes = {.tp = 8, .pp = 4, .ep = 2, .dp = 4}}));
  for (const NamedOptions& o : OptionSets()) {
    if (o.options.chunk_bytes < 256) continue;  // enough with two sets
    SCOPED_TRACE(o.name);
    RoundTrip(source, target, o.options);
  }
}

constexpr uint64_t kMaxScenarioBytes = uint64_t{16} << 20;

// The first DP-owned tensor of `m`, or "".
std::string FirstDpOwnedTensor(const WeightPlacementManifest& m) {
  for (const auto& t : m.tensors()) {
    const ParallelAxis* dp = t.FindAxis(AxisKind::kDp);
    if (dp != nullptr && dp->semantics() == AxisSemantics::kOwnership) {
      return t.tensor_id();
    }
  }
  return "";
}

TEST_P(WeightStoreRoundTripTest, GoldenScenarios) {
  size_t ran = 0;
  size_t dp_owned = 0;
  for (const auto& [name, source, target, bytes, regions] :
       testing::ScenarioPairs(kMaxScenarioBytes)) {
    SCOPED_TRACE(name);
    const std::string owned = FirstDpOwnedTensor(source);
    if (!owned.empty()) {
      // DP-owned snapshots cannot be stored as one replica.
      ++dp_owned;
      TestStore dir;
      WeightStore store = dir.Open();
      Side src = SourceSide(source);
      auto plan = store.PrepareUpload(source, src.buffers.bindings);
      ASSERT_THAT(
          plan,
          StatusIs(StatusCode::kInvalidArgument,
                   "Weight Store upload requires replicated DP source tensors; "
                   "DP-owned tensor snapshots are not supported: " +
                       owned));
      continue;
    }
    for (const NamedOptions& o : OptionSets()) {
      if (o.options.chunk_bytes == 256) continue;  // enough with two sets
      SCOPED_TRACE(o.name);
      const LoadReport r = RoundTrip(source, target, o.options);
      EXPECT_EQ(r.bytes, bytes);
      EXPECT_EQ(r.regions, regions);
    }
    ++ran;
  }
  EXPECT_EQ(ran, 19u);
  EXPECT_EQ(dp_owned, 1u);
}

// ---------------------------------------------------------------- loads

TEST_P(WeightStoreLoadTest, SingleTargetParticipantFillsExactlyItsFragments) {
  TestStore dir;
  WeightStoreOptions o;
  o.chunk_bytes = 64;
  o.staging_bytes = 256;
  o.max_ranges_per_request = 3;
  WeightStore store = dir.Open(o);
  const Side src = SourceSide(ExpertLayout(2, 2, false));
  const auto plan = Must(UploadAndCommit(store, src));
  const auto manifest =
      Must(store.ReadManifest(plan.manifest().manifest_key()));
  const auto target = ExpertLayout(3, 4, true);
  size_t loaded = 0;
  for (const auto& part : target.parts()) {
    if (part.fragments().empty()) continue;
    SCOPED_TRACE(part.participant_id());
    Side dst = TargetSide(target, {part.participant_id()});
    ASSERT_EQ(dst.buffers.bindings.size(), 1u);
    const LoadReport r = LoadAndVerify(store, manifest, dst);
    uint64_t own = 0;
    for (const auto& f : part.fragments()) own += f.nbytes();
    EXPECT_EQ(r.bytes, own);
    ++loaded;
  }
  EXPECT_EQ(loaded, 3u * 2 * 2 * 4);
  // A subset of two participants: both filled, nothing else planned.
  const std::string a = testing::ParticipantId({2, 3, 1, 0});
  const std::string b = testing::ParticipantId({0, 1, 0, 1});
  Side dst = TargetSide(target, {a, b});
  ASSERT_EQ(dst.buffers.bindings.size(), 2u);
  const LoadReport r = LoadAndVerify(store, manifest, dst);
  uint64_t own = 0;
  for (const auto& part : target.parts()) {
    if (part.participant_id() != a && part.participant_id() != b) continue;
    for (const auto& f : part.fragments()) own += f.nbytes();
  }
  EXPECT_EQ(r.bytes, own);
}

TEST_P(WeightStoreLoadTest, ReportCountsRespectRequestLimits) {
  // Contiguous regions over many chunks: direct reads split by
  // max_range_bytes into ranges that continue each other (one run per
  // object: its two regions are adjacent), so one request per object
  // whatever max_ranges_per_request.
  auto layout = [](int64_t tp, int64_t cols) {
    auto draft = testing::GridDraft({.tp = tp});
    testing::AddTensor(&draft, {.tensor_id = "w",
                                .shape = {64, cols},
                                .dtype = "uint8",
                                .itemsize = 1,
                                .tp_dim = 0});
    return Build(draft);
  };
  for (uint32_t max_ranges : {1u, 2u, 5u}) {
    SCOPED_TRACE("max_ranges_per_request " + std::to_string(max_ranges));
    WeightStoreOptions o;
    o.chunk_bytes = 64;
    o.staging_bytes = 128;
    o.max_range_bytes = 64;
    o.max_ranges_per_request = max_ranges;
    const LoadReport r = RoundTrip(layout(2, 100), layout(4, 100), o);
    EXPECT_EQ(r.bytes, 6400u);
    EXPECT_EQ(r.regions, 4u);
    // Each target is 1600 bytes starting at 0 or 1600 of a 3200-byte
    // object: 25 chunks, no edges.
    EXPECT_EQ(r.ranges, 2u);
    EXPECT_EQ(r.bytes_read, 6400u);
    EXPECT_EQ(r.chunks_verified, 100u);
    EXPECT_EQ(r.read_requests, 2u);
  }
  // Every other TP8 target of [64, 128] bytes: two separate 1024-byte
  // runs (16 chunks each) per 4096-byte object, batched by the limit.
  TestStore dir;
  const StoredWeightManifest manifest = [&] {
    WeightStore store = dir.Open({.chunk_bytes = 64});
    const Side src = SourceSide(layout(2, 128));
    const auto plan = Must(UploadAndCommit(store, src));
    return Must(store.ReadManifest(plan.manifest().manifest_key()));
  }();
  const auto target = layout(8, 128);
  for (const auto& [max_ranges, requests] :
       std::vector<std::pair<uint32_t, uint64_t>>{{1, 4}, {2, 2}, {5, 2}}) {
    SCOPED_TRACE("max_ranges_per_request " + std::to_string(max_ranges));
    WeightStore store = dir.Open({.chunk_bytes = 64,
                                  .max_range_bytes = 64,
                                  .max_ranges_per_request = max_ranges});
    std::vector<std::string> every_other;
    for (int64_t tp = 0; tp < 8; tp += 2) {
      every_other.push_back(testing::ParticipantId({0, tp, 0, 0}));
    }
    Side dst = TargetSide(target, every_other);
    const LoadReport r = LoadAndVerify(store, manifest, dst);
    EXPECT_EQ(r.bytes, 4096u);
    EXPECT_EQ(r.ranges, 4u);
    EXPECT_EQ(r.read_requests, requests);
    EXPECT_EQ(r.bytes_read, 4096u);
    EXPECT_EQ(r.chunks_verified, 64u);
  }
}

// ---------------------------------------------------------------- upload plan

uint64_t PayloadBytes(const TestStore& dir, const UploadPlan& plan) {
  uint64_t n = 0;
  for (const auto& k : dir.Keys(BaseOf(plan) + "/payload/")) {
    n += Must(dir.backend().ObjectSize(k));
  }
  return n;
}

WeightPlacementManifest EvenModel(int64_t dp, int64_t tp) {
  auto d = testing::GridDraft({.dp = dp, .tp = tp});
  for (int i = 0; i < 8; ++i) {
    testing::AddTensor(&d, {.tensor_id = "w" + std::to_string(i),
                            .shape = {32, 64},
                            .tp_dim = i % 2});
  }
  testing::AddTensor(&d, {.tensor_id = "norm", .shape = {64}});
  return Build(d);
}

TEST_P(WeightStoreUploadTest, StoredPayloadIsOneModelWhateverTheDpSize) {
  std::vector<WeightPlacementManifest> layouts = {
      EvenModel(1, 2), EvenModel(2, 2), EvenModel(4, 2)};
  const ModelSpec model = TinyMoe();
  for (int64_t dp : {1, 2, 4}) {
    layouts.push_back(Must(GenerateLayout(
        model, {.sizes = {.tp = 2, .pp = 2, .ep = 2, .dp = dp}})));
  }
  std::map<uint64_t, size_t> fragments_by_model;
  for (const auto& source : layouts) {
    SCOPED_TRACE(source.resource_id() + " dp" +
                 std::to_string(source.topology().dp_size()));
    TestStore dir;
    WeightStore store = dir.Open();
    const Side src = SourceSide(source);
    const auto plan = Must(UploadAndCommit(store, src));
    EXPECT_EQ(PayloadBytes(dir, plan), ModelBytes(source));
    EXPECT_EQ(dir.Keys(BaseOf(plan) + "/payload/").size(),
              plan.manifest().fragments().size());
    uint64_t planned = 0;
    for (const auto& b : src.buffers.bindings) {
      planned += plan.BytesOf(b.participant_id());
    }
    EXPECT_EQ(planned, ModelBytes(source));
    // The same stored fragments whatever the DP size.
    auto [it, inserted] = fragments_by_model.emplace(
        ModelBytes(source), plan.manifest().fragments().size());
    if (!inserted) {
      EXPECT_EQ(it->second, plan.manifest().fragments().size());
    }
  }
}

TEST_P(WeightStoreUploadTest, PlanSpreadsWritesOverEveryReplica) {
  TestStore dir;
  WeightStore store = dir.Open();
  const Side single = SourceSide(EvenModel(1, 2));
  const auto single_plan =
      Must(store.PrepareUpload(single.placement, single.buffers.bindings));
  uint64_t per_participant = 0;
  for (const auto& b : single.buffers.bindings) {
    per_participant =
        std::max(per_participant, single_plan.BytesOf(b.participant_id()));
  }
  uint64_t largest = 0;
  for (const auto& f : single_plan.manifest().fragments()) {
    largest = std::max(largest, f.nbytes);
  }
  for (int64_t dp : {2, 4}) {
    SCOPED_TRACE("dp" + std::to_string(dp));
    const Side src = SourceSide(EvenModel(dp, 2));
    const auto plan =
        Must(store.PrepareUpload(src.placement, src.buffers.bindings));
    ASSERT_EQ(src.buffers.bindings.size(), static_cast<size_t>(2 * dp));
    uint64_t max = 0;
    for (const auto& b : src.buffers.bindings) {
      SCOPED_TRACE(b.participant_id());
      EXPECT_GT(plan.BytesOf(b.participant_id()), 0u);
      max = std::max(max, plan.BytesOf(b.participant_id()));
    }
    const uint64_t share = per_participant / static_cast<uint64_t>(dp);
    EXPECT_GE(max, share);
    EXPECT_LE(max, share + largest);
    EXPECT_EQ(plan.BytesOf("no-such-participant"), 0u);
  }
}

TEST_P(WeightStoreUploadTest, UploadRejectsStaleSourceLease) {
  TestStore dir;
  WeightStore store = dir.Open();
  const Side src = SourceSide(TpLayout(1, 2));
  const auto plan =
      Must(store.PrepareUpload(src.placement, src.buffers.bindings));
  EXPECT_EQ(plan.generation(), 1u);
  const auto& b = src.buffers.bindings[0];
  auto r = store.Upload(plan, src.placement,
                        Must(WithBindingChanges(b, {.generation = 2})));
  ASSERT_THAT(r,
              StatusIs(StatusCode::kFailedPrecondition,
                       "stale source lease: participant " + b.participant_id() +
                           " is at generation 2, the upload plan "
                           "at 1"));
  // Nothing was written for it.
  EXPECT_TRUE(dir.Keys(BaseOf(plan) + "/payload/").empty());
  // Another placement is refused too.
  auto other = store.Upload(plan, TpLayout(1, 4), b);
  EXPECT_THAT(other, StatusIs(StatusCode::kInvalidArgument,
                              "source placement identity mismatch"));
}

TEST_P(WeightStoreUploadTest, PrepareRejectsDpOwnedTensors) {
  const auto source = Must(WeightPlacementFromJson(
      ReadTestData("scenarios/dp_ownership_source.json")));
  TestStore dir;
  WeightStore store = dir.Open();
  const Side src = SourceSide(source);
  auto plan = store.PrepareUpload(source, src.buffers.bindings);
  ASSERT_THAT(
      plan,
      StatusIs(
          StatusCode::kInvalidArgument,
          "Weight Store upload requires replicated DP source tensors; "
          "DP-owned tensor snapshots are not supported: layers.0.owned_0"));
  EXPECT_TRUE(dir.Keys("weights/").empty());
}

TEST_P(WeightStoreUploadTest, PrepareNeedsACompleteConsistentReplica) {
  TestStore dir;
  WeightStore store = dir.Open();
  const Side src = SourceSide(TpLayout(2, 2));
  const auto& all = src.buffers.bindings;
  auto without = [&](std::set<std::string> missing) {
    std::vector<WeightRuntimeBindingManifest> out;
    for (const auto& b : all) {
      if (!missing.count(b.participant_id())) out.push_back(b);
    }
    return out;
  };
  const std::string d0t1 = testing::ParticipantId({0, 1, 0, 0});
  const std::string d1t0 = testing::ParticipantId({1, 0, 0, 0});
  const std::string kNoReplica =
      "source manifests have no complete generation-consistent DP replica";
  // Each replica misses a participant: the message names, per replica, the
  // first participant without a binding and its first fragment.
  auto plan = store.PrepareUpload(src.placement, without({d0t1, d1t0}));
  ASSERT_THAT(
      plan,
      StatusIs(StatusCode::kFailedPrecondition,
               kNoReplica + ": DP replica 0 is missing participant " + d0t1 +
                   " (unbound; its first fragment: attn.out at [0, "
                   "48] of shape [32, 48]); DP replica 1 is missing "
                   "participant " +
                   d1t0 +
                   " (unbound; its first fragment: attn.out at [0, "
                   "0] of shape [32, 48])"));
  plan = store.PrepareUpload(src.placement, {});
  EXPECT_THAT(plan.status().message(),
              StartsWith(kNoReplica + ": DP replica 0 is missing participant " +
                         testing::ParticipantId({0, 0, 0, 0})));
  // A replica whose bindings disagree on the generation is not complete.
  auto mixed = all;
  for (auto& b : mixed) {
    if (b.participant_id() == d0t1 || b.participant_id() == d1t0) {
      b = Must(WithBindingChanges(b, {.generation = 7}));
    }
  }
  plan = store.PrepareUpload(src.placement, mixed);
  EXPECT_THAT(
      plan, StatusIs(StatusCode::kFailedPrecondition,
                     kNoReplica + ": DP replica 0 has bindings of generations "
                                  "1 7; DP replica 1 has bindings of "
                                  "generations 1 7"));
  // Two complete replicas at different generations.
  auto split = all;
  for (auto& b : split) {
    if (b.participant_id().starts_with("p-d1")) {
      b = Must(WithBindingChanges(b, {.generation = 2}));
    }
  }
  plan = store.PrepareUpload(src.placement, split);
  EXPECT_THAT(
      plan,
      StatusIs(
          StatusCode::kFailedPrecondition,
          "complete source DP replicas have inconsistent lease generations: "
          "DP replica 0 at 1, DP replica 1 at 2"));
  // One complete replica is enough: only its participants write, and the
  // revision loads byte-exactly.
  const auto bindings = without({d0t1});
  ASSERT_OK_AND_ASSIGN(auto ok, store.PrepareUpload(src.placement, bindings));
  for (const auto& op : ok.operations()) {
    EXPECT_THAT(op.participant_id, StartsWith("p-d1-"));
  }
  std::vector<UploadReceipt> receipts;
  for (const auto& b : bindings) {
    auto r = Must(store.Upload(ok, src.placement, b));
    if (b.participant_id().starts_with("p-d0")) {
      EXPECT_TRUE(r.empty());
    }
    receipts.insert(receipts.end(), r.begin(), r.end());
  }
  MustOk(store.Commit(ok, receipts));
  Side dst = TargetSide(TpLayout(3, 4));
  LoadAndVerify(store, Must(store.ReadManifest(ok.manifest().manifest_key())),
                dst);
}

// Upload writes the checksum record, then the payload object. A writer
// killed between the two leaves a record without its payload; a retry of
// the same plan finds the record (same checksums), writes the payload and
// the transaction commits. (Built here by deleting a payload after a
// complete upload; StoreCrash* kills real processes.)
TEST_P(WeightStoreUploadTest, RetryResumesAfterCrashBetweenChecksumAndPayload) {
  TestStore dir;
  WeightStore store = dir.Open({.chunk_bytes = 64, .staging_bytes = 256});
  const Side src = SourceSide(TpLayout(1, 2));
  std::vector<UploadReceipt> receipts;
  const auto plan = PrepareAndUpload(store, src, &receipts);
  const auto& first = plan.manifest().fragments()[0];
  MustOk(dir.backend().Delete(first.object_key));
  // Not committable as it is.
  EXPECT_EQ(store.Commit(plan, receipts).code(),
            StatusCode::kFailedPrecondition);
  std::vector<UploadReceipt> again;
  for (const auto& b : src.buffers.bindings) {
    ASSERT_OK_AND_ASSIGN(auto r, store.Upload(plan, src.placement, b));
    again.insert(again.end(), r.begin(), r.end());
  }
  EXPECT_EQ(again, receipts);
  MustOk(store.Commit(plan, again));
  EXPECT_OK(store.Verify(plan.manifest().manifest_key()));
  Side dst = TargetSide(TpLayout(1, 4));
  LoadAndVerify(store, Must(store.ReadManifest(plan.manifest().manifest_key())),
                dst);
}

TEST_P(WeightStoreUploadTest, RetryWithOtherBytesIsRefused) {
  TestStore dir;
  WeightStore store = dir.Open();
  const Side src = SourceSide(TpLayout(1, 2));
  std::vector<UploadReceipt> receipts;
  const auto plan = PrepareAndUpload(store, src, &receipts);
  // Same bytes: the retry is accepted and returns the same receipts.
  std::vector<UploadReceipt> again;
  for (const auto& b : src.buffers.bindings) {
    auto r = Must(store.Upload(plan, src.placement, b));
    again.insert(again.end(), r.begin(), r.end());
  }
  EXPECT_EQ(again, receipts);
  // Other bytes under the same plan: refused, naming the object.
  const auto& op = plan.operations()[0];
  const auto& s = plan.manifest().fragments()[op.stored_fragment];
  src.buffers.data.at(op.placement_fragment_id)[0] ^= 0x5A;
  for (const auto& b : src.buffers.bindings) {
    if (b.participant_id() != op.participant_id) continue;
    auto r = store.Upload(plan, src.placement, b);
    ASSERT_THAT(r,
                StatusIs(StatusCode::kAlreadyExists,
                         "payload exists with other bytes: " + s.object_key));
  }
  src.buffers.data.at(op.placement_fragment_id)[0] ^= 0x5A;
}

// ---------------------------------------------------------------- commit

struct Uploaded {
  TestStore dir;
  WeightStore store;
  Side src;
  std::vector<UploadReceipt> receipts;
  UploadPlan plan;
  explicit Uploaded(WeightPlacementManifest m = TpLayout(2, 2))
      : store(dir.Open()),
        src(SourceSide(m)),
        plan(PrepareAndUpload(store, src, &receipts)) {}
  std::string key() const { return plan.manifest().manifest_key(); }
  std::string base() const { return BaseOf(plan); }
  std::string txn() const { return plan.transaction_id(); }
  std::string fid(size_t i) const {
    return plan.manifest().fragments()[i].stored_fragment_id;
  }
  void ExpectLoads() {
    Side dst = TargetSide(TpLayout(3, 4));
    LoadAndVerify(store, Must(store.ReadManifest(key())), dst);
  }
};

TEST_P(WeightStoreCommitTest, CommitIsIdempotent) {
  Uploaded u;
  MustOk(u.store.Commit(u.plan, u.receipts));
  EXPECT_OK(u.store.Commit(u.plan, u.receipts));
  EXPECT_OK(u.store.Commit(u.plan, u.receipts));
  EXPECT_EQ(Must(u.dir.backend().Get(u.base() + "/transactions/" + u.txn() +
                                     "/decision")),
            "{\"decision\":\"commit\",\"plan_digest\":\"" +
                u.plan.manifest().manifest_digest() +
                "\",\"record_type\":\"weight-upload-decision\"}");
  u.ExpectLoads();
}

TEST_P(WeightStoreCommitTest, BadReceiptsAreRefusedBeforeAnyDecision) {
  Uploaded u;
  const std::string decision =
      u.base() + "/transactions/" + u.txn() + "/decision";
  // Missing: the first stored fragment's receipt.
  auto missing = u.receipts;
  std::erase_if(missing, [&](const UploadReceipt& r) {
    return r.stored_fragment_id == u.fid(0);
  });
  ASSERT_EQ(missing.size(), u.receipts.size() - 1);
  Status st = u.store.Commit(u.plan, missing);
  EXPECT_THAT(st, StatusIs(StatusCode::kFailedPrecondition,
                           "missing upload receipt: " + u.fid(0)));
  // Duplicate.
  auto dup = u.receipts;
  dup.push_back(u.receipts[1]);
  st = u.store.Commit(u.plan, dup);
  EXPECT_THAT(st, StatusIs(StatusCode::kInvalidArgument,
                           "duplicate upload receipt: " +
                               u.receipts[1].stored_fragment_id));
  // Unexpected.
  auto extra = u.receipts;
  extra.push_back({"0123456789abcdef01234567", u.receipts[0].object_key,
                   u.receipts[0].participant_id});
  st = u.store.Commit(u.plan, extra);
  EXPECT_THAT(st,
              StatusIs(StatusCode::kInvalidArgument,
                       "unexpected upload receipt: 0123456789abcdef01234567"));
  // From another participant than planned.
  auto wrong = u.receipts;
  wrong[0].participant_id = "someone-else";
  st = u.store.Commit(u.plan, wrong);
  EXPECT_THAT(st, StatusIs(StatusCode::kInvalidArgument,
                           "upload receipt does not match plan: " +
                               wrong[0].stored_fragment_id));
  // None of these decided anything: the real receipts still commit.
  EXPECT_EQ(u.dir.backend().Get(decision).status().code(),
            StatusCode::kNotFound);
  EXPECT_EQ(u.store.ReadManifest(u.key()).status().code(),
            StatusCode::kNotFound);
  MustOk(u.store.Commit(u.plan, u.receipts));
  u.ExpectLoads();
}

TEST_P(WeightStoreCommitTest, CommitNeedsEveryPayload) {
  Uploaded u;
  const auto& s = u.plan.manifest().fragments()[2];
  MustOk(u.dir.backend().Delete(s.object_key));
  Status st = u.store.Commit(u.plan, u.receipts);
  EXPECT_THAT(st, StatusIs(StatusCode::kFailedPrecondition,
                           "payload is not complete: " + s.object_key));
  EXPECT_EQ(u.store.ReadManifest(u.key()).status().code(),
            StatusCode::kNotFound);
}

TEST_P(WeightStoreCommitTest, AbortThenCommitFails) {
  Uploaded u;
  MustOk(u.store.Abort(u.plan));
  EXPECT_OK(u.store.Abort(u.plan));  // idempotent
  Status st = u.store.Commit(u.plan, u.receipts);
  EXPECT_THAT(st, StatusIs(StatusCode::kFailedPrecondition,
                           "weight upload already chose abort"));
  EXPECT_EQ(u.store.ReadManifest(u.key()).status().code(),
            StatusCode::kNotFound);
}

TEST_P(WeightStoreCommitTest, CommitThenAbortFails) {
  Uploaded u;
  MustOk(u.store.Commit(u.plan, u.receipts));
  Status st = u.store.Abort(u.plan);
  EXPECT_THAT(st,
              StatusIs(StatusCode::kFailedPrecondition,
                       "cannot abort a published weight revision: " + u.key()));
  u.ExpectLoads();
  EXPECT_OK(u.store.Verify(u.key()));
}

TEST_P(WeightStoreCommitTest, AbortRemovesPayloadsAndChecksums) {
  Uploaded u;
  const std::string txn = u.txn();
  ASSERT_EQ(u.dir.Keys(u.base() + "/payload/" + txn + "/").size(),
            u.plan.manifest().fragments().size());
  ASSERT_EQ(u.dir.Keys(u.base() + "/checksums/" + txn + "/").size(),
            u.plan.manifest().fragments().size());
  MustOk(u.store.Abort(u.plan));
  EXPECT_TRUE(u.dir.Keys(u.base() + "/payload/").empty());
  EXPECT_TRUE(u.dir.Keys(u.base() + "/checksums/").empty());
  // What is left: the transaction's own records (for Gc).
  EXPECT_EQ(u.dir.Keys(u.base() + "/"),
            (std::vector<std::string>{
                u.base() + "/transactions/" + txn + "/decision",
                u.base() + "/transactions/" + txn + "/started"}));
  EXPECT_THAT(Must(u.dir.backend().Get(u.base() + "/transactions/" + txn +
                                       "/decision")),
              HasSubstr("\"decision\":\"abort\""));
}

TEST_P(WeightStoreCommitTest, SecondWriterOfARevisionConflicts) {
  Uploaded u;
  MustOk(u.store.Commit(u.plan, u.receipts));
  // Another writer of the same revision, from the same data.
  std::vector<UploadReceipt> receipts;
  const auto second = PrepareAndUpload(u.store, u.src, &receipts);
  ASSERT_NE(second.transaction_id(), u.txn());
  ASSERT_EQ(second.manifest().manifest_key(), u.key());
  ASSERT_FALSE(
      u.dir.Keys(u.base() + "/payload/" + second.transaction_id() + "/")
          .empty());
  Status st = u.store.Commit(second, receipts);
  EXPECT_THAT(st, StatusIs(StatusCode::kAlreadyExists,
                           "conflicting weight revision: " + u.key()));
  // Its payloads are gone; the winner's stay and load.
  for (const char* kind : {"/payload/", "/checksums/"}) {
    EXPECT_TRUE(
        u.dir.Keys(u.base() + kind + second.transaction_id() + "/").empty());
    EXPECT_EQ(u.dir.Keys(u.base() + kind + u.txn() + "/").size(),
              u.plan.manifest().fragments().size());
  }
  // A retry of the loser still conflicts.
  st = u.store.Commit(second, receipts);
  EXPECT_FALSE(st.ok());
  u.ExpectLoads();
  EXPECT_OK(u.store.Verify(u.key()));
}

// ---------------------------------------------------------------- lifecycle

// The keys a committed revision consists of.
std::set<std::string> CommittedKeys(const UploadPlan& plan) {
  const std::string base = BaseOf(plan);
  const std::string txn = plan.transaction_id();
  std::set<std::string> keys = {
      plan.manifest().manifest_key(),
      base + "/transactions/" + txn + "/started",
      base + "/transactions/" + txn + "/decision",
      base + "/transactions/" + txn + "/pending-manifest"};
  for (const auto& f : plan.manifest().fragments()) {
    keys.insert(f.object_key);
    keys.insert(base + "/checksums/" + txn + "/" + f.stored_fragment_id);
  }
  return keys;
}

std::set<std::string> KeySet(const std::vector<std::string>& keys) {
  return {keys.begin(), keys.end()};
}

TEST_P(WeightStoreLifecycleTest, ListShowsImportingThenReady) {
  TestStore dir;
  WeightStore store = dir.Open();
  EXPECT_TRUE(Must(store.List()).empty());
  const Side src = SourceSide(TpLayout(2, 2));
  std::vector<UploadReceipt> receipts;
  const auto plan = PrepareAndUpload(store, src, &receipts);
  auto list = Must(store.List());
  ASSERT_EQ(list.size(), 1u);
  EXPECT_EQ(list[0].state, "IMPORTING");
  EXPECT_EQ(list[0].manifest_key, plan.manifest().manifest_key());
  MustOk(store.Commit(plan, receipts));
  list = Must(store.List());
  ASSERT_EQ(list.size(), 1u);
  EXPECT_EQ(list[0].state, "READY");
  EXPECT_EQ(list[0].manifest_key, plan.manifest().manifest_key());
  EXPECT_EQ(list[0].resource_id, src.placement.resource_id());
  EXPECT_EQ(list[0].revision, src.placement.revision());
  EXPECT_EQ(list[0].weight_generation, 1u);
  EXPECT_EQ(list[0].fragments, plan.manifest().fragments().size());
  EXPECT_EQ(list[0].fragments, 7u);  // 3 split tensors x 2 + the norm
  EXPECT_EQ(list[0].bytes, ModelBytes(src.placement));
  EXPECT_EQ(list[0].leases, 0u);
}

// A clock tests set and advance (WeightStoreOptions::now_seconds).
struct FakeClock {
  int64_t now = 1764582000;  // 2025-12-01T09:40:00Z
  std::function<int64_t()> Source() {
    return [this] { return now; };
  }
};

TEST_P(WeightStoreLifecycleTest, LeasesBlockRemoveUntilExpired) {
  TestStore dir;
  FakeClock clock;
  int leases_taken = 0;
  WeightStore store =
      dir.Open({.lease_ttl = std::chrono::seconds(3600),
                .now_seconds = clock.Source(),
                .new_lease_id = [&] {
                  return "lease" + std::to_string(++leases_taken);
                }});
  const Side src = SourceSide(TpLayout(1, 2));
  const auto plan = Must(UploadAndCommit(store, src));
  const std::string key = plan.manifest().manifest_key();
  const std::string lease = BaseOf(plan) + "/leases/0123456789abcdef";
  // A load in progress (taken by another process, an hour from expiry).
  MustOk(dir.backend().Put(lease, internal::LeaseRecord(clock.now + 3600)));
  EXPECT_EQ(Must(store.List())[0].leases, 1u);
  Status st = store.Remove(key);
  EXPECT_THAT(st, StatusIs(StatusCode::kFailedPrecondition,
                           "weight revision " + key +
                               " is leased by 1 load(s); not removed"));
  EXPECT_EQ(KeySet(dir.Keys(BaseOf(plan) + "/")).size(),
            CommittedKeys(plan).size() + 1);
  // The load still works meanwhile (and drops only its own lease).
  Side dst = TargetSide(TpLayout(1, 4));
  LoadAndVerify(store, Must(store.ReadManifest(key)), dst);
  EXPECT_EQ(dir.Keys(BaseOf(plan) + "/leases/"),
            std::vector<std::string>{lease});
  EXPECT_EQ(leases_taken, 1);
  // Still held at its last second; expired one second later.
  clock.now += 3599;
  EXPECT_EQ(Must(store.List())[0].leases, 1u);
  EXPECT_FALSE(store.Remove(key).ok());
  clock.now += 1;
  EXPECT_EQ(Must(store.List())[0].leases, 0u);
  MustOk(store.Remove(key));
  EXPECT_TRUE(dir.Keys(BaseOf(plan) + "/").empty());
  EXPECT_TRUE(Must(store.List()).empty());
  EXPECT_EQ(store.ReadManifest(key).status().code(), StatusCode::kNotFound);
  auto loaded =
      store.Load(plan.manifest(), dst.placement, dst.buffers.bindings);
  EXPECT_THAT(loaded, StatusIs(StatusCode::kFailedPrecondition,
                               "weight manifest is not committed: " + key));
  // A failed load leaves no lease behind.
  EXPECT_TRUE(dir.Keys(BaseOf(plan) + "/").empty());
}

TEST_P(WeightStoreLifecycleTest, RemoveDeletesEveryKeyOfTheRevision) {
  TestStore dir;
  WeightStore store = dir.Open();
  const Side src = SourceSide(TpLayout(2, 2));
  const auto plan = Must(UploadAndCommit(store, src));
  // An aborted second upload's records live under the revision too.
  std::vector<UploadReceipt> receipts;
  const auto aborted = PrepareAndUpload(store, src, &receipts);
  MustOk(store.Abort(aborted));
  // Another revision is untouched.
  auto draft = testing::GridDraft({.tp = 2});
  draft.header.revision = "step-2";
  testing::AddTensor(&draft, {.tensor_id = "w", .shape = {8, 8}, .tp_dim = 0});
  const Side other = SourceSide(Build(draft));
  const auto other_plan = Must(UploadAndCommit(store, other));
  ASSERT_NE(BaseOf(other_plan), BaseOf(plan));
  const auto other_keys = dir.Keys(BaseOf(other_plan) + "/");
  // Progress counts the keys removed after the commit decisions and the
  // manifest (which go first: see Remove).
  uint64_t keys = 0;
  for (const std::string& k : dir.Keys(BaseOf(plan) + "/")) {
    keys += !k.ends_with("/decision") && !k.ends_with("/manifest");
  }
  std::vector<std::pair<uint64_t, uint64_t>> calls;
  WeightStoreOptions counted = store.options();
  counted.progress = [&](uint64_t done, uint64_t total) {
    calls.emplace_back(done, total);
  };
  MustOk(store.WithOptions(counted).Remove(plan.manifest().manifest_key()));
  ASSERT_GE(calls.size(), 2u);
  EXPECT_EQ(calls.front(), std::make_pair(uint64_t{0}, keys));
  EXPECT_EQ(calls.back(), std::make_pair(keys, keys));
  EXPECT_TRUE(dir.Keys(BaseOf(plan) + "/").empty());
  EXPECT_EQ(dir.Keys("weights/"), other_keys);
  EXPECT_EQ(store.Remove(plan.manifest().manifest_key()).code(),
            StatusCode::kNotFound);
  EXPECT_OK(store.Verify(other_plan.manifest().manifest_key()));
}

TEST_P(WeightStoreLifecycleTest, GcRemovesAbortedAndAbandonedUploadsOnly) {
  TestStore dir;
  WeightStore store = dir.Open({.chunk_bytes = 256, .staging_bytes = 1024});
  const Side src = SourceSide(TpLayout(2, 2));
  const auto committed = Must(UploadAndCommit(store, src));
  // An aborted upload, an undecided one and a losing writer, all of the
  // same revision; and an undecided upload of a revision never published.
  std::vector<UploadReceipt> r1, r2, r3, r4;
  const auto aborted = PrepareAndUpload(store, src, &r1);
  MustOk(store.Abort(aborted));
  const auto undecided = PrepareAndUpload(store, src, &r2);
  const auto loser = PrepareAndUpload(store, src, &r3);
  EXPECT_EQ(store.Commit(loser, r3).code(), StatusCode::kAlreadyExists);
  auto draft = testing::GridDraft({.tp = 2});
  draft.header.revision = "step-9";
  testing::AddTensor(&draft, {.tensor_id = "w", .shape = {8, 8}, .tp_dim = 0});
  const Side unpublished_src = SourceSide(Build(draft));
  const auto unpublished = PrepareAndUpload(store, unpublished_src, &r4);
  const std::string base = BaseOf(committed);
  EXPECT_EQ(
      dir.Keys(base + "/payload/" + undecided.transaction_id() + "/").size(),
      undecided.manifest().fragments().size());

  // Progress counts the uploads examined: the committed one and four.
  std::vector<std::pair<uint64_t, uint64_t>> calls;
  WeightStore gc = dir.Open({.gc_grace = std::chrono::seconds(0),
                             .progress = [&](uint64_t done, uint64_t total) {
                               calls.emplace_back(done, total);
                             }});
  const GcReport report = Must(gc.Gc());
  ASSERT_GE(calls.size(), 2u);
  EXPECT_EQ(calls.front(), std::make_pair(uint64_t{0}, uint64_t{5}));
  EXPECT_EQ(calls.back(), std::make_pair(uint64_t{5}, uint64_t{5}));
  EXPECT_EQ(std::set<std::string>(report.transactions_removed.begin(),
                                  report.transactions_removed.end()),
            (std::set<std::string>{
                base + "/" + aborted.transaction_id(),
                base + "/" + undecided.transaction_id(),
                base + "/" + loser.transaction_id(),
                BaseOf(unpublished) + "/" + unpublished.transaction_id()}));
  // Removed: the aborted transaction's 2 records, the loser's 3 (with its
  // pending manifest); the undecided ones' payloads, checksums and started
  // records.
  const uint64_t n = undecided.manifest().fragments().size();
  const uint64_t m = unpublished.manifest().fragments().size();
  EXPECT_EQ(report.keys_removed, 2 + 3 + (2 * n + 1) + (2 * m + 1));
  EXPECT_GT(report.bytes_removed, ModelBytes(src.placement));
  // Exactly the committed revision is left, and it is intact.
  EXPECT_EQ(KeySet(dir.Keys("weights/")), CommittedKeys(committed));
  EXPECT_OK(gc.Verify(committed.manifest().manifest_key()));
  Side dst = TargetSide(TpLayout(3, 4));
  LoadAndVerify(store,
                Must(store.ReadManifest(committed.manifest().manifest_key())),
                dst);
  // Nothing more to do.
  const GcReport again = Must(gc.Gc());
  EXPECT_EQ(again.keys_removed, 0u);
  EXPECT_TRUE(again.transactions_removed.empty());
  // The undecided upload lost its payloads: it cannot commit any more.
  EXPECT_EQ(store.Commit(undecided, r2).code(),
            StatusCode::kFailedPrecondition);
}

TEST_P(WeightStoreLifecycleTest, GcGraceKeepsRecentUndecidedUploads) {
  TestStore dir;
  WeightStore store = dir.Open();  // gc_grace: one hour
  auto draft = testing::GridDraft({.tp = 2});
  testing::AddTensor(&draft, {.tensor_id = "w", .shape = {8, 8}, .tp_dim = 0});
  const Side src = SourceSide(Build(draft));
  std::vector<UploadReceipt> receipts, aborted_receipts;
  const auto undecided = PrepareAndUpload(store, src, &receipts);
  const auto aborted = PrepareAndUpload(store, src, &aborted_receipts);
  MustOk(store.Abort(aborted));
  const auto before = KeySet(dir.Keys("weights/"));
  const GcReport report = Must(store.Gc());
  // The aborted one goes whatever the grace; the undecided one stays.
  EXPECT_EQ(report.transactions_removed,
            std::vector<std::string>{BaseOf(aborted) + "/" +
                                     aborted.transaction_id()});
  auto after = KeySet(dir.Keys("weights/"));
  EXPECT_EQ(after.size(), before.size() - 2);
  auto expected = CommittedKeys(undecided);
  expected.erase(undecided.manifest().manifest_key());
  expected.erase(BaseOf(undecided) + "/transactions/" +
                 undecided.transaction_id() + "/decision");
  expected.erase(BaseOf(undecided) + "/transactions/" +
                 undecided.transaction_id() + "/pending-manifest");
  EXPECT_EQ(after, expected);
  // ... and can still commit.
  MustOk(store.Commit(undecided, receipts));
  Side dst = TargetSide(src.placement);
  LoadAndVerify(store,
                Must(store.ReadManifest(undecided.manifest().manifest_key())),
                dst);
}

// The grace period runs on the store's clock: an undecided upload is
// collected exactly when it becomes older than gc_grace, with no waiting.
TEST_P(WeightStoreLifecycleTest, GcGraceRunsOnTheInjectedClock) {
  TestStore dir;
  FakeClock clock;
  WeightStore store = dir.Open(
      {.gc_grace = std::chrono::seconds(600),
       .now_seconds = clock.Source(),
       .new_transaction_id = [] { return std::string("txn-under-test"); }});
  auto draft = testing::GridDraft({.tp = 2});
  testing::AddTensor(&draft, {.tensor_id = "w", .shape = {8, 8}, .tp_dim = 0});
  const Side src = SourceSide(Build(draft));
  std::vector<UploadReceipt> receipts;
  const auto undecided = PrepareAndUpload(store, src, &receipts);
  EXPECT_EQ(undecided.transaction_id(), "txn-under-test");
  EXPECT_EQ(undecided.manifest().created_at(), "2025-12-01T09:40:00Z");
  const std::string started =
      BaseOf(undecided) + "/transactions/txn-under-test/started";
  EXPECT_EQ(Must(dir.backend().Get(started)),
            internal::StartedRecord(clock.now));
  clock.now += 599;
  EXPECT_TRUE(Must(store.Gc()).transactions_removed.empty());
  clock.now += 1;
  EXPECT_EQ(Must(store.Gc()).transactions_removed,
            std::vector<std::string>{BaseOf(undecided) + "/txn-under-test"});
  EXPECT_TRUE(dir.Keys("weights/").empty());
}

// Regression: a lease record was read with from_chars after its last '=',
// and a malformed one counted as expired, so Remove deleted a revision a
// load of another process may still hold.
TEST_P(WeightStoreLifecycleTest, MalformedLeaseBlocksRemoveNamingTheRecord) {
  TestStore dir;
  WeightStore store = dir.Open();
  const auto plan = Must(UploadAndCommit(store, SourceSide(TpLayout(1, 2))));
  const std::string key = plan.manifest().manifest_key();
  const std::string lease = BaseOf(plan) + "/leases/garbled";
  MustOk(dir.backend().Put(lease, "expires=soon"));
  // Listed as held; Remove refuses, naming the record.
  EXPECT_EQ(Must(store.List())[0].leases, 1u);
  const Status st = store.Remove(key);
  EXPECT_THAT(st, StatusIs(StatusCode::kDataLoss,
                           "malformed load lease record: " + lease));
  EXPECT_EQ(KeySet(dir.Keys(BaseOf(plan) + "/")).size(),
            CommittedKeys(plan).size() + 1);
  // An older store's lease spelling is still honoured.
  MustOk(dir.backend().Delete(lease));
  MustOk(dir.backend().Put(
      lease, "expires=" + std::to_string(internal::UnixSeconds() + 3600)));
  EXPECT_EQ(store.Remove(key).code(), StatusCode::kFailedPrecondition);
  MustOk(dir.backend().Delete(lease));
  MustOk(store.Remove(key));
}

// Regression: a started record that did not parse counted as 0 (an
// upload as old as can be), so Gc removed the payloads of an upload whose
// age it could not know. Now the upload is skipped, naming the record.
TEST_P(WeightStoreLifecycleTest, MalformedStartedRecordIsSkippedByGc) {
  TestStore dir;
  WeightStore store = dir.Open({.gc_grace = std::chrono::seconds(0)});
  std::vector<UploadReceipt> receipts;
  const auto plan =
      PrepareAndUpload(store, SourceSide(TpLayout(1, 2)), &receipts);
  const std::string started =
      BaseOf(plan) + "/transactions/" + plan.transaction_id() + "/started";
  MustOk(dir.backend().Delete(started));
  MustOk(dir.backend().Put(started, "started at noon"));
  const auto before = KeySet(dir.Keys("weights/"));
  const GcReport report = Must(store.Gc());
  EXPECT_TRUE(report.transactions_removed.empty());
  ASSERT_EQ(report.skipped.size(), 1u);
  EXPECT_EQ(report.skipped[0].key, BaseOf(plan) + "/" + plan.transaction_id());
  EXPECT_EQ(report.skipped[0].error,
            "malformed upload started record: " + started);
  EXPECT_EQ(KeySet(dir.Keys("weights/")), before);
  // The upload can still commit.
  MustOk(store.Commit(plan, receipts));
}

// Regression: Gc once treated a transaction with a commit decision but no
// manifest yet as abandoned (by the age of its upload) and removed its
// payloads while the Commit went on to publish them. A decided commit is now
// never removed: Gc rolls it forward from its pending manifest.
TEST_P(WeightStoreLifecycleTest,
       GcDuringACommitNeverBreaksThePublishedRevision) {
  TestStore dir;
  WeightStore store = dir.Open();
  const Side src = SourceSide(TpLayout(2, 2));
  std::vector<UploadReceipt> receipts;
  const auto plan = PrepareAndUpload(store, src, &receipts);
  // The upload started two hours ago.
  WeightStore gc = dir.Open({.now_seconds = [] {
    return internal::UnixSeconds() + 7200;
  }});  // default grace: one hour
  GcReport during;
  WeightStore committer = dir.Open({.on_stage = [&](std::string_view stage) {
    if (stage == "decision") during = Must(gc.Gc());
  }});
  const Status st = committer.Commit(plan, receipts);
  const std::string key = plan.manifest().manifest_key();
  if (!st.ok()) {
    // Refusing the commit would be fine: then nothing is published.
    EXPECT_EQ(store.ReadManifest(key).status().code(), StatusCode::kNotFound);
    return;
  }
  auto verified = store.Verify(key);
  EXPECT_OK(verified)
      << "Commit returned OK but the published revision lost its data to a "
         "concurrent Gc (which removed "
      << during.keys_removed << " keys)";
  Side dst = TargetSide(TpLayout(3, 4));
  auto loaded = store.Load(Must(store.ReadManifest(key)), dst.placement,
                           dst.buffers.bindings);
  EXPECT_OK(loaded);
}

// ---------------------------------------------------------------- corruption

WeightPlacementManifest RowsLayout(int64_t tp) {
  auto d = testing::GridDraft({.tp = tp});
  // [64, 32] bf16: 64-byte rows, split by rows.
  testing::AddTensor(&d, {.tensor_id = "w", .shape = {64, 32}, .tp_dim = 0});
  return Build(d);
}

TEST_P(WeightStoreCorruptionTest, FlippedByteIsDetectedWhereItIsRead) {
  TestStore dir;
  WeightStore store = dir.Open({.chunk_bytes = 64, .staging_bytes = 256});
  const Side src = SourceSide(RowsLayout(2));
  const auto plan = Must(UploadAndCommit(store, src));
  const std::string key = plan.manifest().manifest_key();
  // The second half of the rows (rows 32..63, 2048 bytes).
  const StoredFragment* b = nullptr;
  for (const auto& f : plan.manifest().fragments()) {
    if (f.global_offset[0] == 32) b = &f;
  }
  ASSERT_NE(b, nullptr);
  ASSERT_EQ(b->nbytes, 2048u);
  dir.FlipByte(b->object_key, 100);  // row 33, chunk [64, 128)
  const std::string expected = "checksum mismatch in stored fragment " +
                               b->stored_fragment_id + " (object " +
                               b->object_key + ") at bytes [64, 128)";
  auto verified = store.Verify(key);
  ASSERT_THAT(verified, StatusIs(StatusCode::kDataLoss, HasSubstr(expected)));
  // TP4 targets: t2 holds rows 32..47 (reads the bad chunk), t3 rows
  // 48..63 (reads the same object, not that chunk), t0/t1 the other object.
  const auto target = RowsLayout(4);
  for (int64_t tp = 0; tp < 4; ++tp) {
    const std::string p = testing::ParticipantId({0, tp, 0, 0});
    SCOPED_TRACE(p);
    Side dst = TargetSide(target, {p});
    auto r =
        store.Load(Must(store.ReadManifest(key)), target, dst.buffers.bindings);
    if (tp == 2) {
      ASSERT_THAT(r, StatusIs(StatusCode::kDataLoss, HasSubstr(expected)));
    } else {
      ASSERT_OK(r);
      EXPECT_EQ(internal::VerifyPattern(target, dst.tensors, dst.buffers), "");
    }
  }
  // Whole targets that touch the byte fail the same way whatever the load
  // options (loads verify in the record's chunks).
  for (const NamedOptions& o : OptionSets()) {
    SCOPED_TRACE(o.name);
    WeightStore s = dir.Open(o.options);
    for (const auto& t : {RowsLayout(1), RowsLayout(4)}) {
      Side dst = TargetSide(t);
      auto r = s.Load(Must(s.ReadManifest(key)), t, dst.buffers.bindings);
      ASSERT_THAT(r, StatusIs(StatusCode::kDataLoss, HasSubstr(expected)));
    }
  }
  // A column split reads the object through staged sweeps: same report.
  auto cols = testing::GridDraft({.tp = 4});
  testing::AddTensor(&cols, {.tensor_id = "w", .shape = {64, 32}, .tp_dim = 1});
  const auto col_target = Build(cols);
  Side dst = TargetSide(col_target);
  auto r = store.Load(Must(store.ReadManifest(key)), col_target,
                      dst.buffers.bindings);
  ASSERT_THAT(r, StatusIs(StatusCode::kDataLoss, HasSubstr(expected)));
  // The same rows read in place into the column targets are verified
  // where they landed.
  WeightStore in_place = dir.Open(
      {.chunk_bytes = 64, .staging_bytes = 256, .min_scatter_bytes = 0});
  Side dst2 = TargetSide(col_target);
  r = in_place.Load(Must(in_place.ReadManifest(key)), col_target,
                    dst2.buffers.bindings);
  ASSERT_THAT(r, StatusIs(StatusCode::kDataLoss, HasSubstr(expected)));
  // Flipping the byte back repairs the revision.
  dir.FlipByte(b->object_key, 100);
  EXPECT_OK(store.Verify(key));
}

TEST_P(WeightStoreCorruptionTest, TruncatedPayloadFailsClearly) {
  TestStore dir;
  WeightStore store = dir.Open({.chunk_bytes = 64, .staging_bytes = 256});
  const Side src = SourceSide(RowsLayout(2));
  const auto plan = Must(UploadAndCommit(store, src));
  const std::string key = plan.manifest().manifest_key();
  const StoredFragment& f = plan.manifest().fragments()[0];
  dir.Truncate(f.object_key, 1000);
  auto verified = store.Verify(key);
  ASSERT_THAT(verified,
              StatusIs(StatusCode::kDataLoss,
                       "payload " + f.object_key + " is short: 1000 bytes"));
  for (const auto& t : {RowsLayout(1), RowsLayout(4)}) {
    Side dst = TargetSide(t);
    auto r = store.Load(Must(store.ReadManifest(key)), t, dst.buffers.bindings);
    ASSERT_THAT(r, StatusIs(StatusCode::kDataLoss, HasSubstr(f.object_key)));
    EXPECT_THAT(r.status().message(), HasSubstr("is short"));
  }
}

}  // namespace
}  // namespace reshard

namespace reshard {
namespace {

// An upload spread over processes: the coordinator prepares and publishes
// the plan; one process per source participant (DP2 x TP2) reads the plan
// back from the store, uploads only its own fragments from its own binding
// and publishes its receipts; the coordinator gathers them and commits.
RESHARD_BACKEND_SUITE(WeightStoreMultiProcessTest);

TEST_P(WeightStoreMultiProcessTest, WorkersUploadFromThePublishedPlan) {
  TestStore dir;
  WeightStore store = dir.Open({.chunk_bytes = 256});
  auto draft = testing::GridDraft({.dp = 2, .tp = 2});
  testing::AddTensor(&draft,
                     {.tensor_id = "w", .shape = {64, 32}, .tp_dim = 1});
  // A second tensor: four stored fragments, each held by both replicas.
  testing::AddTensor(&draft,
                     {.tensor_id = "v", .shape = {64, 32}, .tp_dim = 1});
  const Side src = SourceSide(Build(draft));
  const UploadPlan plan =
      Must(store.PrepareUpload(src.placement, src.buffers.bindings));
  MustOk(store.PublishUploadPlan(plan));
  const std::string key = plan.manifest().manifest_key();
  std::vector<pid_t> workers;
  for (const auto& binding : src.buffers.bindings) {
    const pid_t pid = ::fork();
    if (pid == 0) {
      WeightStore mine = dir.Open();
      auto loaded = mine.ReadUploadPlan(key, plan.transaction_id());
      if (!loaded.ok()) std::_Exit(2);
      auto receipts = mine.Upload(*loaded, src.placement, binding);
      if (!receipts.ok()) std::_Exit(3);
      std::_Exit(mine.PublishReceipts(*loaded, *receipts).ok() ? 0 : 4);
    }
    workers.push_back(pid);
  }
  for (pid_t pid : workers) {
    int status = 0;
    ASSERT_EQ(::waitpid(pid, &status, 0), pid);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
  }
  // Every participant of both replicas wrote (the work is spread).
  for (const auto& b : src.buffers.bindings) {
    EXPECT_GT(plan.BytesOf(b.participant_id()), 0u) << b.participant_id();
  }
  const auto receipts = Must(store.GatherReceipts(plan));
  EXPECT_EQ(receipts.size(), plan.manifest().fragments().size());
  MustOk(store.Commit(plan, receipts));
  Side dst = TargetSide(Build([] {
    auto d = testing::GridDraft({.tp = 4});
    testing::AddTensor(&d, {.tensor_id = "w", .shape = {64, 32}, .tp_dim = 0});
    testing::AddTensor(&d, {.tensor_id = "v", .shape = {64, 32}, .tp_dim = 0});
    return d;
  }()));
  LoadAndVerify(store, Must(store.ReadManifest(key)), dst);
}

TEST_P(WeightStoreMultiProcessTest, MissingReceiptsAndBadPlansAreNamed) {
  TestStore dir;
  WeightStore store = dir.Open();
  auto draft = testing::GridDraft({.tp = 2});
  testing::AddTensor(&draft, {.tensor_id = "w", .shape = {8, 8}, .tp_dim = 0});
  const Side src = SourceSide(Build(draft));
  const UploadPlan plan =
      Must(store.PrepareUpload(src.placement, src.buffers.bindings));
  // Only the first participant publishes receipts.
  MustOk(store.PublishReceipts(
      plan,
      Must(store.Upload(plan, src.placement, src.buffers.bindings.front()))));
  auto gathered = store.GatherReceipts(plan);
  ASSERT_THAT(gathered,
              StatusIs(StatusCode::kFailedPrecondition,
                       ::testing::StartsWith("missing upload receipt: ")));
  // No plan published yet; then a plan for another transaction id.
  const std::string key = plan.manifest().manifest_key();
  EXPECT_EQ(store.ReadUploadPlan(key, plan.transaction_id()).status().code(),
            StatusCode::kNotFound);
  MustOk(store.PublishUploadPlan(plan));
  const UploadPlan back =
      Must(store.ReadUploadPlan(key, plan.transaction_id()));
  EXPECT_EQ(back.transaction_id(), plan.transaction_id());
  EXPECT_EQ(back.generation(), plan.generation());
  EXPECT_EQ(back.manifest().manifest_digest(),
            plan.manifest().manifest_digest());
  ASSERT_EQ(back.operations().size(), plan.operations().size());
  for (size_t i = 0; i < back.operations().size(); ++i) {
    EXPECT_EQ(back.operations()[i].participant_id,
              plan.operations()[i].participant_id);
    EXPECT_EQ(back.operations()[i].placement_fragment_id,
              plan.operations()[i].placement_fragment_id);
    EXPECT_EQ(back.operations()[i].stored_fragment,
              plan.operations()[i].stored_fragment);
  }
  const std::string plan_key = BaseOf(plan) + "/transactions/other/plan";
  MustOk(dir.backend().Put(plan_key, "{\"generation\":1}"));
  auto bad = store.ReadUploadPlan(key, "other");
  ASSERT_FALSE(bad.ok());
  EXPECT_THAT(bad.status().message(), ::testing::StartsWith(plan_key + ": "));
}

// Fences and contract rules on the store paths (rules 56, 65, 67; writer
// leases; memory kinds).

TEST_P(WeightStoreFenceTest, UploadRejectsAChangedLeaseOrInstance) {
  TestStore dir;
  WeightStore store = dir.Open();
  const Side src = SourceSide(TpLayout(1, 2));
  const auto plan =
      Must(store.PrepareUpload(src.placement, src.buffers.bindings));
  const auto& b = src.buffers.bindings[0];
  ASSERT_EQ(plan.writers().size(), 2u);
  EXPECT_EQ(plan.writers()[0],
            (UploadWriter{b.participant_id(), b.instance_id(), b.lease_id()}));
  auto r = store.Upload(plan, src.placement,
                        Must(WithBindingChanges(b, {.lease = "lease-2"})));
  EXPECT_THAT(
      r, StatusIs(StatusCode::kFailedPrecondition,
                  "stale source lease: participant " + b.participant_id() +
                      " holds lease lease-2 of instance " + b.instance_id() +
                      ", the upload plan was made at lease " + b.lease_id() +
                      " of instance " + b.instance_id()));
  r = store.Upload(plan, src.placement,
                   Must(WithBindingChanges(b, {.instance = "restarted"})));
  EXPECT_THAT(r, StatusIs(StatusCode::kFailedPrecondition,
                          HasSubstr("of instance restarted,")));
  EXPECT_TRUE(dir.Keys(BaseOf(plan) + "/").size() == 1);  // "started" only
}

TEST_P(WeightStoreFenceTest, NoPayloadWritesAfterAbort) {
  TestStore dir;
  WeightStore store = dir.Open();
  const Side src = SourceSide(TpLayout(1, 2));
  const auto plan =
      Must(store.PrepareUpload(src.placement, src.buffers.bindings));
  MustOk(store.Abort(plan));
  for (const auto& b : src.buffers.bindings) {
    auto r = store.Upload(plan, src.placement, b);
    EXPECT_THAT(r,
                StatusIs(StatusCode::kFailedPrecondition,
                         "weight upload transaction " + plan.transaction_id() +
                             " was aborted: no more payload writes"));
  }
  EXPECT_TRUE(dir.Keys(BaseOf(plan) + "/payload/").empty());
  EXPECT_TRUE(dir.Keys(BaseOf(plan) + "/checksums/").empty());
}

// Memory of a kind no executor moves. (CUDA memory, which the store
// stages through a device: device_staging_test.cc.)
TEST_P(WeightStoreFenceTest, UploadAndLoadRefuseMemoryTheyCannotMove) {
  TestStore dir;
  WeightStore store = dir.Open();
  const Side src = SourceSide(TpLayout(1, 2));
  const auto plan =
      Must(store.PrepareUpload(src.placement, src.buffers.bindings));
  const auto& b = src.buffers.bindings[0];
  std::string first;  // the first fragment the plan has it write
  for (const auto& op : plan.operations()) {
    if (first.empty() && op.participant_id == b.participant_id()) {
      first = op.placement_fragment_id;
    }
  }
  auto r = store.Upload(plan, src.placement,
                        Must(WithBindingChanges(b, {.device = "npu:3"})));
  EXPECT_EQ(r.status().message(),
            "store upload executor cannot move unknown memory kind: source "
            "fragment " +
                first + " of participant " + b.participant_id() +
                " (device \"npu:3\")");
  EXPECT_TRUE(dir.Keys(BaseOf(plan) + "/payload/").empty());

  const auto committed = Must(UploadAndCommit(store, src));
  Side dst = TargetSide(TpLayout(1, 4));
  std::vector<WeightRuntimeBindingManifest> npu;
  for (const auto& t : dst.buffers.bindings) {
    npu.push_back(Must(WithBindingChanges(t, {.device = "npu:0"})));
  }
  auto loaded = store.Load(committed.manifest(), dst.placement, npu);
  EXPECT_THAT(loaded, StatusIs(StatusCode::kFailedPrecondition,
                               StartsWith("store load executor cannot move "
                                          "unknown memory kind: target "
                                          "fragment ")));
  // Nothing was written into the (host) buffers behind the bindings.
  for (const auto& [id, p] : dst.buffers.data) {
    EXPECT_EQ(p[0], 0xD7) << id;
  }
}

TEST_P(WeightStoreFenceTest, LoadWithNoOperationsIsAnError) {
  TestStore dir;
  WeightStore store = dir.Open();
  const Side src = SourceSide(TpLayout(1, 2));
  const auto plan = Must(UploadAndCommit(store, src));
  const Side dst = TargetSide(TpLayout(1, 4));
  auto r = store.Load(plan.manifest(), dst.placement, {});
  EXPECT_THAT(r, StatusIs(StatusCode::kInvalidArgument,
                          StartsWith("load plan has no operations")));
}

// Rule 56: two aliased target views at one address may be written twice
// only from one source alias group; a stored source never authorises it.
TEST_P(WeightStoreFenceTest, StoredSourceNeverAuthorisesTargetAliasSharing) {
  auto tied = [] {
    auto d = testing::GridDraft({});
    const std::vector<std::string> group = {"embed_tokens.weight",
                                            "lm_head.weight"};
    testing::AddTensor(
        &d,
        {.tensor_id = "embed_tokens.weight", .shape = {32}, .aliases = group});
    testing::AddTensor(
        &d, {.tensor_id = "lm_head.weight", .shape = {32}, .aliases = group});
    return Build(d);
  };
  TestStore dir;
  WeightStore store = dir.Open();
  const Side src = SourceSide(tied());
  const auto plan = Must(UploadAndCommit(store, src));
  const WeightPlacementManifest target = tied();
  std::vector<uint8_t> memory(64, 0xD7);
  const auto address = reinterpret_cast<uint64_t>(memory.data());
  ASSERT_EQ(target.parts().size(), 1u);
  const auto binding =
      Must(testing::BindingBuilder(target)
               .Instance("target-instance")
               .Lease("lease")
               .AddressOf([&](const PlacementFragment&) { return address; })
               .Build())
          .at(0);
  ASSERT_OK(
      ValidateRuntimeBindings(target, {binding}, BindingCoverage::kSubset));
  auto r = store.Load(plan.manifest(), target, {binding});
  EXPECT_THAT(r, StatusIs(StatusCode::kFailedPrecondition,
                          StartsWith("conflicting target physical range: ")));
}

// Rule 65 on a published upload plan: each stored fragment written once,
// into objects the transaction owns; operations read the stored box.
TEST_P(WeightStoreFenceTest, TamperedUploadPlansAreRefused) {
  TestStore dir;
  WeightStore store = dir.Open();
  auto draft = testing::GridDraft({.tp = 2});
  testing::AddTensor(&draft, {.tensor_id = "a", .shape = {8, 8}, .tp_dim = 0});
  testing::AddTensor(&draft, {.tensor_id = "b", .shape = {8, 8}, .tp_dim = 0});
  const Side src = SourceSide(Build(draft));
  const UploadPlan plan =
      Must(store.PrepareUpload(src.placement, src.buffers.bindings));
  MustOk(store.PublishUploadPlan(plan));
  const std::string key = plan.manifest().manifest_key();
  const std::string plan_key =
      BaseOf(plan) + "/transactions/" + plan.transaction_id() + "/plan";
  const std::string good = Must(dir.backend().Get(plan_key));
  auto with = [&](const std::string& text) {
    MustOk(dir.backend().Delete(plan_key));
    MustOk(dir.backend().Put(plan_key, text));
    return store.ReadUploadPlan(key, plan.transaction_id());
  };
  auto replace = [](std::string text, const std::string& from,
                    const std::string& to) {
    const size_t at = text.find(from);
    if (at == std::string::npos) throw std::runtime_error("no " + from);
    return text.replace(at, from.size(), to);
  };
  // Two operations writing stored fragment 0.
  auto dup =
      with(replace(good, "\"stored_fragment\":1}", "\"stored_fragment\":0}"));
  EXPECT_EQ(dup.status().message(),
            plan_key + ": upload plan writes stored fragment " +
                plan.manifest().fragments()[0].stored_fragment_id + " twice");
  // No writer records: operations without a fenced writer.
  auto nowriter =
      with(good.substr(0, good.find("\"writers\":[")) + "\"writers\":[]}");
  EXPECT_EQ(nowriter.status().message(),
            plan_key + ": upload operation of participant " +
                plan.operations()[0].participant_id + " has no writer record");
  // Operations of one participant that swap their placement fragments: the
  // bytes of one box would be stored under the other's id.
  std::map<std::string, std::vector<size_t>> by_participant;
  for (size_t i = 0; i < plan.operations().size(); ++i) {
    by_participant[plan.operations()[i].participant_id].push_back(i);
  }
  const auto& mine = by_participant.begin()->second;
  ASSERT_GE(mine.size(), 2u);
  const std::string fa = plan.operations()[mine[0]].placement_fragment_id;
  const std::string fb = plan.operations()[mine[1]].placement_fragment_id;
  std::string swapped = replace(good, fa, "@@");
  swapped = replace(swapped, fb, fa);
  swapped = replace(swapped, "@@", fb);
  const UploadPlan tampered = Must(with(swapped));
  for (const auto& b : src.buffers.bindings) {
    if (b.participant_id() != by_participant.begin()->first) continue;
    auto r = store.Upload(tampered, src.placement, b);
    EXPECT_THAT(
        r, StatusIs(StatusCode::kInvalidArgument,
                    StartsWith("upload operation source and stored fragment "
                               "geometry differ: ")));
  }
  EXPECT_TRUE(dir.Keys(BaseOf(plan) + "/payload/").empty());
}

}  // namespace
}  // namespace reshard
