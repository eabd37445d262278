// Each runtime binding is checked once per operation: a store upload
// (prepare, write, commit; and a shared upload), a local reshard (and a
// converting one, whose staging bindings are checked once too), a store
// load and a live session's open; a live rebind checks only the bindings
// that moved. The contract layer's check observer counts every binding
// checked (rules 30-36), so a second check anywhere on these paths fails
// these tests.

#include "contract/binding_checks.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "reshard/api.h"
#include "reshard/backends/fs_store.h"
#include "reshard/live.h"
#include "reshard/weight_store.h"
#include "testing/memory_object_store.h"
#include "testing/must.h"
#include "testing/placement_builders.h"
#include "testing/status_testing.h"
#include "testing/temp_dir.h"

namespace reshard {
namespace {

using ::reshard::testing::CubeLayout;
using ::reshard::testing::Must;

using Counts = std::map<std::string, int>;

// A binding's key: its placement, instance and participant.
std::string KeyOf(const std::string& placement_id, const std::string& instance,
                  const std::string& participant_id) {
  return placement_id + "|" + instance + "/" + participant_id;
}

// Counts the bindings checked while it lives, by KeyOf.
class CheckCounter {
 public:
  CheckCounter() {
    internal::SetBindingCheckObserverForTesting(
        [this](const WeightRuntimeBindingManifest& b) {
          std::lock_guard<std::mutex> lock(mu_);
          ++counts_[KeyOf(b.placement_id(), b.instance_id(),
                          b.participant_id())];
        });
  }
  ~CheckCounter() { internal::SetBindingCheckObserverForTesting(nullptr); }
  CheckCounter(const CheckCounter&) = delete;
  CheckCounter& operator=(const CheckCounter&) = delete;

  // The counts so far; starts counting afresh.
  Counts Take() {
    std::lock_guard<std::mutex> lock(mu_);
    Counts out;
    out.swap(counts_);
    return out;
  }

 private:
  std::mutex mu_;
  Counts counts_;
};

// Host memory for every fragment of a placement, bound under `instance`.
struct Memory {
  Memory(const WeightPlacementManifest& placement, std::string instance)
      : placement(placement), instance(std::move(instance)) {
    for (const PlacementFragment* f : placement.fragments()) {
      bytes[f->placement_fragment_id()].assign(f->nbytes(), 0);
    }
  }

  CheckedBindings Bind() {
    BufferBindingOptions o;
    o.instance_id = instance;
    o.worker_id = instance;
    return Must(BindAllBuffers(
        placement,
        [this](std::string_view id) -> void* {
          return bytes.at(std::string(id)).data();
        },
        o));
  }

  // Every participant once, under this memory's instance.
  Counts Once() const {
    Counts out;
    for (const WeightPlacementPart& p : placement.parts()) {
      if (!p.fragments().empty()) {
        out[KeyOf(placement.placement_id(), instance, p.participant_id())] = 1;
      }
    }
    return out;
  }

