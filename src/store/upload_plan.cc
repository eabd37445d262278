// WeightStore::PrepareUpload and PrepareImport: which source replica holds
// each stored box, the manifest of the revision to be, and who writes
// what (docs/store-format.md, "Upload, commit, abort").

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
#include "store/device_staging.h"
#include "store/keys.h"
#include "store/progress.h"
#include "store/records.h"
#include "store/revision_files.h"
#include "store/revision_state.h"
#include "util/dims_text.h"

namespace reshard {

namespace {

using internal::KeysOf;
using internal::RevisionKeys;

// UTC ISO-8601 to seconds with 'Z' (the reference's created_at).
std::string UtcTime(int64_t unix_seconds) {
  const std::time_t t = static_cast<std::time_t>(unix_seconds);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

}  // namespace

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
  auto checked =
      CheckedBindings::Make(source, bindings, BindingCoverage::kSubset);
  if (!checked.ok()) return checked.status().WithContext("source bindings");
  return PrepareUploadAs(source, *checked, options_.new_transaction_id());
}

Result<UploadPlan> WeightStore::PrepareUpload(
    const WeightPlacementManifest& source, const CheckedBindings& bindings) {
  return PrepareUploadAs(source, bindings, options_.new_transaction_id());
}

Result<UploadPlan> WeightStore::PrepareUploadAs(
    const WeightPlacementManifest& source, const CheckedBindings& bindings,
    std::string transaction_id) {
  RESHARD_RETURN_NOT_OK(
      bindings.RequireFor(source).WithContext("source bindings"));
  RESHARD_RETURN_NOT_OK(RejectDpOwnedTensors(source));
  // CUDA sources without a device: refused before the started record.
  RESHARD_RETURN_NOT_OK(internal::DeviceApiFor(bindings.bindings(),
                                               "store upload", "source",
                                               options_.device_api)
                            .status());
  BindingsByParticipant by_part;
  for (const auto& b : bindings.bindings()) by_part[b.participant_id()] = &b;
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

}  // namespace reshard
