// Converting store loads in bounded memory (WeightStoreOptions::
// convert_staging_bytes): the converting tensors stage in groups, each
// converted before the next is read; every target byte equals the kernels
// applied to the whole tensor, whatever the grouping.

#include <gtest/gtest.h>

#include <cstring>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "reshard/api.h"
#include "reshard/weight_store.h"
#include "testing/must.h"
#include "testing/placement_builders.h"
#include "testing/status_testing.h"
#include "testing/temp_dir.h"
#include "util/float_convert.h"

namespace reshard {
namespace {

using ::reshard::internal::FloatType;
using ::reshard::testing::AddTensor;
using ::reshard::testing::GridDraft;
using ::reshard::testing::Must;

constexpr int64_t kN = 256, kK = 256;

std::string WeightId(int layer) {
  return "model.layers." + std::to_string(layer) + ".mlp.up_proj.weight";
}
std::string ScaleId(int layer) {
  return "model.layers." + std::to_string(layer) +
         ".mlp.up_proj.weight_scale_inv";
}

// Three [256, 256] weights and a norm: bfloat16 at TP1, or FP8 (128x128
// blocks, float32 scales) at TP2 over columns.
WeightPlacementManifest Layout(bool fp8) {
  auto draft = GridDraft({1, 1, 1, fp8 ? 2 : 1});
  for (int layer = 0; layer < 3; ++layer) {
    AddTensor(&draft, {.tensor_id = WeightId(layer),
                       .shape = {kN, kK},
                       .dtype = fp8 ? "float8_e4m3fn" : "bfloat16",
                       .itemsize = fp8 ? 1 : 2,
                       .tp_dim = fp8 ? 1 : -1});
    if (fp8) {
      AddTensor(&draft, {.tensor_id = ScaleId(layer),
                         .shape = {2, 2},
                         .dtype = "float32",
                         .itemsize = 4,
                         .tp_dim = 1});
    }
  }
  AddTensor(&draft, {.tensor_id = "model.norm.weight", .shape = {kK}});
  return Must(draft.Build());
}

struct Memory {
  std::map<std::string, std::vector<uint8_t>, std::less<>> buffers;
  std::vector<WeightRuntimeBindingManifest> bindings;
};

Memory Allocate(const WeightPlacementManifest& p) {
  Memory m;
  for (const auto* f : p.fragments()) {
    m.buffers[f->placement_fragment_id()].assign(f->nbytes(), 0xD7);
  }
  m.bindings = Must(BindAllBuffers(p, [&](std::string_view id) -> void* {
                 return m.buffers.find(id)->second.data();
               })).bindings();
  return m;
}

TEST(ConvertingLoadTest, GroupsOfTensorsStageOneAtATime) {
  const auto source = Layout(false);
  const auto target = Layout(true);
  // Whole bfloat16 tensors of varied magnitude.
  std::map<std::string, std::vector<uint16_t>> whole;
  std::mt19937 rng(5);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  Memory src = Allocate(source);
  for (const auto* f : source.fragments()) {
    const size_t n = f->nbytes() / 2;
    std::vector<float> values(n);
    for (size_t i = 0; i < n; ++i) values[i] = normal(rng) * (1 + i % 97);
    auto& bf16 = whole[f->tensor_id()];
    bf16.resize(n);
    internal::CastElements(FloatType::kFloat32, values.data(),
                           FloatType::kBFloat16, bf16.data(), n);
    std::memcpy(src.buffers[f->placement_fragment_id()].data(), bf16.data(),
                f->nbytes());
  }
  ::reshard::testing::TempDir dir("reshard-convload");
  auto store = Must(WeightStore::Open("fs://" + dir.path()));
  auto upload = Must(store.PrepareUpload(source, src.bindings));
  auto receipts = Must(store.Upload(upload, source, src.bindings.front()));
  ASSERT_OK(store.Commit(upload, receipts));
  const auto manifest =
      Must(store.ReadManifest(upload.manifest().manifest_key()));
  // Both TP2 participants here: a weight's staging is 256 x 256 x 2 bytes.
  constexpr uint64_t kWeightStaging = kN * kK * 2;
  for (const uint64_t budget :
       {uint64_t{1}, kWeightStaging * 2, uint64_t{1} << 30}) {
    // Fresh options: WithOptions fills the hooks Open would.
    WeightStoreOptions o;
    o.convert = true;
    o.convert_staging_bytes = budget;
    Memory dst = Allocate(target);
    const LoadReport r =
        Must(store.WithOptions(o).Load(manifest, target, dst.bindings));
    EXPECT_EQ(r.conversion_bytes, budget == 1 ? kWeightStaging
                                  : budget == kWeightStaging * 2
                                      ? 2 * kWeightStaging
                                      : 3 * kWeightStaging)
        << budget;
    for (int layer = 0; layer < 3; ++layer) {
      std::vector<uint8_t> q(kN * kK);
      std::vector<float> s(4);
      internal::QuantizeE4m3Blocks(FloatType::kBFloat16,
                                   whole[WeightId(layer)].data(), {kN, kK, kK},
                                   128, 128, q.data(), kK, s.data(), 2);
      for (const auto* f : target.fragments()) {
        const auto& got = dst.buffers[f->placement_fragment_id()];
        if (f->tensor_id() == WeightId(layer)) {
          for (int64_t row = 0; row < kN; ++row) {
            ASSERT_EQ(std::memcmp(got.data() + row * (kK / 2),
                                  q.data() + row * kK + f->global_offset()[1],
                                  kK / 2),
                      0)
                << f->tensor_id() << " row " << row;
          }
        }
        if (f->tensor_id() == ScaleId(layer)) {
          const int64_t col = f->global_offset()[1];
          ASSERT_EQ(std::memcmp(got.data(), &s[col], 4), 0);
          ASSERT_EQ(std::memcmp(got.data() + 4, &s[2 + col], 4), 0);
        }
      }
    }
  }
}

}  // namespace
}  // namespace reshard
