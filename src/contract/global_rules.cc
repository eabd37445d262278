// The global rules of a placement's tensors (rules 20-26): GlobalValidator
// checks one tensor's fragments against the topology; CheckGlobalRules runs
// it over every tensor.

#include "contract/global_rules.h"

#include <algorithm>
#include <array>
#include <map>
#include <string>
#include <unordered_map>

#include "util/box_cover.h"
#include "util/claimed_runs.h"

namespace reshard::internal {
namespace {

// A rank projected onto a subset of axis kinds; unselected coordinates are
// -1. Used as a hash key for owner, replica and split tuples.
using AxisKey = std::array<int64_t, 4>;
using KindMask = uint8_t;

AxisKey Project(const ParallelRank& r, KindMask mask) {
  static_assert(static_cast<int>(AxisKind::kDp) == 0 &&
                static_cast<int>(AxisKind::kPp) == 1 &&
                static_cast<int>(AxisKind::kEp) == 2 &&
                static_cast<int>(AxisKind::kTp) == 3);
  return {mask & 1u ? r.dp : -1, mask & 2u ? r.pp : -1, mask & 4u ? r.ep : -1,
          mask & 8u ? r.tp : -1};
}

// How a tensor's axes project a rank: its ownership, replicated and split
// kinds, and per kind the ranks per shard of a grouped split (0 for every
// other kind). A grouped split's coordinate is rank / group in the split
// key and rank % group in the replica key: the ranks of one shard are its
// replicas. Per kind also the ranks that hold a partial split (0 for
// every other kind): the participants beyond them hold no fragment of the
// tensor and are no part of its expectation. Per kind also the size of a
// spanning split's kind and the kind it spans (0 and -1 for every other
// kind): its coordinate is rank(spans) * stride + rank(kind), and the
// spanned kind is in no mask (it is neither owned, replicated nor split
// on its own).
struct Projection {
  KindMask owner = 0, replica = 0, split = 0;
  std::array<int64_t, 4> group = {0, 0, 0, 0};
  std::array<int64_t, 4> held = {0, 0, 0, 0};
  std::array<int64_t, 4> stride = {0, 0, 0, 0};
  std::array<int64_t, 4> spans = {-1, -1, -1, -1};

