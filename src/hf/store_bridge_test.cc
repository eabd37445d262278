// Checkpoint -> weight-store revision -> any layout -> checkpoint, every
// byte checked against the self-test pattern (tensor and global element
// index).

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <string>

#include "reshard/hf.h"
#include "reshard/weight_store.h"
#include "selftest/host_buffers.h"
#include "selftest/pattern.h"
#include "testing/must.h"
#include "testing/status_testing.h"
#include "testing/temp_dir.h"

namespace reshard {
namespace {

using ::reshard::testing::Must;
using ::reshard::testing::StatusIs;
using ::reshard::testing::TempDir;
using ::testing::HasSubstr;

// A Qwen3-MoE-shaped model small enough for a unit test (bf16).
constexpr const char* kConfig = R"({
  "architectures": ["Qwen3MoeForCausalLM"], "model_type": "qwen3_moe",
  "hidden_size": 64, "vocab_size": 96, "num_hidden_layers": 2,
  "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16,
  "intermediate_size": 96, "moe_intermediate_size": 32, "num_experts": 4,
  "mlp_only_layers": [0], "torch_dtype": "bfloat16"})";

HfLayoutOptions Grid(int64_t tp, int64_t pp, int64_t ep) {
  HfLayoutOptions o;
  o.sizes = {tp, pp, ep, 1};
  return o;
}

// Writes the model's checkpoint from TP2 buffers holding the pattern.
std::string MakeCheckpoint(const std::string& dir) {
  const auto layout = Must(HfLayout(kConfig, Grid(2, 1, 1)));
  auto buffers = Must(internal::AllocateHostBuffers(layout, "gen"));
  internal::FillPattern(layout, internal::TensorIndex(layout), buffers);
  CheckpointWriteOptions o;
  o.max_file_bytes = 64 << 10;
  auto plan = Must(PlanCheckpointWrite(layout, o));
  testing::MustOk(CreateCheckpointFiles(plan, dir));
  Must(WriteCheckpointFragments(plan, layout, buffers.bindings, dir, o));
  testing::MustOk(FinishCheckpoint(plan, dir));
  return dir;
}

// Loads `target` from the checkpoint and checks every byte.
void ExpectLoads(const HfCheckpoint& ckpt, const HfLayoutOptions& grid) {
  const auto target = Must(HfLayout(kConfig, grid, &ckpt));
  auto buffers = Must(internal::AllocateHostBuffers(target, "check"));
  ASSERT_OK(LoadCheckpoint(ckpt, target, buffers.bindings).status());
  EXPECT_EQ(
      internal::VerifyPattern(target, internal::TensorIndex(target), buffers),
      "");
}

TEST(HfStoreBridgeTest, ImportLoadAnywhereExportRoundTrip) {
  TempDir dir("hf-bridge");
  auto ckpt = Must(HfCheckpoint::Open(MakeCheckpoint(dir.path() + "/ckpt")));
  ASSERT_GE(ckpt.files().size(), 3u);
  ExpectLoads(ckpt, Grid(1, 1, 1));
  auto store = Must(WeightStore::Open("fs://" + dir.path() + "/store"));
  HfImportOptions options;
  options.max_fragment_bytes = 2048;  // slabs: no tensor whole in memory
  ASSERT_OK_AND_ASSIGN(auto imported,
                       ImportCheckpoint(ckpt, kConfig, store, options));
  EXPECT_EQ(imported.tensors, ckpt.tensors().size());
  EXPECT_GT(imported.fragments, 2 * ckpt.tensors().size());
  EXPECT_EQ(imported.bytes_read, ckpt.tensor_bytes());
  ASSERT_OK_AND_ASSIGN(auto manifest,
                       store.ReadManifest(imported.manifest_key));
  for (const auto& f : manifest.fragments()) EXPECT_LE(f.nbytes, 2048u);
  ASSERT_OK(store.Verify(imported.manifest_key).status());
  // The revision loads into an engine layout with every byte in place.
  const auto target = Must(HfLayout(kConfig, Grid(2, 2, 2), &ckpt));
  auto buffers = Must(internal::AllocateHostBuffers(target, "load"));
  ASSERT_OK(store.Load(manifest, target, buffers.bindings).status());
  EXPECT_EQ(
      internal::VerifyPattern(target, internal::TensorIndex(target), buffers),
      "");
  // And back out, through windows smaller than a tensor.
  CheckpointWriteOptions out;
  out.staging_bytes = 4096;
  out.max_file_bytes = 100 << 10;
  ASSERT_OK_AND_ASSIGN(
      auto exported,
      ExportCheckpoint(store, manifest, dir.path() + "/exported", out));
  EXPECT_EQ(exported.bytes, ckpt.tensor_bytes());
  EXPECT_GE(exported.files, 2u);
  auto back = Must(HfCheckpoint::Open(dir.path() + "/exported"));
  EXPECT_EQ(back.tensor_bytes(), ckpt.tensor_bytes());
  ExpectLoads(back, Grid(2, 1, 2));
  EXPECT_THAT(ExportCheckpoint(store, manifest, dir.path() + "/exported", out),
              StatusIs(StatusCode::kAlreadyExists));
  // The export held a lease only while it ran.
  ASSERT_OK(store.Remove(imported.manifest_key));
}

