// BoundTransferPlan::Bind (rules 49-56 of docs/validation-rules.md as far as
// this library implements them): absolute addresses from the bindings,
// plan/placement identity, required bindings, binding validation with side
// context, the in-place (overlapping source and target storage) rejection per
// address space, and re-binding after an address change without re-planning.

#include "reshard/bound_plan.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <stdexcept>
#include <string>
#include <tuple>
#include <vector>

#include "reshard/binding.h"
#include "reshard/placement.h"
#include "reshard/plan.h"
#include "testing/must.h"
#include "testing/placement_builders.h"
#include "testing/status_testing.h"

namespace reshard {
namespace {

using ::reshard::testing::AddTensor;
using ::reshard::testing::BindingBuilder;
using ::reshard::testing::GridDraft;
using ::reshard::testing::Must;
using ::reshard::testing::PlacementDraft;
using ::reshard::testing::Sizes;
using ::reshard::testing::SpecOf;
using ::reshard::testing::StatusIs;
using ::reshard::testing::TensorLayout;
using ::testing::EndsWith;
using ::testing::StartsWith;

template <typename T>
std::string ErrorOf(const Result<T>& r) {
  return r.ok() ? std::string("<ok>") : r.status().message();
}

// The same three tensors laid out on `sizes`; `target` changes the split
// dimensions.
WeightPlacementManifest Layout(Sizes sizes, bool target) {
  PlacementDraft d = GridDraft(sizes);
  TensorLayout w{.tensor_id = "w", .shape = {12, 6}};
  w.tp_dim = target ? 1 : 0;
  AddTensor(&d, w);
  TensorLayout v{
      .tensor_id = "v", .shape = {4, 6, 12}, .dtype = "float32", .itemsize = 4};
  v.tp_dim = target ? 1 : 2;
  AddTensor(&d, v);
  TensorLayout r{.tensor_id = "r", .shape = {12}};
  r.tp_dim = target ? 0 : -1;
  AddTensor(&d, r);
  return Must(d.Build());
}

// DP2 x TP2 -> TP3, crossing split dimensions.
WeightPlacementManifest Source() {
  return Layout(Sizes{.dp = 2, .tp = 2}, false);
}
WeightPlacementManifest Target() { return Layout(Sizes{.tp = 3}, true); }

using Adjust = BindingBuilder::Adjust;

// One binding per participant with fragments, every fragment in its own
// allocation at `base`, `base + stride`, ... (in participant, then fragment
// id order). `addresses` receives each fragment's address.
std::vector<WeightRuntimeBindingManifest> Bindings(
    const WeightPlacementManifest& m, const std::string& instance,
    uint64_t base, std::map<std::string, uint64_t>* addresses = nullptr,
    const Adjust& adjust = nullptr, uint64_t stride = 0x10000) {
  BindingBuilder builder(m);
  builder.Instance(instance).Addresses(base, stride);
  if (adjust) builder.AdjustEach(adjust);
  auto out = Must(builder.Build());
  for (const auto& b : out) {
    for (const auto& f : b.fragments()) {
      if (addresses != nullptr) {
        (*addresses)[f.placement_fragment_id()] = f.address();
      }
    }
  }
  return out;
}

// Every bound region is the logical region at the bound addresses.
void ExpectBoundAt(const LogicalTransferPlan& plan,
                   const BoundTransferPlan& bound,
                   const std::map<std::string, uint64_t>& source_addresses,
                   const std::map<std::string, uint64_t>& target_addresses) {
  ASSERT_EQ(bound.regions().size(), plan.regions().size());
  EXPECT_EQ(bound.bytes(), plan.summary().bytes);
  for (size_t i = 0; i < plan.regions().size(); ++i) {
    SCOPED_TRACE("region " + std::to_string(i));
    const TransferRegion& r = plan.regions()[i];
    const BoundRegion& b = bound.regions()[i];
    const std::string sid(
        plan.source_fragments()[r.source_fragment].fragment_id);
    const std::string tid(
        plan.target_fragments()[r.target_fragment].fragment_id);
    EXPECT_EQ(b.region, i);
    EXPECT_EQ(b.source_address,
              source_addresses.at(sid) + r.source_base_offset);
    EXPECT_EQ(b.target_address,
              target_addresses.at(tid) + r.target_base_offset);
    EXPECT_EQ(b.inner_bytes, r.inner_bytes);
    EXPECT_EQ(b.loops, r.loops);
    EXPECT_EQ(b.bytes, r.bytes);
  }
}

TEST(TransferPlanTest, BindUsesBindingAddressesAndRegionOffsets) {
  const auto source = Source();
  const auto target = Target();
  const auto plan = Must(LogicalTransferPlan::Make(source, target));
  std::map<std::string, uint64_t> sa;
  std::map<std::string, uint64_t> ta;
  const auto sb = Bindings(source, "src", 0x100000, &sa);
  // The same addresses in another instance are another address space.
  const auto tb = Bindings(target, "dst", 0x100000, &ta);
  ASSERT_OK_AND_ASSIGN(auto bound,
                       BoundTransferPlan::Bind(plan, source, sb, target, tb));
  ExpectBoundAt(plan, bound, sa, ta);
  // The plan is non-trivial: offsets and strided loops occur.
  bool offset = false;
  bool loops = false;
  for (const auto& r : plan.regions()) {
    offset |= r.source_base_offset != 0 || r.target_base_offset != 0;
    loops |= !r.loops.empty();
  }
  EXPECT_TRUE(offset);
  EXPECT_TRUE(loops);
}

TEST(TransferPlanTest, RebindFollowsNewAddressesWithoutReplanning) {
  const auto source = Source();
  const auto target = Target();
  const auto plan = Must(LogicalTransferPlan::Make(source, target));
  std::map<std::string, uint64_t> sa1, ta1, sa2, ta2;
  const auto sb1 = Bindings(source, "src", 0x100000, &sa1);
  const auto tb1 = Bindings(target, "dst", 0x900000, &ta1);
  const auto first =
      Must(BoundTransferPlan::Bind(plan, source, sb1, target, tb1));
  // The runtime moved its tensors (new allocations, another stride).
  const auto sb2 = Bindings(source, "src", 0x7000000, &sa2, nullptr, 0x20000);
  const auto tb2 = Bindings(target, "dst", 0x5000000, &ta2, nullptr, 0x30000);
  const auto second =
      Must(BoundTransferPlan::Bind(plan, source, sb2, target, tb2));
  ExpectBoundAt(plan, first, sa1, ta1);
  ExpectBoundAt(plan, second, sa2, ta2);
  ASSERT_EQ(first.regions().size(), second.regions().size());
  for (size_t i = 0; i < first.regions().size(); ++i) {
    EXPECT_NE(first.regions()[i].source_address,
              second.regions()[i].source_address);
    EXPECT_NE(first.regions()[i].target_address,
              second.regions()[i].target_address);
  }
}

TEST(TransferPlanTest, PlanForAnotherPlacement) {
  const auto source = Source();
  const auto target = Target();
  const auto plan = Must(LogicalTransferPlan::Make(source, target));
  const auto other_source = Layout(Sizes{.tp = 2}, false);
  const auto other_target = Layout(Sizes{.tp = 2}, true);
  ASSERT_NE(other_source.placement_id(), source.placement_id());
  ASSERT_NE(other_target.placement_id(), target.placement_id());
  const auto sb = Bindings(source, "src", 0x100000);
  const auto tb = Bindings(target, "dst", 0x100000);
  auto r = BoundTransferPlan::Bind(
      plan, other_source, Bindings(other_source, "src", 0x100000), target, tb);
  ASSERT_THAT(r, StatusIs(StatusCode::kInvalidArgument,
                          "logical plan and source placement IDs differ"));
  r = BoundTransferPlan::Bind(plan, source, sb, other_target,
                              Bindings(other_target, "dst", 0x100000));
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(ErrorOf(r), "logical plan and target placement IDs differ");
  // Swapped sides.
  r = BoundTransferPlan::Bind(plan, target, tb, source, sb);
  EXPECT_EQ(ErrorOf(r), "logical plan and source placement IDs differ");
}

// Removes the binding of `participant`.
std::vector<WeightRuntimeBindingManifest> Without(
    std::vector<WeightRuntimeBindingManifest> bindings,
    const std::string& participant) {
  std::erase_if(bindings, [&](const auto& b) {
    return b.participant_id() == participant;
  });
  return bindings;
}

TEST(TransferPlanTest, MissingSourceBinding) {
  const auto source = Source();
  const auto target = Target();
  const auto plan = Must(LogicalTransferPlan::Make(source, target));
  const auto sb = Bindings(source, "src", 0x100000);
  const auto tb = Bindings(target, "dst", 0x100000);
  const std::string dropped = "p-d0-p0-e0-t1";
  // The first region (in plan order) served by the dropped participant.
  std::string expected;
  for (const auto& r : plan.regions()) {
    const auto& f = plan.source_fragments()[r.source_fragment];
    if (f.participant_id == dropped) {
      expected = f.fragment_id;
      break;
    }
  }
  ASSERT_FALSE(expected.empty());
  auto r =
      BoundTransferPlan::Bind(plan, source, Without(sb, dropped), target, tb);
  ASSERT_THAT(
      r, StatusIs(StatusCode::kInvalidArgument,
                  "missing source runtime binding for placement fragment: " +
                      expected));
}

TEST(TransferPlanTest, UnusedSourceReplicaNeedsNoBinding) {
  // Three complete replicas of one tensor serve two target fragments: at
  // least one replica serves nothing and needs no binding.
  TensorLayout w{.tensor_id = "w", .shape = {12, 6}};
  PlacementDraft sd = GridDraft(Sizes{.dp = 3});
  AddTensor(&sd, w);
  PlacementDraft td = GridDraft(Sizes{.tp = 2});
  w.tp_dim = 0;
  AddTensor(&td, w);
  const auto source = Must(sd.Build());
  const auto target = Must(td.Build());
  const auto plan = Must(LogicalTransferPlan::Make(source, target));
  std::set<std::string> used;
  for (const auto& r : plan.regions()) {
    used.emplace(plan.source_fragments()[r.source_fragment].participant_id);
  }
  ASSERT_LT(used.size(), 3u);
  std::map<std::string, uint64_t> sa, ta;
  auto sb = Bindings(source, "src", 0x100000, &sa);
  std::erase_if(
      sb, [&](const auto& b) { return used.count(b.participant_id()) == 0; });
  ASSERT_EQ(sb.size(), used.size());
  const auto tb = Bindings(target, "dst", 0x100000, &ta);
  ASSERT_OK_AND_ASSIGN(auto bound,
                       BoundTransferPlan::Bind(plan, source, sb, target, tb));
  ExpectBoundAt(plan, bound, sa, ta);
  // Dropping a replica that does serve is an error.
  sb = Without(sb, *used.begin());
  EXPECT_THAT(ErrorOf(BoundTransferPlan::Bind(plan, source, sb, target, tb)),
              StartsWith("missing source runtime binding for placement "
                         "fragment: sha256:"));
}

TEST(TransferPlanTest, MissingTargetBinding) {
  const auto source = Source();
  const auto target = Target();
  const auto plan = Must(LogicalTransferPlan::Make(source, target));
  const auto sb = Bindings(source, "src", 0x100000);
  const auto tb = Bindings(target, "dst", 0x100000);
  for (const std::string dropped :
       {"p-d0-p0-e0-t0", "p-d0-p0-e0-t1", "p-d0-p0-e0-t2"}) {
    SCOPED_TRACE(dropped);
    std::string expected;
    for (const auto& r : plan.regions()) {
      const auto& f = plan.target_fragments()[r.target_fragment];
      if (f.participant_id == dropped) {
        expected = f.fragment_id;
        break;
      }
    }
    ASSERT_FALSE(expected.empty());
    auto r =
        BoundTransferPlan::Bind(plan, source, sb, target, Without(tb, dropped));
    ASSERT_THAT(r, StatusIs(StatusCode::kInvalidArgument,
                            "missing runtime binding for placement fragment: " +
                                expected));
  }
  // No target binding at all: the first region's target fragment.
  auto r = BoundTransferPlan::Bind(plan, source, sb, target, {});
  EXPECT_EQ(
      ErrorOf(r),
      "missing runtime binding for placement fragment: " +
          std::string(plan.target_fragments()[plan.regions()[0].target_fragment]
                          .fragment_id));
}

// A copy of `b` with one header field changed.
WeightRuntimeBindingManifest Rewrite(
    const WeightRuntimeBindingManifest& b,
    const std::function<void(WeightRuntimeBindingManifestSpec*)>& change) {
  WeightRuntimeBindingManifestSpec s = SpecOf(b);
  change(&s);
  return Must(WeightRuntimeBindingManifest::Make(std::move(s)));
}

TEST(TransferPlanTest, InvalidBindingsAreReportedWithTheirSide) {
  const auto source = Source();
  const auto target = Target();
  const auto plan = Must(LogicalTransferPlan::Make(source, target));
  const auto sb = Bindings(source, "src", 0x100000);
  const auto tb = Bindings(target, "dst", 0x100000);
  const std::string zeros(64, '0');
  auto wrong_digest = [&](WeightRuntimeBindingManifestSpec* s) {
    s->placement_digest = zeros;
  };

  auto bad_sb = sb;
  bad_sb[1] = Rewrite(sb[1], wrong_digest);
  auto r = BoundTransferPlan::Bind(plan, source, bad_sb, target, tb);
  ASSERT_THAT(
      r, StatusIs(
             StatusCode::kInvalidArgument,
             "source bindings: placement digest and runtime binding placement "
             "digest differ (participant " +
                 sb[1].participant_id() + ")"));

  auto bad_tb = tb;
  bad_tb[2] = Rewrite(tb[2], wrong_digest);
  r = BoundTransferPlan::Bind(plan, source, sb, target, bad_tb);
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(ErrorOf(r),
            "target bindings: placement digest and runtime binding placement "
            "digest differ (participant " +
                tb[2].participant_id() + ")");

  // A binding made for the other side's placement.
  bad_tb = tb;
  bad_tb[0] = Rewrite(tb[0], [&](WeightRuntimeBindingManifestSpec* s) {
    s->placement_id = source.placement_id();
  });
  EXPECT_EQ(ErrorOf(BoundTransferPlan::Bind(plan, source, sb, target, bad_tb)),
            "target bindings: placement_id and runtime binding placement_id "
            "differ (participant " +
                tb[0].participant_id() + ")");

  // A stale revision.
  bad_sb = sb;
  bad_sb[0] = Rewrite(sb[0], [](WeightRuntimeBindingManifestSpec* s) {
    s->revision = "step-0";
  });
  EXPECT_EQ(ErrorOf(BoundTransferPlan::Bind(plan, source, bad_sb, target, tb)),
            "source bindings: placement and runtime binding revision differ: "
            "step-1 vs step-0");

  // Duplicate participant.
  bad_tb = tb;
  bad_tb.push_back(tb[0]);
  EXPECT_EQ(ErrorOf(BoundTransferPlan::Bind(plan, source, sb, target, bad_tb)),
            "target bindings: duplicate runtime binding participant: " +
                tb[0].participant_id());

  // Source validation runs first.
  EXPECT_THAT(
      ErrorOf(BoundTransferPlan::Bind(plan, source, bad_sb, target, bad_tb)),
      StartsWith("source bindings: "));
}

// In-place reshard: source and target in one address space.
class TransferPlanInPlaceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    plan_ = std::make_unique<LogicalTransferPlan>(
        Must(LogicalTransferPlan::Make(source_, target_)));
    // Every source fragment in one space (instance "node", worker "w0",
    // device "cpu") at 0x100000, 0x110000, ...
    sb_ = Bindings(source_, "node", 0x100000, &sa_, SameSpace());
    // The lowest source allocation and its fragment.
    for (const auto& [id, address] : sa_) {
      if (address == 0x100000) lowest_ = id;
    }
    ASSERT_FALSE(lowest_.empty());
  }

