// WeightStore: upload, commit/abort, ranged verified loads, lifecycle
// (docs/store-format.md).

#include "reshard/weight_store.h"

#include <algorithm>
#include <chrono>
#include <ctime>
#include <map>
#include <optional>
#include <set>
#include <tuple>

#include "reshard/plan.h"
#include "store/checksum.h"
#include "store/layout.h"
#include "store/progress.h"
#include "store/records.h"
#include "store/revision_files.h"
#include "util/dims_text.h"

namespace reshard {
namespace {

using internal::ClassifiedKey;
using internal::RevisionKeyKind;
using internal::RevisionKeys;
using internal::StoreKeys;
using internal::TransactionOfObject;
using internal::UploadDecision;

StoreKeys KeysOf(const WeightStoreOptions& o) {
  return StoreKeys(o.key_prefix, o.namespace_);
}

// The revision a manifest belongs to: its group (the revision base).
RevisionKeys KeysOf(const StoredWeightManifest& m) {
  return RevisionKeys(m.group_id());
}

// UTC ISO-8601 to seconds with 'Z' (the reference's created_at).
std::string UtcTime(int64_t unix_seconds) {
  const std::time_t t = static_cast<std::time_t>(unix_seconds);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

// The decision record of a transaction, if any (strict: any other shape is
// DataLoss naming the key).
Result<std::optional<UploadDecision>> ReadDecision(ObjectStore& b,
                                                   const std::string& key) {
  auto text = b.Get(key);
  if (text.status().IsNotFound()) return std::optional<UploadDecision>();
  RESHARD_RETURN_NOT_OK(text.status());
  RESHARD_ASSIGN_OR_RETURN(UploadDecision d,
                           internal::ParseDecisionRecord(*text, key));
  return std::optional<UploadDecision>(d);
}

// Claims `decision` for the upload (create-only: the first decision wins)
// and returns the decision that won.
Result<UploadDecision> ClaimDecision(ObjectStore& b, const std::string& key,
                                     UploadDecision decision,
                                     std::string_view plan_digest) {
  Status st = b.Put(key, internal::DecisionRecord(decision, plan_digest));
  if (!st.ok() && !st.IsAlreadyExists()) return st;
  RESHARD_ASSIGN_OR_RETURN(auto decided, ReadDecision(b, key));
  if (!decided) {
    return Status::Unavailable("upload decision is not complete; retry");
  }
  if (*decided != decision) {
    return Status::FailedPrecondition(
        "weight upload already chose " +
        std::string(internal::UploadDecisionName(*decided)));
  }
  return *decided;
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

// Removes the keys of upload `txn` of the revision in the given key
// families ("payload", "checksums", "transactions") except those in `keep`,
// counting them in `report` when given.
Status RemoveTransactionKeys(ObjectStore& b, const RevisionKeys& keys,
                             const std::string& txn,
                             std::initializer_list<std::string_view> families,
                             const std::set<std::string>& keep,
                             GcReport* report) {
  for (std::string_view family : families) {
    // Listed without the trailing '/', so that a non-directory entry at
    // "<family>/<txn>" (a planted symbolic link) is removed too: Delete
    // removes a link itself, never what it points to.
    const std::string dir = keys.TransactionFamily(family, txn);
    RESHARD_ASSIGN_OR_RETURN(auto listed, b.List(dir));
    for (const std::string& k : listed) {
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

// Payloads and checksum records; the families an abort or a lost commit
// removes.
const std::initializer_list<std::string_view> kPayloadFamilies = {"payload",
                                                                  "checksums"};

// The revision a manifest describes is the one its key names (a damaged
// identity would send loads and checksum reads elsewhere), and every
// payload key is <base>/payload/<txn>/<name>.
Status CheckManifestConfinement(std::string_view manifest_key,
                                const StoredWeightManifest& m) {
  const std::string identity =
      "/" + internal::QuoteKeyComponent(m.namespace_id()) + "/" +
      internal::QuoteKeyComponent(m.resource_id()) + "/" +
      internal::QuoteKeyComponent(m.revision()) + "/" +
      std::to_string(m.weight_generation()) + "/manifest";
  if (!m.manifest_key().ends_with(identity)) {
    return Status::DataLoss("corrupt manifest " + std::string(manifest_key) +
                            ": it describes " + m.resource_id() + "@" +
                            m.revision() + "/" +
                            std::to_string(m.weight_generation()));
  }
  const std::string payload = m.group_id() + "/payload/";
  for (const StoredFragment& f : m.fragments()) {
    const std::string_view key(f.object_key);
    const std::string_view rest =
        key.starts_with(payload) ? key.substr(payload.size()) : "";
    const size_t slash = rest.find('/');
    if (slash == 0 || slash == std::string_view::npos ||
        slash + 1 == rest.size() ||
        rest.find('/', slash + 1) != std::string_view::npos) {
      return Status::DataLoss("corrupt manifest " + std::string(manifest_key) +
                              ": stored fragment " + f.stored_fragment_id +
                              " names object " + f.object_key + ", not " +
                              payload + "<txn>/<id>");
    }
  }
  return Status::OK();
}

// Parses `text` as the manifest published at `manifest_key` and checks that
// it describes that revision only: its key, its group (the revision base)
// and every payload key. A manifest failing these is corrupt (DataLoss):
// loads, verify and gc never act on the keys it names.
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
  RESHARD_RETURN_NOT_OK(CheckManifestConfinement(manifest_key, m));
  return m;
}

Result<StoredWeightManifest> ReadPublishedManifest(
    ObjectStore& b, std::string_view manifest_key) {
  auto text = b.Get(manifest_key);
  if (text.status().IsNotFound()) {
    return Status::NotFound("no published weight revision " +
                            std::string(manifest_key));
  }
  RESHARD_RETURN_NOT_OK(text.status());
  return ParsePublishedManifest(manifest_key, *text);
}

// The expiry of the lease record at `key` (strict; errors name the key).
Result<int64_t> ReadLeaseExpiry(ObjectStore& b, const std::string& key) {
  RESHARD_ASSIGN_OR_RETURN(std::string text, b.Get(key));
  return internal::ParseLeaseRecord(text, key);
}

}  // namespace

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

namespace {

// The clock and id sources options leave empty.
void FillDefaultHooks(WeightStoreOptions* options) {
  if (!options->now_seconds) options->now_seconds = internal::UnixSeconds;
  if (!options->new_transaction_id) {
    options->new_transaction_id = [] { return internal::RandomHex(16); };
  }
  if (!options->new_lease_id) {
    options->new_lease_id = [] { return internal::RandomHex(8); };
  }
}

}  // namespace

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
  FillDefaultHooks(&options);
  return WeightStore(std::move(backend), std::move(options));
}

WeightStore WeightStore::WithOptions(WeightStoreOptions options) const {
  FillDefaultHooks(&options);
  return WeightStore(backend_, std::move(options));
}

// ---------------------------------------------------------------- upload

namespace {

// A source placement fragment and the binding of the participant holding
// it.
struct Candidate {
  const PlacementFragment* fragment;
  const WeightRuntimeBindingManifest* binding;
};

using BindingsByParticipant =
    std::map<std::string_view, const WeightRuntimeBindingManifest*>;

// Rule 64: the store holds one replica of replicated weights only (one
// DP replica holds all of every tensor: none DP-owned or split over DP).
Status RejectDpOwnedTensors(const WeightPlacementManifest& source) {
  for (const auto& t : source.tensors()) {
    for (const auto& axis : t.parallel_axes()) {
      if (axis.kind() == AxisKind::kDp &&
          axis.semantics() == AxisSemantics::kOwnership) {
        return Status::InvalidArgument(
            "Weight Store upload requires replicated DP source tensors; "
            "DP-owned tensor snapshots are not supported: " +
            t.tensor_id());
      }
      // One DP replica holds only its part of a split spanning DP.
      if (axis.over() == AxisKind::kDp) {
        return Status::InvalidArgument(
            "Weight Store upload requires replicated DP source tensors; "
            "tensors split over DP are not supported: " +
            t.tensor_id());
      }
    }
  }
  return Status::OK();
}

// The DP replicas an upload may read: every fragment bound, one binding
// generation per replica, one generation for all of them.
struct ReplicaSelection {
  uint64_t generation = 0;
  std::vector<int64_t> eligible;  // ascending DP ranks
  std::map<int64_t, std::vector<Candidate>> replicas;
};

// Why no DP replica is eligible: for each replica (at most four named),
// its first fragment without a binding, or the generations its bindings
// disagree on.
std::string WhyNoReplica(
    const std::map<int64_t, std::pair<std::string, const PlacementFragment*>>&
        first_unbound,
    const std::map<int64_t, std::set<uint64_t>>& generations) {
  std::set<int64_t> replicas;
  for (const auto& [dp, unused] : first_unbound) replicas.insert(dp);
  for (const auto& [dp, unused] : generations) replicas.insert(dp);
  std::string out;
  size_t named = 0;
  for (int64_t dp : replicas) {
    if (named == 4) {
      out += "; and " + std::to_string(replicas.size() - named) +
             " more replica(s)";
      break;
    }
    out += named++ == 0 ? ": " : "; ";
    out += "DP replica " + std::to_string(dp);
    if (auto it = first_unbound.find(dp); it != first_unbound.end()) {
      const PlacementFragment& f = *it->second.second;
      out += " is missing participant " + it->second.first +
             " (unbound; its first fragment: " + f.tensor_id() + " at " +
             internal::DimsText(f.global_offset()) + " of shape " +
             internal::DimsText(f.local_shape()) + ")";
      continue;
    }
    out += " has bindings of generations";
    for (uint64_t g : generations.at(dp)) out += " " + std::to_string(g);
  }
  return out;
}

Result<ReplicaSelection> SelectSourceReplicas(
    const WeightPlacementManifest& source, const BindingsByParticipant& bound) {
  ReplicaSelection out;
  std::map<int64_t, std::set<uint64_t>> generations;
  // DP rank -> its first participant without a binding and that
  // participant's first fragment.
  std::map<int64_t, std::pair<std::string, const PlacementFragment*>>
      first_unbound;
  for (const auto& part : source.parts()) {
    auto it = bound.find(part.participant_id());
    for (const auto& f : part.fragments()) {
      const int64_t dp = part.rank().dp;
      if (it == bound.end()) {
        // The replica's first unbound participant (parts are sorted), and
        // its first fragment in (tensor, offset) order.
        auto [u, added] =
            first_unbound.emplace(dp, std::pair{part.participant_id(), &f});
        const PlacementFragment* g = u->second.second;
        if (!added && u->second.first == part.participant_id() &&
            std::tie(f.tensor_id(), f.global_offset()) <
                std::tie(g->tensor_id(), g->global_offset())) {
          u->second.second = &f;
        }
        continue;
      }
      out.replicas[dp].push_back({&f, it->second});
      generations[dp].insert(it->second->generation());
    }
  }
  std::optional<uint64_t> generation;
  std::string seen;  // "dp 0 at 1, dp 1 at 2": the eligible replicas so far
  for (const auto& [dp, frags] : out.replicas) {
    if (first_unbound.count(dp) || generations[dp].size() != 1) continue;
    const uint64_t g = *generations[dp].begin();
    seen += (seen.empty() ? "" : ", ") + std::string("DP replica ") +
            std::to_string(dp) + " at " + std::to_string(g);
    if (generation && *generation != g) {
      return Status::FailedPrecondition(
          "complete source DP replicas have inconsistent lease generations: " +
          seen);
    }
    generation = g;
    out.eligible.push_back(dp);
  }
  if (out.eligible.empty()) {
    return Status::FailedPrecondition(
        "source manifests have no complete generation-consistent DP "
        "replica" +
        WhyNoReplica(first_unbound, generations));
  }
  out.generation = *generation;
  return out;
}

// A fragment box (tensor, offset, shape) and every eligible copy of it.
using Box = std::tuple<std::string, Dims, Dims>;
using BoxCopies = std::map<Box, std::vector<Candidate>>;

// The stored fragments: each tensor's boxes in the lowest eligible
// replica that holds it (every tensor's in the lowest replica when each
// DP replica is a whole copy; where expert parallelism spans DP, as
// engines lay it out, an expert's tensors live in one DP replica only);
// their possible writers: every eligible copy of each box.
BoxCopies GroupStoredBoxes(const ReplicaSelection& sel) {
  BoxCopies boxes;
  auto box_of = [](const Candidate& c) {
    return Box{c.fragment->tensor_id(), c.fragment->global_offset(),
               c.fragment->local_shape()};
  };
  std::map<std::string_view, int64_t> holder;  // tensor -> its DP replica
  for (int64_t dp : sel.eligible) {
    for (const Candidate& c : sel.replicas.at(dp)) {
      if (holder.emplace(c.fragment->tensor_id(), dp).first->second == dp) {
        boxes[box_of(c)];
      }
    }
  }
  for (int64_t dp : sel.eligible) {
    for (const Candidate& c : sel.replicas.at(dp)) {
      auto it = boxes.find(box_of(c));
      if (it != boxes.end()) it->second.push_back(c);
    }
  }
  return boxes;
}

// The manifest the upload will publish: one stored fragment per box, in
// box order, each in its own payload object of transaction `txn`.
Result<StoredWeightManifest> MakeUploadManifest(
    const WeightPlacementManifest& source, const WeightStoreOptions& options,
    const RevisionKeys& keys, const std::string& txn, const BoxCopies& boxes) {
  StoredWeightManifestSpec spec;
  spec.namespace_ = options.namespace_;
  spec.resource_id = source.resource_id();
  spec.revision = source.revision();
  spec.weight_generation = source.weight_generation();
  spec.group_id = keys.base();
  spec.manifest_key = keys.Manifest();
  spec.created_at = UtcTime(options.now_seconds());
  spec.tensors = source.tensors();
  for (const auto& [box, copies] : boxes) {
    const PlacementFragment& f = *copies.front().fragment;
    StoredFragment s;
    s.stored_fragment_id = internal::StoredFragmentId(
        f.tensor_id(), f.global_offset(), f.local_shape());
    s.tensor_id = f.tensor_id();
    s.global_offset = f.global_offset();
    s.local_shape = f.local_shape();
    s.object_key = keys.Payload(txn, s.stored_fragment_id);
    s.object_offset = 0;
    s.nbytes = f.nbytes();
    s.aliases = f.aliases();
    spec.fragments.push_back(std::move(s));
  }
  return StoredWeightManifest::Make(std::move(spec));
}

// One writer per stored fragment: largest first (ties in box order), to
// the least-loaded holder of identical bytes. Returns the bytes each
// writer writes.
std::map<std::string, uint64_t> AssignWriters(
    const StoredWeightManifest& m, const BoxCopies& boxes,
    std::vector<UploadOperation>* ops) {
  std::map<std::string_view, size_t> index_of;  // stored fragment id -> index
  const auto& stored = m.fragments();
  for (size_t i = 0; i < stored.size(); ++i) {
    index_of[stored[i].stored_fragment_id] = i;
  }
  struct Pending {
    size_t stored;
    const std::vector<Candidate>* copies;
  };
  std::vector<Pending> pending;
  for (const auto& [box, copies] : boxes) {
    const auto& [tensor, offset, shape] = box;
    pending.push_back(
        {index_of.at(internal::StoredFragmentId(tensor, offset, shape)),
         &copies});
  }
  std::stable_sort(pending.begin(), pending.end(),
                   [&](const Pending& a, const Pending& b) {
                     return stored[a.stored].nbytes > stored[b.stored].nbytes;
                   });
  std::map<std::string, uint64_t> load;
  for (const Pending& p : pending) {
    const Candidate* best = nullptr;
    for (const Candidate& c : *p.copies) {
      if (best == nullptr || load[c.binding->participant_id()] <
                                 load[best->binding->participant_id()]) {
        best = &c;
      }
    }
    load[best->binding->participant_id()] += stored[p.stored].nbytes;
    ops->push_back({p.stored, best->binding->participant_id(),
                    best->fragment->placement_fragment_id()});
  }
  std::sort(ops->begin(), ops->end(), [](const auto& a, const auto& b) {
    return a.stored_fragment < b.stored_fragment;
  });
  return load;
}

}  // namespace

Result<UploadPlan> WeightStore::PrepareUpload(
    const WeightPlacementManifest& source,
    const std::vector<WeightRuntimeBindingManifest>& bindings) {
  return PrepareUploadAs(source, bindings, options_.new_transaction_id());
}

Result<UploadPlan> WeightStore::PrepareUploadAs(
    const WeightPlacementManifest& source,
    const std::vector<WeightRuntimeBindingManifest>& bindings,
    std::string transaction_id) {
  RESHARD_RETURN_NOT_OK(
      ValidateRuntimeBindings(source, bindings, BindingCoverage::kSubset)
          .WithContext("source bindings"));
  RESHARD_RETURN_NOT_OK(RejectDpOwnedTensors(source));
  BindingsByParticipant by_part;
  for (const auto& b : bindings) by_part[b.participant_id()] = &b;
  RESHARD_ASSIGN_OR_RETURN(ReplicaSelection selection,
                           SelectSourceReplicas(source, by_part));
  const BoxCopies boxes = GroupStoredBoxes(selection);
  // The revision is the placement's weight generation; the plan's
  // generation is the runtime binding generation the upload is fenced at.
  const RevisionKeys keys = KeysOf(options_).Revision(
      source.resource_id(), source.revision(), source.weight_generation());
  UploadPlan plan;
  plan.transaction_id_ = std::move(transaction_id);
  plan.generation_ = selection.generation;
  plan.source_placement_id_ = source.placement_id();
  RESHARD_ASSIGN_OR_RETURN(
      auto manifest,
      MakeUploadManifest(source, options_, keys, plan.transaction_id_, boxes));
  plan.manifest_ =
      std::make_shared<const StoredWeightManifest>(std::move(manifest));
  const auto bytes = AssignWriters(*plan.manifest_, boxes, &plan.ops_);
  for (const auto& [participant, n] : bytes) {
    const WeightRuntimeBindingManifest& b = *by_part.at(participant);
    plan.writers_.push_back({participant, b.instance_id(), b.lease_id()});
  }
  Status started =
      backend_->Put(keys.Started(plan.transaction_id_),
                    internal::StartedRecord(options_.now_seconds()));
  if (!started.ok() && !started.IsAlreadyExists()) return started;
  return plan;
}

namespace {

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
        op.placement_fragment_id + " -> " + s.stored_fragment_id);
  }
  return Status::OK();
}

// The writer record of `binding`'s participant, fenced: its generation,
// instance and lease must be the plan's. nullptr: it writes nothing.
Result<const UploadWriter*> FenceWriter(
    const UploadPlan& plan, const WeightRuntimeBindingManifest& binding) {
  if (binding.generation() != plan.generation()) {
    return Status::FailedPrecondition(
        "stale source lease: participant " + binding.participant_id() +
        " is at generation " + std::to_string(binding.generation()) +
        ", the upload plan at " + std::to_string(plan.generation()));
  }
  const bool writes =
      std::any_of(plan.operations().begin(), plan.operations().end(),
                  [&](const UploadOperation& op) {
                    return op.participant_id == binding.participant_id();
                  });
  if (!writes) return nullptr;
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
  return writer;
}

// A stored fragment and the bound source memory it is written from.
using UploadWork = std::vector<
    std::pair<const StoredFragment*, const RuntimeBindingFragment*>>;

// The participant's operations, every one checked before the first byte
// is written.
Result<UploadWork> CollectUploadWork(
    const UploadPlan& plan, const WeightPlacementManifest& source,
    const WeightRuntimeBindingManifest& binding) {
  UploadWork work;
  for (const UploadOperation& op : plan.operations()) {
    if (op.participant_id != binding.participant_id()) continue;
    const StoredFragment& s = plan.manifest().fragments()[op.stored_fragment];
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
  return work;
}

// No writes into a transaction that chose abort (a late writer would leave
// payloads nobody references); checked before every object.
Status RequireNotAborted(ObjectStore& b, const UploadPlan& plan) {
  RESHARD_ASSIGN_OR_RETURN(
      auto decided,
      ReadDecision(b, KeysOf(plan.manifest()).Decision(plan.transaction_id())));
  if (decided == UploadDecision::kAbort) {
    return Status::FailedPrecondition("weight upload transaction " +
                                      plan.transaction_id() +
                                      " was aborted: no more payload writes");
  }
  return Status::OK();
}

// The checksum record first, then the payload, both durable at commit (one
// Sync for the whole upload). A retry after a crash finds the record and
// requires the same checksums; the payload is atomic.
Status WriteStoredFragment(ObjectStore& b, const WeightStoreOptions& options,
                           const UploadPlan& plan, const StoredFragment& s,
                           const uint8_t* data) {
  const std::string sums =
      internal::ChecksumRecord(data, s.nbytes, options.chunk_bytes);
  const std::string sums_key =
      KeysOf(plan.manifest())
          .Checksum(plan.transaction_id(), s.stored_fragment_id);
  Status st = b.PutObject(sums_key, {{sums.data(), sums.size()}},
                          Durability::kAtNextSync);
  if (st.IsAlreadyExists()) {
    RESHARD_ASSIGN_OR_RETURN(auto old, b.Get(sums_key));
    if (old != sums) {
      return Status::AlreadyExists("payload exists with other bytes: " +
                                   s.object_key);
    }
  } else {
    RESHARD_RETURN_NOT_OK(st);
  }
  st = b.PutObject(s.object_key, {{data, s.nbytes}}, Durability::kAtNextSync);
  if (!st.ok() && !st.IsAlreadyExists()) return st;
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
  RESHARD_ASSIGN_OR_RETURN(const UploadWriter* writer,
                           FenceWriter(plan, binding));
  if (writer == nullptr) return std::vector<UploadReceipt>{};
  RESHARD_ASSIGN_OR_RETURN(UploadWork work,
                           CollectUploadWork(plan, source, binding));
  uint64_t total = 0;
  for (const auto& [s, f] : work) total += s->nbytes;
  internal::ProgressMeter progress(options_.progress, total);
  std::vector<UploadReceipt> receipts;
  for (const auto& [s, f] : work) {
    RESHARD_RETURN_NOT_OK(RequireNotAborted(*backend_, plan));
    RESHARD_RETURN_NOT_OK(
        WriteStoredFragment(*backend_, options_, plan, *s,
                            reinterpret_cast<const uint8_t*>(f->address())));
    if (options_.on_stage) options_.on_stage("payload");
    receipts.push_back(
        {s->stored_fragment_id, s->object_key, binding.participant_id()});
    progress.Add(s->nbytes);
  }
  progress.Finish();
  return receipts;
}

// ---------------------------------------------------------------- import

namespace {

constexpr std::string_view kImportWriter = "import";

// Each tensor's fragments in the lowest DP replica holding it (as
// GroupStoredBoxes chooses), by box, and the participant holding each.
BoxCopies ImportBoxes(const WeightPlacementManifest& source,
                      std::map<std::string_view, std::string_view>* owner) {
  std::map<std::string_view, int64_t> holder;  // tensor -> lowest DP rank
  for (const auto& part : source.parts()) {
    for (const auto& f : part.fragments()) {
      auto [it, added] = holder.emplace(f.tensor_id(), part.rank().dp);
      if (!added) it->second = std::min(it->second, part.rank().dp);
    }
  }
  BoxCopies boxes;
  for (const auto& part : source.parts()) {
    for (const auto& f : part.fragments()) {
      if (holder.at(f.tensor_id()) != part.rank().dp) continue;
      auto& copies =
          boxes[Box{f.tensor_id(), f.global_offset(), f.local_shape()}];
      if (!copies.empty()) continue;  // a replica over another axis
      copies.push_back({&f, nullptr});
      (*owner)[f.placement_fragment_id()] = part.participant_id();
    }
  }
  return boxes;
}

}  // namespace

Result<UploadPlan> WeightStore::PrepareImport(
    const WeightPlacementManifest& source) {
  RESHARD_RETURN_NOT_OK(RejectDpOwnedTensors(source));
  std::map<std::string_view, std::string_view> owner;
  const BoxCopies boxes = ImportBoxes(source, &owner);
  const RevisionKeys keys = KeysOf(options_).Revision(
      source.resource_id(), source.revision(), source.weight_generation());
  UploadPlan plan;
  plan.transaction_id_ = options_.new_transaction_id();
  plan.source_placement_id_ = source.placement_id();
  RESHARD_ASSIGN_OR_RETURN(
      auto manifest,
      MakeUploadManifest(source, options_, keys, plan.transaction_id_, boxes));
  plan.manifest_ =
      std::make_shared<const StoredWeightManifest>(std::move(manifest));
  std::set<std::string_view> writers;
  for (const auto& [box, copies] : boxes) {
    const PlacementFragment& f = *copies.front().fragment;
    const std::string id = internal::StoredFragmentId(
        f.tensor_id(), f.global_offset(), f.local_shape());
    const auto& stored = plan.manifest_->fragments();
    auto it =
        std::lower_bound(stored.begin(), stored.end(), id,
                         [](const StoredFragment& a, const std::string& b) {
                           return a.stored_fragment_id < b;
                         });
    const std::string_view participant = owner.at(f.placement_fragment_id());
    plan.ops_.push_back({static_cast<size_t>(it - stored.begin()),
                         std::string(participant), f.placement_fragment_id()});
    writers.insert(participant);
  }
  std::sort(plan.ops_.begin(), plan.ops_.end(),
            [](const auto& a, const auto& b) {
              return a.stored_fragment < b.stored_fragment;
            });
  for (std::string_view w : writers) {
    plan.writers_.push_back({std::string(w), std::string(kImportWriter),
                             std::string(kImportWriter)});
  }
  RESHARD_RETURN_NOT_OK(
      backend_->Put(keys.Started(plan.transaction_id_),
                    internal::StartedRecord(options_.now_seconds())));
  return plan;
}

Result<std::vector<UploadReceipt>> WeightStore::Import(
    const UploadPlan& plan, const WeightPlacementManifest& source,
    FragmentReader& reader) {
  if (source.placement_id() != plan.source_placement_id_) {
    return Status::InvalidArgument("source placement identity mismatch");
  }
  uint64_t largest = 0, total = 0;
  for (const UploadOperation& op : plan.operations()) {
    const uint64_t n = plan.manifest().fragments()[op.stored_fragment].nbytes;
    largest = std::max(largest, n);
    total += n;
  }
  internal::ProgressMeter progress(options_.progress, total);
  std::vector<uint8_t> buffer(largest);
  std::vector<UploadReceipt> receipts;
  for (const UploadOperation& op : plan.operations()) {
    const StoredFragment& s = plan.manifest().fragments()[op.stored_fragment];
    RESHARD_RETURN_NOT_OK(CheckOperationGeometry(source, op, s));
    RESHARD_RETURN_NOT_OK(RequireNotAborted(*backend_, plan));
    RESHARD_RETURN_NOT_OK(
        reader
            .Read(*source.FindFragment(op.placement_fragment_id), buffer.data())
            .WithContext("reading " + op.placement_fragment_id));
    RESHARD_RETURN_NOT_OK(
        WriteStoredFragment(*backend_, options_, plan, s, buffer.data()));
    if (options_.on_stage) options_.on_stage("payload");
    receipts.push_back({s.stored_fragment_id, s.object_key, op.participant_id});
    progress.Add(s.nbytes);
  }
  progress.Finish();
  return receipts;
}

// ---------------------------------------------------------------- commit

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

// ---------------------------------------------------------------- read side

Result<StoredWeightManifest> WeightStore::ReadManifest(
    std::string_view manifest_key) {
  return ReadPublishedManifest(*backend_, manifest_key);
}

namespace {

// A listed revision from its manifest: READY, or CORRUPT with the error
// (one tampered revision must not hide the others).
RevisionInfo DescribeRevision(ObjectStore& b, const std::string& key) {
  RevisionInfo r;
  r.manifest_key = key;
  auto m = ReadPublishedManifest(b, key);
  if (!m.ok()) {
    r.state = "CORRUPT";
    r.error = m.status().message();
    return r;
  }
  r.resource_id = m->resource_id();
  r.revision = m->revision();
  r.weight_generation = m->weight_generation();
  r.state = "READY";
  r.fragments = m->fragments().size();
  for (const auto& f : m->fragments()) r.bytes += f.nbytes;
  return r;
}

}  // namespace

Result<std::vector<std::string>> WeightStore::ManifestKeys(
    std::string_view resource_id) {
  const StoreKeys layout = KeysOf(options_);
  // "<prefix>/<ns>/<resource>/": the base without revision and generation.
  std::string prefix = layout.Base(resource_id, "", 0);
  prefix.resize(prefix.size() - 2);  // the empty revision and "/0"
  RESHARD_ASSIGN_OR_RETURN(auto keys, backend_->List(prefix));
  std::vector<std::string> out;
  for (std::string& k : keys) {
    auto c = layout.Classify(k);
    if (c && c->kind == RevisionKeyKind::kManifest) out.push_back(std::move(k));
  }
  std::sort(out.begin(), out.end());
  return out;
}

Result<std::vector<RevisionInfo>> WeightStore::List() {
  const StoreKeys layout = KeysOf(options_);
  RESHARD_ASSIGN_OR_RETURN(auto keys, backend_->List(layout.ListPrefix()));
  std::vector<std::pair<const std::string*, ClassifiedKey>> classified;
  for (const std::string& k : keys) {
    if (auto c = layout.Classify(k)) classified.emplace_back(&k, *c);
  }
  std::map<std::string, RevisionInfo> revisions;  // by base
  for (const auto& [key, c] : classified) {
    if (c.kind == RevisionKeyKind::kManifest) {
      revisions[c.base] = DescribeRevision(*backend_, *key);
    }
  }
  const int64_t now = options_.now_seconds();
  for (const auto& [key, c] : classified) {
    if (c.kind == RevisionKeyKind::kLease) {
      auto it = revisions.find(c.base);
      if (it == revisions.end() || it->second.state != "READY") continue;
      // A lease that cannot be read counts as held (Remove refuses the
      // revision, naming the record).
      auto expires = ReadLeaseExpiry(*backend_, *key);
      if (expires.status().IsNotFound()) continue;  // released meanwhile
      if (!expires.ok() || *expires > now) ++it->second.leases;
    }
    if (c.kind == RevisionKeyKind::kStarted && !revisions.count(c.base)) {
      RevisionInfo& r = revisions[c.base];
      r.manifest_key = RevisionKeys(c.base).Manifest();
      r.state = "IMPORTING";
    }
  }
  std::vector<RevisionInfo> out;
  for (auto& [b, r] : revisions) out.push_back(std::move(r));
  return out;
}

Result<VerifyReport> WeightStore::Verify(std::string_view manifest_key) {
  RESHARD_ASSIGN_OR_RETURN(auto m, ReadManifest(manifest_key));
  const RevisionKeys keys = KeysOf(m);  // checked: the key's own
  VerifyReport report;
  uint64_t total = 0;
  for (const StoredFragment& s : m.fragments()) total += s.nbytes;
  internal::ProgressMeter progress(options_.progress, total);
  std::vector<uint8_t> buf(options_.staging_bytes);
  for (const StoredFragment& s : m.fragments()) {
    RESHARD_ASSIGN_OR_RETURN(auto sums,
                             internal::ReadChunkSums(*backend_, keys, s));
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
      RESHARD_RETURN_NOT_OK(
          internal::VerifyChunks(sums, at, buf.data(), n, s.object_key,
                                 s.stored_fragment_id, &report.chunks));
    }
    ++report.objects;
    report.bytes += size;
    progress.Add(s.nbytes);
  }
  // The revision's files (store/revision_files.h), each against its
  // checksums and indexed size.
  RESHARD_RETURN_NOT_OK(internal::ForEachRevisionFile(
      *backend_, m,
      [&](const internal::RevisionFileEntry& f, std::string_view) {
        ++report.objects;
        report.bytes += f.size;
        return Status::OK();
      },
      &report.chunks));
  progress.Finish();
  return report;
}

namespace {

// How many unexpired leases the revision holds; a lease record that cannot
// be read is an error naming it (a load may hold it).
Result<uint32_t> CountLiveLeases(ObjectStore& b, const StoreKeys& layout,
                                 const RevisionKeys& keys, int64_t now) {
  // Listed without the trailing '/': a link planted at "leases" is no
  // lease (and is removed with the rest of the revision).
  RESHARD_ASSIGN_OR_RETURN(auto listed, b.List(keys.Leases()));
  uint32_t live = 0;
  for (const std::string& k : listed) {
    auto c = layout.Classify(k);
    if (!c || c->kind != RevisionKeyKind::kLease || c->base != keys.base()) {
      continue;
    }
    auto expires = ReadLeaseExpiry(b, k);
    if (expires.status().IsNotFound()) continue;  // released meanwhile
    RESHARD_RETURN_NOT_OK(expires.status());
    if (*expires > now) ++live;
  }
  return live;
}

}  // namespace

Status WeightStore::Remove(std::string_view manifest_key) {
  // The revision is the one the key names, whatever its manifest says.
  const StoreKeys layout = KeysOf(options_);
  auto c = layout.Classify(manifest_key);
  if (!c || c->kind != RevisionKeyKind::kManifest) {
    return Status::InvalidArgument(
        "not a weight revision manifest key (" + options_.key_prefix +
        "/<namespace>/<resource>/<revision>/<generation>/manifest): " +
        std::string(manifest_key));
  }
  const RevisionKeys keys(c->base);
  // A corrupt manifest (unparseable, a link, naming keys elsewhere) is
  // removable; only an absent one is an error.
  auto m = ReadManifest(manifest_key);
  if (m.status().IsNotFound()) return m.status();
  RESHARD_ASSIGN_OR_RETURN(
      uint32_t live,
      CountLiveLeases(*backend_, layout, keys, options_.now_seconds()));
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
                           backend_->List(keys.base() + "/transactions/"));
  for (const std::string& k : txn_keys) {
    auto record = layout.Classify(k);
    if (record && record->kind == RevisionKeyKind::kDecision) {
      RESHARD_RETURN_NOT_OK(backend_->Delete(k));
    }
  }
  RESHARD_RETURN_NOT_OK(backend_->Delete(manifest_key));
  RESHARD_ASSIGN_OR_RETURN(auto all, backend_->List(keys.base() + "/"));
  // Progress in keys removed of the revision's keys.
  internal::ProgressMeter meter(options_.progress, all.size());
  for (const std::string& k : all) {
    RESHARD_RETURN_NOT_OK(backend_->Delete(k));
    meter.Add(1);
  }
  meter.Finish();
  return Status::OK();
}

// ---------------------------------------------------------------- gc

namespace {

// One Gc pass: what the store holds, then each upload collected (or rolled
// forward) on its own, an error skipping that upload only.
class GarbageCollector {
 public:
  GarbageCollector(ObjectStore& b, const WeightStoreOptions& o,
                   GcReport* report)
      : b_(b), o_(o), layout_(KeysOf(o)), report_(report) {}

