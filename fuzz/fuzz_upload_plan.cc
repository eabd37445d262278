// Upload plans and receipts as the store holds them (WeightStore::
// ReadUploadPlan, GatherReceipts). Input: NUL-separated documents: the
// manifest key, the transaction id, the plan record, then receipt records.
// Properties: a loaded plan re-published and loaded again is the same plan;
// gathered receipts cover every stored fragment of the plan.

#include <memory>

#include "fuzz/fuzz_check.h"
#include "reshard/weight_store.h"
#include "store/keys.h"
#include "testing/memory_object_store.h"

namespace {

using reshard::UploadPlan;
using reshard::WeightStore;
using reshard::testing::MemoryObjectStore;

WeightStore NewStore() {
  return *WeightStore::Open(std::make_shared<MemoryObjectStore>());
}

bool SamePlan(const UploadPlan& a, const UploadPlan& b) {
  if (a.generation() != b.generation() ||
      a.transaction_id() != b.transaction_id() ||
      a.manifest().manifest_digest() != b.manifest().manifest_digest() ||
      a.operations().size() != b.operations().size()) {
    return false;
  }
  for (size_t i = 0; i < a.operations().size(); ++i) {
    const auto& x = a.operations()[i];
    const auto& y = b.operations()[i];
    if (x.stored_fragment != y.stored_fragment ||
        x.participant_id != y.participant_id ||
        x.placement_fragment_id != y.placement_fragment_id) {
      return false;
    }
  }
  return true;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const auto docs =
      reshard::fuzz::SplitAtNul(reshard::fuzz::AsView(data, size));
  if (docs.size() < 3) return 0;
  const std::string_view manifest_key = docs[0];
  const std::string_view txn = docs[1];
  const auto keys =
      reshard::internal::RevisionKeys::OfManifestKey(manifest_key);
  if (!keys) return 0;
  WeightStore store = NewStore();
  if (!store.backend().Put(keys->Plan(txn), docs[2]).ok()) return 0;
  auto plan = store.ReadUploadPlan(manifest_key, txn);
  if (!plan.ok()) return 0;

  WeightStore fresh = NewStore();
  FUZZ_CHECK(fresh.PublishUploadPlan(*plan).ok(), "a loaded plan publishes");
  auto again = fresh.ReadUploadPlan(manifest_key, txn);
  FUZZ_CHECK(again.ok(), "a published plan loads");
  FUZZ_CHECK(SamePlan(*plan, *again), "plan round trip");

  for (size_t i = 3; i < docs.size(); ++i) {
    const std::string key =
        reshard::internal::RevisionKeys(plan->manifest().group_id())
            .Receipt(plan->transaction_id(), "r" + std::to_string(i));
    if (!store.backend().Put(key, docs[i]).ok()) return 0;
  }
  auto receipts = store.GatherReceipts(*plan);
  if (!receipts.ok()) return 0;
  for (const auto& f : plan->manifest().fragments()) {
    bool found = false;
    for (const auto& r : *receipts)
      found = found || r.stored_fragment_id == f.stored_fragment_id;
    FUZZ_CHECK(found, "gathered receipts cover every stored fragment");
  }
  return 0;
}
