// WeightStore: upload, commit/abort, ranged verified loads, lifecycle.

#include "reshard/weight_store.h"

#include <unistd.h>

#include <algorithm>
#include <charconv>
#include <chrono>
#include <cstring>
#include <map>
#include <set>
#include <unordered_map>

#include "reshard/plan.h"
#include "store/checksum.h"
#include "store/layout.h"
#include "util/canonical_json.h"
#include "util/json_reader.h"
#include "util/sha256.h"

namespace reshard {
namespace {

using internal::BaseOfManifestKey;
using internal::ChecksumKey;
using internal::RandomHex;
using internal::TransactionOfObject;
using internal::UnixSeconds;

std::string UtcNow() {
  const std::time_t t =
      std::chrono::system_clock::to_time_t(std::chrono::system_clock::now());
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

// The integer after the last '=' (or the whole text); 0 when malformed.
int64_t ParseSeconds(std::string_view text) {
  const size_t eq = text.rfind('=');
  if (eq != std::string_view::npos) text.remove_prefix(eq + 1);
  int64_t v = 0;
  const auto r = std::from_chars(text.data(), text.data() + text.size(), v);
  return r.ec == std::errc() ? v : 0;
}

std::string PyTuple(const Dims& d) {
  std::string out = "(";
  for (size_t i = 0; i < d.size(); ++i) {
    if (i) out += ", ";
    out += std::to_string(d[i]);
  }
  if (d.size() == 1) out += ",";
  return out + ")";
}

std::string DecisionJson(std::string_view decision, std::string_view digest) {
  std::string out;
  internal::CanonicalJsonWriter w(&out);
  w.BeginObject();
  w.KeyString("decision", decision);
  w.KeyString("plan_digest", digest);
  w.KeyString("record_type", "weight-upload-decision");
  w.EndObject();
  return out;
}

}  // namespace

std::string StoredFragmentId(std::string_view tensor_id, const Dims& offset,
                             const Dims& shape) {
  const std::string s =
      std::string(tensor_id) + "|" + PyTuple(offset) + "|" + PyTuple(shape);
  return internal::Sha256Hex(s).substr(0, 24);
}

std::string QuoteKeyComponent(std::string_view id) {
  static const char* kHex = "0123456789ABCDEF";
  std::string out;
  for (size_t i = 0; i < id.size(); ++i) {
    const auto c = static_cast<unsigned char>(id[i]);
    const bool safe = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
                      (c >= '0' && c <= '9') || c == '_' || c == '-' ||
                      c == '~' || (c == '.' && i > 0);
    if (safe) {
      out += static_cast<char>(c);
    } else {
      out += '%';
      out += kHex[c >> 4];
      out += kHex[c & 15];
    }
  }
  return out;
}

uint64_t UploadPlan::BytesOf(std::string_view participant_id) const {
  uint64_t n = 0;
  for (const auto& op : ops_) {
    if (op.participant_id == participant_id) {
      n += manifest_->fragments()[op.stored_fragment].nbytes;
    }
  }
  return n;
}

Result<WeightStore> WeightStore::Open(std::string_view uri,
                                      WeightStoreOptions options) {
  RESHARD_ASSIGN_OR_RETURN(auto backend, OpenObjectStore(uri));
  return Open(std::shared_ptr<ObjectStore>(std::move(backend)),
              std::move(options));
}

Result<WeightStore> WeightStore::Open(std::shared_ptr<ObjectStore> backend,
                                      WeightStoreOptions options) {
  if (options.chunk_bytes == 0 || options.max_range_bytes == 0 ||
      options.max_ranges_per_request == 0) {
    return Status::InvalidArgument(
        "chunk_bytes, max_range_bytes and max_ranges_per_request must be "
        "positive");
  }
  if (options.staging_bytes < options.chunk_bytes) {
    return Status::InvalidArgument("staging_bytes (" +
                                   std::to_string(options.staging_bytes) +
                                   ") must hold at least one chunk (" +
                                   std::to_string(options.chunk_bytes) + ")");
  }
  while (options.key_prefix.ends_with('/')) options.key_prefix.pop_back();
  while (options.key_prefix.starts_with('/')) options.key_prefix.erase(0, 1);
  RESHARD_RETURN_NOT_OK(ValidateRecordKey(options.key_prefix));
  return WeightStore(std::move(backend), std::move(options));
}

std::string WeightStore::BaseKey(std::string_view resource_id,
                                 std::string_view revision,
                                 uint64_t generation) const {
  return options_.key_prefix + "/" + QuoteKeyComponent(options_.namespace_) +
         "/" + QuoteKeyComponent(resource_id) + "/" +
         QuoteKeyComponent(revision) + "/" + std::to_string(generation);
}

// ---------------------------------------------------------------- upload

Result<UploadPlan> WeightStore::PrepareUpload(
    const WeightPlacementManifest& source,
    const std::vector<WeightRuntimeBindingManifest>& bindings) {
  RESHARD_RETURN_NOT_OK(
      ValidateRuntimeBindings(source, bindings, BindingCoverage::kSubset)
          .WithContext("source bindings"));
  for (const auto& t : source.tensors()) {
    for (const auto& axis : t.parallel_axes()) {
      if (axis.kind() == AxisKind::kDp &&
          axis.semantics() == AxisSemantics::kOwnership) {
        return Status::InvalidArgument(
            "Weight Store upload requires replicated DP source tensors; "
            "DP-owned tensor snapshots are not supported: " +
            t.tensor_id());
      }
    }
  }
  std::map<std::string_view, const WeightRuntimeBindingManifest*> by_part;
  for (const auto& b : bindings) by_part[b.participant_id()] = &b;
  // Fragments per DP replica; a replica is eligible when every fragment is
  // bound and its bindings share one generation.
  struct Candidate {
    const PlacementFragment* fragment;
    const WeightRuntimeBindingManifest* binding;
  };
  std::map<int64_t, std::vector<Candidate>> replicas;
  std::map<int64_t, std::set<uint64_t>> generations;
  std::set<int64_t> incomplete;
  for (const auto& part : source.parts()) {
    auto it = by_part.find(part.participant_id());
    for (const auto& f : part.fragments()) {
      const int64_t dp = part.rank().dp;
      if (it == by_part.end()) {
        incomplete.insert(dp);
        continue;
      }
      replicas[dp].push_back({&f, it->second});
      generations[dp].insert(it->second->generation());
    }
  }
  std::optional<uint64_t> generation;
  std::vector<int64_t> eligible;
  for (const auto& [dp, frags] : replicas) {
    if (incomplete.count(dp) || generations[dp].size() != 1) continue;
    const uint64_t g = *generations[dp].begin();
    if (generation && *generation != g) {
      return Status::FailedPrecondition(
          "complete source DP replicas have inconsistent lease generations");
    }
    generation = g;
    eligible.push_back(dp);
  }
  if (eligible.empty()) {
    return Status::FailedPrecondition(
        "source manifests have no complete generation-consistent DP replica");
  }
  // The stored fragments: the boxes of the lowest eligible replica; the
  // writers: every eligible copy of each box, balanced by bytes.
  using Box = std::tuple<std::string, Dims, Dims>;
  std::map<Box, std::vector<Candidate>> boxes;
  for (const Candidate& c : replicas[eligible.front()]) {
    boxes[{c.fragment->tensor_id(), c.fragment->global_offset(),
           c.fragment->local_shape()}];
  }
  for (int64_t dp : eligible) {
    for (const Candidate& c : replicas[dp]) {
      auto it =
          boxes.find({c.fragment->tensor_id(), c.fragment->global_offset(),
                      c.fragment->local_shape()});
      if (it != boxes.end()) it->second.push_back(c);
    }
  }
  // The revision is the placement's weight generation; `generation` is
  // the runtime binding generation the upload is fenced at.
  const std::string base = BaseKey(source.resource_id(), source.revision(),
                                   source.weight_generation());
  UploadPlan plan;
  plan.transaction_id_ = RandomHex(16);
  plan.generation_ = *generation;
  plan.source_placement_id_ = source.placement_id();
  StoredWeightManifestSpec spec;
  spec.namespace_ = options_.namespace_;
  spec.resource_id = source.resource_id();
  spec.revision = source.revision();
  spec.weight_generation = source.weight_generation();
  spec.group_id = base;
  spec.manifest_key = base + "/manifest";
  spec.created_at = UtcNow();
  spec.tensors = source.tensors();
  struct Pending {
    StoredFragment stored;
    std::vector<Candidate> writers;
  };
  std::vector<Pending> pending;
  for (auto& [box, writers] : boxes) {
    const PlacementFragment& f = *writers.front().fragment;
    StoredFragment s;
    s.fragment_id =
        StoredFragmentId(f.tensor_id(), f.global_offset(), f.local_shape());
    s.tensor_id = f.tensor_id();
    s.global_offset = f.global_offset();
    s.local_shape = f.local_shape();
    s.object_key =
        base + "/payload/" + plan.transaction_id_ + "/" + s.fragment_id;
    s.object_offset = 0;
    s.nbytes = f.nbytes();
    s.aliases = f.aliases();
    spec.fragments.push_back(s);
    pending.push_back({std::move(s), writers});
  }
  RESHARD_ASSIGN_OR_RETURN(auto manifest,
                           StoredWeightManifest::Make(std::move(spec)));
  plan.manifest_ =
      std::make_shared<const StoredWeightManifest>(std::move(manifest));
  // Largest first, to the least-loaded holder of identical bytes.
  std::vector<size_t> order(pending.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    return pending[a].stored.nbytes > pending[b].stored.nbytes;
  });
  std::map<std::string, uint64_t> load;
  std::map<std::string_view, size_t> index_of;
  const auto& stored = plan.manifest_->fragments();
  for (size_t i = 0; i < stored.size(); ++i) {
    index_of[stored[i].fragment_id] = i;
  }
  for (size_t i : order) {
    const Candidate* best = nullptr;
    for (const Candidate& c : pending[i].writers) {
      if (best == nullptr || load[c.binding->participant_id()] <
                                 load[best->binding->participant_id()]) {
        best = &c;
      }
    }
    load[best->binding->participant_id()] += pending[i].stored.nbytes;
    plan.ops_.push_back({index_of.at(pending[i].stored.fragment_id),
                         best->binding->participant_id(),
                         best->fragment->placement_fragment_id()});
  }
  std::sort(plan.ops_.begin(), plan.ops_.end(),
            [](const auto& a, const auto& b) {
              return a.stored_fragment < b.stored_fragment;
            });
  for (const auto& [participant, bytes] : load) {
    const WeightRuntimeBindingManifest& b = *by_part.at(participant);
    plan.writers_.push_back({participant, b.instance_id(), b.lease_id()});
  }
  RESHARD_RETURN_NOT_OK(
      backend_->Put(base + "/transactions/" + plan.transaction_id_ + "/started",
                    std::to_string(UnixSeconds())));
  return plan;
}

namespace {

Result<std::optional<std::string>> ReadDecision(ObjectStore& b,
                                                const std::string& key);

// Rule 65: the placement fragment an operation reads holds exactly the
// stored fragment's box (a tampered plan must not store one box's bytes
// under another's id).
Status CheckOperationGeometry(const WeightPlacementManifest& source,
                              const UploadOperation& op,
                              const StoredFragment& s) {
  // The caller found the fragment in the participant's validated binding,
  // which holds exactly that participant's placement fragments.
  const PlacementFragment* pf = source.FindFragment(op.placement_fragment_id);
  if (pf == nullptr) {
    return Status::InvalidArgument(
        "upload operation names no fragment of its participant: " +
        op.placement_fragment_id + " of " + op.participant_id);
  }
  if (pf->tensor_id() != s.tensor_id ||
      pf->global_offset() != s.global_offset ||
      pf->local_shape() != s.local_shape || pf->nbytes() != s.nbytes ||
      s.object_offset != 0) {
    return Status::InvalidArgument(
        "upload operation source and stored fragment geometry differ: " +
        op.placement_fragment_id + " -> " + s.fragment_id);
  }
  return Status::OK();
}

}  // namespace

Result<std::vector<UploadReceipt>> WeightStore::Upload(
    const UploadPlan& plan, const WeightPlacementManifest& source,
    const WeightRuntimeBindingManifest& binding) {
  if (source.placement_id() != plan.source_placement_id_) {
    return Status::InvalidArgument("source placement identity mismatch");
  }
  RESHARD_RETURN_NOT_OK(ValidateRuntimeBinding(source, binding));
  if (binding.generation() != plan.generation()) {
    return Status::FailedPrecondition(
        "stale source lease: participant " + binding.participant_id() +
        " is at generation " + std::to_string(binding.generation()) +
        ", the upload plan at " + std::to_string(plan.generation()));
  }
  bool writes = false;
  for (const UploadOperation& op : plan.operations()) {
    writes = writes || op.participant_id == binding.participant_id();
  }
  if (!writes) return std::vector<UploadReceipt>{};
  const UploadWriter* writer = nullptr;
  for (const UploadWriter& w : plan.writers()) {
    if (w.participant_id == binding.participant_id()) writer = &w;
  }
  if (writer == nullptr) {
    return Status::InvalidArgument("upload plan has no writer record for " +
                                   binding.participant_id());
  }
  if (writer->instance_id != binding.instance_id() ||
      writer->lease_id != binding.lease_id()) {
    return Status::FailedPrecondition(
        "stale source lease: participant " + binding.participant_id() +
        " holds lease " + binding.lease_id() + " of instance " +
        binding.instance_id() + ", the upload plan was made at lease " +
        writer->lease_id + " of instance " + writer->instance_id);
  }
  const StoredWeightManifest& m = plan.manifest();
  const std::string base = m.group_id();
  const std::string decision_key =
      base + "/transactions/" + plan.transaction_id() + "/decision";
  // No writes into a transaction that chose abort (a late writer would
  // leave payloads nobody references); checked before every object.
  auto fence = [&]() -> Status {
    RESHARD_ASSIGN_OR_RETURN(auto decided,
                             ReadDecision(*backend_, decision_key));
    if (decided && *decided == "abort") {
      return Status::FailedPrecondition("weight upload transaction " +
                                        plan.transaction_id() +
                                        " was aborted: no more payload writes");
    }
    return Status::OK();
  };
  // Everything is checked before the first byte is written.
  std::vector<std::pair<const StoredFragment*, const RuntimeBindingFragment*>>
      work;
  for (const UploadOperation& op : plan.operations()) {
    if (op.participant_id != binding.participant_id()) continue;
    const StoredFragment& s = m.fragments()[op.stored_fragment];
    const RuntimeBindingFragment* f =
        binding.FindFragment(op.placement_fragment_id);
    if (f == nullptr) {
      return Status::FailedPrecondition("missing planned source fragment: " +
                                        op.placement_fragment_id);
    }
    if (f->nbytes() != s.nbytes) {
      return Status::FailedPrecondition("stale source fragment: " +
                                        op.placement_fragment_id);
    }
    RESHARD_RETURN_NOT_OK(CheckOperationGeometry(source, op, s));
    RESHARD_RETURN_NOT_OK(RequireMemoryKind(*f, {MemoryKind::kHost},
                                            "store upload", "source",
                                            binding.participant_id()));
    work.emplace_back(&s, f);
  }
  std::vector<UploadReceipt> receipts;
  for (const auto& [sp, f] : work) {
    const StoredFragment& s = *sp;
    RESHARD_RETURN_NOT_OK(fence());
    const auto* data = reinterpret_cast<const uint8_t*>(f->address());
    const std::string sums =
        internal::ChecksumRecord(data, s.nbytes, options_.chunk_bytes);
    // The checksum record first, then the payload, both durable at commit
    // (one Sync for the whole upload). A retry after a crash finds the
    // record and requires the same checksums; the payload is atomic.
    const std::string sums_key =
        ChecksumKey(base, plan.transaction_id(), s.fragment_id);
    Status st =
        backend_->PutObject(sums_key, {{sums.data(), sums.size()}}, false);
    if (st.IsAlreadyExists()) {
      RESHARD_ASSIGN_OR_RETURN(auto old, backend_->Get(sums_key));
      if (old != sums) {
        return Status::AlreadyExists("payload exists with other bytes: " +
                                     s.object_key);
      }
    } else {
      RESHARD_RETURN_NOT_OK(st);
    }
    st = backend_->PutObject(s.object_key, {{data, s.nbytes}}, false);
    if (!st.ok() && !st.IsAlreadyExists()) return st;
    if (options_.on_stage) options_.on_stage("payload");
    receipts.push_back({s.fragment_id, s.object_key, binding.participant_id()});
  }
  return receipts;
}

namespace {

// The decision record of a transaction, if any. The record is input from
// another process: parsed strictly, any other shape is DataLoss naming it.
Result<std::optional<std::string>> ReadDecision(ObjectStore& b,
                                                const std::string& key) {
  auto text = b.Get(key);
  if (text.status().IsNotFound()) {
    return std::optional<std::string>();
  }
  RESHARD_RETURN_NOT_OK(text.status());
  // The key ends the message (tools and tests read it back from there).
  const Status malformed =
      Status::DataLoss("malformed upload decision record: " + key);
  auto doc = internal::JsonDocument::Parse(*text);
  if (!doc.ok()) return malformed;
  const internal::JsonPath root;
  auto obj =
      internal::StrictObject::Make(doc->root(), root, "upload decision",
                                   {"decision", "plan_digest", "record_type"});
  if (!obj.ok()) return malformed;
  auto decision =
      internal::ReadString(obj->Get("decision"), root.Field("decision"));
  auto type =
      internal::ReadString(obj->Get("record_type"), root.Field("record_type"));
  auto digest =
      internal::ReadString(obj->Get("plan_digest"), root.Field("plan_digest"));
  for (const Status* st :
       {&decision.status(), &type.status(), &digest.status()}) {
    if (!st->ok()) return malformed;
  }
  if ((*decision != "commit" && *decision != "abort") ||
      *type != "weight-upload-decision") {
    return malformed;
  }
  return std::optional<std::string>(std::move(*decision));
}

// Publishes `json` create-only under `key` and reads it back: a backend
// that acknowledged damaged bytes is reported, never trusted.
Status PublishManifest(ObjectStore& b, const std::string& key,
                       const std::string& json) {
  RESHARD_RETURN_NOT_OK(b.Put(key, json));
  RESHARD_ASSIGN_OR_RETURN(std::string stored, b.Get(key));
  if (stored != json) {
    return Status::DataLoss("published weight manifest is damaged: " + key);
  }
  return Status::OK();
}

// Removes the keys of transaction `txn` under `base` in the given key
// families ("payload", "checksums", "transactions") except those in `keep`,
// counting them in `report` when given.
Status RemoveTransactionKeys(ObjectStore& b, const std::string& base,
                             const std::string& txn,
                             std::initializer_list<std::string_view> families,
                             const std::set<std::string>& keep,
                             GcReport* report) {
  for (std::string_view family : families) {
    // Listed without the trailing '/', so that a non-directory entry at
    // "<family>/<txn>" (a planted symbolic link) is removed too: Delete
    // removes a link itself, never what it points to.
    const std::string dir = base + "/" + std::string(family) + "/" + txn;
    RESHARD_ASSIGN_OR_RETURN(auto keys, b.List(dir));
    for (const std::string& k : keys) {
      if (k != dir && !k.starts_with(dir + "/")) continue;
      if (keep.count(k)) continue;
      if (report != nullptr) {
        auto size = b.ObjectSize(k);
        if (size.ok()) report->bytes_removed += *size;
        ++report->keys_removed;
      }
      RESHARD_RETURN_NOT_OK(b.Delete(k));
    }
  }
  return Status::OK();
}

// Splits `key`, a key under `prefix`, into its revision base
// ("<prefix>/<ns>/<resource>/<revision>/<generation>") and the rest after
// it; false when the key is not below a revision base.
bool SplitRevisionKey(std::string_view prefix, std::string_view key,
                      std::string* base, std::string* rest) {
  if (!key.starts_with(prefix) || key.size() <= prefix.size() ||
      key[prefix.size()] != '/') {
    return false;
  }
  size_t at = prefix.size();
  for (int i = 0; i < 4; ++i) {
    at = key.find('/', at + 1);
    if (at == std::string_view::npos) return false;
  }
  *base = std::string(key.substr(0, at));
  *rest = std::string(key.substr(at + 1));
  return true;
}

// Parses `text` as the manifest published at `manifest_key` and checks that
// it describes that revision only: its key, its group (the revision base)
// and every payload key (<base>/payload/<txn>/<name>). A manifest failing
// these is corrupt (DataLoss): loads, verify and gc never act on the keys
// it names.
Result<StoredWeightManifest> ParsePublishedManifest(
    std::string_view manifest_key, std::string_view text) {
  auto parsed = StoredWeightManifestFromJson(text);
  if (!parsed.ok()) {
    return Status::DataLoss("corrupt manifest " + std::string(manifest_key) +
                            ": " + parsed.status().message());
  }
  StoredWeightManifest m = std::move(parsed).ValueOrDie();
  if (m.manifest_key() != manifest_key) {
    return Status::DataLoss(
        "manifest key mismatch: " + std::string(manifest_key) + " holds " +
        m.manifest_key());
  }
  // (The decoder already requires manifest_key == group_id + "/manifest".)
  const std::string base = m.group_id();
  // The revision the manifest describes is the one its key names (a
  // damaged identity would send loads and checksum reads elsewhere).
  const std::string identity = "/" + QuoteKeyComponent(m.namespace_id()) + "/" +
                               QuoteKeyComponent(m.resource_id()) + "/" +
                               QuoteKeyComponent(m.revision()) + "/" +
                               std::to_string(m.weight_generation()) +
                               "/manifest";
  if (!m.manifest_key().ends_with(identity)) {
    return Status::DataLoss("corrupt manifest " + std::string(manifest_key) +
                            ": it describes " + m.resource_id() + "@" +
                            m.revision() + "/" +
                            std::to_string(m.weight_generation()));
  }
  const std::string payload = base + "/payload/";
  for (const StoredFragment& f : m.fragments()) {
    const std::string_view key(f.object_key);
    const std::string_view rest =
        key.starts_with(payload) ? key.substr(payload.size()) : "";
    const size_t slash = rest.find('/');
    if (slash == 0 || slash == std::string_view::npos ||
        slash + 1 == rest.size() ||
        rest.find('/', slash + 1) != std::string_view::npos) {
      return Status::DataLoss("corrupt manifest " + std::string(manifest_key) +
                              ": stored fragment " + f.fragment_id +
                              " names object " + f.object_key + ", not " +
                              payload + "<txn>/<id>");
    }
  }
  return m;
}

}  // namespace

Status WeightStore::Commit(const UploadPlan& plan,
                           const std::vector<UploadReceipt>& receipts) {
  const StoredWeightManifest& m = plan.manifest();
  const std::string base = m.group_id();
  const std::string txn = plan.transaction_id();
  // Receipts: exactly one per stored fragment, matching the plan.
  std::map<std::string, const UploadReceipt*> got;
  for (const auto& r : receipts) {
    if (!got.emplace(r.fragment_id, &r).second) {
      return Status::InvalidArgument("duplicate upload receipt: " +
                                     r.fragment_id);
    }
  }
  for (const UploadOperation& op : plan.operations()) {
    const StoredFragment& s = m.fragments()[op.stored_fragment];
    auto it = got.find(s.fragment_id);
    if (it == got.end()) {
      return Status::FailedPrecondition("missing upload receipt: " +
                                        s.fragment_id);
    }
    if (it->second->object_key != s.object_key ||
        it->second->participant_id != op.participant_id) {
      return Status::InvalidArgument("upload receipt does not match plan: " +
                                     s.fragment_id);
    }
    got.erase(it);
  }
  if (!got.empty()) {
    return Status::InvalidArgument("unexpected upload receipt: " +
                                   got.begin()->first);
  }
  const std::string json = StoredWeightManifestToJson(m);
  const std::string decision_key = base + "/transactions/" + txn + "/decision";
  auto require_payloads = [&]() -> Status {
    for (const StoredFragment& s : m.fragments()) {
      auto size = backend_->ObjectSize(s.object_key);
      if (!size.ok() || *size != s.nbytes) {
        return Status::FailedPrecondition("payload is not complete: " +
                                          s.object_key);
      }
      auto sums = backend_->Get(ChecksumKey(base, txn, s.fragment_id));
      if (!sums.ok()) {
        return Status::FailedPrecondition("payload checksums missing: " +
                                          s.object_key);
      }
    }
    return Status::OK();
  };
  // First decision wins.
  RESHARD_ASSIGN_OR_RETURN(auto decided, ReadDecision(*backend_, decision_key));
  if (!decided) {
    RESHARD_RETURN_NOT_OK(require_payloads());
    // The manifest travels with the decision, so that anyone (a retry, or
    // Gc) can roll a decided commit forward.
    Status copied =
        backend_->PutObject(base + "/transactions/" + txn + "/pending-manifest",
                            {{json.data(), json.size()}},
                            /*durable=*/false);
    if (!copied.ok() && !copied.IsAlreadyExists()) {
      return copied;
    }
    // Payloads are durable before anything can refer to them.
    RESHARD_RETURN_NOT_OK(backend_->Sync());
    Status st = backend_->Put(decision_key,
                              DecisionJson("commit", m.manifest_digest()));
    if (!st.ok() && !st.IsAlreadyExists()) return st;
    RESHARD_ASSIGN_OR_RETURN(decided, ReadDecision(*backend_, decision_key));
  }
  if (!decided) {
    return Status::Unavailable("upload decision is not complete; retry");
  }
  if (*decided != "commit") {
    return Status::FailedPrecondition("weight upload already chose " +
                                      *decided);
  }
  RESHARD_RETURN_NOT_OK(require_payloads());
  if (options_.on_stage) options_.on_stage("decision");
  // Publish the manifest create-only; resolve a race.
  Status st = PublishManifest(*backend_, m.manifest_key(), json);
  if (st.IsAlreadyExists()) {
    RESHARD_ASSIGN_OR_RETURN(std::string winner,
                             backend_->Get(m.manifest_key()));
    if (winner == json) return Status::OK();  // idempotent retry
    // Only another writer's valid manifest makes this upload a loser whose
    // payloads go; damaged bytes under the key (a torn or corrupted
    // publication of this very upload) are reported and the payloads kept.
    auto other = StoredWeightManifestFromJson(winner);
    const bool damaged =
        !other.ok() || other->manifest_key() != m.manifest_key() ||
        std::any_of(other->fragments().begin(), other->fragments().end(),
                    [&](const StoredFragment& f) {
                      return TransactionOfObject(f.object_key) == txn;
                    });
    if (damaged) {
      return Status::DataLoss("published weight manifest is damaged: " +
                              m.manifest_key());
    }
    RESHARD_RETURN_NOT_OK(RemoveTransactionKeys(
        *backend_, base, txn, {"payload", "checksums"}, {}, nullptr));
    return Status::AlreadyExists("conflicting weight revision: " +
                                 m.manifest_key());
  }
  RESHARD_RETURN_NOT_OK(st.WithContext("manifest put failed"));
  if (options_.on_stage) options_.on_stage("published");
  return Status::OK();
}

Status WeightStore::Abort(const UploadPlan& plan) {
  const StoredWeightManifest& m = plan.manifest();
  const std::string base = m.group_id();
  const std::string txn = plan.transaction_id();
  auto published = backend_->Get(m.manifest_key());
  if (published.ok() && *published == StoredWeightManifestToJson(m)) {
    return Status::FailedPrecondition(
        "cannot abort a published weight revision: " + m.manifest_key());
  }
  const std::string decision_key = base + "/transactions/" + txn + "/decision";
  Status st =
      backend_->Put(decision_key, DecisionJson("abort", m.manifest_digest()));
  if (!st.ok() && !st.IsAlreadyExists()) return st;
  RESHARD_ASSIGN_OR_RETURN(auto decided, ReadDecision(*backend_, decision_key));
  if (!decided) {
    return Status::Unavailable("upload decision is not complete; retry");
  }
  if (*decided != "abort") {
    return Status::FailedPrecondition("weight upload already chose " +
                                      *decided);
  }
  return RemoveTransactionKeys(*backend_, base, txn, {"payload", "checksums"},
                               {}, nullptr);
}

// ---------------------------------------------------------------- read side

Result<StoredWeightManifest> WeightStore::LoadManifest(
    std::string_view manifest_key) {
  auto text = backend_->Get(manifest_key);
  if (text.status().IsNotFound()) {
    return Status::NotFound("no published weight revision " +
                            std::string(manifest_key));
  }
  RESHARD_RETURN_NOT_OK(text.status());
  return ParsePublishedManifest(manifest_key, *text);
}

Result<std::vector<RevisionInfo>> WeightStore::List() {
  const std::string& prefix = options_.key_prefix;
  RESHARD_ASSIGN_OR_RETURN(auto keys, backend_->List(prefix + "/"));
  std::map<std::string, RevisionInfo> revisions;  // by base
  std::string base, rest;
  for (const std::string& k : keys) {
    if (!SplitRevisionKey(prefix, k, &base, &rest) || rest != "manifest") {
      continue;
    }
    RevisionInfo& r = revisions[base];
    r.manifest_key = k;
    auto m = LoadManifest(k);
    if (!m.ok()) {
      // One tampered revision must not hide the others.
      r.state = "CORRUPT";
      r.error = m.status().message();
      continue;
    }
    r.resource_id = m->resource_id();
    r.revision = m->revision();
    r.weight_generation = m->weight_generation();
    r.state = "READY";
    r.fragments = m->fragments().size();
    for (const auto& f : m->fragments()) r.bytes += f.nbytes;
  }
  const int64_t now = UnixSeconds();
  for (const std::string& k : keys) {
    if (!SplitRevisionKey(prefix, k, &base, &rest)) continue;
    if (rest.starts_with("leases/")) {
      auto it = revisions.find(base);
      if (it == revisions.end() || it->second.state != "READY") continue;
      auto text = backend_->Get(k);
      if (text.ok() && ParseSeconds(*text) > now) ++it->second.leases;
    }
    if (rest.starts_with("transactions/") && rest.ends_with("/started")) {
      if (revisions.count(base)) continue;
      RevisionInfo& r = revisions[base];
      r.manifest_key = base + "/manifest";
      r.state = "IMPORTING";
    }
  }
  std::vector<RevisionInfo> out;
  for (auto& [b, r] : revisions) out.push_back(std::move(r));
  return out;
}

Result<VerifyReport> WeightStore::Verify(std::string_view manifest_key) {
  RESHARD_ASSIGN_OR_RETURN(auto m, LoadManifest(manifest_key));
  const std::string base = m.group_id();  // checked: the key's own
  VerifyReport report;
  std::vector<uint8_t> buf(options_.staging_bytes);
  for (const StoredFragment& s : m.fragments()) {
    RESHARD_ASSIGN_OR_RETURN(auto sums,
                             internal::ReadChunkSums(*backend_, base, s));
    RESHARD_ASSIGN_OR_RETURN(uint64_t size, backend_->ObjectSize(s.object_key));
    if (size < s.object_offset + s.nbytes) {
      return Status::DataLoss("payload " + s.object_key +
                              " is short: " + std::to_string(size) + " bytes");
    }
    const uint64_t step =
        options_.staging_bytes / sums.chunk_bytes * sums.chunk_bytes;
    for (uint64_t at = 0; at < size; at += step) {
      const uint64_t n = std::min(step, size - at);
      RESHARD_RETURN_NOT_OK(
          backend_->ReadRanges({{s.object_key, at, n, buf.data()}}));
      RESHARD_RETURN_NOT_OK(internal::VerifyChunks(sums, at, buf.data(), n,
                                                   s.object_key, s.fragment_id,
                                                   &report.chunks));
    }
    ++report.objects;
    report.bytes += size;
  }
  return report;
}

Status WeightStore::Remove(std::string_view manifest_key) {
  // The revision is the one the key names, whatever its manifest says.
  std::string base, rest;
  if (!SplitRevisionKey(options_.key_prefix, manifest_key, &base, &rest) ||
      rest != "manifest") {
    return Status::InvalidArgument(
        "not a weight revision manifest key (" + options_.key_prefix +
        "/<namespace>/<resource>/<revision>/<generation>/manifest): " +
        std::string(manifest_key));
  }
  // A corrupt manifest (unparseable, a link, naming keys elsewhere) is
  // removable; only an absent one is an error.
  auto m = LoadManifest(manifest_key);
  if (m.status().IsNotFound()) return m.status();
  const int64_t now = UnixSeconds();
  // Listed without the trailing '/': a link planted at "leases" is no
  // lease (and is removed with the rest below).
  RESHARD_ASSIGN_OR_RETURN(auto leases, backend_->List(base + "/leases"));
  uint32_t live = 0;
  for (const std::string& k : leases) {
    if (!k.starts_with(base + "/leases/")) continue;
    auto text = backend_->Get(k);
    if (text.ok() && ParseSeconds(*text) > now) {
      ++live;
    }
  }
  if (live > 0) {
    return Status::FailedPrecondition(
        "weight revision " + std::string(manifest_key) + " is leased by " +
        std::to_string(live) + " load(s); not removed");
  }
  // Withdraw the commit decisions first, so that a removal interrupted
  // below leaves undecided uploads (abandoned after gc_grace) rather than
  // decided ones that Gc would publish again from their pending manifest,
  // some of whose keys may already be gone. Then hide the revision and
  // remove everything under it (the backend lists no key through a
  // symbolic link and deletes a link itself only).
  RESHARD_ASSIGN_OR_RETURN(auto txn_keys,
                           backend_->List(base + "/transactions/"));
  for (const std::string& k : txn_keys) {
    if (k.ends_with("/decision")) RESHARD_RETURN_NOT_OK(backend_->Delete(k));
  }
  RESHARD_RETURN_NOT_OK(backend_->Delete(manifest_key));
  RESHARD_ASSIGN_OR_RETURN(auto keys, backend_->List(base + "/"));
  for (const std::string& k : keys) RESHARD_RETURN_NOT_OK(backend_->Delete(k));
  return Status::OK();
}

Result<GcReport> WeightStore::Gc() {
  GcReport report;
  const std::string& prefix = options_.key_prefix;
  RESHARD_ASSIGN_OR_RETURN(auto keys, backend_->List(prefix + "/"));
  // Transactions per base, and what published manifests reference.
  std::map<std::string, std::set<std::string>> txns;  // base -> txn ids
  std::set<std::string> referenced;                   // object keys
  std::map<std::string, std::string> manifests;       // base -> key
  std::string base, rest;
  for (const std::string& k : keys) {
    if (!SplitRevisionKey(prefix, k, &base, &rest)) continue;
    if (rest == "manifest") manifests[base] = k;
    for (std::string_view family :
         {"payload/", "checksums/", "transactions/"}) {
      if (!rest.starts_with(family)) continue;
      const std::string txn = rest.substr(family.size());
      txns[base].insert(txn.substr(0, txn.find('/')));
    }
  }
  std::map<std::string, std::string> committed_txn;  // base -> txn
  std::set<std::string> corrupt;                     // bases
  for (const auto& [b, key] : manifests) {
    auto m = LoadManifest(key);
    if (!m.ok()) {
      // Its manifest may reference anything under the revision: collect
      // nothing there until it is repaired or removed.
      corrupt.insert(b);
      report.skipped.push_back({key, m.status().message()});
      continue;
    }
    for (const auto& f : m->fragments()) {
      referenced.insert(f.object_key);
      committed_txn[b] = TransactionOfObject(f.object_key);
    }
  }
  const int64_t now = UnixSeconds();
  // One upload; an error skips it (reported), not the rest of the store.
  auto collect = [&](const std::string& b, const std::string& txn) -> Status {
    const std::string tkey = b + "/transactions/" + txn;
    RESHARD_ASSIGN_OR_RETURN(auto decided,
                             ReadDecision(*backend_, tkey + "/decision"));
    bool remove = decided && *decided == "abort";
    if (decided && *decided == "commit") {
      if (manifests.count(b)) {
        remove = true;  // lost to another manifest
      } else {
        // Decided but not published (the writer died after its decision):
        // roll forward, never delete. A concurrent Commit of the same
        // transaction publishes the same bytes. Only a manifest of this
        // very revision is published.
        const std::string pending = tkey + "/pending-manifest";
        auto copy = backend_->Get(pending);
        if (copy.status().IsNotFound()) return Status::OK();
        RESHARD_RETURN_NOT_OK(copy.status());
        if (!ParsePublishedManifest(b + "/manifest", *copy).ok()) {
          return Status::DataLoss("damaged pending weight manifest: " +
                                  pending);
        }
        Status st = PublishManifest(*backend_, b + "/manifest", *copy);
        if (st.ok()) {
          report.transactions_completed.push_back(b + "/" + txn);
        } else if (!st.IsAlreadyExists()) {
          return st.WithContext("publishing " + pending);
        }
        return Status::OK();
      }
    }
    if (!remove && !decided) {
      // Undecided: abandoned once older than the grace period.
      auto started = backend_->Get(tkey + "/started");
      const int64_t t = started.ok() ? ParseSeconds(*started) : 0;
      remove = now - t >= options_.gc_grace.count();
    }
    if (!remove) return Status::OK();
    // Never anything a published manifest references.
    RESHARD_RETURN_NOT_OK(RemoveTransactionKeys(
        *backend_, b, txn, {"payload", "checksums", "transactions"}, referenced,
        &report));
    report.transactions_removed.push_back(b + "/" + txn);
    return Status::OK();
  };
  for (const auto& [b, ids] : txns) {
    if (corrupt.count(b)) continue;
    for (const std::string& txn : ids) {
      if (txn.empty()) continue;
      if (committed_txn.count(b) && committed_txn[b] == txn) continue;
      Status st = collect(b, txn);
      if (!st.ok()) report.skipped.push_back({b + "/" + txn, st.message()});
    }
  }
  RESHARD_ASSIGN_OR_RETURN(report.temporaries_removed,
                           backend_->RemoveStaleTemporaries(options_.gc_grace));
  return report;
}

}  // namespace reshard