  // The uploads of every revision, and its manifest if published.
  Status Scan() {
    RESHARD_ASSIGN_OR_RETURN(auto keys, b_.List(layout_.ListPrefix()));
    for (const std::string& k : keys) {
      auto c = layout_.Classify(k);
      if (!c) continue;
      switch (c->kind) {
        case RevisionKeyKind::kManifest:
          manifests_[c->base] = k;
          break;
        case RevisionKeyKind::kLease:
        case RevisionKeyKind::kOther:
          break;
        default:  // payload, checksum and transaction keys
          txns_[c->base].insert(c->transaction);
      }
    }
    return Status::OK();
  }

  // What published manifests reference. A corrupt one may reference
  // anything under its revision: nothing there is collected until it is
  // repaired or removed.
  void ReadPublished() {
    for (const auto& [base, key] : manifests_) {
      auto m = ReadPublishedManifest(b_, key);
      if (!m.ok()) {
        corrupt_.insert(base);
        report_->skipped.push_back({key, m.status().message()});
        continue;
      }
      for (const auto& f : m->fragments()) {
        referenced_.insert(f.object_key);
        committed_txn_[base] = TransactionOfObject(f.object_key);
      }
    }
  }

  void CollectUploads() {
    const int64_t now = o_.now_seconds();
    // Progress in uploads examined of those found.
    uint64_t uploads = 0;
    for (const auto& [base, ids] : txns_) uploads += ids.size();
    internal::ProgressMeter meter(o_.progress, uploads);
    for (const auto& [base, ids] : txns_) {
      if (corrupt_.count(base)) {
        meter.Add(ids.size());
        continue;
      }
      auto committed = committed_txn_.find(base);
      for (const std::string& txn : ids) {
        if (txn.empty()) continue;
        if (committed != committed_txn_.end() && committed->second == txn) {
          continue;
        }
        Status st = CollectUpload(RevisionKeys(base), txn, now);
        if (!st.ok()) {
          report_->skipped.push_back({base + "/" + txn, st.message()});
        }
      }
      meter.Add(ids.size());
    }
    meter.Finish();
  }

