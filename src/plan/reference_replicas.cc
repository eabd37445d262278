// The reference prototype's choice of source replicas
// (ReplicaPolicy::kReference, docs/planner.md).

#include "plan/reference_replicas.h"

#include <map>
#include <string_view>
#include <tuple>
#include <unordered_map>
#include <utility>

namespace reshard::internal {
namespace {

// A box: (global offset, local shape).
using Box = std::pair<Dims, Dims>;
// An owner: the fragment's OwnershipAxis coordinates in the tensor's axis
// order (dp < pp < ep < tp); the first is the DP rank if DP owns.
using Owner = std::vector<int64_t>;
// One owner's boxes on one DP rank, each by its first copy.
using OwnerBoxes = std::map<Box, const PlacementFragment*>;
// One DP rank's fragments of one tensor, by owner.
using Cell = std::map<Owner, OwnerBoxes>;

// What the choice needs of one source tensor.
struct TensorFacts {
  std::vector<AxisKind> owner_kinds;
  bool dp_owned = false;
  unsigned __int128 volume = 1;
};

// Whether the (distinct) boxes add up to the tensor's volume.
bool Covers(const OwnerBoxes& boxes, const TensorFacts& t) {
  unsigned __int128 sum = 0;
  for (const auto& [box, f] : boxes) {
    unsigned __int128 v = 1;
    for (int64_t e : box.second) v *= static_cast<uint64_t>(e);
    sum += v;
  }
  return sum == t.volume;
}

// The source placement's fragments in cells by (DP rank, tensor index).
class ReferenceTable {
 public:
  explicit ReferenceTable(const WeightPlacementManifest& source) {
    const auto& tensors = source.tensors();
    for (size_t i = 0; i < tensors.size(); ++i) {
      TensorFacts facts;
      for (const ParallelAxis& a : tensors[i].parallel_axes()) {
        if (a.semantics() != AxisSemantics::kOwnership) continue;
        facts.owner_kinds.push_back(a.kind());
        facts.dp_owned |= a.kind() == AxisKind::kDp;
      }
      for (int64_t e : tensors[i].global_shape()) {
        facts.volume *= static_cast<uint64_t>(e);
      }
      index_.emplace(tensors[i].tensor_id(), i);
      facts_.push_back(std::move(facts));
    }
    for (const PlacementFragment* f : source.fragments()) Add(*f);
  }

  const std::vector<TensorFacts>& facts() const { return facts_; }
  size_t IndexOf(std::string_view id) const { return index_.at(id); }
  const std::map<std::pair<int64_t, size_t>, Cell>& cells() const {
    return cells_;
  }
  const Cell* Find(int64_t dp, size_t tensor) const {
    auto it = cells_.find({dp, tensor});
    return it == cells_.end() ? nullptr : &it->second;
  }

 private:
  void Add(const PlacementFragment& f) {
    const size_t t = index_.at(f.tensor_id());
    Owner owner;
    for (AxisKind k : facts_[t].owner_kinds) owner.push_back(f.rank().Get(k));
    OwnerBoxes& boxes = cells_[{f.rank().dp, t}][std::move(owner)];
    const PlacementFragment*& first =
        boxes[{f.global_offset(), f.local_shape()}];
    if (first == nullptr ||
        std::tie(f.rank(), f.placement_fragment_id()) <
            std::tie(first->rank(), first->placement_fragment_id())) {
      first = &f;
    }
  }