  AxisKey Owner(const ParallelRank& r) const { return Project(r, owner); }
  AxisKey Replica(const ParallelRank& r) const {
    AxisKey k = Project(r, replica);
    for (size_t a = 0; a < 4; ++a) {
      if (group[a] > 0) k[a] = r.Get(static_cast<AxisKind>(a)) % group[a];
    }
    return k;
  }
  AxisKey Split(const ParallelRank& r) const {
    AxisKey k = Project(r, split);
    for (size_t a = 0; a < 4; ++a) {
      if (group[a] > 0) k[a] = r.Get(static_cast<AxisKind>(a)) / group[a];
      if (stride[a] > 0) {
        k[a] += r.Get(static_cast<AxisKind>(spans[a])) * stride[a];
      }
    }
    return k;
  }
  // Whether `r` lies beyond a partial split's ranks (holds nothing).
  bool Beyond(const ParallelRank& r) const {
    for (size_t a = 0; a < 4; ++a) {
      if (held[a] > 0 && r.Get(static_cast<AxisKind>(a)) >= held[a]) {
        return true;
      }
    }
    return false;
  }
  // The (owner, replica) group's key: owner coordinates, then replica ones.
  static AxisKey GroupKey(AxisKey owner, const AxisKey& replica) {
    for (size_t a = 0; a < 4; ++a) {
      if (replica[a] >= 0) owner[a] = replica[a];
    }
    return owner;
  }
  uint64_t CacheKey() const {
    uint64_t k = owner | (replica << 8) | (split << 16);
    for (size_t a = 0; a < 4; ++a) {
      k = k * 1000003u + static_cast<uint64_t>(group[a]);
      k = k * 1000003u + static_cast<uint64_t>(held[a]);
      k = k * 1000003u + static_cast<uint64_t>(stride[a]);
      k = k * 1000003u + static_cast<uint64_t>(spans[a] + 1);
    }
    return k;
  }
};

// `k` in one integer, 16 bits per coordinate (value + 1, so that -1 is 0),
// ordered as AxisKeys are: exact when every coordinate is below 65535.
uint64_t Pack(const AxisKey& k) {
  uint64_t v = 0;
  for (int64_t c : k) v = (v << 16) | static_cast<uint64_t>(c + 1);
  return v;
}

struct AxisKeyHash {
  size_t operator()(const AxisKey& k) const {
    size_t h = 1469598103934665603ull;
    for (int64_t v : k) h = (h ^ static_cast<size_t>(v)) * 1099511628211ull;
    return h;
  }
};

KindMask MaskOf(const TensorDescriptor& t, AxisSemantics semantics) {
  KindMask m = 0;
  for (const auto& axis : t.parallel_axes()) {
    if (axis.semantics() == semantics) {
      m |= 1u << static_cast<unsigned>(axis.kind());
    }
  }
  return m;
}

// What the topology says each (owner, replica) group must contain, for one
// combination of ownership, replicated and split masks. Computed once per
// distinct combination, then shared by every tensor that uses it.
struct TopologyExpectation {
  // owner -> sorted unique replica keys of the participants of that owner.
  std::unordered_map<AxisKey, std::vector<AxisKey>, AxisKeyHash> replicas;
  // owner|replica -> sorted unique split keys of matching participants.
  std::unordered_map<AxisKey, std::vector<AxisKey>, AxisKeyHash> splits;
};

void SortUnique(std::vector<AxisKey>* v) {
  std::sort(v->begin(), v->end());
  v->erase(std::unique(v->begin(), v->end()), v->end());
}

TopologyExpectation ComputeExpectation(const ParallelTopology& topo,
                                       const Projection& pr) {
  TopologyExpectation e;
  for (const auto& p : topo.participants()) {
    if (pr.Beyond(p.rank)) continue;
    const AxisKey owner = pr.Owner(p.rank);
    const AxisKey replica = pr.Replica(p.rank);
    e.replicas[owner].push_back(replica);
    e.splits[Projection::GroupKey(owner, replica)].push_back(pr.Split(p.rank));
  }
  for (auto& [k, v] : e.replicas) SortUnique(&v);
  for (auto& [k, v] : e.splits) SortUnique(&v);
  return e;
}

// A fragment with its rank projected onto the tensor's ownership, replicated
// and split axes.
struct RankedFragment {
  AxisKey owner, replica, split;
  const PlacementFragment* f;
};

// Buffers reused across the groups of one tensor.
struct GroupScratch {
  std::vector<AxisKey> replicas;
  std::vector<AxisKey> splits;
  std::vector<BoxRef> boxes;
  std::vector<int64_t> values;
};

class GlobalValidator {
 public:
  explicit GlobalValidator(const ParallelTopology& topo) : topo_(topo) {
    for (AxisKind kind : kAllAxisKinds) packable_ &= topo.size(kind) < 65535;
    // A spanning split's coordinates reach dp x tp.
    packable_ &= topo.size(AxisKind::kDp) * topo.size(AxisKind::kTp) < 65535;
  }

  Status CheckTensor(const TensorDescriptor& t,
                     const std::vector<const PlacementFragment*>& frags);

 private:
  Status CheckUndeclaredAxes(const TensorDescriptor& t,
                             const std::vector<const PlacementFragment*>& f);
  Status CheckSplitGeometry(const TensorDescriptor& t,
                            const std::vector<const PlacementFragment*>& f);
  // `frags` with their ranks projected on the masks, sorted by (owner,
  // replica, split), ties in fragment order.
  std::vector<RankedFragment> RankFragments(
      const std::vector<const PlacementFragment*>& frags,
      const Projection& pr) const;
  // The tensor's projection; a grouped split whose shards do not divide
  // its axis into groups of two or more ranks, or a partial split held by
  // as many ranks as its axis has or more, is an error.
  Result<Projection> ProjectionOf(const TensorDescriptor& t) const;
  // One (owner, replica) group [begin, end), sorted by split key: exact
  // cover (rule 23), the topology's split participants, Cartesian split
  // tuples.
  Status CheckReplicaGroup(const TensorDescriptor& t,
                           const TopologyExpectation& expect,
                           const Projection& pr, const RankedFragment* begin,
                           const RankedFragment* end,
                           GroupScratch* scratch) const;
  // True if, per split kind, the values in `splits` are {0..size-1}.
  bool SplitValuesComplete(const std::vector<AxisKey>& splits,
                           const Projection& pr,
                           std::vector<int64_t>* values) const;
  const TopologyExpectation& Expectation(const Projection& pr);