 private:
  // Aborted, lost to another manifest, or undecided past the grace period:
  // removed (never a key a published manifest references). Decided to
  // commit but unpublished: rolled forward.
  Status CollectUpload(const RevisionKeys& keys, const std::string& txn,
                       int64_t now) {
    RESHARD_ASSIGN_OR_RETURN(auto decided,
                             ReadDecision(b_, keys.Decision(txn)));
    if (decided == UploadDecision::kCommit && !manifests_.count(keys.base())) {
      return RollForward(keys, txn);
    }
    if (!decided) {
      RESHARD_ASSIGN_OR_RETURN(int64_t started, StartedAt(keys, txn));
      if (now - started < o_.gc_grace.count()) return Status::OK();
    }
    RESHARD_RETURN_NOT_OK(RemoveTransactionKeys(
        b_, keys, txn, {"payload", "checksums", "transactions"}, referenced_,
        report_));
    report_->transactions_removed.push_back(keys.base() + "/" + txn);
    return Status::OK();
  }

  // When the undecided upload started; an upload without a started record
  // is as old as can be.
  Result<int64_t> StartedAt(const RevisionKeys& keys, const std::string& txn) {
    const std::string key = keys.Started(txn);
    auto text = b_.Get(key);
    if (text.status().IsNotFound()) return int64_t{0};
    RESHARD_RETURN_NOT_OK(text.status());
    return internal::ParseStartedRecord(*text, key);
  }

