// CheckedBindings: each binding is checked once by Make; Merge, Replace and
// Only check no binding they already hold, only the set rules; consumers
// learn from RequireFor whether a set was checked for their placement.

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <map>
#include <string>
#include <vector>

#include "contract/binding_checks.h"
#include "reshard/binding.h"
#include "testing/must.h"
#include "testing/placement_builders.h"
#include "testing/status_testing.h"

namespace reshard {
namespace {

using ::reshard::testing::BindingChanges;
using ::reshard::testing::CubeLayout;
using ::reshard::testing::FakeBindings;
using ::reshard::testing::Must;
using ::reshard::testing::StatusIs;
using ::reshard::testing::WithBindingChanges;

// Counts the bindings checked while it lives, by participant.
class CheckCounter {
 public:
  CheckCounter() {
    internal::SetBindingCheckObserverForTesting(
        [this](const WeightRuntimeBindingManifest& b) {
          ++counts_[b.participant_id()];
        });
  }
  ~CheckCounter() { internal::SetBindingCheckObserverForTesting(nullptr); }
  std::map<std::string, int> Take() { return std::exchange(counts_, {}); }

 private:
  std::map<std::string, int> counts_;
};

class CheckedBindingsTest : public ::testing::Test {
 protected:
  const WeightPlacementManifest placement_ = CubeLayout(2, 0, {4, 4});
  const std::vector<WeightRuntimeBindingManifest> bindings_ =
      FakeBindings(placement_);
  const std::string p0_ = bindings_[0].participant_id();
  const std::string p1_ = bindings_[1].participant_id();
};

TEST_F(CheckedBindingsTest, MakeChecksEachBindingOnceAndCarriesItsProof) {
  CheckCounter counter;
  const CheckedBindings checked = Must(CheckedBindings::Make(
      placement_, bindings_, BindingCoverage::kEveryOwner));
  EXPECT_EQ(counter.Take(), (std::map<std::string, int>{{p0_, 1}, {p1_, 1}}));
  EXPECT_EQ(checked.placement_id(), placement_.placement_id());
  EXPECT_EQ(checked.placement_digest(), placement_.digest());
  EXPECT_EQ(checked.coverage(), BindingCoverage::kEveryOwner);
  ASSERT_EQ(checked.bindings().size(), 2u);
  EXPECT_EQ(checked.Find(p1_)->participant_id(), p1_);
  EXPECT_EQ(checked.Find("nobody"), nullptr);
  EXPECT_OK(checked.RequireFor(placement_));
  // Copies share the proof; nothing is checked again.
  const CheckedBindings copy = checked;
  EXPECT_OK(copy.RequireFor(placement_));
  EXPECT_EQ(counter.Take(), (std::map<std::string, int>{}));
}

TEST_F(CheckedBindingsTest, MakeRefusesWhatValidateRefuses) {
  EXPECT_THAT(CheckedBindings::Make(placement_, {bindings_[0]}),
              StatusIs(StatusCode::kInvalidArgument,
                       "missing runtime binding participant: " + p1_));
  EXPECT_OK(CheckedBindings::Make(placement_, {bindings_[0]},
                                  BindingCoverage::kSubset));
  EXPECT_THAT(ValidateRuntimeBindings(placement_, {bindings_[0]}),
              StatusIs(StatusCode::kInvalidArgument,
                       "missing runtime binding participant: " + p1_));
}

TEST_F(CheckedBindingsTest, RequireForNamesBothPlacements) {
  const auto other = CubeLayout(2, 1, {4, 4});
  const CheckedBindings checked =
      Must(CheckedBindings::Make(placement_, bindings_));
  EXPECT_THAT(checked.RequireFor(other),
              StatusIs(StatusCode::kInvalidArgument,
                       "runtime bindings were checked for placement " +
                           placement_.placement_id() + ", not " +
                           other.placement_id()));
}

TEST_F(CheckedBindingsTest, MergeChecksOnlyTheSetRules) {
  const CheckedBindings a = Must(CheckedBindings::Make(
      placement_, {bindings_[0]}, BindingCoverage::kSubset));
  const CheckedBindings b = Must(CheckedBindings::Make(
      placement_, {bindings_[1]}, BindingCoverage::kSubset));
  CheckCounter counter;
  const CheckedBindings all = Must(CheckedBindings::Merge(placement_, {a, b}));
  EXPECT_EQ(counter.Take(), (std::map<std::string, int>{}));
  EXPECT_EQ(all.bindings().size(), 2u);
  EXPECT_EQ(all.coverage(), BindingCoverage::kEveryOwner);
  // The set rules still hold across the sets.
  EXPECT_THAT(CheckedBindings::Merge(placement_, {a, a}),
              StatusIs(StatusCode::kInvalidArgument,
                       "duplicate runtime binding participant: " + p0_));
  EXPECT_THAT(CheckedBindings::Merge(placement_, {a}),
              StatusIs(StatusCode::kInvalidArgument,
                       "missing runtime binding participant: " + p1_));
  // Only sets checked for this placement.
  const auto other = CubeLayout(2, 1, {4, 4});
  EXPECT_THAT(CheckedBindings::Merge(other, {a}, BindingCoverage::kSubset),
              StatusIs(StatusCode::kInvalidArgument,
                       "runtime bindings were checked for placement " +
                           placement_.placement_id() + ", not " +
                           other.placement_id()));
}

TEST_F(CheckedBindingsTest, MergeFindsBuffersSharedAcrossSets) {
  // p1's views at p0's addresses, in the same address space.
  auto spec = testing::SpecOf(bindings_[1]);
  spec.instance_id = bindings_[0].instance_id();
  for (size_t i = 0; i < spec.fragments.size(); ++i) {
    auto f = testing::SpecOf(spec.fragments[i]);
    const auto& g = bindings_[0].fragments()[i];
    f.address = g.address();
    f.storage_address = g.storage_address();
    f.worker_id = g.worker_id();
    spec.fragments[i] = Must(RuntimeBindingFragment::Make(f));
  }
  const auto shared = Must(WeightRuntimeBindingManifest::Make(spec));
  const CheckedBindings a = Must(CheckedBindings::Make(
      placement_, {bindings_[0]}, BindingCoverage::kSubset));
  const CheckedBindings b = Must(
      CheckedBindings::Make(placement_, {shared}, BindingCoverage::kSubset));
  EXPECT_THAT(CheckedBindings::Merge(placement_, {a, b}),
              StatusIs(StatusCode::kInvalidArgument,
                       ::testing::StartsWith(
                           "runtime binding address ranges overlap: ")));
}

TEST_F(CheckedBindingsTest, ReplaceChecksOnlyWhatChanged) {
  const CheckedBindings checked =
      Must(CheckedBindings::Make(placement_, bindings_));
  const auto moved = Must(WithBindingChanges(
      bindings_[1], BindingChanges{.address_shift = uint64_t{1} << 32}));
  CheckCounter counter;
  // The same bindings: nothing is checked.
  const CheckedBindings same = Must(checked.Replace(placement_, bindings_));
  EXPECT_EQ(counter.Take(), (std::map<std::string, int>{}));
  EXPECT_EQ(same.bindings().size(), 2u);
  // One moved: only it.
  const CheckedBindings now =
      Must(checked.Replace(placement_, {bindings_[0], moved}));
  EXPECT_EQ(counter.Take(), (std::map<std::string, int>{{p1_, 1}}));
  EXPECT_EQ(now.Find(p1_)->fragments()[0].address(),
            moved.fragments()[0].address());
  EXPECT_EQ(now.coverage(), BindingCoverage::kEveryOwner);
  // A moved binding that breaks a rule is refused.
  auto spec = testing::SpecOf(bindings_[1]);
  spec.placement_id = "p-other";
  const auto wrong = Must(WeightRuntimeBindingManifest::Make(spec));
  EXPECT_THAT(checked.Replace(placement_, {wrong}),
              StatusIs(StatusCode::kInvalidArgument,
                       "placement_id and runtime binding placement_id differ "
                       "(participant " +
                           p1_ + ")"));
}

TEST_F(CheckedBindingsTest, OnlyKeepsTheNamedParticipantsWithoutChecks) {
  const CheckedBindings checked =
      Must(CheckedBindings::Make(placement_, bindings_));
  CheckCounter counter;
  const CheckedBindings one = checked.Only({p1_, "nobody"});
  EXPECT_EQ(counter.Take(), (std::map<std::string, int>{}));
  ASSERT_EQ(one.bindings().size(), 1u);
  EXPECT_EQ(one.bindings()[0].participant_id(), p1_);
  EXPECT_EQ(one.coverage(), BindingCoverage::kSubset);
  EXPECT_OK(one.RequireFor(placement_));
}

}  // namespace
}  // namespace reshard
