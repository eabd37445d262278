// The source tiling (docs/planner.md, step 2) and its interval index.

#include "plan/source_tiling.h"

#include <algorithm>
#include <array>
#include <map>
#include <tuple>

namespace reshard::internal {
namespace {

using AxisKey = std::array<int64_t, 4>;

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

}  // namespace

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

void BoxIndex::Build(const SourceBox* boxes, size_t n, size_t ndim) {
  boxes_.clear();
  for (size_t i = 0; i < n; ++i) boxes_.push_back(&boxes[i]);
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

}  // namespace reshard::internal