  // Decided but not published (the writer died after its decision): roll
  // forward, never delete. A concurrent Commit of the same transaction
  // publishes the same bytes. Only a manifest of this very revision is
  // published.
  Status RollForward(const RevisionKeys& keys, const std::string& txn) {
    const std::string pending = keys.PendingManifest(txn);
    auto copy = b_.Get(pending);
    if (copy.status().IsNotFound()) return Status::OK();
    RESHARD_RETURN_NOT_OK(copy.status());
    if (!ParsePublishedManifest(keys.Manifest(), *copy).ok()) {
      return Status::DataLoss("damaged pending weight manifest: " + pending);
    }
    Status st = PublishManifest(b_, keys.Manifest(), *copy);
    if (st.ok()) {
      report_->transactions_completed.push_back(keys.base() + "/" + txn);
    } else if (!st.IsAlreadyExists()) {
      return st.WithContext("publishing " + pending);
    }
    return Status::OK();
  }

  ObjectStore& b_;
  const WeightStoreOptions& o_;
  const StoreKeys layout_;
  GcReport* report_;
  std::map<std::string, std::set<std::string>> txns_;  // base -> txn ids
  std::map<std::string, std::string> manifests_;       // base -> key
  std::set<std::string> referenced_;                   // object keys
  std::map<std::string, std::string> committed_txn_;   // base -> txn
  std::set<std::string> corrupt_;                      // bases
};

}  // namespace

Result<GcReport> WeightStore::Gc() {
  GcReport report;
  GarbageCollector gc(*backend_, options_, &report);
  RESHARD_RETURN_NOT_OK(gc.Scan());
  gc.ReadPublished();
  gc.CollectUploads();
  RESHARD_ASSIGN_OR_RETURN(report.temporaries_removed,
                           backend_->RemoveStaleTemporaries(options_.gc_grace));
  return report;
}

}  // namespace reshard
