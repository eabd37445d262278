// Tied weights at bind time: aliased target views sharing one range are written
// twice, which Bind allows only when the source declares the same alias group
// and both views share a lease scope.

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "reshard/bound_plan.h"
#include "testing/placement_builders.h"
#include "testing/status_testing.h"

namespace reshard {
namespace {

using testing::AddTensor;
using testing::GridDraft;

const std::vector<std::string> kGroup = {"embed_tokens.weight",
                                         "lm_head.weight"};

// embed on one PP stage and lm_head on the other (or both on one stage).
WeightPlacementManifest Tied(int64_t pp, bool aliased) {
  auto d = GridDraft({1, pp, 1, 1});
  const auto group = aliased ? kGroup : std::vector<std::string>{};
  AddTensor(&d, {.tensor_id = "embed_tokens.weight",
                 .shape = {32},
                 .pp_owner = pp > 1 ? 0 : -1,
                 .aliases = group});
  AddTensor(&d, {.tensor_id = "lm_head.weight",
                 .shape = {32},
                 .pp_owner = pp > 1 ? 1 : -1,
                 .aliases = group});
  return *d.Build();
}

// Bindings that put every fragment of `m` at one address in one instance,
// with lease `lease_of(participant)`.
std::vector<WeightRuntimeBindingManifest> SharedRange(
    const WeightPlacementManifest& m,
    std::function<std::string(const std::string&)> lease_of) {
  return testing::BindingBuilder(m)
      .Instance("target-instance")
      .LeaseOf(std::move(lease_of))
      .AddressOf([](const PlacementFragment&) { return 0x900000; })
      .AdjustEach([](const std::string&, RuntimeBindingFragmentSpec* r) {
        r->worker_id = "gpu-host";
      })
      .Build()
      .ValueOrDie();
}

Result<BoundTransferPlan> BindTied(
    const WeightPlacementManifest& source,
    const WeightPlacementManifest& target,
    const std::vector<WeightRuntimeBindingManifest>& target_bindings) {
  auto plan = LogicalTransferPlan::Make(source, target);
  if (!plan.ok()) return plan.status();
  return BoundTransferPlan::Bind(*plan, source, testing::FakeBindings(source),
                                 target, target_bindings);
}

TEST(AliasBindTest, IdenticalPhysicalCopiesKeepTwoOperations) {
  auto source = Tied(2, true);
  auto target = Tied(1, true);
  auto bound = BindTied(source, target,
                        SharedRange(target, [](auto&) { return "lease"; }));
  ASSERT_OK(bound);
  EXPECT_EQ(bound->regions().size(), 2u);
  EXPECT_EQ(bound->bytes(), 128u);
  EXPECT_EQ(bound->regions()[0].target_address,
            bound->regions()[1].target_address);
}

TEST(AliasBindTest, SourceWithoutTheAliasGroupCannotShareATargetRange) {
  auto source = Tied(2, false);
  auto target = Tied(1, true);
  auto bound = BindTied(source, target,
                        SharedRange(target, [](auto&) { return "lease"; }));
  EXPECT_THAT(bound.status().message(),
              ::testing::AllOf(
                  ::testing::StartsWith("conflicting target physical range: "),
                  ::testing::EndsWith("(aliased target views need the same "
                                      "alias group on the source)")));
}

TEST(AliasBindTest, AliasesAcrossPipelineStagesShareOneLease) {
  auto source = Tied(2, true);
  auto target = Tied(2, true);
  EXPECT_OK(BindTied(source, target,
                     SharedRange(target, [](auto&) { return "lease"; })));
  auto bound =
      BindTied(source, target,
               SharedRange(target, [](auto& p) { return "lease-of-" + p; }));
  EXPECT_THAT(bound.status().message(),
              ::testing::EndsWith("(aliased target views in different lease "
                                  "scopes)"));
}

}  // namespace
}  // namespace reshard
