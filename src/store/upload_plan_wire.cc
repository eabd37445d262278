// Upload plans and receipts as store records, for uploads spread over
// processes (the coordinator prepares and commits, every source process
// uploads its own fragments).

#include <algorithm>
#include <map>

#include "reshard/weight_store.h"
#include "store/layout.h"
#include "util/canonical_json.h"
#include "util/json_reader.h"

namespace reshard {
namespace {

using internal::JsonDocument;
using internal::JsonPath;
using internal::StrictObject;

std::string TransactionKey(const UploadPlan& plan) {
  return plan.manifest().group_id() + "/transactions/" + plan.transaction_id();
}

}  // namespace

Status WeightStore::PublishUploadPlan(const UploadPlan& plan) {
  std::string out;
  internal::CanonicalJsonWriter w(&out, internal::JsonAscii::kRawUtf8);
  w.BeginObject();
  w.KeyUInt("generation", plan.generation());
  w.KeyString("manifest", StoredWeightManifestToJson(plan.manifest()));
  w.Key("operations");
  w.BeginArray();
  for (const UploadOperation& op : plan.operations()) {
    w.BeginObject();
    w.KeyString("participant_id", op.participant_id);
    w.KeyString("placement_fragment_id", op.placement_fragment_id);
    w.KeyUInt("stored_fragment", op.stored_fragment);
    w.EndObject();
  }
  w.EndArray();
  w.KeyString("source_placement_id", plan.source_placement_id_);
  w.KeyString("transaction_id", plan.transaction_id());
  w.Key("writers");
  w.BeginArray();
  for (const UploadWriter& writer : plan.writers()) {
    w.BeginObject();
    w.KeyString("instance_id", writer.instance_id);
    w.KeyString("lease_id", writer.lease_id);
    w.KeyString("participant_id", writer.participant_id);
    w.EndObject();
  }
  w.EndArray();
  w.EndObject();
  return backend_->Put(TransactionKey(plan) + "/plan", out);
}

Result<UploadPlan> WeightStore::LoadUploadPlan(
    std::string_view manifest_key, std::string_view transaction_id) {
  const std::string base = internal::BaseOfManifestKey(manifest_key);
  if (base.empty()) {
    return Status::InvalidArgument("not a manifest key: " +
                                   std::string(manifest_key));
  }
  const std::string key =
      base + "/transactions/" + std::string(transaction_id) + "/plan";
  RESHARD_ASSIGN_OR_RETURN(std::string text, backend_->Get(key));
  auto fail = [&](const Status& st) { return st.WithContext(key); };
  auto doc = JsonDocument::Parse(text);
  if (!doc.ok()) return fail(doc.status());
  const JsonPath root;
  auto obj =
      StrictObject::Make(doc->root(), root, "upload plan",
                         {"generation", "manifest", "operations",
                          "source_placement_id", "transaction_id", "writers"});
  if (!obj.ok()) return fail(obj.status());
  UploadPlan plan;
  auto generation =
      internal::ReadU64(obj->Get("generation"), root.Field("generation"));
  auto manifest_json =
      internal::ReadString(obj->Get("manifest"), root.Field("manifest"));
  auto placement = internal::ReadIdField(*obj, "source_placement_id", root);
  auto txn = internal::ReadIdField(*obj, "transaction_id", root);
  for (const Status* st : {&generation.status(), &manifest_json.status(),
                           &placement.status(), &txn.status()}) {
    if (!st->ok()) return fail(*st);
  }
  if (*txn != transaction_id) {
    return Status::DataLoss(key + " holds transaction " + *txn);
  }
  auto manifest = StoredWeightManifestFromJson(*manifest_json);
  if (!manifest.ok()) return fail(manifest.status());
  if (manifest->manifest_key() != manifest_key) {
    return Status::DataLoss(key + " is the plan of " +
                            manifest->manifest_key());
  }
  plan.generation_ = *generation;
  plan.source_placement_id_ = *placement;
  plan.transaction_id_ = *txn;
  plan.manifest_ =
      std::make_shared<const StoredWeightManifest>(std::move(*manifest));
  const JsonPath ops_path = root.Field("operations");
  auto ops = internal::ReadArray(obj->Get("operations"), ops_path);
  if (!ops.ok()) return fail(ops.status());
  size_t i = 0;
  for (internal::JsonElement e : *ops) {
    const JsonPath p = ops_path.Index(i++);
    auto op = StrictObject::Make(
        e, p, "upload operation",
        {"participant_id", "placement_fragment_id", "stored_fragment"});
    if (!op.ok()) return fail(op.status());
    auto participant = internal::ReadIdField(*op, "participant_id", p);
    auto fragment = internal::ReadIdField(*op, "placement_fragment_id", p);
    auto index = internal::ReadU64(op->Get("stored_fragment"),
                                   p.Field("stored_fragment"));
    for (const Status* st :
         {&participant.status(), &fragment.status(), &index.status()}) {
      if (!st->ok()) return fail(*st);
    }
    if (*index >= plan.manifest_->fragments().size()) {
      return fail(Status::InvalidArgument(p.ToString() +
                                          ".stored_fragment out of range"));
    }
    plan.ops_.push_back({*index, *participant, *fragment});
  }
  // Rule 65: every stored fragment written by exactly one operation, into
  // an object the transaction owns, under the group this store's key
  // layout gives the revision.
  const StoredWeightManifest& m = *plan.manifest_;
  if (plan.ops_.size() != m.fragments().size()) {
    return fail(Status::InvalidArgument(
        "upload plan has " + std::to_string(plan.ops_.size()) +
        " operations for " + std::to_string(m.fragments().size()) +
        " stored fragments"));
  }
  std::vector<bool> written(m.fragments().size());
  for (const UploadOperation& op : plan.ops_) {
    if (written[op.stored_fragment]) {
      return fail(Status::InvalidArgument(
          "upload plan writes stored fragment " +
          m.fragments()[op.stored_fragment].fragment_id + " twice"));
    }
    written[op.stored_fragment] = true;
  }
  const std::string owned = m.group_id() + "/payload/" + *txn + "/";
  for (const StoredFragment& f : m.fragments()) {
    if (!f.object_key.starts_with(owned) || f.object_offset != 0) {
      return fail(Status::InvalidArgument(
          "upload session/transaction does not own payload members: " +
          f.object_key));
    }
  }
  if (m.group_id() !=
          BaseKey(m.resource_id(), m.revision(), m.weight_generation()) ||
      m.namespace_id() != options_.namespace_) {
    return fail(Status::InvalidArgument(
        "upload control key does not belong to session group: " +
        m.group_id()));
  }
  const JsonPath writers_path = root.Field("writers");
  auto writers = internal::ReadArray(obj->Get("writers"), writers_path);
  if (!writers.ok()) return fail(writers.status());
  i = 0;
  for (internal::JsonElement e : *writers) {
    const JsonPath p = writers_path.Index(i++);
    auto wo = StrictObject::Make(e, p, "upload writer",
                                 {"instance_id", "lease_id", "participant_id"});
    if (!wo.ok()) return fail(wo.status());
    UploadWriter writer;
    for (auto [field, into] :
         {std::pair{"instance_id", &writer.instance_id},
          std::pair{"lease_id", &writer.lease_id},
          std::pair{"participant_id", &writer.participant_id}}) {
      auto v = internal::ReadIdField(*wo, field, p);
      if (!v.ok()) return fail(v.status());
      *into = std::move(*v);
    }
    if (!plan.writers_.empty() &&
        plan.writers_.back().participant_id >= writer.participant_id) {
      return fail(Status::InvalidArgument(
          p.ToString() + ": writers must be sorted and unique by participant"));
    }
    plan.writers_.push_back(std::move(writer));
  }
  for (const UploadOperation& op : plan.ops_) {
    const bool known = std::any_of(
        plan.writers_.begin(), plan.writers_.end(), [&](const UploadWriter& w) {
          return w.participant_id == op.participant_id;
        });
    if (!known) {
      return fail(Status::InvalidArgument("upload operation of participant " +
                                          op.participant_id +
                                          " has no writer record"));
    }
  }
  return plan;
}

Status WeightStore::PublishReceipts(
    const UploadPlan& plan, const std::vector<UploadReceipt>& receipts) {
  if (receipts.empty()) return Status::OK();
  std::string out;
  internal::CanonicalJsonWriter w(&out, internal::JsonAscii::kRawUtf8);
  w.BeginArray();
  for (const UploadReceipt& r : receipts) {
    w.BeginObject();
    w.KeyString("fragment_id", r.fragment_id);
    w.KeyString("object_key", r.object_key);
    w.KeyString("participant_id", r.participant_id);
    w.EndObject();
  }
  w.EndArray();
  // One record per receipt batch, named by its first fragment (unique:
  // every stored fragment has exactly one writer).
  return backend_->Put(
      TransactionKey(plan) + "/receipts/" + receipts.front().fragment_id, out);
}

Result<std::vector<UploadReceipt>> WeightStore::GatherReceipts(
    const UploadPlan& plan) {
  RESHARD_ASSIGN_OR_RETURN(auto keys,
                           backend_->List(TransactionKey(plan) + "/receipts/"));
  std::vector<UploadReceipt> out;
  for (const std::string& key : keys) {
    RESHARD_ASSIGN_OR_RETURN(std::string text, backend_->Get(key));
    auto doc = JsonDocument::Parse(text);
    if (!doc.ok()) return doc.status().WithContext(key);
    const JsonPath root;
    auto arr = internal::ReadArray(doc->root(), root);
    if (!arr.ok()) return arr.status().WithContext(key);
    size_t i = 0;
    for (internal::JsonElement e : *arr) {
      const JsonPath p = root.Index(i++);
      auto r =
          StrictObject::Make(e, p, "upload receipt",
                             {"fragment_id", "object_key", "participant_id"});
      if (!r.ok()) return r.status().WithContext(key);
      UploadReceipt receipt;
      for (auto [field, into] :
           {std::pair{"fragment_id", &receipt.fragment_id},
            std::pair{"object_key", &receipt.object_key},
            std::pair{"participant_id", &receipt.participant_id}}) {
        auto v = internal::ReadIdField(*r, field, p);
        if (!v.ok()) return v.status().WithContext(key);
        *into = std::move(*v);
      }
      out.push_back(std::move(receipt));
    }
  }
  std::map<std::string_view, bool> have;
  for (const auto& r : out) have[r.fragment_id] = true;
  for (const StoredFragment& s : plan.manifest().fragments()) {
    if (!have.count(s.fragment_id)) {
      return Status::FailedPrecondition("missing upload receipt: " +
                                        s.fragment_id);
    }
  }
  return out;
}

}  // namespace reshard
