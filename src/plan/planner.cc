// The planner, in the steps of docs/planner.md: checks, source tiling
// (cover groups, tiling classes, interchangeable replicas), candidates and
// regions, balanced choice, geometry, canonical order and summaries.

#include <algorithm>
#include <array>
#include <bit>
#include <functional>
#include <map>
#include <mutex>
#include <numeric>
#include <optional>
#include <thread>
#include <tuple>
#include <unordered_map>

#include "plan/geometry.h"
#include "reshard/plan.h"
#include "util/claimed_runs.h"
#include "util/string_sort.h"

namespace reshard {

struct LogicalTransferPlan::Impl {
  // The manifests the fragment tables' ids view (shared, immutable state).
  std::optional<WeightPlacementManifest> source_placement;
  std::optional<StoredWeightManifest> source_stored;
  std::optional<WeightPlacementManifest> target_placement;
  PlanSourceKind source_kind = PlanSourceKind::kPlacement;
  std::string resource_id;
  std::string revision;
  std::string source_placement_id;
  std::string target_placement_id;
  std::vector<std::string> tensors;
  std::vector<PlanFragment> source_fragments;
  std::vector<PlanFragment> target_fragments;
  // In step 7's order from the first call of regions() on (OrderRegions):
  // a plan that is only summarised, as `reshard plan` prints it, never
  // pays for the ordering. Every reader goes through regions().
  mutable std::vector<TransferRegion> regions;
  mutable std::once_flag regions_ordered;
  std::vector<PipelineRoute> routes;
  std::vector<std::string> source_participants;
  std::vector<uint64_t> source_bytes;
  std::vector<std::string> target_participants;
  std::vector<uint64_t> target_bytes;
  std::vector<TrafficEntry> traffic;
  PlanSummary summary;
  std::shared_ptr<const ConversionPlan> conversion;
};

namespace internal {
namespace {

using AxisKey = std::array<int64_t, 4>;

// Index of each planned tensor id in LogicalTransferPlan::tensors().
// Fragments come grouped by tensor, so the last hit is remembered: most lookups
// are one string comparison rather than a hash. Not for concurrent use.
class TensorIndex {
 public:
  static constexpr uint32_t kNotPlanned = UINT32_MAX;

  TensorIndex() = default;
  // The same ids with caches of its own: one index per thread.
  TensorIndex(const TensorIndex& other) : map_(other.map_) {}
  TensorIndex& operator=(const TensorIndex&) = delete;

  void Add(std::string_view id, uint32_t index) { map_.emplace(id, index); }
  // The index of `id`; nullptr if the plan does not need the tensor.
  const uint32_t* Find(std::string_view id) const {
    if (last_ != nullptr && last_->first == id) return &last_->second;
    const auto it = map_.find(id);
    if (it == map_.end()) return nullptr;
    last_ = &*it;
    return &it->second;
  }
  // The index of each of `part`'s tensors (kNotPlanned for a tensor the plan
  // does not need), so that fragment i's is
  // result[part.fragment_tensor(i)]. A part's fragments come in id order,
  // not grouped by tensor; descriptors decoded from one document share
  // their state, so a state seen in an earlier part is found by its
  // address instead of hashing its id again.
  void ForPart(const WeightPlacementPart& part,
               std::vector<uint32_t>* out) const {
    out->clear();
    for (const auto& t : part.tensors()) {
      auto [it, inserted] = by_state_.try_emplace(&t.tensor_id(), kNotPlanned);
      if (inserted) {
        const uint32_t* index = Find(t.tensor_id());
        if (index != nullptr) it->second = *index;
      }
      out->push_back(it->second);
    }
  }

 private:
  std::unordered_map<std::string_view, uint32_t> map_;
  mutable const std::pair<const std::string_view, uint32_t>* last_ = nullptr;
  // Address of a descriptor's id string -> its index (or kNotPlanned).
  mutable std::unordered_map<const std::string*, uint32_t> by_state_;
};

// The rank's cover-group key for `t`: its ownership and replicated
// coordinates, and for a grouped split of an axis of `sizes` its place in
// its shard's group (the ranks of one shard are replicas of each other).
AxisKey CoverKey(const ParallelRank& r, const TensorDescriptor& t,
                 const ParallelSizes& sizes) {
  AxisKey k{-1, -1, -1, -1};
  for (const auto& axis : t.parallel_axes()) {
    const auto a = static_cast<size_t>(axis.kind());
    if (axis.semantics() == AxisSemantics::kOwnership ||
        axis.semantics() == AxisSemantics::kReplicated) {
      k[a] = r.Get(axis.kind());
    } else if (axis.shards() > 0) {
      const int64_t size = sizes.Get(axis.kind());
      if (size > axis.shards()) {
        k[a] = r.Get(axis.kind()) % (size / axis.shards());
      }
    }
  }
  return k;
}

// Loops that reach table entries or columns in an order of their own
// prefetch the entry this many steps ahead (the contract's global rules do
// the same): on the VMs measured a miss costs more than the work per entry.
constexpr size_t kPrefetchAhead = 8;

// One box of the chosen source tiling and the interchangeable fragments
// (one per cover group) that hold it.
struct SourceBox {
  const Dims* offset;
  const Dims* shape;
  std::vector<uint32_t> members;  // source fragment indices
};
// Boxes of one tensor indexed for interval queries along one dimension:
// sorted by begin, with a running maximum of ends, so a query visits only
// boxes whose begin lies before the query's end. The sorted boxes'
// coordinates are kept side by side, so a query reads one small array
// rather than chasing each box to its fragment.
class BoxIndex {
 public:
  // `boxes` must outlive the index.
  void Build(const std::vector<SourceBox>& boxes, size_t ndim) {
    boxes_.clear();
    for (const auto& b : boxes) boxes_.push_back(&b);
    // Sweep the dimension with the most distinct begin coordinates.
    size_t best = 0;
    size_t best_distinct = 0;
    std::vector<int64_t> v(boxes_.size());
    for (size_t d = 0; d < ndim; ++d) {
      for (size_t i = 0; i < boxes_.size(); ++i) v[i] = (*boxes_[i]->offset)[d];
      std::sort(v.begin(), v.end());
      size_t distinct = std::unique(v.begin(), v.end()) - v.begin();
      if (distinct > best_distinct) {
        best_distinct = distinct;
        best = d;
      }
    }
    dim_ = best;
    std::sort(boxes_.begin(), boxes_.end(), [&](const auto* a, const auto* b) {
      return (*a->offset)[dim_] < (*b->offset)[dim_];
    });
    max_end_.resize(boxes_.size());
    int64_t m = INT64_MIN;
    for (size_t i = 0; i < boxes_.size(); ++i) {
      m = std::max(m, (*boxes_[i]->offset)[dim_] + (*boxes_[i]->shape)[dim_]);
      max_end_[i] = m;
    }
    ndim_ = ndim;
    coords_.assign(boxes_.size() * 2 * ndim, 0);
    for (size_t i = 0; i < boxes_.size(); ++i) {
      int64_t* c = &coords_[i * 2 * ndim];
      for (size_t d = 0; d < ndim; ++d) {
        c[2 * d] = (*boxes_[i]->offset)[d];
        c[2 * d + 1] = (*boxes_[i]->offset)[d] + (*boxes_[i]->shape)[d];
      }
    }
  }

