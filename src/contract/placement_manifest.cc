// WeightPlacementManifest: global assembly, validation (rules 16-28; the
// per-tensor global rules 20-26 are in global_rules.cc) and identities
// (placement_id, digest).

#include <algorithm>
#include <future>
#include <map>
#include <numeric>
#include <unordered_map>
#include <unordered_set>

#include "contract/global_rules.h"
#include "contract/placement_codec.h"
#include "reshard/placement.h"
#include "util/sha256.h"
#include "util/sorted_find.h"
#include "util/string_sort.h"

namespace reshard {

using internal::CanonicalJsonWriter;

struct WeightPlacementManifest::Impl {
  PlacementHeader header;
  ParallelTopology topology;
  std::vector<WeightPlacementPart> parts;
  std::vector<TensorDescriptor> tensors;
  std::vector<const PlacementFragment*> fragments;
  std::vector<uint32_t> fragment_part_positions;  // FragmentPartPositions
  std::string placement_id;
  std::string digest;
};

namespace {

Status CheckAliasGroups(
    const std::vector<TensorDescriptor>& tensors,
    const std::vector<std::vector<const PlacementFragment*>>& by_tensor,
    const std::unordered_map<std::string_view, size_t>& index) {
  std::vector<const std::vector<std::string>*> group(tensors.size());
  for (size_t t = 0; t < tensors.size(); ++t) {
    const auto& frags = by_tensor[t];
    group[t] = &frags.front()->aliases();
    for (const auto* f : frags) {
      if (f->aliases() != *group[t]) {
        return Status::InvalidArgument(
            "alias group is not declared consistently for tensor: " +
            tensors[t].tensor_id() + " (fragment " +
            f->placement_fragment_id() + ")");
      }
    }
  }
  for (size_t t = 0; t < tensors.size(); ++t) {
    for (const auto& member : *group[t]) {
      auto it = index.find(member);
      if (it == index.end()) {
        return Status::InvalidArgument(
            "alias group references unknown tensor: " + member +
            " (declared by tensor " + tensors[t].tensor_id() + ")");
      }
      if (*group[it->second] != *group[t]) {
        return Status::InvalidArgument(
            "alias group is not declared consistently for tensor: " + member +
            " (group of tensor " + tensors[t].tensor_id() + ")");
      }
    }
  }
  return Status::OK();
}

// Streams the canonical "parts" array to `sink` in chunks of about 1 MiB,
// so a million-fragment placement never needs its whole wire in memory.
template <typename Sink>
void StreamParts(const std::vector<WeightPlacementPart>& parts, Sink&& sink) {
  constexpr size_t kChunk = 1 << 20;
  std::string buf;
  buf.reserve(kChunk + 4096);
  CanonicalJsonWriter w(&buf);
  w.BeginArray();
  for (const auto& part : parts) {
    w.BeginObject();
    w.Key("fragments");
    w.BeginArray();
    for (const auto& f : part.fragments()) {
      internal::WriteFragment(f, &w);
      if (buf.size() >= kChunk) {
        sink(std::string_view(buf));
        buf.clear();
      }
    }
    w.EndArray();
    w.KeyString("participant_id", part.participant_id());
    w.Key("rank");
    internal::WriteRank(part.rank(), &w);
    w.EndObject();
  }
  w.EndArray();
  sink(std::string_view(buf));
}

// The wire after the "parts" value, given the placement_id:
// ,"placement_id":..,...,"weight_generation":G}
// (A template: the manifest's state type is private to it.)
template <typename State>
std::string WireTail(const State& m, const std::string& placement_id) {
  std::string out;
  CanonicalJsonWriter w(&out);
  w.BeginObject();
  w.KeyString("placement_id", placement_id);
  w.KeyString("placement_set_id", m.header.placement_set_id);
  w.KeyString("resource_id", m.header.resource_id);
  w.KeyString("resource_kind", WeightPlacementManifest::kResourceKind);
  w.KeyString("revision", m.header.revision);
  w.Key("tensors");
  w.BeginArray();
  for (const auto& t : m.tensors) internal::WriteTensor(t, &w);
  w.EndArray();
  w.Key("topology");
  internal::WriteTopology(m.topology, &w);
  w.KeyUInt("weight_generation", m.header.weight_generation);
  w.EndObject();
  out[0] = ',';  // continues the object opened before "parts"
  return out;
}

// placement_id and digest share the prefix {"parts":P, so P is serialised
// and hashed once and the hasher is cloned for the two tails. A non-empty
// `canonical_prefix` is that prefix's bytes, read by the decoder; a
// `prefix_hash` has seen them already.
template <typename State>
void ComputeIdentity(State* m, std::string_view canonical_prefix,
                     const internal::Sha256* prefix_hash = nullptr) {
  internal::Sha256 prefix;
  if (prefix_hash != nullptr) {
    prefix = prefix_hash->Clone();
  } else if (canonical_prefix.empty()) {
    prefix.Update("{\"parts\":");
    StreamParts(m->parts,
                [&](std::string_view chunk) { prefix.Update(chunk); });
  } else {
    prefix.Update(canonical_prefix);
  }
  internal::Sha256 id_hash = prefix.Clone();
  std::string tail;
  {
    CanonicalJsonWriter w(&tail);
    w.BeginObject();
    w.KeyString("placement_set_id", m->header.placement_set_id);
    w.KeyString("resource_id", m->header.resource_id);
    w.KeyString("revision", m->header.revision);
    w.KeyString("schema", "complete-weight-placement");
    w.Key("tensors");
    w.BeginArray();
    for (const auto& t : m->tensors) internal::WriteTensor(t, &w);
    w.EndArray();
    w.Key("topology");
    internal::WriteTopology(m->topology, &w);
    w.KeyUInt("weight_generation", m->header.weight_generation);
    w.EndObject();
    tail[0] = ',';
  }
  id_hash.Update(tail);
  m->placement_id = "sha256:" + id_hash.FinishHex();
  prefix.Update(WireTail(*m, m->placement_id));
  m->digest = prefix.FinishHex();
}

}  // namespace

namespace {

Status CheckHeader(const PlacementHeader& h) {
  if (h.resource_id.empty()) {
    return Status::InvalidArgument("resource_id must be a non-empty string");
  }
  if (h.revision.empty()) {
    return Status::InvalidArgument("revision must be a non-empty string");
  }
  if (h.placement_set_id.empty()) {
    return Status::InvalidArgument(
        "placement_set_id must be a non-empty string");
  }
  return Status::OK();
}

// Rule 17 for one part against its topology participant: the same header,
// topology and rank.
Status CheckPartAgainstParticipant(const WeightPlacementPart& part,
                                   const TopologyParticipant& participant,
                                   const PlacementHeader& h,
                                   const ParallelTopology& topo) {
  const std::string& pid = part.participant_id();
  const PlacementHeader& ph = part.header();
  const std::pair<const char*, bool> same[] = {
      {"resource_id", ph.resource_id == h.resource_id},
      {"revision", ph.revision == h.revision},
      {"weight_generation", ph.weight_generation == h.weight_generation},
      {"placement_set_id", ph.placement_set_id == h.placement_set_id},
      {"topology_id", part.topology_id() == topo.topology_id()}};
  for (const auto& [field, equal] : same) {
    if (!equal) {
      return Status::InvalidArgument(std::string("placement part ") + field +
                                     " differs: participant " + pid);
    }
  }
  if (!(part.rank() == participant.rank)) {
    return Status::InvalidArgument(
        "placement part rank differs from topology: participant " + pid +
        " has " + part.rank().ToString() + ", topology has " +
        participant.rank.ToString());
  }
  return Status::OK();
}

// Rule 17: sorts parts by participant id; they match the topology's
// participants one to one.
Status MatchPartsToTopology(const PlacementHeader& h,
                            const ParallelTopology& topo,
                            std::vector<WeightPlacementPart>* parts_in) {
  std::vector<WeightPlacementPart>& parts = *parts_in;
  std::sort(parts.begin(), parts.end(), [](const auto& a, const auto& b) {
    return a.participant_id() < b.participant_id();
  });
  for (size_t i = 1; i < parts.size(); ++i) {
    if (parts[i].participant_id() == parts[i - 1].participant_id()) {
      return Status::InvalidArgument("duplicate placement participant: " +
                                     parts[i].participant_id());
    }
  }
  const auto& participants = topo.participants();
  for (size_t i = 0, j = 0; i < participants.size() || j < parts.size();
       ++i, ++j) {
    if (j == parts.size() ||
        (i < participants.size() &&
         participants[i].participant_id < parts[j].participant_id())) {
      return Status::InvalidArgument("missing topology participant: " +
                                     participants[i].participant_id);
    }
    if (i == participants.size() ||
        parts[j].participant_id() < participants[i].participant_id) {
      return Status::InvalidArgument("unknown topology participant: " +
                                     parts[j].participant_id());
    }
    RESHARD_RETURN_NOT_OK(
        CheckPartAgainstParticipant(parts[j], participants[i], h, topo));
  }
  return Status::OK();
}

// Rule 18: one descriptor per tensor id across parts. Returns the union,
// sorted by tensor id, and rejects a placement without tensors or
// fragments.
Result<std::vector<TensorDescriptor>> UnionTensors(
    const std::vector<WeightPlacementPart>& parts) {
  std::vector<TensorDescriptor> tensors;
  // Tensor id -> its first descriptor and the part that declared it.
  std::unordered_map<std::string_view,
                     std::pair<const TensorDescriptor*, std::string_view>>
      seen_tensors;
  // Parts decoded from one document share each descriptor's state, so the
  // address of its id string names the state: a state seen before needs
  // neither the id's hash nor a comparison.
  std::unordered_set<const std::string*> seen_states;
  size_t n_fragments = 0;
  for (const auto& part : parts) {
    for (const auto& t : part.tensors()) {
      if (!seen_states.insert(&t.tensor_id()).second) continue;
      auto [it, inserted] = seen_tensors.emplace(
          t.tensor_id(),
          std::pair{&t, std::string_view(part.participant_id())});
      if (inserted) {
        tensors.push_back(t);
      } else if (!(*it->second.first == t)) {
        return Status::InvalidArgument(
            "placement part tensor descriptor mismatch: " + t.tensor_id() +
            ": " +
            DescribeDescriptorDifference(
                *it->second.first, t, "part " + std::string(it->second.second),
                "part " + part.participant_id()));
      }
    }
    n_fragments += part.fragments().size();
  }
  std::sort(tensors.begin(), tensors.end(), [](const auto& a, const auto& b) {
    return a.tensor_id() < b.tensor_id();
  });
  if (tensors.empty()) {
    return Status::InvalidArgument(
        "global weight placement must contain tensors");
  }
  if (n_fragments == 0) {
    return Status::InvalidArgument(
        "global weight placement must contain fragments");
  }
  return tensors;
}

// Every part's fragments sorted by placement_fragment_id, which must be
// globally unique, and each one's position counted part by part.
Status CollectFragments(const std::vector<WeightPlacementPart>& parts,
                        std::vector<const PlacementFragment*>* frags,
                        std::vector<uint32_t>* part_positions) {
  size_t n_fragments = 0;
  for (const auto& part : parts) n_fragments += part.fragments().size();
  frags->reserve(n_fragments);
  for (const auto& part : parts) {
    for (const auto& f : part.fragments()) frags->push_back(&f);
  }
  const bool duplicates = internal::SortByStringKey(
      frags,
      [](const PlacementFragment* f) -> const std::string& {
        return f->placement_fragment_id();
      },
      part_positions);
  for (size_t i = 1; duplicates && i < frags->size(); ++i) {
    if ((*frags)[i]->placement_fragment_id() ==
        (*frags)[i - 1]->placement_fragment_id()) {
      return Status::InvalidArgument("duplicate fragment_id: " +
                                     (*frags)[i]->placement_fragment_id());
    }
  }
  return Status::OK();
}

// The fragments of each tensor (in part order), and the index by tensor id.
struct FragmentsByTensor {
  std::unordered_map<std::string_view, size_t> index;
  std::vector<std::vector<const PlacementFragment*>> fragments;
};

FragmentsByTensor GroupByTensor(const std::vector<TensorDescriptor>& tensors,
                                const std::vector<WeightPlacementPart>& parts) {
  FragmentsByTensor out;
  out.index.reserve(tensors.size());
  for (size_t t = 0; t < tensors.size(); ++t) {
    out.index.emplace(tensors[t].tensor_id(), t);
  }
  out.fragments.resize(tensors.size());
  std::vector<size_t> global;  // part tensor index -> index in `tensors`
  for (const auto& part : parts) {
    global.clear();
    for (const auto& t : part.tensors()) {
      global.push_back(out.index.at(t.tensor_id()));
    }
    const auto& frags = part.fragments();
    for (size_t i = 0; i < frags.size(); ++i) {
      out.fragments[global[part.fragment_tensor(i)]].push_back(&frags[i]);
    }
  }
  return out;
}

}  // namespace

Result<WeightPlacementManifest> WeightPlacementManifest::Make(
    WeightPlacementManifestSpec s) {
  return Assemble(std::move(s), {});
}

Result<WeightPlacementManifest> WeightPlacementManifest::Assemble(
    WeightPlacementManifestSpec s, std::string_view canonical_prefix,
    const internal::Sha256* prefix_hash) {
  const PlacementHeader& h = s.header;
  RESHARD_RETURN_NOT_OK(CheckHeader(h));
  auto impl = std::make_shared<Impl>(
      Impl{h, std::move(s.topology), std::move(s.parts), {}, {}, {}, {}});
  const ParallelTopology& topo = impl->topology;
  RESHARD_RETURN_NOT_OK(MatchPartsToTopology(h, topo, &impl->parts));
  RESHARD_ASSIGN_OR_RETURN(impl->tensors, UnionTensors(impl->parts));
  size_t n_fragments = 0;
  for (const auto& part : impl->parts) n_fragments += part.fragments().size();
  const bool large = n_fragments >= internal::kParallelIdentityThreshold;
  // Identity depends only on the parts, tensors, topology and header, so
  // large placements hash on another thread from here on, and collect the
  // id order of their fragments on a third while their fragments are
  // grouped by tensor here. The futures' destructors join them on every
  // return path (before `impl`, declared first, goes).
  std::future<void> identity;
  std::future<Status> collected;
  if (large) {
    identity = std::async(std::launch::async,
                          [raw = impl.get(), canonical_prefix, prefix_hash] {
                            ComputeIdentity(raw, canonical_prefix, prefix_hash);
                          });
    collected = std::async(std::launch::async, [raw = impl.get()] {
      return CollectFragments(raw->parts, &raw->fragments,
                              &raw->fragment_part_positions);
    });
  } else {
    RESHARD_RETURN_NOT_OK(CollectFragments(impl->parts, &impl->fragments,
                                           &impl->fragment_part_positions));
  }
  const FragmentsByTensor by_tensor = GroupByTensor(impl->tensors, impl->parts);
  const Status aliases =
      CheckAliasGroups(impl->tensors, by_tensor.fragments, by_tensor.index);
  if (collected.valid()) RESHARD_RETURN_NOT_OK(collected.get());
  RESHARD_RETURN_NOT_OK(aliases);
  RESHARD_RETURN_NOT_OK(
      internal::CheckGlobalRules(impl->topology, impl->tensors,
                                 by_tensor.fragments, impl->fragments.size()));
  if (identity.valid()) {
    identity.get();
  } else {
    ComputeIdentity(impl.get(), canonical_prefix, prefix_hash);
  }
  if (s.placement_id.has_value() && *s.placement_id != impl->placement_id) {
    return Status::InvalidArgument(
        "placement_id does not match canonical logical content: got " +
        *s.placement_id + ", expected " + impl->placement_id);
  }
  return WeightPlacementManifest(std::move(impl));
}

Result<WeightPlacementManifest> WeightPlacementManifest::FromFragments(
    PlacementHeader header, ParallelTopology topology,
    std::vector<TensorDescriptor> tensors,
    std::vector<PlacementFragment> fragments) {
  std::sort(tensors.begin(), tensors.end(), [](const auto& a, const auto& b) {
    return a.tensor_id() < b.tensor_id();
  });
  for (size_t i = 1; i < tensors.size(); ++i) {
    if (tensors[i].tensor_id() == tensors[i - 1].tensor_id()) {
      return Status::InvalidArgument("duplicate tensor_id: " +
                                     tensors[i].tensor_id());
    }
  }
  std::map<ParallelRank, size_t> by_rank;
  const auto& participants = topology.participants();
  for (size_t i = 0; i < participants.size(); ++i) {
    by_rank.emplace(participants[i].rank, i);
  }
  std::vector<WeightPlacementPartSpec> specs(participants.size());
  std::vector<std::vector<bool>> uses(participants.size(),
                                      std::vector<bool>(tensors.size()));
  std::vector<bool> referenced(tensors.size(), false);
  for (auto& f : fragments) {
    auto it = by_rank.find(f.rank());
    if (it == by_rank.end()) {
      return Status::InvalidArgument(
          "placement fragment rank has no topology participant: " +
          f.placement_fragment_id() + " at " + f.rank().ToString());
    }
    const TensorDescriptor* t = internal::FindSorted(
        tensors, f.tensor_id(),
        [](const auto& d) -> decltype(auto) { return d.tensor_id(); });
    if (t == nullptr) {
      return Status::InvalidArgument("unknown tensor_id " + f.tensor_id() +
                                     " in fragment " +
                                     f.placement_fragment_id());
    }
    const size_t ti = t - tensors.data();
    uses[it->second][ti] = true;
    referenced[ti] = true;
    specs[it->second].fragments.push_back(std::move(f));
  }
  for (size_t t = 0; t < tensors.size(); ++t) {
    if (!referenced[t]) {
      return Status::InvalidArgument(
          "placement fragment inventory contains an unreferenced tensor: " +
          tensors[t].tensor_id());
    }
  }
  WeightPlacementManifestSpec spec{header, topology, {}, std::nullopt};
  for (size_t i = 0; i < participants.size(); ++i) {
    auto& ps = specs[i];
    ps.header = header;
    ps.topology_id = topology.topology_id();
    ps.participant_id = participants[i].participant_id;
    ps.rank = participants[i].rank;
    for (size_t t = 0; t < tensors.size(); ++t) {
      if (uses[i][t]) ps.tensors.push_back(tensors[t]);
    }
    RESHARD_ASSIGN_OR_RETURN(auto part,
                             WeightPlacementPart::Make(std::move(ps)));
    spec.parts.push_back(std::move(part));
  }
  return Make(std::move(spec));
}

const PlacementHeader& WeightPlacementManifest::header() const {
  return impl_->header;
}
const ParallelTopology& WeightPlacementManifest::topology() const {
  return impl_->topology;
}
const std::vector<WeightPlacementPart>& WeightPlacementManifest::parts() const {
  return impl_->parts;
}
const std::vector<TensorDescriptor>& WeightPlacementManifest::tensors() const {
  return impl_->tensors;
}
const std::vector<const PlacementFragment*>&
WeightPlacementManifest::fragments() const {
  return impl_->fragments;
}
namespace internal {
const std::vector<uint32_t>& FragmentPartPositions(
    const WeightPlacementManifest& m) {
  return m.impl_->fragment_part_positions;
}
}  // namespace internal

const std::string& WeightPlacementManifest::placement_id() const {
  return impl_->placement_id;
}
const std::string& WeightPlacementManifest::digest() const {
  return impl_->digest;
}

const TensorDescriptor* WeightPlacementManifest::FindTensor(
    std::string_view id) const {
  return internal::FindSorted(
      impl_->tensors, id,
      [](const auto& t) -> decltype(auto) { return t.tensor_id(); });
}

const WeightPlacementPart* WeightPlacementManifest::FindPart(
    std::string_view id) const {
  return internal::FindSorted(
      impl_->parts, id,
      [](const auto& p) -> decltype(auto) { return p.participant_id(); });
}

const PlacementFragment* WeightPlacementManifest::FindFragment(
    std::string_view id) const {
  const PlacementFragment* const* f = internal::FindSorted(
      impl_->fragments, id, [](const PlacementFragment* p) -> decltype(auto) {
        return p->placement_fragment_id();
      });
  return f == nullptr ? nullptr : *f;
}

std::string WeightPlacementToJson(const WeightPlacementManifest& placement) {
  const auto& m = *placement.impl_;
  std::string out = "{\"parts\":";
  StreamParts(m.parts, [&](std::string_view chunk) { out.append(chunk); });
  out += WireTail(m, m.placement_id);
  return out;
}

Result<WeightPlacementManifest> WithRevision(
    const WeightPlacementManifest& placement, std::string revision,
    uint64_t weight_generation) {
  PlacementHeader header = placement.header();
  header.revision = std::move(revision);
  header.weight_generation = weight_generation;
  WeightPlacementManifestSpec spec{header, placement.topology(), {}, {}};
  spec.parts.reserve(placement.parts().size());
  for (const WeightPlacementPart& p : placement.parts()) {
    RESHARD_ASSIGN_OR_RETURN(
        auto part,
        WeightPlacementPart::Make({header, p.topology_id(), p.participant_id(),
                                   p.rank(), p.tensors(), p.fragments()}));
    spec.parts.push_back(std::move(part));
  }
  return WeightPlacementManifest::Make(std::move(spec));
}

}  // namespace reshard
