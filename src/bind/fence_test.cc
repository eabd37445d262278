// The execution-time generation and lease fence (rules 57-60):
// BoundTransferPlan::CheckCurrent against the bindings seen right before a
// transfer runs.

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "reshard/bound_plan.h"
#include "testing/placement_builders.h"

namespace reshard {
namespace {

using testing::AddTensor;
using testing::GridDraft;

class FenceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto s = GridDraft({1, 1, 1, 2});
    AddTensor(&s, {.tensor_id = "w", .shape = {8, 4}, .tp_dim = 0});
    auto t = GridDraft({1, 1, 1, 2});
    AddTensor(&t, {.tensor_id = "w", .shape = {8, 4}, .tp_dim = 1});
    source_ = *s.Build();
    target_ = *t.Build();
    // Distinct instances keep source and target address spaces apart.
    sources_ = Rename(testing::FakeBindings(*source_, 3), "src");
    targets_ = Rename(testing::FakeBindings(*target_, 5), "dst");
    auto plan = LogicalTransferPlan::Make(*source_, *target_);
    bound_ =
        *BoundTransferPlan::Bind(*plan, *source_, sources_, *target_, targets_);
  }

  static std::vector<WeightRuntimeBindingManifest> Rename(
      const std::vector<WeightRuntimeBindingManifest>& in,
      const std::string& prefix, uint64_t generation = 0,
      const std::string& lease = "", uint64_t shift = 0) {
    std::vector<WeightRuntimeBindingManifest> out;
    for (const auto& b : in) {
      WeightRuntimeBindingManifestSpec s{
          b.resource_id(),
          b.placement_id(),
          b.placement_digest(),
          prefix + "-" + b.instance_id(),
          generation == 0 ? b.generation() : generation,
          lease.empty() ? b.lease_id() : lease,
          b.revision(),
          b.participant_id(),
          {}};
      for (const auto& f : b.fragments()) {
        RuntimeBindingFragmentSpec r{f.placement_fragment_id(),
                                     f.runtime_fragment_id(),
                                     f.address() + shift,
                                     f.nbytes(),
                                     f.worker_id(),
                                     f.endpoint(),
                                     f.device(),
                                     f.itemsize(),
                                     f.local_shape(),
                                     f.strides_bytes(),
                                     f.storage_address() + shift,
                                     f.storage_nbytes(),
                                     f.storage_offset_bytes(),
                                     nullptr};
        s.fragments.push_back(*RuntimeBindingFragment::Make(r));
      }
      out.push_back(*WeightRuntimeBindingManifest::Make(s));
    }
    return out;
  }

  std::optional<WeightPlacementManifest> source_, target_;
  std::vector<WeightRuntimeBindingManifest> sources_, targets_;
  std::optional<BoundTransferPlan> bound_;
};

TEST_F(FenceTest, UnchangedBindingsPass) {
  EXPECT_TRUE(bound_->CheckCurrent(sources_, targets_).ok());
}

TEST_F(FenceTest, StaleGenerationIsRejected) {
  auto newer = Rename(testing::FakeBindings(*target_, 6), "dst");
  EXPECT_EQ(bound_->CheckCurrent(sources_, newer).message(),
            "acquired runtime binding generation differs from plan: target "
            "participant p-d0-p0-e0-t0: planned 5, current 6");
  EXPECT_EQ(bound_->CheckCurrent(sources_, newer).code(),
            StatusCode::kFailedPrecondition);
}

TEST_F(FenceTest, RevokedLeaseIsRejected) {
  auto released =
      Rename(testing::FakeBindings(*source_, 3), "src", 0, "lease-2");
  EXPECT_EQ(bound_->CheckCurrent(released, targets_).message(),
            "acquired runtime binding lease_id differs from plan: source "
            "participant p-d0-p0-e0-t0: planned lease-1, current lease-2");
  // A participant whose binding disappeared (lease revoked, process gone).
  std::vector<WeightRuntimeBindingManifest> partial(sources_.begin() + 1,
                                                    sources_.end());
  EXPECT_EQ(bound_->CheckCurrent(partial, targets_).message(),
            "acquired source runtime binding is missing for participant "
            "p-d0-p0-e0-t0 (lease revoked?)");
}

TEST_F(FenceTest, NewInstanceIsRejected) {
  auto restarted = Rename(testing::FakeBindings(*source_, 3), "src2");
  EXPECT_THAT(bound_->CheckCurrent(restarted, targets_).message(),
              ::testing::StartsWith(
                  "acquired runtime binding instance_id differs from plan: "
                  "source participant p-d0-p0-e0-t0: planned src-instance-"));
}

TEST_F(FenceTest, MovedAddressIsAStaleFragment) {
  auto moved = Rename(testing::FakeBindings(*target_, 5), "dst", 0, "", 4096);
  const std::string first =
      targets_.front().fragments().front().placement_fragment_id();
  EXPECT_EQ(bound_->CheckCurrent(sources_, moved).message(),
            "stale target fragment: " + first);
}

}  // namespace
}  // namespace reshard
