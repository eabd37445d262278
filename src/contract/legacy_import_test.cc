// Legacy runtime inventories -> typed placement and bindings.

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <map>

#include "reshard/legacy.h"
#include "testing/placement_builders.h"
#include "testing/status_testing.h"

namespace reshard {
namespace {

using testing::AddTensor;
using testing::GridDraft;
using ::testing::HasSubstr;

WeightPlacementManifest Original() {
  auto d = GridDraft({2, 2, 2, 2});
  d.header.placement_set_id = "demo-model-legacy";
  AddTensor(&d, {.tensor_id = "layers.0.experts.w",
                 .shape = {4, 8, 6},
                 .tp_dim = 1,
                 .ep_split = true,
                 .pp_owner = 0,
                 .layer_id = 0});
  AddTensor(&d, {.tensor_id = "layers.1.attn.q",
                 .shape = {8, 6},
                 .tp_dim = 0,
                 .pp_owner = 1,
                 .layer_id = 1});
  AddTensor(&d, {.tensor_id = "layers.1.norm",
                 .shape = {6},
                 .pp_owner = 1,
                 .layer_id = 1});
  return *d.Build();
}

Result<LegacyImport> Import(const std::vector<std::string>& inv) {
  std::vector<std::string_view> views(inv.begin(), inv.end());
  return ImportLegacyInventories(
      views, {.sizes = {.tp = 2, .pp = 2, .ep = 2, .dp = 2}});
}

TEST(LegacyImportTest, InventoriesRebuildTheSamePlacement) {
  auto original = Original();
  ASSERT_OK_AND_ASSIGN(auto imported,
                       Import(testing::LegacyInventories(original)));
  EXPECT_EQ(imported.placement.placement_id(), original.placement_id());
  EXPECT_EQ(imported.placement.digest(), original.digest());
  EXPECT_EQ(imported.bindings.size(), 16u);
  EXPECT_OK(ValidateRuntimeBindings(imported.placement, imported.bindings));
  // Views keep their packed offsets inside one allocation per participant.
  for (const auto& b : imported.bindings) {
    for (const auto& f : b.fragments()) {
      EXPECT_EQ(f.address(), f.storage_address() + f.storage_offset_bytes());
    }
  }
}

TEST(LegacyImportTest, PartitionDimIsOneDimensionalTp) {
  auto original = Original();
  ASSERT_OK_AND_ASSIGN(auto imported,
                       Import(testing::LegacyInventories(
                           original, /*legacy_partition_dim=*/true)));
  EXPECT_EQ(imported.placement.placement_id(), original.placement_id());
  const TensorDescriptor* q = imported.placement.FindTensor("layers.1.attn.q");
  EXPECT_EQ(q->shard_dims(), Dims({0}));
}

TEST(LegacyImportTest, NonContiguousViewRejected) {
  auto inv = testing::LegacyInventories(Original());
  const size_t at = inv[0].find("\"is_contiguous\":true");
  inv[0].replace(at, 20, "\"is_contiguous\":false");
  EXPECT_EQ(Import(inv).status().message(),
            "inventory 0: tensors[0]: view is not contiguous (is_contiguous "
            "is false)");
}

TEST(LegacyImportTest, StrictFields) {
  auto inv = testing::LegacyInventories(Original());
  const size_t at = inv[1].find("\"runtime_name\"");
  inv[1].replace(at, 14, "\"runtime_nam3\"");
  EXPECT_EQ(Import(inv).status().message(),
            "inventory 1: tensors[0]: legacy inventory entry schema fields do "
            "not match contract: unknown field \"runtime_nam3\"");
}

TEST(LegacyImportTest, OneParticipantPerInventory) {
  auto inv = testing::LegacyInventories(Original());
  // Glue the second inventory's entries into the first.
  const std::string tail = inv[1].substr(inv[1].find("\"tensors\":[") + 11);
  inv[0] = inv[0].substr(0, inv[0].size() - 2) + "," + tail;
  inv.erase(inv.begin() + 1);
  EXPECT_THAT(Import(inv).status().message(),
              HasSubstr("one inventory must describe one participant"));
}

TEST(LegacyImportTest, MissingParticipantIsIncomplete) {
  auto inv = testing::LegacyInventories(Original());
  inv.pop_back();
  EXPECT_THAT(Import(inv).status().message(),
              HasSubstr("global placement tensor is not fully covered: "));
}

}  // namespace
}  // namespace reshard
