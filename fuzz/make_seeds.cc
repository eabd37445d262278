// Writes the seed corpora of the store-record and binding fuzz targets
// (fuzz_binding, fuzz_stored_manifest, fuzz_upload_plan, fuzz_checksum,
// fuzz_legacy_import) by running the real encoders: an upload of small
// scenario placements into an in-memory store, plus legacy inventories in
// the shape earlier adapters exported. Not run by CI; rerun after a format
// change:
//   cmake --build build-asan --target fuzz_make_seeds
//   build-asan/fuzz/fuzz_make_seeds tests/data fuzz/corpus

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "reshard/binding.h"
#include "reshard/legacy.h"
#include "reshard/weight_store.h"
#include "selftest/host_buffers.h"
#include "selftest/pattern.h"
#include "testing/memory_object_store.h"
#include "testing/placement_builders.h"
#include "util/sha256.h"

namespace reshard::fuzz {
namespace {

std::string corpus_dir;

void Write(std::string_view target, std::string_view data) {
  const std::filesystem::path dir =
      std::filesystem::path(corpus_dir) / std::string(target);
  std::filesystem::create_directories(dir);
  const std::string name = internal::Sha256Hex(data).substr(0, 40);
  std::ofstream(dir / name, std::ios::binary)
      .write(data.data(), static_cast<std::streamsize>(data.size()));
}

template <typename T>
T Must(Result<T> r, const char* what) {
  if (!r.ok()) {
    std::fprintf(stderr, "%s: %s\n", what, r.status().ToString().c_str());
    std::exit(1);
  }
  return std::move(*r);
}

void Must(const Status& st, const char* what) {
  if (!st.ok()) {
    std::fprintf(stderr, "%s: %s\n", what, st.ToString().c_str());
    std::exit(1);
  }
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// Bindings, a stored manifest, the upload plan and receipt records and the
// checksum records of one upload of `placement`.
void StoreSeeds(const WeightPlacementManifest& placement) {
  auto buffers =
      Must(internal::AllocateHostBuffers(placement, "seed"), "allocate");
  internal::FillPattern(placement, internal::TensorIndex(placement), buffers);
  for (const auto& b : buffers.bindings) {
    Write("fuzz_binding", WeightRuntimeBindingToJson(b));
  }
  auto backend = std::make_shared<testing::MemoryObjectStore>();
  WeightStoreOptions options;
  options.chunk_bytes = 32;  // several checksum lines per fragment
  WeightStore store = Must(WeightStore::Open(backend, options), "open");
  UploadPlan plan =
      Must(store.PrepareUpload(placement, buffers.bindings), "prepare");
  Must(store.PublishUploadPlan(plan), "publish plan");
  std::vector<UploadReceipt> receipts;
  std::string seed =
      plan.manifest().manifest_key() + '\0' + plan.transaction_id() + '\0';
  const std::string txn_prefix =
      plan.manifest().group_id() + "/transactions/" + plan.transaction_id();
  seed += Must(backend->Get(txn_prefix + "/plan"), "plan record");
  for (const auto& b : buffers.bindings) {
    auto r = Must(store.Upload(plan, placement, b), "upload");
    Must(store.PublishReceipts(plan, r), "publish receipts");
    receipts.insert(receipts.end(), r.begin(), r.end());
  }
  for (const std::string& key :
       Must(backend->List(txn_prefix + "/receipts/"), "list receipts")) {
    seed += '\0' + Must(backend->Get(key), "receipt record");
  }
  Write("fuzz_upload_plan", seed);
  Must(store.Commit(plan, receipts), "commit");
  Write("fuzz_stored_manifest",
        Must(backend->Get(plan.manifest().manifest_key()), "manifest"));
  const std::string base = plan.manifest().group_id();
  for (const std::string& key :
       Must(backend->List(base + "/checksums/"), "list checksums")) {
    Write("fuzz_checksum", Must(backend->Get(key), "checksum record"));
  }
}

// Legacy seeds: the grid byte (2 bits each of tp-1, pp-1, ep-1, dp-1) and
// the inventories separated by NUL, checked to import.
void LegacySeeds() {
  for (const testing::Sizes sizes :
       {testing::Sizes{1, 1, 1, 2}, testing::Sizes{1, 2, 1, 2},
        testing::Sizes{1, 1, 2, 2}, testing::Sizes{2, 2, 2, 2}}) {
    auto d = testing::GridDraft(sizes);
    d.header.placement_set_id = "demo-model-legacy";
    testing::AddTensor(&d, {.tensor_id = "layers.0.mlp.w",
                            .shape = {4, 8},
                            .tp_dim = 1,
                            .layer_id = 0});
    if (sizes.ep > 1) {
      testing::AddTensor(&d, {.tensor_id = "layers.0.experts.w",
                              .shape = {4, 8, 6},
                              .tp_dim = 1,
                              .ep_split = true,
                              .layer_id = 0});
    }
    testing::AddTensor(
        &d, {.tensor_id = "layers.0.norm", .shape = {6}, .layer_id = 0});
    auto m = Must(d.Build(), "legacy placement");
    const auto inventories = testing::LegacyInventories(m);
    LegacyImportOptions options{
        .sizes = {
            .tp = sizes.tp, .pp = sizes.pp, .ep = sizes.ep, .dp = sizes.dp}};
    std::vector<std::string_view> views(inventories.begin(), inventories.end());
    Must(ImportLegacyInventories(views, options), "legacy import");
    std::string seed(
        1, static_cast<char>((sizes.tp - 1) | (sizes.pp - 1) << 2 |
                             (sizes.ep - 1) << 4 | (sizes.dp - 1) << 6));
    for (size_t i = 0; i < inventories.size(); ++i) {
      if (i) seed += '\0';
      seed += inventories[i];
    }
    Write("fuzz_legacy_import", seed);
  }
}

}  // namespace
}  // namespace reshard::fuzz

int main(int argc, char** argv) {
  using namespace reshard::fuzz;
  if (argc != 3) {
    std::fprintf(stderr, "usage: fuzz_make_seeds TEST_DATA_DIR CORPUS_DIR\n");
    return 2;
  }
  corpus_dir = argv[2];
  for (const char* name :
       {"aliases_tied_embeddings_source.json",
        "cross_dim_ep2_to_tp2_source.json", "ep_regroup_2_to_8_source.json"}) {
    StoreSeeds(Must(reshard::WeightPlacementFromJson(
                        ReadFile(std::string(argv[1]) + "/scenarios/" + name)),
                    name));
  }
  LegacySeeds();
  return 0;
}