  std::unordered_map<std::string_view, size_t> index_;
  std::vector<TensorFacts> facts_;
  std::map<std::pair<int64_t, size_t>, Cell> cells_;
};

// (DP rank, owner) a group is read from.
using GroupKey = std::pair<int64_t, Owner>;

// The one complete owner of each DP-owned tensor, by tensor index.
Result<std::map<size_t, GroupKey>> DpOwners(
    const WeightPlacementManifest& source, const ReferenceTable& table) {
  std::map<size_t, GroupKey> out;
  for (size_t t = 0; t < table.facts().size(); ++t) {
    if (!table.facts()[t].dp_owned) continue;
    std::map<Owner, const OwnerBoxes*> owners;
    for (const auto& [key, cell] : table.cells()) {
      if (key.second != t) continue;
      for (const auto& [owner, boxes] : cell) owners[owner] = &boxes;
    }
    std::vector<Owner> complete;
    for (const auto& [owner, boxes] : owners) {
      if (Covers(*boxes, table.facts()[t])) complete.push_back(owner);
    }
    const std::string& id = source.tensors()[t].tensor_id();
    if (complete.empty()) {
      return Status::InvalidArgument(
          "DP-owned source tensor has no complete declared owner: " + id);
    }
    if (complete.size() != 1 || owners.size() != 1) {
      return Status::InvalidArgument(
          "DP-owned source tensor has ambiguous declared owners: " + id);
    }
    out[t] = {complete.front().front(), complete.front()};
  }
  return out;
}

// The complete replicas, by DP rank in order: each tensor that is not
// DP-owned with its smallest owner there.
Result<std::map<int64_t, std::vector<Owner>>> CompleteReplicas(
    const WeightPlacementManifest& source, const ReferenceTable& table) {
  std::vector<size_t> tensors;
  for (size_t t = 0; t < table.facts().size(); ++t) {
    if (!table.facts()[t].dp_owned) tensors.push_back(t);
  }
  std::map<int64_t, std::vector<Owner>> out;
  if (tensors.empty()) return out;
  std::map<int64_t, bool> dps;
  for (const PlacementFragment* f : source.fragments()) dps[f->rank().dp];
  for (const auto& [dp, unused] : dps) {
    std::vector<Owner> owners(table.facts().size());
    bool complete = true;
    for (size_t t : tensors) {
      const Cell* cell = table.Find(dp, t);
      complete = cell != nullptr;
      if (complete) {
        for (const auto& [owner, boxes] : *cell) {
          complete = complete && Covers(boxes, table.facts()[t]);
        }
      }
      if (!complete) break;
      owners[t] = cell->begin()->first;  // the smallest owner key
    }
    if (complete) out[dp] = std::move(owners);
  }
  if (out.empty()) {
    return Status::InvalidArgument(
        "source manifests have no complete DP replica; tensors are not fully "
        "covered");
  }
  return out;
}

// Appends the boxes of `boxes` as one group, each member the table entry
// of its first copy.
void AddGroup(const OwnerBoxes& boxes,
              const std::unordered_map<std::string_view, uint32_t>& entry,
              const std::vector<PlanFragment>& table, ReferenceTiling* out) {
  for (const auto& [box, f] : boxes) {
    const uint32_t i = entry.at(f->placement_fragment_id());
    out->boxes.push_back({&table[i].global_offset, &table[i].local_shape, {i}});
  }
  out->group_first.push_back(out->boxes.size());
}

}  // namespace

Result<std::vector<ReferenceTiling>> ReferenceTilings(
    const WeightPlacementManifest& source,
    const std::vector<std::string>& tensors,
    const std::vector<PlanFragment>& table) {
  const ReferenceTable cells(source);
  RESHARD_ASSIGN_OR_RETURN(auto dp_owners, DpOwners(source, cells));
  RESHARD_ASSIGN_OR_RETURN(auto replicas, CompleteReplicas(source, cells));
  std::unordered_map<std::string_view, uint32_t> entry;
  for (uint32_t i = 0; i < table.size(); ++i) {
    entry.emplace(table[i].fragment_id, i);
  }
  std::vector<ReferenceTiling> out(tensors.size());
  for (size_t p = 0; p < tensors.size(); ++p) {
    const size_t t = cells.IndexOf(tensors[p]);
    out[p].group_first.push_back(0);
    auto owned = dp_owners.find(t);
    if (owned != dp_owners.end()) {
      const auto& [dp, owner] = owned->second;
      AddGroup(cells.Find(dp, t)->at(owner), entry, table, &out[p]);
      continue;
    }
    for (const auto& [dp, owners] : replicas) {
      AddGroup(cells.Find(dp, t)->at(owners[t]), entry, table, &out[p]);
    }
  }
  return out;
}

}  // namespace reshard::internal
