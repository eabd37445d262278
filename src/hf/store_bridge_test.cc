// Checkpoint -> weight-store revision -> any layout -> checkpoint, every
// byte checked against the self-test pattern (tensor and global element
// index).

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <string>

#include "reshard/hf.h"
#include "reshard/weight_store.h"
#include "selftest/host_buffers.h"
#include "selftest/pattern.h"
#include "store/keys.h"
#include "testing/must.h"
#include "testing/status_testing.h"
#include "testing/store_backends.h"
#include "testing/temp_dir.h"
#include "util/printable.h"

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

// ------------------------------------------------------------- side files

void WriteBytes(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary) << bytes;
}

std::string ReadBytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

// What the checkpoint directory holds beside the weights: side files
// (bytes a text reader would trip on included) and entries that are not.
const std::map<std::string, std::string>& SideFiles() {
  static const auto* files = new std::map<std::string, std::string>{
      {"config.json", kConfig},
      {"generation_config.json", R"({"do_sample": true})"},
      {"tokenizer.json", std::string("{\"v\":\"\0\xff\x1b[31m\"}", 15)},
      {"chat_template.jinja", "{{ messages }}\n"},
      {"merges.txt", ""},
  };
  return *files;
}

std::string MakeCheckpointWithSideFiles(const std::string& dir) {
  MakeCheckpoint(dir);
  for (const auto& [name, bytes] : SideFiles()) {
    WriteBytes(dir + "/" + name, bytes);
  }
  // Not side files: never stored, never written.
  WriteBytes(dir + "/README.md", "# model");
  WriteBytes(dir + "/modeling_x.py", "import os");
  WriteBytes(dir + "/config.json\n", "{}");
  WriteBytes(dir + "/tokenizer.json\x1b[2J", "{}");
  return dir;
}

// Every key of the store under the upload transaction `txn`.
std::vector<std::string> KeysOf(ObjectStore& b, const std::string& txn) {
  std::vector<std::string> out;
  for (const std::string& k : Must(b.List("weights/"))) {
    if (k.find("/" + txn + "/") != std::string::npos ||
        k.ends_with("/" + txn)) {
      out.push_back(k);
    }
  }
  return out;
}

class HfSideFilesTest : public testing::StoreBackendTest {
 protected:
  HfSideFilesTest() : backend_(GetParam()), dir_("hf-side-files") {}
  WeightStore Store(WeightStoreOptions o = {}) {
    return Must(WeightStore::Open(backend_.backend(), std::move(o)));
  }
  testing::BackendStore backend_;
  TempDir dir_;
};
INSTANTIATE_TEST_SUITE_P(, HfSideFilesTest,
                         ::testing::ValuesIn(testing::StoreBackendNames()),
                         testing::StoreBackendCaseName);

TEST_P(HfSideFilesTest, ImportStoresThemAndExportWritesThemBack) {
  auto ckpt = Must(
      HfCheckpoint::Open(MakeCheckpointWithSideFiles(dir_.path() + "/ckpt")));
  auto store = Store();
  ASSERT_OK_AND_ASSIGN(auto imported, ImportCheckpoint(ckpt, kConfig, store));
  EXPECT_EQ(imported.side_files, SideFiles().size());
  ASSERT_OK_AND_ASSIGN(auto manifest,
                       store.ReadManifest(imported.manifest_key));
  // Records of the import's transaction, beside its payloads.
  const std::string txn =
      internal::TransactionOfObject(manifest.fragments()[0].object_key);
  const std::string base = manifest.group_id();
  const auto keys = KeysOf(*backend_.backend(), txn);
  for (const auto& [name, bytes] : SideFiles()) {
    for (const char* family : {"payload", "checksums"}) {
      const std::string key = base + "/" + family + "/" + txn + "/file-" + name;
      EXPECT_THAT(keys, ::testing::Contains(key));
    }
  }
  EXPECT_EQ(
      Must(backend_.backend()->Get(base + "/transactions/" + txn + "/files")),
      R"({"files":[{"name":"chat_template.jinja","size":15},)"
      R"({"name":"config.json","size":)" +
          std::to_string(std::string(kConfig).size()) +
          R"(},{"name":"generation_config.json","size":19},)"
          R"({"name":"merges.txt","size":0},)"
          R"({"name":"tokenizer.json","size":15}],)"
          R"("record_type":"weight-revision-files"})");
  ASSERT_OK_AND_ASSIGN(auto verified, store.Verify(imported.manifest_key));
  EXPECT_EQ(verified.objects, manifest.fragments().size() + SideFiles().size());
  const std::string out = dir_.path() + "/exported";
  ASSERT_OK_AND_ASSIGN(auto exported, ExportCheckpoint(store, manifest, out));
  EXPECT_EQ(exported.side_files, SideFiles().size());
  std::set<std::string> names;
  for (const auto& e : std::filesystem::directory_iterator(out)) {
    names.insert(e.path().filename().string());
    EXPECT_TRUE(e.is_regular_file()) << e.path();
  }
  for (const auto& [name, bytes] : SideFiles()) {
    EXPECT_EQ(ReadBytes(out + "/" + name), bytes) << name;
    names.erase(name);
  }
  // Weights and their index; nothing that was not a side file.
  for (const std::string& n : names) {
    EXPECT_TRUE(n.ends_with(".safetensors") ||
                n == "model.safetensors.index.json")
        << n;
  }
  EXPECT_EQ(Must(HfCheckpoint::Open(out)).tensor_bytes(), ckpt.tensor_bytes());
}

