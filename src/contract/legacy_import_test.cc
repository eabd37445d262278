// Legacy runtime inventories -> typed placement and bindings.

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <map>

#include "reshard/legacy.h"
#include "testing/placement_builders.h"

namespace reshard {
namespace {

using testing::AddTensor;
using testing::GridDraft;
using ::testing::HasSubstr;

std::string Ints(const Dims& d) {
  std::string s = "[";
  for (size_t i = 0; i < d.size(); ++i) {
    s += (i ? "," : "") + std::to_string(d[i]);
  }
  return s + "]";
}

std::string Opt(const std::optional<int64_t>& v) {
  return v ? std::to_string(*v) : "null";
}

// Writes one legacy inventory per participant of `m`, with views packed
// into one allocation per participant, exactly as an old adapter would.
std::vector<std::string> Inventories(const WeightPlacementManifest& m,
                                     bool legacy_partition_dim = false) {
  std::vector<std::string> out;
  for (const auto& part : m.parts()) {
    if (part.fragments().empty()) continue;
    uint64_t total = 0;
    for (const auto& f : part.fragments()) total += f.nbytes();
    std::string inv =
        "{\"generation\":" + std::to_string(m.weight_generation()) +
        ",\"instance_id\":\"inst-" + part.participant_id() +
        "\",\"lease_id\":\"lease\",\"model_id\":\"" + m.resource_id() +
        "\",\"revision\":\"" + m.revision() + "\",\"tensors\":[";
    uint64_t offset = 0;
    bool first = true;
    for (const auto& f : part.fragments()) {
      const TensorDescriptor* t = m.FindTensor(f.tensor_id());
      std::string axes = "[";
      bool first_axis = true;
      bool one_dim_tp = false;
      for (const auto& a : t->parallel_axes()) {
        if (legacy_partition_dim && a.kind() == AxisKind::kTp &&
            a.semantics() == AxisSemantics::kSplit &&
            t->shard_dims().size() == 1) {
          one_dim_tp = true;  // expressed through partition_dim instead
          continue;
        }
        axes +=
            std::string(first_axis ? "" : ",") + "{\"kind\":\"" +
            std::string(AxisKindName(a.kind())) + "\",\"split_dim\":" +
            (a.semantics() == AxisSemantics::kSplit ? std::to_string(a.dim())
                                                    : std::string("null")) +
            "}";
        first_axis = false;
      }
      axes += "]";
      std::string aliases = "[";
      for (size_t i = 0; i < f.aliases().size(); ++i) {
        aliases += std::string(i ? "," : "") + "\"" + f.aliases()[i] + "\"";
      }
      aliases += "]";
      const uint64_t base = 0x100000;
      inv +=
          std::string(first ? "" : ",") +
          "{\"address\":" + std::to_string(base + offset) +
          ",\"aliases\":" + aliases +
          ",\"byte_offset\":" + std::to_string(offset) +
          ",\"device\":\"cpu\",\"dtype\":\"" + t->dtype() +
          "\",\"endpoint\":\"ep-" + part.participant_id() +
          "\",\"expert_axis\":0,\"expert_id\":" + Opt(t->expert_id()) +
          ",\"fragment_id\":\"rt-" + f.placement_fragment_id().substr(7, 24) +
          "\",\"global_offset\":" + Ints(f.global_offset()) +
          ",\"global_shape\":" + Ints(t->global_shape()) +
          ",\"is_contiguous\":true,\"itemsize\":" +
          std::to_string(t->itemsize()) +
          ",\"layer_id\":" + Opt(t->layer_id()) + ",\"layout_fingerprint\":\"" +
          t->layout_fingerprint() +
          "\",\"lease_generation\":1,\"local_shape\":" + Ints(f.local_shape()) +
          ",\"nbytes\":" + std::to_string(f.nbytes()) +
          ",\"parallel_axes\":" + axes + ",\"partition_dim\":" +
          (one_dim_tp ? std::to_string(t->shard_dims()[0]) : "null") +
          ",\"rank\":{\"dp\":" + std::to_string(f.rank().dp) +
          ",\"ep\":" + std::to_string(f.rank().ep) +
          ",\"moe_dp\":0,\"pp\":" + std::to_string(f.rank().pp) +
          ",\"tp\":" + std::to_string(f.rank().tp) + "},\"runtime_name\":\"" +
          f.tensor_id() + "\",\"shard_dims\":" +
          (one_dim_tp ? std::string("[]") : Ints(t->shard_dims())) +
          ",\"storage_address\":" + std::to_string(base) +
          ",\"storage_nbytes\":" + std::to_string(total) +
          ",\"storage_offset\":0,\"storage_offset_bytes\":" +
          std::to_string(offset) + ",\"stride\":[],\"strides_bytes\":" +
          Ints(*CanonicalStrides(f.local_shape(), t->itemsize())) +
          ",\"tensor_id\":\"" + f.tensor_id() + "\",\"worker_id\":\"w-" +
          part.participant_id() + "\"}";
      offset += f.nbytes();
      first = false;
    }
    out.push_back(inv + "]}");
  }
  return out;
}

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
  return ImportLegacyInventories(views, {.tp = 2, .pp = 2, .ep = 2, .dp = 2});
}

TEST(LegacyImportTest, InventoriesRebuildTheSamePlacement) {
  auto original = Original();
  auto imported = Import(Inventories(original));
  ASSERT_TRUE(imported.ok()) << imported.status().ToString();
  EXPECT_EQ(imported->placement.placement_id(), original.placement_id());
  EXPECT_EQ(imported->placement.digest(), original.digest());
  EXPECT_EQ(imported->bindings.size(), 16u);
  EXPECT_TRUE(
      ValidateRuntimeBindings(imported->placement, imported->bindings).ok());
  // Views keep their packed offsets inside one allocation per participant.
  for (const auto& b : imported->bindings) {
    for (const auto& f : b.fragments()) {
      EXPECT_EQ(f.address(), f.storage_address() + f.storage_offset_bytes());
    }
  }
}

TEST(LegacyImportTest, PartitionDimIsOneDimensionalTp) {
  auto original = Original();
  auto imported = Import(Inventories(original, /*legacy_partition_dim=*/true));
  ASSERT_TRUE(imported.ok()) << imported.status().ToString();
  EXPECT_EQ(imported->placement.placement_id(), original.placement_id());
  const TensorDescriptor* q = imported->placement.FindTensor("layers.1.attn.q");
  EXPECT_EQ(q->shard_dims(), Dims({0}));
}

TEST(LegacyImportTest, NonContiguousViewRejected) {
  auto inv = Inventories(Original());
  const size_t at = inv[0].find("\"is_contiguous\":true");
  inv[0].replace(at, 20, "\"is_contiguous\":false");
  EXPECT_EQ(Import(inv).status().message(),
            "inventory 0: tensors[0]: view is not contiguous (is_contiguous "
            "is false)");
}

TEST(LegacyImportTest, StrictFields) {
  auto inv = Inventories(Original());
  const size_t at = inv[1].find("\"runtime_name\"");
  inv[1].replace(at, 14, "\"runtime_nam3\"");
  EXPECT_EQ(Import(inv).status().message(),
            "inventory 1: tensors[0]: legacy inventory entry schema fields do "
            "not match contract: unknown field \"runtime_nam3\"");
}

TEST(LegacyImportTest, OneParticipantPerInventory) {
  auto inv = Inventories(Original());
  // Glue the second inventory's entries into the first.
  const std::string tail = inv[1].substr(inv[1].find("\"tensors\":[") + 11);
  inv[0] = inv[0].substr(0, inv[0].size() - 2) + "," + tail;
  inv.erase(inv.begin() + 1);
  EXPECT_THAT(Import(inv).status().message(),
              HasSubstr("one inventory must describe one participant"));
}

TEST(LegacyImportTest, MissingParticipantIsIncomplete) {
  auto inv = Inventories(Original());
  inv.pop_back();
  EXPECT_THAT(Import(inv).status().message(),
              HasSubstr("global placement tensor is not fully covered: "));
}

}  // namespace
}  // namespace reshard