  // Calls f(box) for every box intersecting [offset, offset + shape)
  // (the index's ndim coordinates each).
  template <typename F>
  void Query(const int64_t* offset, const int64_t* shape, F&& f) const {
    const int64_t a = offset[dim_];
    const int64_t b = a + shape[dim_];
    size_t i = std::upper_bound(max_end_.begin(), max_end_.end(), a) -
               max_end_.begin();
    for (; i < boxes_.size(); ++i) {
      const int64_t* c = &coords_[i * 2 * ndim_];  // [begin, end) per dim
      if (c[2 * dim_] >= b) break;
      bool hit = true;
      for (size_t d = 0; d < ndim_ && hit; ++d) {
        hit = c[2 * d] < offset[d] + shape[d] && offset[d] < c[2 * d + 1];
      }
      if (hit) f(*boxes_[i]);
    }
  }

 private:
  std::vector<const SourceBox*> boxes_;
  std::vector<int64_t> max_end_;
  std::vector<int64_t> coords_;
  size_t dim_ = 0;
  size_t ndim_ = 0;
};

Status CheckCompatible(const TensorDescriptor& s, const TensorDescriptor& t) {
  if (s.layout_fingerprint() != t.layout_fingerprint()) {
    return Status::InvalidArgument("layout mismatch for tensor " +
                                   t.tensor_id() + ": source \"" +
                                   s.layout_fingerprint() + "\", target \"" +
                                   t.layout_fingerprint() + "\"");
  }
  if (s.global_shape() != t.global_shape() || s.dtype() != t.dtype() ||
      s.itemsize() != t.itemsize() || s.layer_id() != t.layer_id() ||
      s.expert_id() != t.expert_id()) {
    // The fields compared are among the first the description names.
    return Status::InvalidArgument(
        "tensor descriptor mismatch: " + t.tensor_id() + ": " +
        DescribeDescriptorDifference(s, t, "source", "target"));
  }
  return Status::OK();
}

PlanFragment ToPlanFragment(const PlacementFragment& f,
                            std::string_view participant,
                            uint32_t participant_index, uint32_t tensor) {
  return {f.placement_fragment_id(),
          participant,
          f.rank(),
          f.pipeline_stage_id(),
          tensor,
          f.global_offset(),
          f.local_shape(),
          f.nbytes(),
          participant_index,
          0};
}

// Sets PlanFragment::order: the position of each fragment in id order.
void AssignOrder(std::vector<PlanFragment>* table) {
  std::vector<uint32_t> idx(table->size());
  std::iota(idx.begin(), idx.end(), 0);
  internal::SortByStringKey(&idx, [&](uint32_t i) -> std::string_view {
    return (*table)[i].fragment_id;
  });
  for (uint32_t pos = 0; pos < idx.size(); ++pos)
    (*table)[idx[pos]].order = pos;
}

// The same from the id order the manifest already holds
// (WeightPlacementManifest::fragments(), as FragmentPartPositions), without
// comparing an id: `table_index[q]` is the table entry of the manifest's
// q-th fragment counted part by part (kNotPlanned if the table lacks it).
// Fragment ids are unique in a manifest, so the orders equal AssignOrder's.
void AssignOrderFromManifest(const WeightPlacementManifest& m,
                             const std::vector<uint32_t>& table_index,
                             std::vector<PlanFragment>* table) {
  std::vector<uint32_t> order(table->size());
  uint32_t pos = 0;
  for (const uint32_t q : FragmentPartPositions(m)) {
    const uint32_t i = table_index[q];
    if (i != TensorIndex::kNotPlanned) order[i] = pos++;
  }
  for (size_t i = 0; i < order.size(); ++i) (*table)[i].order = order[i];
}

// Source fragments of one tensor by (owner, replica) cover group, each a
// complete cover (the contract guarantees it), in group key order. A group
// holds positions in the tensor's fragment list, not table indices.
using CoverGroups = std::map<AxisKey, std::vector<uint32_t>>;

// The boxes of one tensor's source fragments, side by side: position p's
// offset is at(p)[0, ndim), its shape at(p)[ndim, 2 * ndim). Sorting and
// comparing a tensor's boxes then reads this one small array instead of
// fragments spread over the whole table (one cache miss per fragment
// instead of one per comparison).
class TensorBoxes {
 public:
  TensorBoxes(const std::vector<uint32_t>& frags,
              const std::vector<PlanFragment>& table, size_t ndim)
      : width_(2 * ndim), values_(frags.size() * width_, 0) {
    for (size_t p = 0; p < frags.size(); ++p) {
      const PlanFragment& f = table[frags[p]];
      int64_t* v = &values_[p * width_];
      std::copy_n(f.global_offset.begin(),
                  std::min(f.global_offset.size(), ndim), v);
      std::copy_n(f.local_shape.begin(), std::min(f.local_shape.size(), ndim),
                  v + ndim);
    }
  }
  // (offset, shape) order, as std::tie(global_offset, local_shape) compares
  // fragments of one tensor.
  bool Less(uint32_t a, uint32_t b) const {
    return std::lexicographical_compare(at(a), at(a) + width_, at(b),
                                        at(b) + width_);
  }
  bool Same(uint32_t a, uint32_t b) const {
    return std::equal(at(a), at(a) + width_, at(b));
  }