TEST_P(HfSideFilesTest, ARevisionWithoutSideFilesExportsItsWeightsAlone) {
  // As a revision imported before side files were stored: no index record.
  auto ckpt = Must(HfCheckpoint::Open(MakeCheckpoint(dir_.path() + "/ckpt")));
  auto store = Store();
  ASSERT_OK_AND_ASSIGN(auto imported, ImportCheckpoint(ckpt, kConfig, store));
  EXPECT_EQ(imported.side_files, 0u);
  ASSERT_OK_AND_ASSIGN(auto manifest,
                       store.ReadManifest(imported.manifest_key));
  ASSERT_OK_AND_ASSIGN(auto verified, store.Verify(imported.manifest_key));
  EXPECT_EQ(verified.objects, manifest.fragments().size());
  const std::string out = dir_.path() + "/exported";
  ASSERT_OK_AND_ASSIGN(auto exported, ExportCheckpoint(store, manifest, out));
  EXPECT_EQ(exported.side_files, 0u);
  EXPECT_FALSE(std::filesystem::exists(out + "/config.json"));
  EXPECT_EQ(Must(HfCheckpoint::Open(out)).tensor_bytes(), ckpt.tensor_bytes());
}

TEST_P(HfSideFilesTest, DamagedSideFileFailsVerifyAndExportWritesNothing) {
  auto ckpt = Must(
      HfCheckpoint::Open(MakeCheckpointWithSideFiles(dir_.path() + "/ckpt")));
  auto store = Store();
  ASSERT_OK_AND_ASSIGN(auto imported, ImportCheckpoint(ckpt, kConfig, store));
  auto manifest = Must(store.ReadManifest(imported.manifest_key));
  const std::string txn =
      internal::TransactionOfObject(manifest.fragments()[0].object_key);
  const std::string key =
      manifest.group_id() + "/payload/" + txn + "/file-tokenizer.json";
  backend_.FlipByte(key, 3);
  EXPECT_THAT(store.Verify(imported.manifest_key),
              StatusIs(StatusCode::kDataLoss,
                       HasSubstr("checksum mismatch in stored fragment file "
                                 "tokenizer.json (object " +
                                 key + ")")));
  const std::string out = dir_.path() + "/exported";
  EXPECT_THAT(ExportCheckpoint(store, manifest, out),
              StatusIs(StatusCode::kDataLoss, HasSubstr(key)));
  EXPECT_FALSE(std::filesystem::exists(out));
}

TEST_P(HfSideFilesTest, ExportRefusesADirectoryHoldingASideFile) {
  auto ckpt = Must(
      HfCheckpoint::Open(MakeCheckpointWithSideFiles(dir_.path() + "/ckpt")));
  auto store = Store();
  ASSERT_OK_AND_ASSIGN(auto imported, ImportCheckpoint(ckpt, kConfig, store));
  auto manifest = Must(store.ReadManifest(imported.manifest_key));
  const std::string out = dir_.path() + "/exported";
  ASSERT_TRUE(std::filesystem::create_directory(out));
  WriteBytes(out + "/config.json", "mine");
  EXPECT_THAT(ExportCheckpoint(store, manifest, out),
              StatusIs(StatusCode::kAlreadyExists,
                       out + "/config.json exists: refusing to overwrite a "
                             "checkpoint's side file"));
  // Nothing written: only the file that was there.
  EXPECT_EQ(std::distance(std::filesystem::directory_iterator(out), {}), 1);
  EXPECT_EQ(ReadBytes(out + "/config.json"), "mine");
  // A leftover partial file is refused alike.
  std::filesystem::remove(out + "/config.json");
  WriteBytes(out + "/tokenizer.json.partial", "");
  EXPECT_THAT(ExportCheckpoint(store, manifest, out),
              StatusIs(StatusCode::kAlreadyExists,
                       HasSubstr("tokenizer.json.partial exists")));
}