// An export that fails partway (here a stored fragment replaced by a FIFO,
// which the store never opens as an object) leaves no partial files and no
// directory it made; a directory that existed stays.
TEST(HfStoreBridgeTest, FailedExportLeavesNoPartialFilesBehind) {
  TempDir dir("hf-bridge-failed-export");
  auto ckpt = Must(HfCheckpoint::Open(MakeCheckpoint(dir.path() + "/ckpt")));
  auto store = Must(WeightStore::Open("fs://" + dir.path() + "/store"));
  ASSERT_OK_AND_ASSIGN(auto imported, ImportCheckpoint(ckpt, kConfig, store));
  ASSERT_OK_AND_ASSIGN(auto manifest,
                       store.ReadManifest(imported.manifest_key));
  std::string victim;
  for (const auto& entry :
       std::filesystem::recursive_directory_iterator(dir.path() + "/store")) {
    if (entry.is_regular_file() &&
        entry.path().string().find("/payload/") != std::string::npos) {
      victim = entry.path().string();
      break;
    }
  }
  ASSERT_FALSE(victim.empty());
  ASSERT_EQ(::unlink(victim.c_str()), 0);
  ASSERT_EQ(::mkfifo(victim.c_str(), 0644), 0);
  const std::string out = dir.path() + "/exported";
  EXPECT_THAT(ExportCheckpoint(store, manifest, out),
              StatusIs(StatusCode::kNotFound, HasSubstr("no object")));
  EXPECT_FALSE(std::filesystem::exists(out));
  ASSERT_TRUE(std::filesystem::create_directory(out));
  EXPECT_THAT(ExportCheckpoint(store, manifest, out),
              StatusIs(StatusCode::kNotFound));
  EXPECT_TRUE(std::filesystem::is_empty(out));
}

TEST(HfStoreBridgeTest, ImportingTheSameRevisionTwiceKeepsTheFirst) {
  TempDir dir("hf-bridge-twice");
  auto ckpt = Must(HfCheckpoint::Open(MakeCheckpoint(dir.path() + "/ckpt")));
  auto store = Must(WeightStore::Open("fs://" + dir.path() + "/store"));
  ASSERT_OK_AND_ASSIGN(auto first, ImportCheckpoint(ckpt, kConfig, store));
  // A second upload of one revision never replaces the first.
  EXPECT_THAT(ImportCheckpoint(ckpt, kConfig, store),
              StatusIs(StatusCode::kAlreadyExists,
                       ::testing::StartsWith("conflicting weight revision")));
  ASSERT_OK(store.Verify(first.manifest_key).status());
  ASSERT_OK_AND_ASSIGN(auto listed, store.List());
  ASSERT_EQ(listed.size(), 1u);
  EXPECT_EQ(listed[0].state, "READY");
}

TEST(HfStoreBridgeTest, ImportNeedsAKnownArchitecture) {
  TempDir dir("hf-bridge-arch");
  auto ckpt = Must(HfCheckpoint::Open(MakeCheckpoint(dir.path() + "/ckpt")));
  auto store = Must(WeightStore::Open("fs://" + dir.path() + "/store"));
  EXPECT_THAT(ImportCheckpoint(ckpt, R"({"architectures": ["Foo"]})", store),
              StatusIs(StatusCode::kUnimplemented,
                       ::testing::StartsWith("unknown architecture Foo")));
  ASSERT_OK_AND_ASSIGN(auto listed, store.List());
  EXPECT_TRUE(listed.empty());
}

}  // namespace
}  // namespace reshard