 private:
  const int64_t* at(uint32_t p) const { return &values_[p * width_]; }
  size_t width_;
  std::vector<int64_t> values_;
};

// Groups the source fragments `frags` of tensor `t` into cover groups.
// DP ownership is ambiguous when more than one DP rank owns the tensor
// (replicas over other axes within one owner are fine).
Result<CoverGroups> GroupCovers(const TensorDescriptor& t,
                                const std::vector<uint32_t>& frags,
                                const std::vector<PlanFragment>& table,
                                const ParallelSizes& sizes) {
  CoverGroups groups;
  // A tensor's fragments lie spread over the table: start the misses of
  // the fragments ahead (their rank and box, which TensorBoxes reads next).
  for (uint32_t p = 0; p < frags.size(); ++p) {
    if (p + kPrefetchAhead < frags.size()) {
      const PlanFragment& ahead = table[frags[p + kPrefetchAhead]];
      __builtin_prefetch(&ahead.rank);
      __builtin_prefetch(&ahead.global_offset);
      __builtin_prefetch(&ahead.local_shape);
    }
    groups[CoverKey(table[frags[p]].rank, t, sizes)].push_back(p);
  }
  const ParallelAxis* dp = t.FindAxis(AxisKind::kDp);
  auto owners_differ = [&] {
    for (uint32_t i : frags) {
      if (table[i].rank.dp != table[frags.front()].rank.dp) return true;
    }
    return false;
  };
  if (dp != nullptr && dp->semantics() == AxisSemantics::kOwnership &&
      owners_differ()) {
    return Status::InvalidArgument(
        "DP-owned source tensor has ambiguous declared owners: " +
        t.tensor_id());
  }
  return groups;
}

// Cover groups with identical box sets: `first` is the first group of the
// class (its boxes sorted), `groups` every group of it (`first` included),
// each with its boxes in the same order.
struct TilingClass {
  const std::vector<uint32_t>* first;
  std::vector<const std::vector<uint32_t>*> groups;
};

// Sorts each group's boxes and collects the groups into tiling classes,
// in order of each class's first group.
std::vector<TilingClass> GroupByTiling(CoverGroups* groups,
                                       const TensorBoxes& boxes) {
  auto same_tiling = [&](const std::vector<uint32_t>& a,
                         const std::vector<uint32_t>& b) {
    if (a.size() != b.size()) return false;
    for (size_t i = 0; i < a.size(); ++i) {
      if (!boxes.Same(a[i], b[i])) return false;
    }
    return true;
  };
  std::vector<TilingClass> classes;
  for (auto& [key, g] : *groups) {
    std::sort(g.begin(), g.end(),
              [&](uint32_t a, uint32_t b) { return boxes.Less(a, b); });
    size_t c = 0;
    while (c < classes.size() && !same_tiling(*classes[c].first, g)) ++c;
    if (c == classes.size()) classes.push_back({&g, {}});
    classes[c].groups.push_back(&g);
  }
  return classes;
}

// The boxes of tiling class `tiling` (positions in `frags`), each with its
// members (one per group of the class) in rank order (dp, pp, ep, tp),
// then fragment id order.
std::vector<SourceBox> ChooseReplicas(const TilingClass& tiling,
                                      const std::vector<uint32_t>& frags,
                                      const std::vector<PlanFragment>& table) {
  std::vector<SourceBox> boxes;
  const auto& first = *tiling.first;
  boxes.reserve(first.size());
  for (size_t i = 0; i < first.size(); ++i) {
    const PlanFragment& f = table[frags[first[i]]];
    SourceBox box{&f.global_offset, &f.local_shape, {}};
    for (const auto* g : tiling.groups) box.members.push_back(frags[(*g)[i]]);
    std::sort(box.members.begin(), box.members.end(), [&](auto a, auto b) {
      return std::tie(table[a].rank, table[a].fragment_id) <
             std::tie(table[b].rank, table[b].fragment_id);
    });
    boxes.push_back(std::move(box));
  }
  return boxes;
}

// The source tiling of tensor `t` (docs/planner.md, step 2): the tiling
// held by the most cover groups offers the most choice; ties go to the
// class of the smallest group key.
Result<std::vector<SourceBox>> SourceTiling(
    const TensorDescriptor& t, const std::vector<uint32_t>& frags,
    const std::vector<PlanFragment>& table, const ParallelSizes& sizes) {
  RESHARD_ASSIGN_OR_RETURN(CoverGroups groups,
                           GroupCovers(t, frags, table, sizes));
  const TensorBoxes boxes(frags, table, t.ndim());
  const std::vector<TilingClass> classes = GroupByTiling(&groups, boxes);
  size_t best = 0;
  for (size_t c = 1; c < classes.size(); ++c) {
    if (classes[c].groups.size() > classes[best].groups.size()) best = c;
  }
  return ChooseReplicas(classes[best], frags, table);
}

// The region where target fragment `tf` (index `ti`) meets source box
// `box`, in global coordinates; the serving member is chosen later.
TransferRegion OverlapRegion(uint32_t tensor, uint32_t ti,
                             const int64_t* offset, const int64_t* shape,
                             size_t ndim, const SourceBox& box,
                             uint64_t itemsize) {
  TransferRegion r;
  r.tensor = tensor;
  r.target_fragment = ti;
  r.overlap_offset.resize(ndim);
  r.overlap_shape.resize(ndim);
  r.bytes = itemsize;
  for (size_t d = 0; d < ndim; ++d) {
    const int64_t b = std::max(offset[d], (*box.offset)[d]);
    const int64_t e =
        std::min(offset[d] + shape[d], (*box.offset)[d] + (*box.shape)[d]);
    r.overlap_offset[d] = b;
    r.overlap_shape[d] = e - b;
    r.bytes *= static_cast<uint64_t>(e - b);
  }
  return r;
}

// (source pp, source stage, target pp, target stage); -1 when unset.
using RouteKey = std::array<int64_t, 4>;

// (source participant << 32 | target participant, bytes) per region.
using TrafficPairs = std::vector<std::pair<uint64_t, uint64_t>>;

// (operations, bytes) per pipeline route.
using RouteTotals = std::map<RouteKey, std::pair<uint64_t, uint64_t>>;

// One side's pipeline (pp, stage) pairs, each fragment's as a small id:
// the summary visits fragments in random order, so it reads 4 bytes per
// fragment rather than a whole PlanFragment (or 16 bytes of pair).
struct StageIds {
  std::vector<std::pair<int64_t, int64_t>> stages;  // by id
  std::vector<uint32_t> of;                         // per fragment
};

// `no_pp`: a stored source, which has no pipeline rank.
StageIds MakeStageIds(const std::vector<PlanFragment>& table, bool no_pp) {
  StageIds out;
  out.of.resize(table.size());
  std::map<std::pair<int64_t, int64_t>, uint32_t> ids;
  std::pair<int64_t, int64_t> last{INT64_MIN, INT64_MIN};
  uint32_t last_id = 0;
  for (size_t i = 0; i < table.size(); ++i) {
    const std::pair<int64_t, int64_t> stage{
        no_pp ? -1 : table[i].rank.pp, table[i].pipeline_stage_id.value_or(-1)};
    if (i == 0 || stage != last) {  // fragments come grouped by part
      auto [it, added] =
          ids.emplace(stage, static_cast<uint32_t>(out.stages.size()));
      if (added) out.stages.push_back(stage);
      last = stage;
      last_id = it->second;
    }
    out.of[i] = last_id;
  }
  return out;
}

// The sums of one range of regions (Planner::Summarise adds the ranges').
struct SummaryPart {
  std::vector<uint64_t> target_bytes;
  TrafficPairs traffic;  // sorted by pair, equal pairs summed
  // (source stage id << 32 | target stage id) -> (operations, bytes).
  std::map<uint64_t, std::pair<uint64_t, uint64_t>> routes;
  std::vector<uint8_t> used;  // per source fragment
  uint64_t regions = 0;
  uint64_t bytes = 0;
};

// Sorts `traffic` by pair and sums equal pairs, in place.
void SumTraffic(TrafficPairs* traffic) {
  // By pair only: the order among equal pairs does not change their sum.
  RadixSortByFirst(traffic);
  size_t out = 0;
  for (size_t i = 0; i < traffic->size(); ++i) {
    if (out > 0 && (*traffic)[out - 1].first == (*traffic)[i].first) {
      (*traffic)[out - 1].second += (*traffic)[i].second;
    } else {
      (*traffic)[out++] = (*traffic)[i];
    }
  }
  traffic->resize(out);
}

}  // namespace

// The source side's tables as a PlanSource fills them.
struct SourceTables {
  std::vector<std::string>& participants;
  std::vector<PlanFragment>& fragments;
  // Per planned tensor, indices into `fragments`.
  std::vector<std::vector<uint32_t>>& by_tensor;
  // For a placement source: the table entry of each of its fragments,
  // counted part by part (TensorIndex::kNotPlanned where not needed).
  std::vector<uint32_t>& table_index;
};

// Step 7: (target fragment id, target base offset, source fragment id,
// source base offset), in place.
void OrderRegions(const std::vector<PlanFragment>& sfr,
                  const std::vector<PlanFragment>& tfr,
                  std::vector<TransferRegion>* ordered) {
  std::vector<TransferRegion>& regions = *ordered;
  // The order within one target fragment (the fragment is the bucket).
  struct Key {
    uint64_t target_base;
    uint32_t source_order;
    uint32_t index;
    uint64_t source_base;
  };
  // Target id orders are a permutation of [0, targets): a counting sort
  // buckets the regions by target in linear time, and only each target's
  // few regions are compared (most targets have one). The id orders of both
  // sides as compact columns: regions reach their fragments in random order.
  std::vector<uint32_t> source_order(sfr.size()), target_order(tfr.size());
  for (size_t i = 0; i < sfr.size(); ++i) source_order[i] = sfr[i].order;
  for (size_t i = 0; i < tfr.size(); ++i) target_order[i] = tfr[i].order;
  std::vector<uint32_t> first(tfr.size() + 1, 0);
  for (const auto& r : regions) ++first[target_order[r.target_fragment] + 1];
  for (size_t i = 1; i < first.size(); ++i) first[i] += first[i - 1];
  std::vector<uint32_t> next(first.begin(), first.end() - 1);
  std::vector<Key> keys(regions.size());
  for (uint32_t i = 0; i < regions.size(); ++i) {
    const auto& r = regions[i];
    keys[next[target_order[r.target_fragment]]++] = {
        r.target_base_offset, source_order[r.source_fragment], i,
        r.source_base_offset};
  }
  for (size_t t = 0; t + 1 < first.size(); ++t) {
    if (first[t + 1] - first[t] < 2) continue;
    std::sort(keys.begin() + first[t], keys.begin() + first[t + 1],
              [](const Key& a, const Key& b) {
                return std::tie(a.target_base, a.source_order, a.source_base) <
                       std::tie(b.target_base, b.source_order, b.source_base);
              });
  }
  // Into place, cycle by cycle: region keys[p].index goes to p. A second
  // array of regions would cost as much again in fresh pages as the moves.
  std::vector<uint32_t> from(keys.size());
  for (size_t p = 0; p < keys.size(); ++p) from[p] = keys[p].index;
  keys = {};
  for (uint32_t start = 0; start < from.size(); ++start) {
    if (from[start] == start) continue;
    TransferRegion held = std::move(regions[start]);
    uint32_t p = start;
    while (from[p] != start) {
      const uint32_t q = from[p];
      // The next region to move is a random one: start its miss now.
      __builtin_prefetch(&regions[from[q]]);
      regions[p] = std::move(regions[q]);
      from[p] = p;
      p = q;
    }
    regions[p] = std::move(held);
    from[p] = p;
  }
}

// What the planner needs of a source: identity, tensors and a way to emit
// the fragments of the tensors it needs. Made for live placements and for
// stored manifests.
struct PlanSource {
  const std::string& resource_id;
  const std::string& revision;
  uint64_t weight_generation;
  const std::string& id;
  // The source manifest, kept alive by the plan: exactly one of the two.
  // Which one is the plan's source_kind().
  const WeightPlacementManifest* placement = nullptr;
  const StoredWeightManifest* stored = nullptr;
  std::vector<const TensorDescriptor*> tensors;
  std::function<const TensorDescriptor*(std::string_view)> find_tensor;
  size_t fragment_count = 0;  // an upper bound, for reserving
  // Appends the fragments of the tensors in the index to the tables.
  std::function<void(const TensorIndex&, SourceTables)> add_fragments;
  // The source topology's axis sizes (a placement's; all 1 for a stored
  // revision, whose fragments tile each tensor once).
  ParallelSizes sizes;
};

// Plans one target from one source in the steps of docs/planner.md. Each
// step reads what the steps before it left in the plan being built.
class Planner {
 public:
  static Result<LogicalTransferPlan> Run(const PlanSource& source,
                                         const WeightPlacementManifest& target,
                                         const PlanOptions& options) {
    Planner p(source, target, options);
    RESHARD_RETURN_NOT_OK(p.CheckIdentity());
    RESHARD_RETURN_NOT_OK(p.SelectTargetParts());
    RESHARD_RETURN_NOT_OK(p.CheckByteTotal());
    RESHARD_RETURN_NOT_OK(p.SelectTensors());
    p.ChooseThreads();
    p.BuildFragmentTables();
    RESHARD_RETURN_NOT_OK(p.Intersect());
    // The balance chooses each region's source fragment among its box's
    // members; the geometry reads the box, the same for every member: on
    // two threads when planning on several (each writes fields of the
    // regions the other does not touch).
    ForEachClaimed(2, p.threads_, [&p](size_t step, unsigned) {
      if (step == 0) return p.Balance();
      p.ComputeGeometry();
      p.BuildTargetSummaryColumns();  // the shorter step's thread
    });
    p.box_of_ = {};  // read no more (see Intersect)
    p.box_by_id_ = {};
    p.tensor_boxes_ = {};
    p.Summarise();
    return LogicalTransferPlan(std::move(p.impl_));
  }

