// Upload plans and receipts as store records, for uploads spread over
// processes (the coordinator prepares and commits, every source process
// uploads its own fragments).

#include <algorithm>
#include <map>

#include "reshard/weight_store.h"
#include "store/keys.h"
#include "util/canonical_json.h"
#include "util/json_reader.h"

namespace reshard {
namespace {

using internal::JsonDocument;
using internal::JsonElement;
using internal::JsonPath;
using internal::RevisionKeys;
using internal::StoreKeys;
using internal::StrictObject;

StoreKeys KeysOf(const WeightStoreOptions& o) {
  return StoreKeys(o.key_prefix, o.namespace_);
}

RevisionKeys KeysOf(const UploadPlan& plan) {
  return RevisionKeys(plan.manifest().group_id());
}

// The operations of a plan record (indices checked against the manifest's
// fragments).
Result<std::vector<UploadOperation>> ParseOperations(JsonElement element,
                                                     const JsonPath& path,
                                                     size_t stored_fragments) {
  RESHARD_ASSIGN_OR_RETURN(auto ops, internal::ReadArray(element, path));
  std::vector<UploadOperation> out;
  size_t i = 0;
  for (JsonElement e : ops) {
    const JsonPath p = path.Index(i++);
    RESHARD_ASSIGN_OR_RETURN(
        auto op, StrictObject::Make(e, p, "upload operation",
                                    {"participant_id", "placement_fragment_id",
                                     "stored_fragment"}));
    RESHARD_ASSIGN_OR_RETURN(auto participant,
                             internal::ReadIdField(op, "participant_id", p));
    RESHARD_ASSIGN_OR_RETURN(
        auto fragment, internal::ReadIdField(op, "placement_fragment_id", p));
    RESHARD_ASSIGN_OR_RETURN(uint64_t index, op.U64("stored_fragment"));
    if (index >= stored_fragments) {
      return Status::InvalidArgument(p.ToString() +
                                     ".stored_fragment out of range");
    }
    out.push_back({index, std::move(participant), std::move(fragment)});
  }
  return out;
}

// The writers of a plan record: sorted and unique by participant.
Result<std::vector<UploadWriter>> ParseWriters(JsonElement element,
                                               const JsonPath& path) {
  RESHARD_ASSIGN_OR_RETURN(auto writers, internal::ReadArray(element, path));
  std::vector<UploadWriter> out;
  size_t i = 0;
  for (JsonElement e : writers) {
    const JsonPath p = path.Index(i++);
    RESHARD_ASSIGN_OR_RETURN(
        auto wo,
        StrictObject::Make(e, p, "upload writer",
                           {"instance_id", "lease_id", "participant_id"}));
    UploadWriter writer;
    for (auto [field, into] :
         {std::pair{"instance_id", &writer.instance_id},
          std::pair{"lease_id", &writer.lease_id},
          std::pair{"participant_id", &writer.participant_id}}) {
      RESHARD_ASSIGN_OR_RETURN(*into, internal::ReadIdField(wo, field, p));
    }
    if (!out.empty() && out.back().participant_id >= writer.participant_id) {
      return Status::InvalidArgument(
          p.ToString() + ": writers must be sorted and unique by participant");
    }
    out.push_back(std::move(writer));
  }
  return out;
}

// Rule 65: every stored fragment written by exactly one operation, into an
// object the transaction owns, under the group this store's key scheme
// gives the revision.
Status CheckPlanOwnership(const StoredWeightManifest& m,
                          const std::vector<UploadOperation>& ops,
                          const std::string& txn, const StoreKeys& layout,
                          const std::string& namespace_id) {
  if (ops.size() != m.fragments().size()) {
    return Status::InvalidArgument(
        "upload plan has " + std::to_string(ops.size()) + " operations for " +
        std::to_string(m.fragments().size()) + " stored fragments");
  }
  std::vector<bool> written(m.fragments().size());
  for (const UploadOperation& op : ops) {
    if (written[op.stored_fragment]) {
      return Status::InvalidArgument(
          "upload plan writes stored fragment " +
          m.fragments()[op.stored_fragment].stored_fragment_id + " twice");
    }
    written[op.stored_fragment] = true;
  }
  const RevisionKeys keys(m.group_id());
  const std::string owned = keys.TransactionFamily("payload", txn) + "/";
  for (const StoredFragment& f : m.fragments()) {
    if (!f.object_key.starts_with(owned) || f.object_offset != 0) {
      return Status::InvalidArgument(
          "upload session/transaction does not own payload members: " +
          f.object_key);
    }
  }
  if (m.group_id() !=
          layout.Base(m.resource_id(), m.revision(), m.weight_generation()) ||
      m.namespace_id() != namespace_id) {
    return Status::InvalidArgument(
        "upload control key does not belong to session group: " + m.group_id());
  }
  return Status::OK();
}

// Every operation's participant has a writer record.
Status CheckWritersKnown(const std::vector<UploadOperation>& ops,
                         const std::vector<UploadWriter>& writers) {
  for (const UploadOperation& op : ops) {
    const bool known =
        std::any_of(writers.begin(), writers.end(), [&](const UploadWriter& w) {
          return w.participant_id == op.participant_id;
        });
    if (!known) {
      return Status::InvalidArgument("upload operation of participant " +
                                     op.participant_id +
                                     " has no writer record");
    }
  }
  return Status::OK();
}

// The fields of a plan record, decoded (not yet checked against the
// manifest key and transaction it was read for).
struct PlanRecord {
  uint64_t generation = 0;
  std::string manifest_json;
  std::string source_placement_id;
  std::string transaction_id;
  std::shared_ptr<const StoredWeightManifest> manifest;
  std::vector<UploadOperation> ops;
  std::vector<UploadWriter> writers;
};

// The record's scalar fields; `obj` gets the checked top-level object.
Result<PlanRecord> ParsePlanScalars(const StrictObject& obj,
                                    const JsonPath& root) {
  PlanRecord r;
  RESHARD_ASSIGN_OR_RETURN(r.generation, obj.U64("generation"));
  RESHARD_ASSIGN_OR_RETURN(std::string_view manifest_json,
                           obj.String("manifest"));
  r.manifest_json = std::string(manifest_json);
  RESHARD_ASSIGN_OR_RETURN(
      r.source_placement_id,
      internal::ReadIdField(obj, "source_placement_id", root));
  RESHARD_ASSIGN_OR_RETURN(r.transaction_id,
                           internal::ReadIdField(obj, "transaction_id", root));
  return r;
}

// The upload plan record at `key`, read for `manifest_key` and
// `transaction_id`, decoded strictly and checked (rule 65); errors name
// the key.
Result<PlanRecord> ParsePlanRecord(std::string_view text,
                                   const std::string& key,
                                   std::string_view manifest_key,
                                   std::string_view transaction_id,
                                   const StoreKeys& layout,
                                   const std::string& namespace_id) {
  auto fail = [&](const Status& st) { return st.WithContext(key); };
  auto doc = JsonDocument::Parse(text);
  if (!doc.ok()) return fail(doc.status());
  const JsonPath root;
  auto obj =
      StrictObject::Make(doc->root(), root, "upload plan",
                         {"generation", "manifest", "operations",
                          "source_placement_id", "transaction_id", "writers"});
  if (!obj.ok()) return fail(obj.status());
  auto r = ParsePlanScalars(*obj, root);
  if (!r.ok()) return fail(r.status());
  if (r->transaction_id != transaction_id) {
    return Status::DataLoss(key + " holds transaction " + r->transaction_id);
  }
  auto manifest = StoredWeightManifestFromJson(r->manifest_json);
  if (!manifest.ok()) return fail(manifest.status());
  if (manifest->manifest_key() != manifest_key) {
    return Status::DataLoss(key + " is the plan of " +
                            manifest->manifest_key());
  }
  r->manifest =
      std::make_shared<const StoredWeightManifest>(std::move(*manifest));
  auto ops = ParseOperations(obj->Get("operations"), root.Field("operations"),
                             r->manifest->fragments().size());
  if (!ops.ok()) return fail(ops.status());
  r->ops = std::move(*ops);
  Status st = CheckPlanOwnership(*r->manifest, r->ops, r->transaction_id,
                                 layout, namespace_id);
  if (!st.ok()) return fail(st);
  auto writers = ParseWriters(obj->Get("writers"), root.Field("writers"));
  if (!writers.ok()) return fail(writers.status());
  r->writers = std::move(*writers);
  st = CheckWritersKnown(r->ops, r->writers);
  if (!st.ok()) return fail(st);
  return r;
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
  return backend_->Put(KeysOf(plan).Plan(plan.transaction_id()), out);
}

Result<UploadPlan> WeightStore::ReadUploadPlan(
    std::string_view manifest_key, std::string_view transaction_id) {
  const auto keys = RevisionKeys::OfManifestKey(manifest_key);
  if (!keys) {
    return Status::InvalidArgument("not a manifest key: " +
                                   std::string(manifest_key));
  }
  const std::string key = keys->Plan(transaction_id);
  RESHARD_ASSIGN_OR_RETURN(std::string text, backend_->Get(key));
  RESHARD_ASSIGN_OR_RETURN(
      PlanRecord record,
      ParsePlanRecord(text, key, manifest_key, transaction_id, KeysOf(options_),
                      options_.namespace_));
  UploadPlan plan;
  plan.generation_ = record.generation;
  plan.source_placement_id_ = std::move(record.source_placement_id);
  plan.transaction_id_ = std::move(record.transaction_id);
  plan.manifest_ = std::move(record.manifest);
  plan.ops_ = std::move(record.ops);
  plan.writers_ = std::move(record.writers);
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
    w.KeyString("fragment_id", r.stored_fragment_id);
    w.KeyString("object_key", r.object_key);
    w.KeyString("participant_id", r.participant_id);
    w.EndObject();
  }
  w.EndArray();
  // One record per receipt batch, named by its first fragment (unique:
  // every stored fragment has exactly one writer).
  return backend_->Put(
      KeysOf(plan).Receipt(plan.transaction_id(),
                           receipts.front().stored_fragment_id),
      out);
}

Result<std::vector<UploadReceipt>> WeightStore::GatherReceipts(
    const UploadPlan& plan) {
  RESHARD_ASSIGN_OR_RETURN(
      auto keys,
      backend_->List(KeysOf(plan).ReceiptsPrefix(plan.transaction_id())));
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
           {std::pair{"fragment_id", &receipt.stored_fragment_id},
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
  for (const auto& r : out) have[r.stored_fragment_id] = true;
  for (const StoredFragment& s : plan.manifest().fragments()) {
    if (!have.count(s.stored_fragment_id)) {
      return Status::FailedPrecondition("missing upload receipt: " +
                                        s.stored_fragment_id);
    }
  }
  return out;
}

}  // namespace reshard
