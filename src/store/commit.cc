// WeightStore::Commit and Abort: the decision record (create-only, the
// first decision wins), then the manifest published or the payloads
// removed (docs/store-format.md, "Upload, commit, abort").

#include <algorithm>
#include <chrono>
#include <ctime>
#include <map>
#include <optional>
#include <set>
#include <tuple>

#include "reshard/plan.h"
#include "reshard/weight_store.h"
#include "store/checksum.h"
#include "store/keys.h"
#include "store/progress.h"
#include "store/records.h"
#include "store/revision_files.h"
#include "store/revision_state.h"
#include "util/dims_text.h"

namespace reshard {

namespace {

using internal::ClaimDecision;
using internal::KeysOf;
using internal::kPayloadFamilies;
using internal::PublishManifest;
using internal::ReadDecision;
using internal::RemoveTransactionKeys;
using internal::RevisionKeys;
using internal::TransactionOfObject;
using internal::UploadDecision;

}  // namespace

namespace {

// Rule 66: exactly one receipt per stored fragment, matching the plan.
Status CheckReceipts(const UploadPlan& plan,
                     const std::vector<UploadReceipt>& receipts) {
  std::map<std::string, const UploadReceipt*> got;
  for (const auto& r : receipts) {
    if (!got.emplace(r.stored_fragment_id, &r).second) {
      return Status::InvalidArgument("duplicate upload receipt: " +
                                     r.stored_fragment_id);
    }
  }
  for (const UploadOperation& op : plan.operations()) {
    const StoredFragment& s = plan.manifest().fragments()[op.stored_fragment];
    auto it = got.find(s.stored_fragment_id);
    if (it == got.end()) {
      return Status::FailedPrecondition("missing upload receipt: " +
                                        s.stored_fragment_id);
    }
    if (it->second->object_key != s.object_key ||
        it->second->participant_id != op.participant_id) {
      return Status::InvalidArgument("upload receipt does not match plan: " +
                                     s.stored_fragment_id);
    }
    got.erase(it);
  }
  if (!got.empty()) {
    return Status::InvalidArgument("unexpected upload receipt: " +
                                   got.begin()->first);
  }
  return Status::OK();
}

// Every payload complete and its checksum record present.
Status RequirePayloads(ObjectStore& b, const UploadPlan& plan) {
  const RevisionKeys keys = KeysOf(plan.manifest());
  for (const StoredFragment& s : plan.manifest().fragments()) {
    auto size = b.ObjectSize(s.object_key);
    if (!size.ok() || *size != s.nbytes) {
      return Status::FailedPrecondition("payload is not complete: " +
                                        s.object_key);
    }
    auto sums =
        b.Get(keys.Checksum(plan.transaction_id(), s.stored_fragment_id));
    if (!sums.ok()) {
      return Status::FailedPrecondition("payload checksums missing: " +
                                        s.object_key);
    }
  }
  return Status::OK();
}

// Decides "commit" unless the upload already decided: the manifest to
// publish is stored beside the decision first (so that a retry, or Gc, can
// roll a decided commit forward) and the payloads are made durable before
// anything can refer to them.
Status DecideCommit(ObjectStore& b, const UploadPlan& plan,
                    const std::string& json) {
  const RevisionKeys keys = KeysOf(plan.manifest());
  const std::string& txn = plan.transaction_id();
  RESHARD_ASSIGN_OR_RETURN(auto decided, ReadDecision(b, keys.Decision(txn)));
  if (decided) {
    if (*decided != UploadDecision::kCommit) {
      return Status::FailedPrecondition("weight upload already chose abort");
    }
    return Status::OK();
  }
  RESHARD_RETURN_NOT_OK(RequirePayloads(b, plan));
  Status copied =
      b.PutObject(keys.PendingManifest(txn), {{json.data(), json.size()}},
                  Durability::kAtNextSync);
  if (!copied.ok() && !copied.IsAlreadyExists()) return copied;
  RESHARD_RETURN_NOT_OK(b.Sync());
  return ClaimDecision(b, keys.Decision(txn), UploadDecision::kCommit,
                       plan.manifest().manifest_digest())
      .status();
}

// Another manifest holds the revision: an identical one is this upload
// (an idempotent retry); another writer's valid manifest makes this upload
// a loser whose payloads go; damaged bytes under the key (a torn or
// corrupted publication of this very upload) are reported and the
// payloads kept.
Status ResolvePublishedManifest(ObjectStore& b, const UploadPlan& plan,
                                const std::string& json) {
  const StoredWeightManifest& m = plan.manifest();
  RESHARD_ASSIGN_OR_RETURN(std::string winner, b.Get(m.manifest_key()));
  if (winner == json) return Status::OK();
  auto other = StoredWeightManifestFromJson(winner);
  const bool damaged =
      !other.ok() || other->manifest_key() != m.manifest_key() ||
      std::any_of(other->fragments().begin(), other->fragments().end(),
                  [&](const StoredFragment& f) {
                    return TransactionOfObject(f.object_key) ==
                           plan.transaction_id();
                  });
  if (damaged) {
    return Status::DataLoss("published weight manifest is damaged: " +
                            m.manifest_key());
  }
  RESHARD_RETURN_NOT_OK(RemoveTransactionKeys(
      b, KeysOf(m), plan.transaction_id(), kPayloadFamilies, {}, nullptr));
  return Status::AlreadyExists("conflicting weight revision: " +
                               m.manifest_key());
}

}  // namespace

Status WeightStore::Commit(const UploadPlan& plan,
                           const std::vector<UploadReceipt>& receipts) {
  RESHARD_RETURN_NOT_OK(CheckReceipts(plan, receipts));
  const StoredWeightManifest& m = plan.manifest();
  const std::string json = StoredWeightManifestToJson(m);
  // First decision wins.
  RESHARD_RETURN_NOT_OK(DecideCommit(*backend_, plan, json));
  RESHARD_RETURN_NOT_OK(RequirePayloads(*backend_, plan));
  if (options_.on_stage) options_.on_stage("decision");
  // Publish the manifest create-only; resolve a race.
  Status st = PublishManifest(*backend_, m.manifest_key(), json);
  if (st.IsAlreadyExists()) {
    return ResolvePublishedManifest(*backend_, plan, json);
  }
  RESHARD_RETURN_NOT_OK(st.WithContext("manifest put failed"));
  if (options_.on_stage) options_.on_stage("published");
  return Status::OK();
}

Status WeightStore::Abort(const UploadPlan& plan) {
  const StoredWeightManifest& m = plan.manifest();
  auto published = backend_->Get(m.manifest_key());
  if (published.ok() && *published == StoredWeightManifestToJson(m)) {
    return Status::FailedPrecondition(
        "cannot abort a published weight revision: " + m.manifest_key());
  }
  const RevisionKeys keys = KeysOf(m);
  RESHARD_RETURN_NOT_OK(
      ClaimDecision(*backend_, keys.Decision(plan.transaction_id()),
                    UploadDecision::kAbort, m.manifest_digest())
          .status());
  return RemoveTransactionKeys(*backend_, keys, plan.transaction_id(),
                               kPayloadFamilies, {}, nullptr);
}

}  // namespace reshard