  static Adjust SameSpace(const std::string& device = "cpu",
                          const std::string& worker = "w0") {
    return [=](const std::string&, RuntimeBindingFragmentSpec* s) {
      s->worker_id = worker;
      s->device = device;
    };
  }

  // Target bindings in the same space far from the sources, except the
  // fragment `moved`, which `place` may put elsewhere.
  std::vector<WeightRuntimeBindingManifest> Targets(
      const std::string& moved,
      const std::function<void(RuntimeBindingFragmentSpec*)>& place,
      const std::string& instance = "node", const std::string& device = "cpu",
      const std::string& worker = "w0") {
    return Bindings(target_, instance, 0x900000, nullptr,
                    [&](const std::string& p, RuntimeBindingFragmentSpec* s) {
                      SameSpace(device, worker)(p, s);
                      if (s->placement_fragment_id == moved) place(s);
                    });
  }

  static std::string Overlap(const std::string& s, const std::string& t) {
    return "source and target runtime storage allocations overlap (source " +
           s + ", target " + t + "); in-place reshard is unsupported";
  }

  const WeightPlacementManifest source_ = Source();
  const WeightPlacementManifest target_ = Target();
  std::unique_ptr<LogicalTransferPlan> plan_;
  std::map<std::string, uint64_t> sa_;
  std::vector<WeightRuntimeBindingManifest> sb_;
  std::string lowest_;
};

