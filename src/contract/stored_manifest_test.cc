// Stored weight manifests (rule 63) and planning from them.

#include "reshard/stored_manifest.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "reshard/plan.h"
#include "testing/placement_builders.h"
#include "testing/plan_testing.h"
#include "testing/status_testing.h"

namespace reshard {
namespace {

using ::testing::HasSubstr;
using testing::ReadTestData;
using testing::StoredSpecFrom;

WeightPlacementManifest Scenario(const std::string& name) {
  return *WeightPlacementFromJson(ReadTestData("scenarios/" + name));
}

std::string Error(StoredWeightManifestSpec s) {
  auto m = StoredWeightManifest::Make(std::move(s));
  return m.ok() ? "OK" : m.status().message();
}

TEST(StoredManifestTest, OneReplicaOfAPlacementValidatesAndRoundTrips) {
  auto placement = Scenario("four_axis_source.json");
  ASSERT_OK_AND_ASSIGN(auto m,
                       StoredWeightManifest::Make(StoredSpecFrom(placement)));
  // DP2 source: one replica = half of the fragments.
  EXPECT_EQ(m.fragments().size(), placement.fragments().size() / 2);
  const std::string json = StoredWeightManifestToJson(m);
  ASSERT_OK_AND_ASSIGN(auto again, StoredWeightManifestFromJson(json));
  EXPECT_EQ(StoredWeightManifestToJson(again), json);
  EXPECT_EQ(again.manifest_digest(), m.manifest_digest());
  EXPECT_TRUE(LooksLikeStoredManifest(json));
  EXPECT_FALSE(LooksLikeStoredManifest(WeightPlacementToJson(placement)));
}

TEST(StoredManifestTest, JsonKeepsNonAsciiRaw) {
  auto placement = *WeightPlacementFromJson(
      ReadTestData("fixtures/placements/placement_100.json"));
  ASSERT_OK_AND_ASSIGN(auto m,
                       StoredWeightManifest::Make(StoredSpecFrom(placement)));
  const std::string json = StoredWeightManifestToJson(m);
  EXPECT_NE(json.find("layers.3.\xc3\xa9t\xc3\xa9.3"), std::string::npos);
  EXPECT_EQ(json.find("\\u00e9"), std::string::npos);
}

class StoredRulesTest : public ::testing::Test {
 protected:
  StoredWeightManifestSpec Valid() {
    return StoredSpecFrom(Scenario("tp_split_4_to_8_source.json"));
  }
};

TEST_F(StoredRulesTest, ManifestKeySuffix) {
  auto s = Valid();
  s.manifest_key = "ns/rev/index";
  EXPECT_EQ(Error(s),
            "manifest_key must use the canonical manifest suffix: "
            "ns/rev/index");
}

// A group_id naming another revision than the manifest_key sent a store's
// transaction, checksum and lease keys elsewhere (found by
// fuzz_upload_plan: a plan loaded from one revision re-published under
// another).
TEST_F(StoredRulesTest, GroupIdIsTheManifestKeysGroup) {
  auto s = Valid();
  const std::string key = s.manifest_key;
  const std::string group = s.group_id;
  s.group_id = group + "x";
  EXPECT_EQ(Error(s), "manifest_key must be <group_id>/manifest: " + key +
                          " (group_id " + group + "x)");
  ASSERT_OK_AND_ASSIGN(auto m, StoredWeightManifest::Make(Valid()));
  std::string json = StoredWeightManifestToJson(m);
  const std::string field = "\"group_id\":\"" + group + "\"";
  ASSERT_NE(json.find(field), std::string::npos);
  json.replace(json.find(field), field.size(),
               "\"group_id\":\"" + group + "x\"");
  EXPECT_EQ(StoredWeightManifestFromJson(json).status().message(),
            "manifest_key must be <group_id>/manifest: " + key + " (group_id " +
                group + "x)");
}

TEST_F(StoredRulesTest, PayloadKeysBelongToTheGroup) {
  auto s = Valid();
  s.fragments[0].object_key = "elsewhere/payload/x";
  EXPECT_EQ(Error(s),
            "payload object_key does not belong to manifest group: "
            "elsewhere/payload/x (fragment " +
                s.fragments[0].stored_fragment_id + ")");
}

TEST_F(StoredRulesTest, DuplicateFragmentId) {
  auto s = Valid();
  s.fragments[1].stored_fragment_id = s.fragments[0].stored_fragment_id;
  EXPECT_EQ(Error(s),
            "duplicate fragment_id: " + s.fragments[0].stored_fragment_id);
}

TEST_F(StoredRulesTest, GeometryAndCover) {
  auto s = Valid();
  s.fragments[0].nbytes += 1;
  EXPECT_THAT(Error(s), HasSubstr("fragment byte size mismatch: "));
  s = Valid();
  s.fragments.pop_back();
  EXPECT_THAT(Error(s), HasSubstr("tensor is not fully covered: "));
  s = Valid();
  s.fragments.push_back(s.fragments[0]);
  s.fragments.back().stored_fragment_id = "copy";
  s.fragments.back().object_offset = 1 << 20;
  EXPECT_THAT(Error(s), HasSubstr("duplicate fragment geometry: "));
  s = Valid();
  s.fragments[0].tensor_id = "ghost";
  EXPECT_THAT(Error(s),
              HasSubstr("unknown tensor_id ghost in stored fragment"));
}

TEST_F(StoredRulesTest, ObjectRangesMustNotOverlap) {
  auto s = Valid();
  // Put two fragments in one object at overlapping offsets.
  s.fragments[1].object_key = s.fragments[0].object_key;
  s.fragments[1].object_offset = s.fragments[0].object_offset + 1;
  EXPECT_THAT(Error(s), HasSubstr("stored fragment object ranges overlap: "));
}

TEST_F(StoredRulesTest, AliasGroupsMustBeComplete) {
  auto placement = Scenario("aliases_tied_embeddings_source.json");
  auto s = StoredSpecFrom(placement);
  ASSERT_EQ(Error(s), "OK");
  s.fragments.erase(s.fragments.begin());
  EXPECT_THAT(Error(s),
              ::testing::AnyOf(HasSubstr("stored alias group is incomplete"),
                               HasSubstr("tensor is not fully covered")));
}

TEST_F(StoredRulesTest, StrictJson) {
  auto m = StoredWeightManifest::Make(Valid());
  std::string json = StoredWeightManifestToJson(*m);
  std::string bad = json;
  bad.replace(bad.find("\"model_weight\""), 14, "\"kv_cache\"");
  EXPECT_EQ(StoredWeightManifestFromJson(bad).status().message(),
            "stored manifest resource_kind must be model_weight, got "
            "\"kv_cache\"");
  bad = json;
  bad.replace(bad.find("\"object_offset\":"), 16, "\"object_offsetX\":");
  EXPECT_THAT(StoredWeightManifestFromJson(bad).status().message(),
              HasSubstr("stored fragment schema fields do not match "
                        "contract: unknown field \"object_offsetX\""));
}

TEST(StoredPlanTest, PlanningFromTheStoreMatchesTheLivePlanInBytes) {
  for (const char* name : {"four_axis", "tp_split_4_to_8",
                           "cross_dim_ep2_to_tp2", "pp_routing_2_to_4"}) {
    SCOPED_TRACE(name);
    auto src = Scenario(std::string(name) + "_source.json");
    auto dst = Scenario(std::string(name) + "_target.json");
    auto stored = *StoredWeightManifest::Make(StoredSpecFrom(src));
    auto live = LogicalTransferPlan::Make(src, dst);
    auto from_store = LogicalTransferPlan::MakeFromStored(stored, dst);
    ASSERT_OK(live);
    ASSERT_OK(from_store);
    EXPECT_EQ(from_store->summary().bytes, live->summary().bytes);
    EXPECT_EQ(from_store->summary().regions, live->summary().regions);
    EXPECT_EQ(from_store->source_placement_id(),
              "manifest:" + stored.manifest_key());
    for (const auto& route : from_store->pipeline_routes()) {
      EXPECT_EQ(route.source_pp, -1);  // a store has no pipeline rank
    }
    // Every region reads a stored fragment inside its object.
    for (const auto& r : from_store->regions()) {
      const auto& sf = from_store->source_fragments()[r.source_fragment];
      EXPECT_LE(r.source_base_offset + r.bytes, sf.nbytes + 0u)
          << from_store->DescribeRegion(r);
    }
    // Planned on three threads (the tables of both sides at once), the
    // same plan.
    PlanOptions threads;
    threads.threads = 3;
    auto parallel = LogicalTransferPlan::MakeFromStored(stored, dst, threads);
    ASSERT_OK(parallel);
    testing::ExpectSamePlan(*parallel, *from_store);
  }
}

TEST(StoredPlanTest, GenerationMustMatch) {
  auto src = Scenario("tp_split_4_to_8_source.json");
  auto dst = Scenario("tp_split_4_to_8_target.json");
  auto spec = StoredSpecFrom(src);
  spec.weight_generation = 7;
  auto stored = *StoredWeightManifest::Make(spec);
  EXPECT_EQ(LogicalTransferPlan::MakeFromStored(stored, dst).status().message(),
            "source and target weight_generation differ: 7 vs 1");
}

}  // namespace
}  // namespace reshard