  const WeightPlacementManifest& placement;
  std::string instance;
  std::map<std::string, std::vector<uint8_t>> bytes;
};

Counts Sum(Counts a, const Counts& b) {
  for (const auto& [k, v] : b) a[k] += v;
  return a;
}

// A session of one rank named `session`.
LiveSessionOptions OneRank(std::string session) {
  LiveSessionOptions o;
  o.session = std::move(session);
  o.rank = 0;
  o.ranks = 1;
  o.timeout = std::chrono::seconds(10);
  return o;
}

class BindingChecksTest : public ::testing::Test {
 protected:
  const WeightPlacementManifest source_ = CubeLayout(2, 0, {4, 4});
  const WeightPlacementManifest target_ = CubeLayout(2, 1, {4, 4});
};

TEST_F(BindingChecksTest, LocalReshardChecksEachBindingOnce) {
  CheckCounter counter;
  Memory src(source_, "source");
  Memory dst(target_, "target");
  // Bound and checked once each, then resharded without a second check.
  const CheckedBindings sb = src.Bind();
  const CheckedBindings tb = dst.Bind();
  ASSERT_OK(Reshard(source_, sb, target_, tb));
  EXPECT_EQ(counter.Take(), Sum(src.Once(), dst.Once()));
  // Plain bindings (say, decoded from their wire form) are checked once,
  // by Reshard.
  ASSERT_OK(Reshard(source_, sb.bindings(), target_, tb.bindings()));
  EXPECT_EQ(counter.Take(), Sum(src.Once(), dst.Once()));
}

TEST_F(BindingChecksTest, ConvertingReshardChecksEachBindingOnce) {
  // float16 -> bfloat16: the targets are filled through staging buffers,
  // bindings of the staging placement, each checked once when bound.
  auto layout = [](int64_t tp, const std::string& dtype) {
    auto draft = testing::GridDraft({1, 1, 1, tp});
    testing::AddTensor(&draft, {.tensor_id = "w",
                                .shape = {8, 8},
                                .dtype = dtype,
                                .itemsize = 2,
                                .tp_dim = 0});
    return Must(draft.Build());
  };
  const auto source = layout(2, "float16");
  const auto target = layout(4, "bfloat16");
  CheckCounter counter;
  Memory src(source, "source");
  Memory dst(target, "target");
  const CheckedBindings sb = src.Bind();
  const CheckedBindings tb = dst.Bind();
  ReshardOptions options;
  options.plan.convert = true;
  ASSERT_OK(Reshard(source, sb, target, tb, options));
  const Counts counts = counter.Take();
  Counts expected = Sum(src.Once(), dst.Once());
  const auto plan =
      Must(LogicalTransferPlan::Make(source, target, options.plan));
  ASSERT_NE(plan.conversion(), nullptr);
  for (const WeightPlacementPart& p : target.parts()) {
    expected[KeyOf(plan.conversion()->staging().placement_id(), "target",
                   p.participant_id())] = 1;
  }
  EXPECT_EQ(counts, expected);
}

TEST_F(BindingChecksTest, StoreUploadAndLoadCheckEachBindingOnce) {
  CheckCounter counter;
  auto store =
      Must(WeightStore::Open(std::make_shared<testing::MemoryObjectStore>()));
  Memory src(source_, "source");
  const CheckedBindings sb = src.Bind();
  const UploadPlan plan = Must(store.PrepareUpload(source_, sb));
  const auto receipts = Must(store.Upload(plan, source_, sb));
  ASSERT_OK(store.Commit(plan, receipts));
  EXPECT_EQ(counter.Take(), src.Once());

  Memory dst(target_, "target");
  const CheckedBindings tb = dst.Bind();
  ASSERT_OK(store.Load(plan.manifest(), target_, tb));
  EXPECT_EQ(counter.Take(), dst.Once());
  // Plain bindings: checked once, by Load.
  ASSERT_OK(store.Load(plan.manifest(), target_, tb.bindings()));
  EXPECT_EQ(counter.Take(), dst.Once());
}

TEST_F(BindingChecksTest, SharedUploadChecksEachBindingOnce) {
  CheckCounter counter;
  auto store =
      Must(WeightStore::Open(std::make_shared<testing::MemoryObjectStore>()));
  Memory src(source_, "source");
  // Bound and checked once, then uploaded without a second check.
  const CheckedBindings checked = src.Bind();
  ShareUploadOptions o;
  o.upload_id = "checked";
  o.rank = 0;
  o.ranks = 1;
  ASSERT_OK(store.UploadShare(source_, checked, o));
  EXPECT_EQ(counter.Take(), src.Once());
  // Plain bindings: checked once, by UploadShare (into another store: the
  // revision is published already).
  auto other =
      Must(WeightStore::Open(std::make_shared<testing::MemoryObjectStore>()));
  ASSERT_OK(other.UploadShare(source_, checked.bindings(), o));
  EXPECT_EQ(counter.Take(), src.Once());
}

TEST_F(BindingChecksTest, LiveOpenChecksOnceAndARebindOnlyWhatMoved) {
  CheckCounter counter;
  testing::TempDir dir("reshard-binding-checks");
  auto records = Must(OpenDirectoryRecordStore(dir.path()));
  Memory src(source_, "source");
  Memory dst(target_, "target");
  // Checked when bound, and not again by Open, which checks only what
  // another rank would have published.
  LiveBindings bindings = LiveBindings::Of(src.Bind(), dst.Bind());
  const LiveSessionOptions o = OneRank("checks");
  auto session =
      Must(LiveSession::Open(*records, source_, target_, bindings, o));
  EXPECT_EQ(counter.Take(), Sum(src.Once(), dst.Once()));
  ASSERT_OK(session->Update(1));
  EXPECT_EQ(counter.Take(), Counts{});

  // One target participant's buffers move: described without a check,
  // only its binding is checked, by Update.
  Memory moved(target_, "target");
  LiveBindings now{bindings.sources, bindings.targets};
  const WeightRuntimeBindingManifest& old = bindings.targets[1];
  std::map<std::string, void*> buffers;
  for (const auto& f : old.fragments()) {
    buffers[f.placement_fragment_id()] =
        moved.bytes.at(f.placement_fragment_id()).data();
  }
  now.targets[1] =
      Must(DescribeBuffers(target_, old.participant_id(), buffers,
                           {.instance_id = "target", .worker_id = "target"}));
  EXPECT_EQ(counter.Take(), Counts{});
  const LiveUpdateReport report = Must(session->Update(2, &now));
  EXPECT_TRUE(report.rebound);
  EXPECT_EQ(
      counter.Take(),
      (Counts{
          {KeyOf(target_.placement_id(), "target", old.participant_id()), 1}}));
  ASSERT_OK(session->Close());
}

TEST_F(BindingChecksTest, LiveOpenChecksPlainBindingsOnce) {
  // Bindings without a proof (say, decoded from their wire form): Open
  // checks each once, with the other ranks'.
  Memory src(source_, "source");
  Memory dst(target_, "target");
  LiveBindings bindings{src.Bind().bindings(), dst.Bind().bindings()};
  CheckCounter counter;
  testing::TempDir dir("reshard-binding-checks");
  auto records = Must(OpenDirectoryRecordStore(dir.path()));
  const LiveSessionOptions o = OneRank("plain");
  auto session =
      Must(LiveSession::Open(*records, source_, target_, bindings, o));
  EXPECT_EQ(counter.Take(), Sum(src.Once(), dst.Once()));
  ASSERT_OK(session->Close());
}

TEST_F(BindingChecksTest, LiveOpenRefusesAProofForAnotherPlacement) {
  Memory src(source_, "source");
  Memory dst(target_, "target");
  // The target's proof handed over as the source's.
  const CheckedBindings targets = dst.Bind();
  LiveBindings bindings{src.Bind().bindings(), targets.bindings(), targets,
                        targets};
  testing::TempDir dir("reshard-binding-checks");
  auto records = Must(OpenDirectoryRecordStore(dir.path()));
  const LiveSessionOptions o = OneRank("proof");
  EXPECT_THAT(
      LiveSession::Open(*records, source_, target_, bindings, o).status(),
      testing::StatusIs(StatusCode::kInvalidArgument,
                        "live session proof, rank 0: source bindings: "
                        "runtime bindings were checked for "
                        "placement " +
                            target_.placement_id() + ", not " +
                            source_.placement_id()));
}

}  // namespace
}  // namespace reshard