  const ParallelTopology& topo_;
  std::map<uint64_t, TopologyExpectation> cache_;
  // Every rank coordinate fits Pack (each is below its axis size).
  bool packable_ = true;
};

const TopologyExpectation& GlobalValidator::Expectation(const Projection& pr) {
  const uint64_t key = pr.CacheKey();
  auto it = cache_.find(key);
  if (it == cache_.end()) {
    it = cache_.emplace(key, ComputeExpectation(topo_, pr)).first;
  }
  return it->second;
}

Result<Projection> GlobalValidator::ProjectionOf(
    const TensorDescriptor& t) const {
  Projection pr;
  pr.owner = MaskOf(t, AxisSemantics::kOwnership);
  pr.replica = MaskOf(t, AxisSemantics::kReplicated);
  pr.split = MaskOf(t, AxisSemantics::kSplit);
  for (const auto& axis : t.parallel_axes()) {
    if (axis.shards() == 0) continue;
    const int64_t size = topo_.size(axis.kind());
    if (axis.shards() >= size || size % axis.shards() != 0) {
      return Status::InvalidArgument(
          "grouped split axis of " + t.tensor_id() + ": " +
          std::string(AxisKindName(axis.kind())) + " of size " +
          std::to_string(size) + " cannot hold " +
          std::to_string(axis.shards()) +
          " shards (they must divide the axis into groups of two or more "
          "ranks)");
    }
    pr.group[static_cast<size_t>(axis.kind())] = size / axis.shards();
  }
  for (const auto& axis : t.parallel_axes()) {
    if (axis.ranks() == 0) continue;
    const int64_t size = topo_.size(axis.kind());
    if (axis.ranks() >= size) {
      return Status::InvalidArgument(
          "partial split axis of " + t.tensor_id() + ": " +
          std::string(AxisKindName(axis.kind())) + " of size " +
          std::to_string(size) + " cannot leave ranks from " +
          std::to_string(axis.ranks()) +
          " on without fragments (a partial split is held by fewer ranks "
          "than its axis has; use a plain split)");
    }
    pr.held[static_cast<size_t>(axis.kind())] = axis.ranks();
  }
  for (const auto& axis : t.parallel_axes()) {
    if (!axis.over().has_value()) continue;
    const int64_t over_size = topo_.size(*axis.over());
    if (over_size < 2) {
      const std::string over(AxisKindName(*axis.over()));
      return Status::InvalidArgument(
          "spanning split axis of " + t.tensor_id() + ": " +
          std::string(AxisKindName(axis.kind())) + " split over " + over +
          " of size " + std::to_string(over_size) +
          " spans nothing (use a "
          "plain split)");
    }
    const auto a = static_cast<size_t>(axis.kind());
    pr.stride[a] = topo_.size(axis.kind());
    pr.spans[a] = static_cast<int64_t>(*axis.over());
  }
  return pr;
}

Status GlobalValidator::CheckUndeclaredAxes(
    const TensorDescriptor& t,
    const std::vector<const PlacementFragment*>& frags) {
  KindMask declared = 0;
  for (const auto& axis : t.parallel_axes()) {
    declared |= 1u << static_cast<unsigned>(axis.kind());
    // A spanning split consumes the axis it spans.
    if (axis.over().has_value()) {
      declared |= 1u << static_cast<unsigned>(*axis.over());
    }
  }
  for (AxisKind kind : kAllAxisKinds) {
    if (declared & (1u << static_cast<unsigned>(kind))) continue;
    if (topo_.size(kind) <= 1) continue;
    const std::string name(AxisKindName(kind));
    const int64_t first = frags.front()->rank().Get(kind);
    bool varies = false;
    for (const auto* f : frags) varies |= f->rank().Get(kind) != first;
    if (kind == AxisKind::kDp || kind == AxisKind::kPp || !varies) {
      return Status::InvalidArgument(
          "global placement tensor requires explicit parallel semantics for "
          "active undeclared " +
          name + " axis: " + t.tensor_id());
    }
    // It varies: it must be a function of the varying declared coordinates.
    KindMask varying_declared = 0;
    for (AxisKind d : kAllAxisKinds) {
      if (!(declared & (1u << static_cast<unsigned>(d)))) continue;
      const int64_t v0 = frags.front()->rank().Get(d);
      for (const auto* f : frags) {
        if (f->rank().Get(d) != v0) {
          varying_declared |= 1u << static_cast<unsigned>(d);
          break;
        }
      }
    }
    if (varying_declared == 0) {
      return Status::InvalidArgument(
          "global placement tensor varies across undeclared " + name +
          " axis: " + t.tensor_id());
    }
    std::unordered_map<AxisKey, int64_t, AxisKeyHash> projection;
    for (const auto* f : frags) {
      auto [it, inserted] = projection.emplace(
          Project(f->rank(), varying_declared), f->rank().Get(kind));
      if (!inserted && it->second != f->rank().Get(kind)) {
        return Status::InvalidArgument(
            "global placement tensor varies independently across undeclared " +
            name + " axis: " + t.tensor_id());
      }
    }
  }
  return Status::OK();
}

Status GlobalValidator::CheckSplitGeometry(
    const TensorDescriptor& t,
    const std::vector<const PlacementFragment*>& frags) {
  std::vector<std::array<int64_t, 3>> iv;  // rank value, begin, end
  iv.reserve(frags.size());
  for (const auto& axis : t.parallel_axes()) {
    if (axis.semantics() != AxisSemantics::kSplit) continue;
    const auto dim = static_cast<size_t>(axis.dim());
    // A grouped split's ranks of one shard count as one.
    const int64_t group =
        axis.shards() > 0 ? topo_.size(axis.kind()) / axis.shards() : 1;
    // A spanning split's coordinate counts the ranks it spans.
    const int64_t stride =
        axis.over().has_value() ? topo_.size(axis.kind()) : 0;
    iv.clear();
    for (const auto* f : frags) {
      const int64_t spanned =
          stride > 0 ? f->rank().Get(*axis.over()) * stride : 0;
      iv.push_back({spanned + f->rank().Get(axis.kind()) / group,
                    f->global_offset()[dim],
                    f->global_offset()[dim] + f->local_shape()[dim]});
    }
    std::sort(iv.begin(), iv.end());
    // Merge each rank's intervals, then the merged intervals of all ranks
    // must tile [0, extent) contiguously.
    std::vector<std::pair<int64_t, int64_t>> merged;
    for (size_t i = 0; i < iv.size();) {
      int64_t b = iv[i][1];
      int64_t e = iv[i][2];
      size_t j = i + 1;
      for (; j < iv.size() && iv[j][0] == iv[i][0]; ++j) {
        if (iv[j][1] <= e) {
          e = std::max(e, iv[j][2]);
        } else {
          merged.emplace_back(b, e);
          b = iv[j][1];
          e = iv[j][2];
        }
      }
      merged.emplace_back(b, e);
      i = j;
    }
    std::sort(merged.begin(), merged.end());
    int64_t pos = 0;
    bool ok = true;
    for (const auto& [b, e] : merged) {
      if (b != pos) {
        ok = false;
        break;
      }
      pos = e;
    }
    if (!ok || pos != t.global_shape()[dim]) {
      return Status::InvalidArgument(
          "split-axis rank geometry conflicts with declared dimension: " +
          t.tensor_id() + ": " + std::string(AxisKindName(axis.kind())) +
          " -> dim " + std::to_string(dim));
    }
  }
  return Status::OK();
}

std::vector<RankedFragment> GlobalValidator::RankFragments(
    const std::vector<const PlacementFragment*>& frags,
    const Projection& pr) const {
  std::vector<RankedFragment> entries;
  entries.reserve(frags.size());
  // A tensor's fragments lie in every part, a page apart or more: the first
  // touch of each misses the cache, so the misses are started ahead of use
  // and overlap (the later checks of this tensor find them in cache).
  constexpr size_t kAhead = 16;
  for (size_t i = 0; i < frags.size(); ++i) {
    if (i + kAhead < frags.size()) {
      // Addresses only: data() would load the fragment to find its values
      // and wait for the very miss being started.
      const PlacementFragment* ahead = frags[i + kAhead];
      __builtin_prefetch(&ahead->global_offset());
      __builtin_prefetch(&ahead->local_shape());
      __builtin_prefetch(&ahead->rank());
    }
    const PlacementFragment* f = frags[i];
    entries.push_back(
        {pr.Owner(f->rank()), pr.Replica(f->rank()), pr.Split(f->rank()), f});
  }
  // By (owner, replica, split), ties in fragment order. Packed keys compare
  // as three integers, and the sort moves 32 bytes per entry, not a
  // RankedFragment.
  if (packable_) {
    struct Packed {
      uint64_t owner, replica, split;
      uint32_t index;
    };
    std::vector<Packed> keys(entries.size());
    for (uint32_t i = 0; i < entries.size(); ++i) {
      const RankedFragment& e = entries[i];
      keys[i] = {Pack(e.owner), Pack(e.replica), Pack(e.split), i};
    }
    std::sort(keys.begin(), keys.end(), [](const Packed& a, const Packed& b) {
      return std::tie(a.owner, a.replica, a.split, a.index) <
             std::tie(b.owner, b.replica, b.split, b.index);
    });
    std::vector<RankedFragment> sorted(entries.size());
    for (size_t i = 0; i < keys.size(); ++i) sorted[i] = entries[keys[i].index];
    entries = std::move(sorted);
  } else {
    std::stable_sort(entries.begin(), entries.end(),
                     [](const auto& a, const auto& b) {
                       return std::tie(a.owner, a.replica, a.split) <
                              std::tie(b.owner, b.replica, b.split);
                     });
  }
  return entries;
}

Status GlobalValidator::CheckTensor(
    const TensorDescriptor& t,
    const std::vector<const PlacementFragment*>& frags) {
  const std::string& id = t.tensor_id();
  if (frags.empty()) {
    return Status::InvalidArgument(
        "global placement tensor is not fully covered: " + id +
        " (no fragments)");
  }
  RESHARD_RETURN_NOT_OK(CheckUndeclaredAxes(t, frags));
  RESHARD_ASSIGN_OR_RETURN(const Projection pr, ProjectionOf(t));
  const TopologyExpectation& expect = Expectation(pr);

  const std::vector<RankedFragment> entries = RankFragments(frags, pr);
  GroupScratch scratch;
  for (size_t i = 0; i < entries.size();) {
    size_t j = i;
    scratch.replicas.clear();
    while (j < entries.size() && entries[j].owner == entries[i].owner) {
      // One (owner, replica) group: [j, k).
      size_t k = j;
      while (k < entries.size() && entries[k].owner == entries[i].owner &&
             entries[k].replica == entries[j].replica) {
        ++k;
      }
      scratch.replicas.push_back(entries[j].replica);
      RESHARD_RETURN_NOT_OK(CheckReplicaGroup(t, expect, pr, &entries[j],
                                              &entries[0] + k, &scratch));
      j = k;
    }
    // The owner's replicas are the topology's.
    auto rp = expect.replicas.find(entries[i].owner);
    if (rp == expect.replicas.end() || rp->second != scratch.replicas) {
      return Status::InvalidArgument(
          "missing or unexpected replicated-axis participant for " + id +
          " (owner at " + entries[i].f->rank().ToString() + ")");
    }
    i = j;
  }
  return CheckSplitGeometry(t, frags);
}

Status GlobalValidator::CheckReplicaGroup(const TensorDescriptor& t,
                                          const TopologyExpectation& expect,
                                          const Projection& pr,
                                          const RankedFragment* begin,
                                          const RankedFragment* end,
                                          GroupScratch* scratch) const {
  const std::string& id = t.tensor_id();
  constexpr const char* where = " (owner/replica group at ";
  scratch->boxes.clear();
  scratch->splits.clear();
  for (const RankedFragment* e = begin; e != end; ++e) {
    scratch->boxes.push_back(
        {e->f->global_offset().data(), e->f->local_shape().data()});
    scratch->splits.push_back(e->split);
  }
  // Rule 23: the group covers the tensor exactly.
  if (!ExactlyCovers(t.global_shape(), scratch->boxes)) {
    return Status::InvalidArgument(
        "global placement tensor is not fully covered: " + id + where +
        begin->f->rank().ToString() + ")");
  }
  std::vector<AxisKey>& splits = scratch->splits;
  SortUnique(&splits);
  auto sp =
      expect.splits.find(Projection::GroupKey(begin->owner, begin->replica));
  if (sp == expect.splits.end() || sp->second != splits ||
      !SplitValuesComplete(splits, pr, &scratch->values)) {
    return Status::InvalidArgument(
        "missing or unexpected split-axis participant for " + id + where +
        begin->f->rank().ToString() + ")");
  }
  // Cartesian product rule: tuples == product of per-axis value sets.
  size_t product = 1;
  for (size_t a = 0; a < 4; ++a) {
    if (!(pr.split & (1u << a))) continue;
    std::vector<int64_t>& values = scratch->values;
    values.clear();
    for (const auto& key : splits) values.push_back(key[a]);
    std::sort(values.begin(), values.end());
    product *= std::unique(values.begin(), values.end()) - values.begin();
  }
  if (product != splits.size()) {
    return Status::InvalidArgument(
        "non-Cartesian split-axis participant mapping cannot prove "
        "rank-to-dimension ownership: " +
        id);
  }
  return Status::OK();
}

bool GlobalValidator::SplitValuesComplete(const std::vector<AxisKey>& splits,
                                          const Projection& pr,
                                          std::vector<int64_t>* values) const {
  // Per split kind the participants' values must be {0..size-1} (a grouped
  // split's: {0..shards-1}; a partial split's: {0..ranks-1}; a spanning
  // split's: {0..size * size(spanned)-1}).
  for (AxisKind kind : kAllAxisKinds) {
    const auto a = static_cast<size_t>(kind);
    if (!(pr.split & (1u << a))) continue;
    const int64_t n =
        pr.group[a] > 0  ? topo_.size(kind) / pr.group[a]
        : pr.held[a] > 0 ? pr.held[a]
        : pr.stride[a] > 0
            ? topo_.size(kind) * topo_.size(static_cast<AxisKind>(pr.spans[a]))
            : topo_.size(kind);
    values->clear();
    for (const auto& key : splits) values->push_back(key[a]);
    std::sort(values->begin(), values->end());
    values->erase(std::unique(values->begin(), values->end()), values->end());
    if (static_cast<int64_t>(values->size()) != n || values->front() != 0 ||
        values->back() != n - 1) {
      return false;
    }
  }
  return true;
}

}  // namespace

Status CheckGlobalRules(
    const ParallelTopology& topology,
    const std::vector<TensorDescriptor>& tensors,
    const std::vector<std::vector<const PlacementFragment*>>&
        fragments_by_tensor,
    size_t fragment_count) {
  const size_t n = tensors.size();
  const unsigned threads =
      fragment_count < kParallelIdentityThreshold || n < 2 ? 1 : 2;
  constexpr size_t kCheckRuns = 32;
  std::vector<size_t> starts = {0};  // run r is [starts[r], starts[r + 1])
  const size_t per_run =
      threads == 1 ? SIZE_MAX : fragment_count / kCheckRuns + 1;
  for (size_t t = 0, seen = 0; t < n && threads > 1; ++t) {
    seen += fragments_by_tensor[t].size();
    if (seen >= per_run * starts.size() && t + 1 < n) starts.push_back(t + 1);
  }
  starts.push_back(n);
  const size_t runs = starts.size() - 1;
  std::vector<GlobalValidator> validators(threads, GlobalValidator(topology));
  return ForEachClaimedUntilError(
      runs, threads, [&](size_t r, unsigned worker) {
        for (size_t t = starts[r]; t < starts[r + 1]; ++t) {
          RESHARD_RETURN_NOT_OK(validators[worker].CheckTensor(
              tensors[t], fragments_by_tensor[t]));
        }
        return Status::OK();
      });
}

}  // namespace reshard::internal