TEST_F(TransferPlanInPlaceTest, DisjointStorageInOneSpaceIsAccepted) {
  auto r = BoundTransferPlan::Bind(*plan_, source_, sb_, target_,
                                   Targets("", nullptr));
  EXPECT_OK(r);
}

TEST_F(TransferPlanInPlaceTest, TargetInsideASourceAllocation) {
  const std::string moved = target_.fragments()[3]->placement_fragment_id();
  const std::string victim = source_.fragments()[5]->placement_fragment_id();
  const uint64_t at = sa_.at(victim) + 2;
  auto tb = Targets(moved, [&](RuntimeBindingFragmentSpec* s) {
    s->address = s->storage_address = at;
  });
  auto r = BoundTransferPlan::Bind(*plan_, source_, sb_, target_, tb);
  ASSERT_THAT(
      r, StatusIs(StatusCode::kInvalidArgument,
                  StartsWith("source and target runtime storage allocations "
                             "overlap (source ")));
  EXPECT_THAT(r.status().message(),
              EndsWith("in-place reshard is unsupported"));
  EXPECT_EQ(r.status().message(), Overlap(victim, moved));
}

TEST_F(TransferPlanInPlaceTest, TargetStorageCoveringASourceAllocation) {
  // The target view lies before the sources; its allocation reaches over
  // the lowest source allocation.
  const std::string moved = target_.fragments()[0]->placement_fragment_id();
  auto tb = Targets(moved, [](RuntimeBindingFragmentSpec* s) {
    s->storage_address = 0x100000 - 0x1000;
    s->storage_offset_bytes = 0;
    s->address = s->storage_address;
    s->storage_nbytes = 0x1000 + 8;
  });
  auto r = BoundTransferPlan::Bind(*plan_, source_, sb_, target_, tb);
  EXPECT_EQ(ErrorOf(r), Overlap(lowest_, moved));
  // Ending exactly where the source allocation starts is no overlap.
  tb = Targets(moved, [](RuntimeBindingFragmentSpec* s) {
    s->storage_address = 0x100000 - 0x1000;
    s->address = s->storage_address;
    s->storage_nbytes = 0x1000;
  });
  r = BoundTransferPlan::Bind(*plan_, source_, sb_, target_, tb);
  EXPECT_OK(r);
}