TEST_P(HfSideFilesTest, ImportingTwiceKeepsTheFirstAndGcCollectsTheSecond) {
  auto ckpt = Must(
      HfCheckpoint::Open(MakeCheckpointWithSideFiles(dir_.path() + "/ckpt")));
  auto store = Store();
  ASSERT_OK_AND_ASSIGN(auto first, ImportCheckpoint(ckpt, kConfig, store));
  auto manifest = Must(store.ReadManifest(first.manifest_key));
  const std::string txn =
      internal::TransactionOfObject(manifest.fragments()[0].object_key);
  const size_t kept = KeysOf(*backend_.backend(), txn).size();
  EXPECT_THAT(ImportCheckpoint(ckpt, kConfig, store),
              StatusIs(StatusCode::kAlreadyExists,
                       ::testing::StartsWith("conflicting weight revision")));
  ASSERT_OK_AND_ASSIGN(auto gc, store.Gc());
  ASSERT_EQ(gc.transactions_removed.size(), 1u);
  // Nothing of the second import is left; the first is whole.
  const std::string loser = gc.transactions_removed[0].substr(
      gc.transactions_removed[0].rfind('/') + 1);
  EXPECT_NE(loser, txn);
  EXPECT_THAT(KeysOf(*backend_.backend(), loser), ::testing::IsEmpty());
  EXPECT_EQ(KeysOf(*backend_.backend(), txn).size(), kept);
  ASSERT_OK(store.Verify(first.manifest_key).status());
  ASSERT_OK_AND_ASSIGN(auto exported,
                       ExportCheckpoint(store, manifest, dir_.path() + "/out"));
  EXPECT_EQ(exported.side_files, SideFiles().size());
  // Remove takes the side files with the revision.
  ASSERT_OK(store.Remove(first.manifest_key));
  EXPECT_THAT(Must(backend_.backend()->List("weights/")), ::testing::IsEmpty());
}

// A side file that is not a regular file (or too large) is refused naming
// it before the store is touched; a link to a regular file is followed.
TEST(HfSideFilesSourceTest, HostileSourceEntries) {
  TempDir dir("hf-side-files-hostile");
  const std::string ckpt_dir = MakeCheckpoint(dir.path() + "/ckpt");
  auto ckpt = Must(HfCheckpoint::Open(ckpt_dir));
  const std::string uri = "fs://" + dir.path() + "/store";
  auto store = Must(WeightStore::Open(uri));
  const auto refused = [&](StatusCode code, const std::string& message) {
    EXPECT_THAT(ImportCheckpoint(ckpt, kConfig, store),
                StatusIs(code, message));
    EXPECT_THAT(Must(store.backend().List("weights/")), ::testing::IsEmpty());
  };
  const std::string tok = ckpt_dir + "/tokenizer.json";
  ASSERT_EQ(::mkfifo(tok.c_str(), 0644), 0);
  refused(StatusCode::kInvalidArgument,
          tok + " is not a regular file (a FIFO)");
  ASSERT_EQ(::unlink(tok.c_str()), 0);
  std::filesystem::create_directory(tok);
  refused(StatusCode::kInvalidArgument,
          tok + " is not a regular file (a directory)");
  std::filesystem::remove(tok);
  std::filesystem::create_symlink(dir.path() + "/nowhere", tok);
  refused(StatusCode::kNotFound,
          "cannot read " + tok + ": No such file or directory");
  std::filesystem::remove(tok);
  { std::ofstream big(tok, std::ios::binary); }
  std::filesystem::resize_file(tok, (uint64_t{64} << 20) + 1);
  refused(StatusCode::kInvalidArgument,
          "side file " + tok +
              " holds 67108865 bytes; side files hold at most 67108864 bytes "
              "each and 268435456 together");
  std::filesystem::remove(tok);
  // A link to a regular file is read through (the Hugging Face cache's
  // snapshots are links to blobs) and exported as a regular file.
  WriteBytes(dir.path() + "/blob", kConfig);
  std::filesystem::create_symlink(dir.path() + "/blob",
                                  ckpt_dir + "/config.json");
  ASSERT_OK_AND_ASSIGN(auto imported, ImportCheckpoint(ckpt, kConfig, store));
  EXPECT_EQ(imported.side_files, 1u);
  const std::string out = dir.path() + "/out";
  ASSERT_OK(ExportCheckpoint(
                store, Must(store.ReadManifest(imported.manifest_key)), out)
                .status());
  EXPECT_FALSE(std::filesystem::is_symlink(out + "/config.json"));
  EXPECT_EQ(ReadBytes(out + "/config.json"), kConfig);
}

TEST(HfSideFilesSourceTest, NamesOutsideTheAllowListAreNoSideFiles) {
  for (const char* name :
       {"config.json", "generation_config.json", "tokenizer.json",
        "tokenizer_config.json", "special_tokens_map.json", "added_tokens.json",
        "chat_template.jinja", "chat_template.json", "tokenizer.model",
        "spiece.model", "sentencepiece.bpe.model", "vocab.json", "vocab.txt",
        "merges.txt", "preprocessor_config.json", "processor_config.json",
        "qwen.tiktoken"}) {
    EXPECT_TRUE(IsHfSideFileName(name)) << name;
  }
  for (const char* name :
       {"model.safetensors", "model.safetensors.index.json", "modeling_x.py",
        "README.md", ".tiktoken", "a b.tiktoken", "x\n.tiktoken",
        "config.json\n", "Config.json", "../config.json", ".config.json",
        "tokenizer.json.partial", ""}) {
    EXPECT_FALSE(IsHfSideFileName(name)) << internal::Printable(name);
  }
}

}  // namespace
}  // namespace reshard