 private:
  Planner(const PlanSource& source, const WeightPlacementManifest& target,
          const PlanOptions& options)
      : source_(source),
        target_(target),
        options_(options),
        impl_(std::make_shared<LogicalTransferPlan::Impl>()) {}

  // Step 1: same resource, revision and weight generation.
  Status CheckIdentity();
  // Every target part, or the one local participant's.
  Status SelectTargetParts();
  // The selected target fragments' bytes sum to at most 2^64 - 1, which
  // bounds every total of the plan (each region fills part of one target
  // fragment): plan bytes, per-participant bytes, traffic and routes.
  Status CheckByteTotal() const;
  // Step 1: tensor sets and descriptors; fills tensors and the index.
  Status SelectTensors();
  // The threads this plan runs on (PlanOptions::threads, its size).
  void ChooseThreads();
  // Fragment tables and participants of both sides, with id order (the
  // sides on two threads when planning on several).
  void BuildFragmentTables();
  void BuildSourceTable(const TensorIndex& index);
  void BuildTargetTable();
  // Step 2 for every tensor, after the source table (on its thread, while
  // the larger target table is built): tilings, their indexes, or the
  // error each tensor's intersection then reports in its turn.
  void BuildSourceTilings();
  // Steps 2-4: per tensor, the source tiling, candidates and regions.
  Status Intersect();
  Status IntersectTensor(uint32_t t);
  // Step 5: each region's serving fragment among its box's members.
  void Balance();
  // Step 6: base offsets, inner run and merged loops of every region, from
  // its source box (every member of a box has the box's offset and shape).
  void ComputeGeometry();
  // Step 7: totals, per-participant bytes, traffic and pipeline routes
  // (sums: the regions' order does not matter; segments are Geometry's).
  void Summarise();
  // The summary's compact columns of each side's fragments.
  void BuildSourceSummaryColumns();
  void BuildTargetSummaryColumns();
  // The sums of regions [begin, end).
  void SummariseRange(size_t begin, size_t end, const StageIds& source,
                      const StageIds& target,
                      const std::vector<uint32_t>& target_participant,
                      SummaryPart* out) const;

  const PlanSource& source_;
  const WeightPlacementManifest& target_;
  const PlanOptions& options_;
  std::shared_ptr<LogicalTransferPlan::Impl> impl_;
  unsigned threads_ = 1;  // 1 or 2: see ChooseThreads