TEST_F(TransferPlanInPlaceTest, SourceStorageBeyondItsViewCounts) {
  // The lowest source fragment's allocation is 0x800 bytes; a target view
  // after the source view but inside that allocation overlaps it.
  std::map<std::string, uint64_t> sa;
  const std::string low = lowest_;
  auto sb = Bindings(source_, "node", 0x100000, &sa,
                     [&](const std::string& p, RuntimeBindingFragmentSpec* s) {
                       SameSpace()(p, s);
                       if (s->placement_fragment_id == low) {
                         s->storage_nbytes = 0x800;
                       }
                     });
  const std::string moved = target_.fragments()[1]->placement_fragment_id();
  auto tb = Targets(moved, [](RuntimeBindingFragmentSpec* s) {
    s->address = s->storage_address = 0x100000 + 0x400;
  });
  EXPECT_EQ(ErrorOf(BoundTransferPlan::Bind(*plan_, source_, sb, target_, tb)),
            Overlap(low, moved));
  // Right after the allocation: accepted.
  tb = Targets(moved, [](RuntimeBindingFragmentSpec* s) {
    s->address = s->storage_address = 0x100000 + 0x800;
  });
  auto r = BoundTransferPlan::Bind(*plan_, source_, sb, target_, tb);
  EXPECT_OK(r);
}