  std::vector<const WeightPlacementPart*> target_parts_;
  std::vector<const TensorDescriptor*> plan_tensors_;  // target descriptors
  TensorIndex tensor_index_;
  std::vector<std::vector<uint32_t>> source_by_tensor_;
  std::vector<std::vector<uint32_t>> target_by_tensor_;
  // The boxes of each tensor's source tiling (region i's is
  // box_by_id_[box_of_[i]]).
  std::vector<std::vector<SourceBox>> tensor_boxes_;
  std::vector<BoxIndex> box_index_;    // over tensor_boxes_[t]
  std::vector<Status> tiling_status_;  // SourceTiling's error, if any
  // What the balance reads, in compact columns, as the steps before it
  // make them: the balance visits regions in random order. Boxes are
  // numbered tensor by tensor (tensor t's from tensor_first_[t]); box g's
  // members and their participants are [box_first_[g], box_first_[g + 1])
  // of member_ and member_participant_. Each region's box (box_of_) and
  // bytes are noted as the region is made.
  std::vector<uint32_t> tensor_first_, box_first_, member_, member_participant_,
      box_of_;
  std::vector<const SourceBox*> box_by_id_;  // boxes by that number
  std::vector<uint64_t> region_bytes_;       // the balance's keys in place
  // The summary's columns (Build*SummaryColumns).
  StageIds source_stages_, target_stages_;
  std::vector<uint32_t> target_participant_;
  // Compact column of source fragment -> participant: the loops touch
  // fragments in random order, and whole PlanFragments would miss the
  // cache each time.
  std::vector<uint32_t> source_participant_;
  // Target fragment i's box, compactly: offset at [2 * i * box_dims_,
  // + box_dims_), shape right after it; and its bytes. Intersection visits
  // the target fragments tensor by tensor, strided across the table; each
  // visit then costs one cache line rather than a fragment and two heap
  // arrays (measured 0.18 s of cold reads for Kimi-K2's 529,920 targets).
  size_t box_dims_ = 0;  // the largest ndim of the planned tensors
  std::vector<int64_t> target_box_;
  std::vector<uint64_t> target_nbytes_;
};

Status Planner::CheckIdentity() {
  if (source_.resource_id != target_.resource_id()) {
    return Status::InvalidArgument(
        "source and target resource_id differ: " + source_.resource_id +
        " vs " + target_.resource_id());
  }
  if (source_.revision != target_.revision()) {
    return Status::InvalidArgument(
        "source and target revision differ: " + source_.revision + " vs " +
        target_.revision());
  }
  if (source_.weight_generation != target_.weight_generation()) {
    return Status::InvalidArgument(
        "source and target weight_generation differ: " +
        std::to_string(source_.weight_generation) + " vs " +
        std::to_string(target_.weight_generation()));
  }
  if (source_.placement != nullptr) {
    impl_->source_placement = *source_.placement;
  }
  if (source_.stored != nullptr) impl_->source_stored = *source_.stored;
  impl_->target_placement = target_;
  impl_->source_kind = source_.stored != nullptr
                           ? PlanSourceKind::kStoredManifest
                           : PlanSourceKind::kPlacement;
  impl_->resource_id = target_.resource_id();
  impl_->revision = target_.revision();
  impl_->source_placement_id = source_.id;
  impl_->target_placement_id = target_.placement_id();
  return Status::OK();
}

Status Planner::SelectTargetParts() {
  if (!options_.target_participant_id.has_value()) {
    for (const auto& p : target_.parts()) target_parts_.push_back(&p);
    return Status::OK();
  }
  const std::string& id = *options_.target_participant_id;
  const auto* part = target_.FindPart(id);
  if (part == nullptr) {
    return Status::InvalidArgument("unknown target participant: " + id);
  }
  if (part->fragments().empty()) {
    return Status::InvalidArgument(
        "local target manifest is missing fragments: participant " + id +
        " holds none");
  }
  target_parts_.push_back(part);
  return Status::OK();
}

Status Planner::CheckByteTotal() const {
  uint64_t total = 0;
  for (const WeightPlacementPart* part : target_parts_) {
    for (const PlacementFragment& f : part->fragments()) {
      if (__builtin_add_overflow(total, f.nbytes(), &total)) {
        return Status::OutOfRange(
            "plan bytes exceed 2^64 - 1: the target fragments' nbytes "
            "overflow at fragment " +
            f.placement_fragment_id() + " (tensor " + f.tensor_id() +
            ", participant " + part->participant_id() + ")");
      }
    }
  }
  return Status::OK();
}

Status Planner::SelectTensors() {
  if (options_.target_participant_id.has_value()) {
    for (const auto& t : target_parts_.front()->tensors()) {
      plan_tensors_.push_back(target_.FindTensor(t.tensor_id()));
    }
  } else {
    for (const auto& t : target_.tensors()) plan_tensors_.push_back(&t);
    for (const auto* t : source_.tensors) {
      if (target_.FindTensor(t->tensor_id()) == nullptr) {
        return Status::InvalidArgument(
            "target manifests are missing tensors: " + t->tensor_id());
      }
    }
  }
  for (const auto* t : plan_tensors_) {
    const TensorDescriptor* s = source_.find_tensor(t->tensor_id());
    if (s == nullptr) {
      return Status::InvalidArgument(
          "target manifests contain unknown tensors: " + t->tensor_id());
    }
    RESHARD_RETURN_NOT_OK(CheckCompatible(*s, *t));
    tensor_index_.Add(t->tensor_id(),
                      static_cast<uint32_t>(impl_->tensors.size()));
    impl_->tensors.push_back(t->tensor_id());
  }
  return Status::OK();
}

void Planner::ChooseThreads() {
  unsigned threads = options_.threads;
  if (threads == 0) {
    size_t fragments = source_.fragment_count;
    for (const auto* part : target_parts_) {
      fragments += part->fragments().size();
    }
    threads = fragments < PlanOptions::kParallelPlanFragments
                  ? 1
                  : std::clamp(std::thread::hardware_concurrency(), 1u,
                               PlanOptions::kMaxPlanThreads);
  }
  // Today at most two steps run at once (the tables of both sides, the
  // geometry beside the summary): more threads would be idle.
  threads_ = std::min(threads, 2u);
}

void Planner::BuildFragmentTables() {
  source_by_tensor_.resize(plan_tensors_.size());
  target_by_tensor_.resize(plan_tensors_.size());
  box_dims_ = 0;
  for (const auto* t : plan_tensors_)
    box_dims_ = std::max(box_dims_, t->ndim());
  // The sides fill disjoint tables; the source's thread looks tensors up
  // in an index of its own (TensorIndex caches its lookups).
  const TensorIndex source_index(tensor_index_);
  ForEachClaimed(2, threads_, [&](size_t side, unsigned) {
    if (side == 1) return BuildTargetTable();
    BuildSourceTable(source_index);
    BuildSourceTilings();
  });
}

void Planner::BuildSourceTilings() {
  tensor_boxes_.resize(plan_tensors_.size());
  box_index_.resize(plan_tensors_.size());
  tiling_status_.resize(plan_tensors_.size());
  for (uint32_t t = 0; t < plan_tensors_.size(); ++t) {
    const TensorDescriptor& desc = *source_.find_tensor(impl_->tensors[t]);
    auto tiling = SourceTiling(desc, source_by_tensor_[t],
                               impl_->source_fragments, source_.sizes);
    if (!tiling.ok()) {
      tiling_status_[t] = tiling.status();
      continue;
    }
    tensor_boxes_[t] = std::move(tiling).ValueOrDie();
    box_index_[t].Build(tensor_boxes_[t], desc.ndim());
  }
  source_participant_.resize(impl_->source_fragments.size());
  for (size_t i = 0; i < source_participant_.size(); ++i) {
    source_participant_[i] = impl_->source_fragments[i].participant;
  }
  tensor_first_.assign(tensor_boxes_.size() + 1, 0);
  for (size_t t = 0; t < tensor_boxes_.size(); ++t) {
    tensor_first_[t + 1] =
        tensor_first_[t] + static_cast<uint32_t>(tensor_boxes_[t].size());
  }
  box_first_.reserve(tensor_first_.back() + 1);
  box_first_.push_back(0);
  box_by_id_.reserve(tensor_first_.back());
  for (const auto& boxes : tensor_boxes_) {
    for (const SourceBox& box : boxes) {
      box_by_id_.push_back(&box);
      for (uint32_t m : box.members) {
        member_.push_back(m);
        member_participant_.push_back(source_participant_[m]);
      }
      box_first_.push_back(static_cast<uint32_t>(member_.size()));
    }
  }
  BuildSourceSummaryColumns();
}

void Planner::BuildSourceSummaryColumns() {
  source_stages_ =
      MakeStageIds(impl_->source_fragments,
                   impl_->source_kind == PlanSourceKind::kStoredManifest);
}

void Planner::BuildTargetSummaryColumns() {
  const auto& tfr = impl_->target_fragments;
  target_stages_ = MakeStageIds(tfr, false);
  target_participant_.resize(tfr.size());
  for (size_t i = 0; i < tfr.size(); ++i) {
    target_participant_[i] = tfr[i].participant;
  }
}

void Planner::BuildSourceTable(const TensorIndex& index) {
  impl_->source_fragments.reserve(source_.fragment_count);
  std::vector<uint32_t> table_index;
  source_.add_fragments(index,
                        {impl_->source_participants, impl_->source_fragments,
                         source_by_tensor_, table_index});
  if (source_.placement != nullptr) {
    AssignOrderFromManifest(*source_.placement, table_index,
                            &impl_->source_fragments);
  } else {
    AssignOrder(&impl_->source_fragments);
  }
}

void Planner::BuildTargetTable() {
  size_t target_count = 0;
  for (const auto* part : target_parts_) {
    target_count += part->fragments().size();
  }
  impl_->target_fragments.reserve(target_count);
  target_box_.resize(target_count * 2 * box_dims_);
  target_nbytes_.resize(target_count);
  std::vector<uint32_t> part_tensor;
  for (const auto* part : target_parts_) {
    if (part->fragments().empty()) continue;
    const auto pidx = static_cast<uint32_t>(impl_->target_participants.size());
    impl_->target_participants.push_back(part->participant_id());
    tensor_index_.ForPart(*part, &part_tensor);
    const auto& frags = part->fragments();
    for (size_t j = 0; j < frags.size(); ++j) {
      const PlacementFragment& f = frags[j];
      const uint32_t t = part_tensor[part->fragment_tensor(j)];
      const auto i = static_cast<uint32_t>(impl_->target_fragments.size());
      target_by_tensor_[t].push_back(i);
      impl_->target_fragments.push_back(
          ToPlanFragment(f, part->participant_id(), pidx, t));
      // The box again, compactly, while it is in cache (see target_box_).
      int64_t* box = &target_box_[size_t{i} * 2 * box_dims_];
      const size_t n = std::min(f.global_offset().size(), box_dims_);
      std::copy_n(f.global_offset().begin(), n, box);
      std::copy_n(f.local_shape().begin(), n, box + box_dims_);
      target_nbytes_[i] = f.nbytes();
    }
  }
  // Every target fragment is in the table, in the manifest's part order: a
  // whole manifest's id order is the manifest's; one part's is the part's
  // own (its fragments are sorted by id).
  auto& targets = impl_->target_fragments;
  if (target_parts_.size() == 1) {
    for (uint32_t i = 0; i < targets.size(); ++i) targets[i].order = i;
  } else {
    std::vector<uint32_t> identity(targets.size());
    std::iota(identity.begin(), identity.end(), 0);
    AssignOrderFromManifest(target_, identity, &targets);
  }
}

Status Planner::Intersect() {
  impl_->regions.reserve(impl_->target_fragments.size());
  box_of_.reserve(impl_->target_fragments.size());
  region_bytes_.reserve(impl_->target_fragments.size());
  for (uint32_t t = 0; t < plan_tensors_.size(); ++t) {
    RESHARD_RETURN_NOT_OK(IntersectTensor(t));
  }
  box_index_ = {};
  // The steps after this one read regions, not these tables: their memory
  // goes before theirs is touched (a lower peak for a million fragments).
  target_box_ = {};
  target_nbytes_ = {};
  target_by_tensor_ = {};
  source_by_tensor_ = {};
  const uint64_t regions = impl_->regions.size();
  if (regions > options_.limits.max_operations) {
    return Status::ResourceExhausted(
        "plan exceeds max_operations: " + std::to_string(regions) + " > " +
        std::to_string(options_.limits.max_operations));
  }
  return Status::OK();
}

Status Planner::IntersectTensor(uint32_t t) {
  RESHARD_RETURN_NOT_OK(tiling_status_[t]);
  const TensorDescriptor& desc = *source_.find_tensor(impl_->tensors[t]);
  const BoxIndex& index = box_index_[t];
  const auto itemsize = static_cast<uint64_t>(desc.itemsize());
  auto& regions = impl_->regions;
  const size_t ndim = desc.ndim();
  const std::vector<uint32_t>& targets = target_by_tensor_[t];
  for (size_t k = 0; k < targets.size(); ++k) {
    // The tensor's targets lie spread over the compact columns too.
    if (k + kPrefetchAhead < targets.size()) {
      const uint32_t ahead = targets[k + kPrefetchAhead];
      __builtin_prefetch(&target_box_[ahead * 2 * box_dims_]);
      __builtin_prefetch(&target_nbytes_[ahead]);
    }
    const uint32_t ti = targets[k];
    const int64_t* offset = &target_box_[ti * 2 * box_dims_];
    const int64_t* shape = offset + box_dims_;
    uint64_t covered = 0;
    index.Query(offset, shape, [&](const SourceBox& box) {
      TransferRegion r =
          OverlapRegion(t, ti, offset, shape, ndim, box, itemsize);
      covered += r.bytes;
      region_bytes_.push_back(r.bytes);
      regions.push_back(std::move(r));
      box_of_.push_back(tensor_first_[t] +
                        static_cast<uint32_t>(&box - tensor_boxes_[t].data()));
    });
    if (covered != target_nbytes_[ti]) {
      return Status::InvalidArgument(
          "target fragment is not fully covered: " +
          std::string(impl_->target_fragments[ti].fragment_id));
    }
    if (regions.size() > options_.limits.max_transfer_regions) {
      return Status::ResourceExhausted(
          "plan exceeds max_transfer_regions: more than " +
          std::to_string(options_.limits.max_transfer_regions) +
          " regions (at tensor " + impl_->tensors[t] + ")");
    }
  }
  return Status::OK();
}

void Planner::Balance() {
  auto& regions = impl_->regions;
  const auto n = static_cast<uint32_t>(regions.size());
  impl_->source_bytes.assign(impl_->source_participants.size(), 0);
  auto& load = impl_->source_bytes;
  // Each to its box's member on the least loaded participant, the first
  // such member on ties.
  std::vector<uint32_t> chosen(n);
  const auto assign = [&](uint32_t i, uint64_t bytes) {
    const uint32_t g = box_of_[i];
    uint32_t best = box_first_[g];
    uint64_t best_load = load[member_participant_[best]];
    for (uint32_t j = best + 1; j < box_first_[g + 1]; ++j) {
      const uint64_t l = load[member_participant_[j]];
      if (l < best_load) {
        best = j;
        best_load = l;
      }
    }
    chosen[i] = member_[best];
    load[member_participant_[best]] += bytes;
  };
  // Largest regions first, ties in region order, by one sort of one array
  // that holds what the pass reads: each key (largest - bytes, index) in
  // one integer where both fit (always but for regions of petabytes), else
  // (inverted bytes, index) pairs. Radix sorts: sizes span a few bytes.
  uint64_t largest = 0;
  for (uint64_t b : region_bytes_) largest = std::max(largest, b);
  const int index_bits = n < 2 ? 0 : std::bit_width(n - 1);
  if (std::bit_width(largest) + index_bits <= 64) {
    std::vector<uint64_t>& keys = region_bytes_;
    for (uint32_t i = 0; i < n; ++i) {
      keys[i] = (largest - keys[i]) << index_bits | i;
    }
    RadixSortByKey(&keys, [](uint64_t k) { return k; });
    const uint64_t index_mask = (uint64_t{1} << index_bits) - 1;
    for (size_t p = 0; p < keys.size(); ++p) {
      // The regions come in random order: start their misses ahead.
      if (p + 2 * kPrefetchAhead < keys.size()) {
        const uint64_t ahead = keys[p + 2 * kPrefetchAhead] & index_mask;
        __builtin_prefetch(&box_of_[ahead]);
        __builtin_prefetch(&chosen[ahead]);
      }
      if (p + kPrefetchAhead < keys.size()) {
        const uint32_t g = box_of_[keys[p + kPrefetchAhead] & index_mask];
        __builtin_prefetch(&box_first_[g]);
      }
      const uint64_t k = keys[p];
      assign(static_cast<uint32_t>(k & index_mask),
             largest - (k >> index_bits));
    }
  } else {
    std::vector<std::pair<uint64_t, size_t>> by_size(n);
    for (uint32_t i = 0; i < n; ++i) by_size[i] = {~region_bytes_[i], i};
    region_bytes_ = {};
    RadixSortByFirst(&by_size);
    for (const auto& [inverted, i] : by_size) {
      assign(static_cast<uint32_t>(i), ~inverted);
    }
  }
  region_bytes_ = {};
  box_first_ = {};
  member_ = {};
  member_participant_ = {};
  for (uint32_t i = 0; i < n; ++i) regions[i].source_fragment = chosen[i];
}

void Planner::ComputeGeometry() {
  const auto& tfr = impl_->target_fragments;
  auto& regions = impl_->regions;
  uint64_t segments = 0;
  for (size_t i = 0; i < regions.size(); ++i) {
    // Regions reach their boxes and fragments in random order: start the
    // misses a few regions ahead (the box's pointers first).
    if (i + 2 * kPrefetchAhead < regions.size()) {
      __builtin_prefetch(box_by_id_[box_of_[i + 2 * kPrefetchAhead]]);
    }
    if (i + kPrefetchAhead < regions.size()) {
      const SourceBox& box = *box_by_id_[box_of_[i + kPrefetchAhead]];
      __builtin_prefetch(box.offset);
      __builtin_prefetch(box.shape);
      const TransferRegion& ahead = regions[i + kPrefetchAhead];
      __builtin_prefetch(&tfr[ahead.target_fragment].global_offset);
      __builtin_prefetch(&tfr[ahead.target_fragment].local_shape);
    }
    TransferRegion& r = regions[i];
    const SourceBox& box = *box_by_id_[box_of_[i]];
    const PlanFragment& tf = tfr[r.target_fragment];
    RegionGeometry g = ComputeRegionGeometry(
        *box.offset, *box.shape, tf.global_offset, tf.local_shape,
        r.overlap_offset, r.overlap_shape, plan_tensors_[r.tensor]->itemsize());
    r.source_base_offset = g.source_base_offset;
    r.target_base_offset = g.target_base_offset;
    r.inner_bytes = g.inner_bytes;
    r.loops = std::move(g.loops);
    r.segments = g.segments;
    segments += g.segments;
  }
  impl_->summary.segments = segments;
}

void Planner::Summarise() {
  const auto& sfr = impl_->source_fragments;
  // The regions in one range per thread.
  const StageIds& source = source_stages_;
  const StageIds& target = target_stages_;
  const std::vector<uint32_t>& target_participant = target_participant_;
  const size_t n = impl_->regions.size();
  std::vector<SummaryPart> parts(threads_);
  ForEachClaimed(parts.size(), threads_, [&](size_t k, unsigned) {
    SummariseRange(n * k / parts.size(), n * (k + 1) / parts.size(), source,
                   target, target_participant, &parts[k]);
  });
  // The parts' sums added: every figure is a sum, the same in any order.
  PlanSummary& sum = impl_->summary;
  impl_->target_bytes.assign(impl_->target_participants.size(), 0);
  RouteTotals routes;
  std::vector<uint8_t> used(sfr.size(), 0);
  for (const SummaryPart& part : parts) {
    sum.regions += part.regions;
    sum.bytes += part.bytes;
    for (size_t i = 0; i < part.target_bytes.size(); ++i) {
      impl_->target_bytes[i] += part.target_bytes[i];
    }
    for (size_t i = 0; i < used.size(); ++i) used[i] |= part.used[i];
    for (const auto& [ids, totals] : part.routes) {
      const auto& [sp, ss] = source.stages[ids >> 32];
      const auto& [tp, ts] = target.stages[ids & 0xFFFFFFFFu];
      auto& route = routes[RouteKey{sp, ss, tp, ts}];
      route.first += totals.first;
      route.second += totals.second;
    }
  }
  sum.source_fragments_used = std::count(used.begin(), used.end(), 1);
  sum.operations = sum.regions;
  for (uint64_t b : impl_->source_bytes) {
    sum.max_source_bytes = std::max(sum.max_source_bytes, b);
  }
  for (uint64_t b : impl_->target_bytes) {
    sum.max_target_bytes = std::max(sum.max_target_bytes, b);
  }
  sum.mean_source_bytes =
      impl_->source_participants.empty()
          ? 0.0
          : static_cast<double>(sum.bytes) / impl_->source_participants.size();
  // The traffic matrix: the parts' sorted pairs merged, equal pairs summed.
  TrafficPairs traffic;
  for (SummaryPart& part : parts) {
    TrafficPairs merged;
    merged.reserve(traffic.size() + part.traffic.size());
    std::merge(traffic.begin(), traffic.end(), part.traffic.begin(),
               part.traffic.end(), std::back_inserter(merged),
               [](const auto& a, const auto& b) { return a.first < b.first; });
    part.traffic = {};
    traffic = std::move(merged);
  }
  for (const auto& [key, bytes] : traffic) {
    const auto sp = static_cast<uint32_t>(key >> 32);
    const auto tp = static_cast<uint32_t>(key & 0xFFFFFFFFu);
    auto& out = impl_->traffic;
    if (!out.empty() && out.back().source_participant == sp &&
        out.back().target_participant == tp) {
      out.back().bytes += bytes;
    } else {
      out.push_back({sp, tp, bytes});
    }
  }
  for (const auto& [key, value] : routes) {
    impl_->routes.push_back(
        {key[0], key[1], key[2], key[3], value.first, value.second});
  }
}

void Planner::SummariseRange(size_t begin, size_t end, const StageIds& source,
                             const StageIds& target,
                             const std::vector<uint32_t>& target_participant,
                             SummaryPart* out) const {
  out->target_bytes.assign(impl_->target_participants.size(), 0);
  out->used.assign(impl_->source_fragments.size(), 0);
  out->traffic.reserve(end - begin);
  uint64_t last_route = UINT64_MAX;
  std::pair<uint64_t, uint64_t>* route = nullptr;
  const auto& regions = impl_->regions;
  for (size_t i = begin; i < end; ++i) {
    if (i + kPrefetchAhead < end) {  // random columns
      const TransferRegion& ahead = regions[i + kPrefetchAhead];
      __builtin_prefetch(&source.of[ahead.source_fragment]);
      __builtin_prefetch(&source_participant_[ahead.source_fragment]);
      __builtin_prefetch(&target.of[ahead.target_fragment]);
      __builtin_prefetch(&target_participant[ahead.target_fragment]);
    }
    const TransferRegion& r = regions[i];
    const uint32_t tp = target_participant[r.target_fragment];
    out->target_bytes[tp] += r.bytes;
    out->traffic.emplace_back(
        (uint64_t{source_participant_[r.source_fragment]} << 32) | tp, r.bytes);
    const uint64_t key = uint64_t{source.of[r.source_fragment]} << 32 |
                         target.of[r.target_fragment];
    if (route == nullptr || key != last_route) {
      route = &out->routes[key];
      last_route = key;
    }
    route->first += 1;
    route->second += r.bytes;
    out->used[r.source_fragment] = 1;
    out->regions += 1;
    out->bytes += r.bytes;
  }
  SumTraffic(&out->traffic);
}

}  // namespace internal

namespace internal {

// LogicalTransferPlan::Make without conversions: `target`'s bytes from
// `source`'s, dtypes equal.
Result<LogicalTransferPlan> PlanFromPlacement(
    const WeightPlacementManifest& source,
    const WeightPlacementManifest& target, const PlanOptions& options) {
  PlanSource view{source.resource_id(),
                  source.revision(),
                  source.weight_generation(),
                  source.placement_id(),
                  &source,
                  nullptr,
                  {},
                  [&](std::string_view id) { return source.FindTensor(id); },
                  source.fragments().size(),
                  {},
                  source.topology().sizes()};
  for (const auto& t : source.tensors()) view.tensors.push_back(&t);
  view.add_fragments = [&](const internal::TensorIndex& tensor_index,
                           internal::SourceTables out) {
    out.table_index.reserve(source.fragments().size());
    std::vector<uint32_t> part_tensor;
    for (const auto& part : source.parts()) {
      if (part.fragments().empty()) continue;
      const auto pidx = static_cast<uint32_t>(out.participants.size());
      out.participants.push_back(part.participant_id());
      tensor_index.ForPart(part, &part_tensor);
      const auto& frags = part.fragments();
      for (size_t j = 0; j < frags.size(); ++j) {
        const uint32_t t = part_tensor[part.fragment_tensor(j)];
        if (t == internal::TensorIndex::kNotPlanned) {  // target lacks it
          out.table_index.push_back(t);
          continue;
        }
        const auto i = static_cast<uint32_t>(out.fragments.size());
        out.table_index.push_back(i);
        out.by_tensor[t].push_back(i);
        out.fragments.push_back(
            internal::ToPlanFragment(frags[j], part.participant_id(), pidx, t));
      }
    }
  };
  return Planner::Run(view, target, options);
}

}  // namespace internal

Result<LogicalTransferPlan> LogicalTransferPlan::Make(
    const WeightPlacementManifest& source,
    const WeightPlacementManifest& target, const PlanOptions& options) {
  const SourceTensorLookup lookup = ConversionPlan::LookupIn(source);
  if (!options.convert) {
    RESHARD_RETURN_NOT_OK(CheckNoDtypeDifference(lookup, target));
    return internal::PlanFromPlacement(source, target, options);
  }
  RESHARD_ASSIGN_OR_RETURN(
      ConversionPlan conversion,
      ConversionPlan::Make(lookup, target, {options.fp8_block}));
  if (conversion.empty()) {
    return internal::PlanFromPlacement(source, target, options);
  }
  auto shared = std::make_shared<const ConversionPlan>(std::move(conversion));
  RESHARD_ASSIGN_OR_RETURN(
      LogicalTransferPlan plan,
      internal::PlanFromPlacement(source, shared->staging(), options));
  // Just made, so no other copy shares the state yet.
  std::const_pointer_cast<Impl>(plan.impl_)->conversion = std::move(shared);
  return plan;
}

Result<LogicalTransferPlan> LogicalTransferPlan::MakeFromStored(
    const StoredWeightManifest& source, const WeightPlacementManifest& target,
    const PlanOptions& options) {
  if (options.convert) {
    return Status::Unimplemented(
        "PlanOptions::convert: conversions out of a store revision are not "
        "supported yet (plan from a placement, or load and convert with "
        "reshard hf reshard --convert)");
  }
  const std::string id = "manifest:" + source.manifest_key();
  internal::PlanSource view{
      source.resource_id(),
      source.revision(),
      source.weight_generation(),
      id,
      nullptr,
      &source,
      {},
      [&](std::string_view t) { return source.FindTensor(t); },
      source.fragments().size(),
      {},
      ParallelSizes{}};
  for (const auto& t : source.tensors()) view.tensors.push_back(&t);
  // Every stored fragment is eligible; its "participant" is its object.
  view.add_fragments = [&](const internal::TensorIndex& tensor_index,
                           internal::SourceTables out) {
    std::map<std::string_view, uint32_t> objects;
    for (const auto& f : source.fragments()) objects.emplace(f.object_key, 0);
    for (auto& [key, idx] : objects) {
      idx = out.participants.size();
      out.participants.emplace_back(key);
    }
    for (const auto& f : source.fragments()) {
      const uint32_t* t = tensor_index.Find(f.tensor_id);
      if (t == nullptr) continue;
      out.by_tensor[*t].push_back(out.fragments.size());
      out.fragments.push_back({f.stored_fragment_id, f.object_key,
                               ParallelRank{}, std::nullopt, *t,
                               f.global_offset, f.local_shape, f.nbytes,
                               objects.at(f.object_key), 0});
    }
  };
  return internal::Planner::Run(view, target, options);
}

PlanSourceKind LogicalTransferPlan::source_kind() const {
  return impl_->source_kind;
}
const ConversionPlan* LogicalTransferPlan::conversion() const {
  return impl_->conversion.get();
}
const std::string& LogicalTransferPlan::resource_id() const {
  return impl_->resource_id;
}
const std::string& LogicalTransferPlan::revision() const {
  return impl_->revision;
}
const std::string& LogicalTransferPlan::source_placement_id() const {
  return impl_->source_placement_id;
}
const std::string& LogicalTransferPlan::target_placement_id() const {
  return impl_->target_placement_id;
}
const std::vector<std::string>& LogicalTransferPlan::tensors() const {
  return impl_->tensors;
}
const std::vector<PlanFragment>& LogicalTransferPlan::source_fragments() const {
  return impl_->source_fragments;
}
const std::vector<PlanFragment>& LogicalTransferPlan::target_fragments() const {
  return impl_->target_fragments;
}
const std::vector<TransferRegion>& LogicalTransferPlan::regions() const {
  std::call_once(impl_->regions_ordered, [this] {
    internal::OrderRegions(impl_->source_fragments, impl_->target_fragments,
                           &impl_->regions);
  });
  return impl_->regions;
}
const std::vector<PipelineRoute>& LogicalTransferPlan::pipeline_routes() const {
  return impl_->routes;
}
const std::vector<std::string>& LogicalTransferPlan::source_participants()
    const {
  return impl_->source_participants;
}
const std::vector<uint64_t>& LogicalTransferPlan::source_bytes() const {
  return impl_->source_bytes;
}
const std::vector<std::string>& LogicalTransferPlan::target_participants()
    const {
  return impl_->target_participants;
}
const std::vector<uint64_t>& LogicalTransferPlan::target_bytes() const {
  return impl_->target_bytes;
}
const std::vector<TrafficEntry>& LogicalTransferPlan::traffic() const {
  return impl_->traffic;
}
const PlanSummary& LogicalTransferPlan::summary() const {
  return impl_->summary;
}

std::string LogicalTransferPlan::DescribeRegion(const TransferRegion& r) const {
  auto dims = [](const Dims& d) {
    std::string s = "[";
    for (size_t i = 0; i < d.size(); ++i) {
      if (i) s += ",";
      s += std::to_string(d[i]);
    }
    return s + "]";
  };
  std::string s =
      impl_->tensors[r.tensor] + " " + dims(r.overlap_offset) + "+" +
      dims(r.overlap_shape) + ": " +
      std::string(impl_->source_fragments[r.source_fragment].participant_id) +
      "@" + std::to_string(r.source_base_offset) + " -> " +
      std::string(impl_->target_fragments[r.target_fragment].participant_id) +
      "@" + std::to_string(r.target_base_offset) + ", inner " +
      std::to_string(r.inner_bytes);
  for (const auto& l : r.loops) {
    s += " x(" + std::to_string(l.count) + "," +
         std::to_string(l.source_stride) + "," +
         std::to_string(l.target_stride) + ")";
  }
  return s;
}

}  // namespace reshard