TEST_F(TransferPlanInPlaceTest, SameAddressesInAnotherSpaceAreAccepted) {
  const std::string moved = target_.fragments()[3]->placement_fragment_id();
  const uint64_t at = sa_.at(lowest_);
  auto place = [&](RuntimeBindingFragmentSpec* s) {
    s->address = s->storage_address = at;
  };
  // Control: the same placement in the same space is rejected.
  EXPECT_EQ(ErrorOf(BoundTransferPlan::Bind(*plan_, source_, sb_, target_,
                                            Targets(moved, place))),
            Overlap(lowest_, moved));
  // Another instance, device or worker is another address space.
  for (const auto& [instance, device, worker] :
       std::vector<std::tuple<std::string, std::string, std::string>>{
           {"node-2", "cpu", "w0"},
           {"node", "cuda:0", "w0"},
           {"node", "cpu", "w1"}}) {
    SCOPED_TRACE(instance + "/" + device + "/" + worker);
    auto tb = Targets(moved, place, instance, device, worker);
    ASSERT_OK_AND_ASSIGN(
        auto r, BoundTransferPlan::Bind(*plan_, source_, sb_, target_, tb));
    // The moved fragment's regions write at the source's address.
    bool seen = false;
    for (const auto& b : r.regions()) {
      const auto& tr = plan_->regions()[b.region];
      if (plan_->target_fragments()[tr.target_fragment].fragment_id == moved) {
        EXPECT_EQ(b.target_address, at + tr.target_base_offset);
        seen = true;
      }
    }
    EXPECT_TRUE(seen);
  }
}

}  // namespace
}  // namespace reshard
