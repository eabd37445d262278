// WeightPlacementPart: one participant's contribution (rules 7-14).

#include <algorithm>
#include <numeric>
#include <optional>
#include <unordered_map>

#include "contract/fragment_geometry.h"
#include "reshard/placement.h"
#include "util/box_cover.h"
#include "util/sorted_find.h"

namespace reshard {
namespace internal {

Status CheckFragmentGeometry(const TensorDescriptor& t,
                             const PlacementFragment& f) {
  const std::string& id = f.placement_fragment_id();
  if (f.global_offset().size() != t.ndim()) {
    return Status::InvalidArgument(
        "fragment rank mismatch: " + id + ": tensor " + t.tensor_id() +
        " has " + std::to_string(t.ndim()) + " dimensions, fragment has " +
        std::to_string(f.global_offset().size()));
  }
  // Checked: a wrapped product must not match nbytes by accident.
  unsigned __int128 bytes = static_cast<uint64_t>(t.itemsize());
  bool too_large = false;
  for (size_t d = 0; d < t.ndim(); ++d) {
    if (f.global_offset()[d] > t.global_shape()[d] - f.local_shape()[d]) {
      return Status::InvalidArgument(
          "fragment is out of bounds: " + id + ": tensor " + t.tensor_id() +
          " dim " + std::to_string(d) + ": offset " +
          std::to_string(f.global_offset()[d]) + " + extent " +
          std::to_string(f.local_shape()[d]) + " > " +
          std::to_string(t.global_shape()[d]));
    }
    too_large |= __builtin_mul_overflow(
        bytes, static_cast<unsigned __int128>(f.local_shape()[d]), &bytes);
    too_large |= bytes > UINT64_MAX;
  }
  if (too_large || bytes != f.nbytes()) {
    std::string expected = too_large
                               ? "more than 2^64-1"
                               : std::to_string(static_cast<uint64_t>(bytes));
    return Status::InvalidArgument("fragment byte size mismatch: " + id +
                                   ": expected " + expected + ", got " +
                                   std::to_string(f.nbytes()));
  }
  return Status::OK();
}

}  // namespace internal

namespace {

// Parts with more tensors than this find a fragment's tensor by hash, not
// by binary search over ids that share long prefixes.
constexpr size_t kHashedTensorLookup = 16;

// Sorts tensors by id (unique) and fragments by placement_fragment_id.
// Returns true if the fragments were already in strictly ascending order,
// which also proves their ids unique.
Result<bool> SortTensorsAndFragments(const std::string& who,
                                     WeightPlacementPartSpec* s) {
  // Canonical input arrives sorted; checking is cheaper than sorting.
  const auto by_id = [](const auto& a, const auto& b) {
    return a.tensor_id() < b.tensor_id();
  };
  if (!std::is_sorted(s->tensors.begin(), s->tensors.end(), by_id)) {
    std::sort(s->tensors.begin(), s->tensors.end(), by_id);
  }
  for (size_t i = 1; i < s->tensors.size(); ++i) {
    if (s->tensors[i].tensor_id() == s->tensors[i - 1].tensor_id()) {
      return Status::InvalidArgument(
          who + "duplicate tensor_id: " + s->tensors[i].tensor_id());
    }
  }
  auto not_before = [](const auto& a, const auto& b) {
    return !(a.placement_fragment_id() < b.placement_fragment_id());
  };
  if (std::adjacent_find(s->fragments.begin(), s->fragments.end(),
                         not_before) == s->fragments.end()) {
    return true;
  }
  std::sort(s->fragments.begin(), s->fragments.end(),
            [](const auto& a, const auto& b) {
              return a.placement_fragment_id() < b.placement_fragment_id();
            });
  return false;
}

// True if `tensor_of` names, for every fragment of `s`, the tensor with
// its id: a decoder's hint that saves looking the ids up.
bool HintHolds(const WeightPlacementPartSpec& s,
               const std::vector<uint32_t>& tensor_of) {
  if (tensor_of.size() != s.fragments.size()) return false;
  for (size_t i = 0; i < tensor_of.size(); ++i) {
    if (tensor_of[i] >= s.tensors.size() ||
        s.tensors[tensor_of[i]].tensor_id() != s.fragments[i].tensor_id()) {
      return false;
    }
  }
  return true;
}

// Finds fragments' tensors among a part's sorted tensors.
class TensorFinder {
 public:
  explicit TensorFinder(const std::vector<TensorDescriptor>& tensors)
      : tensors_(tensors) {
    if (tensors.size() <= kHashedTensorLookup) return;
    index_.reserve(tensors.size());
    for (size_t t = 0; t < tensors.size(); ++t) {
      index_.emplace(tensors[t].tensor_id(), static_cast<uint32_t>(t));
    }
  }

  // The index of tensor `id`, or nullopt.
  std::optional<uint32_t> Find(std::string_view id) const {
    if (tensors_.size() > kHashedTensorLookup) {
      auto it = index_.find(id);
      if (it == index_.end()) return std::nullopt;
      return it->second;
    }
    const TensorDescriptor* t = internal::FindSorted(
        tensors_, id,
        [](const auto& d) -> decltype(auto) { return d.tensor_id(); });
    if (t == nullptr) return std::nullopt;
    return static_cast<uint32_t>(t - tensors_.data());
  }

 private:
  const std::vector<TensorDescriptor>& tensors_;
  std::unordered_map<std::string_view, uint32_t> index_;
};

// Each fragment on its own: unique id (unless `unique` is known), the
// part's rank, a known tensor and its geometry (rules 7-9). Returns the
// index in s.tensors of each fragment's tensor.
Result<std::vector<uint32_t>> CheckFragments(const std::string& who,
                                             const WeightPlacementPartSpec& s,
                                             bool unique,
                                             std::vector<uint32_t> hint) {
  // A hint that holds names every fragment's tensor; else look them up.
  const bool hinted = HintHolds(s, hint);
  std::vector<uint32_t> tensor_of =
      hinted ? std::move(hint) : std::vector<uint32_t>(s.fragments.size());
  std::optional<TensorFinder> finder;
  if (!hinted) finder.emplace(s.tensors);
  for (size_t i = 0; i < s.fragments.size(); ++i) {
    const PlacementFragment& f = s.fragments[i];
    if (!unique && i > 0 &&
        f.placement_fragment_id() ==
            s.fragments[i - 1].placement_fragment_id()) {
      return Status::InvalidArgument(
          who + "duplicate fragment_id: " + f.placement_fragment_id());
    }
    if (!(f.rank() == s.rank)) {
      return Status::InvalidArgument(
          who + "placement part fragment rank differs from part rank: " +
          f.placement_fragment_id() + " has " + f.rank().ToString() +
          ", part has " + s.rank.ToString());
    }
    const std::optional<uint32_t> t =
        hinted ? std::optional<uint32_t>(tensor_of[i])
               : finder->Find(f.tensor_id());
    if (!t.has_value()) {
      return Status::InvalidArgument(who + "unknown tensor_id " +
                                     f.tensor_id() + " in fragment " +
                                     f.placement_fragment_id());
    }
    RESHARD_RETURN_NOT_OK(internal::CheckFragmentGeometry(s.tensors[*t], f));
    tensor_of[i] = *t;
  }
  return tensor_of;
}

// The part's fragment indices grouped by tensor: group t is
// fragments[start[t] .. start[t + 1]), in ascending fragment order (a
// counting sort of `tensor_of`).
struct TensorGroups {
  std::vector<uint32_t> start;
  std::vector<uint32_t> fragments;
};

TensorGroups GroupFragments(size_t n_tensors,
                            const std::vector<uint32_t>& tensor_of) {
  TensorGroups g;
  g.start.assign(n_tensors + 1, 0);
  for (uint32_t t : tensor_of) ++g.start[t + 1];
  for (size_t t = 0; t < n_tensors; ++t) g.start[t + 1] += g.start[t];
  g.fragments.resize(tensor_of.size());
  std::vector<uint32_t> next(g.start.begin(), g.start.end() - 1);
  for (size_t i = 0; i < tensor_of.size(); ++i) {
    g.fragments[next[tensor_of[i]]++] = static_cast<uint32_t>(i);
  }
  return g;
}

// Rules 11-12: the part's boxes of one tensor (group `t`) neither repeat
// nor overlap.
Status CheckNoOverlap(const std::string& who, const WeightPlacementPartSpec& s,
                      const TensorGroups& groups, size_t t,
                      std::vector<internal::BoxRef>* boxes) {
  boxes->clear();
  const uint32_t* members = groups.fragments.data() + groups.start[t];
  const size_t n = groups.start[t + 1] - groups.start[t];
  for (size_t k = 0; k < n; ++k) {
    const auto& f = s.fragments[members[k]];
    boxes->push_back({f.global_offset().data(), f.local_shape().data()});
  }
  auto pair = internal::FindOverlap(s.tensors[t].ndim(), *boxes);
  if (!pair) return Status::OK();
  const auto& a = s.fragments[members[pair->first]];
  const auto& b = s.fragments[members[pair->second]];
  if (a.global_offset() == b.global_offset() &&
      a.local_shape() == b.local_shape()) {
    return Status::InvalidArgument(
        who + "duplicate logical fragment for tensor and parallel rank: " +
        a.tensor_id() + " at " + s.rank.ToString() + ": " +
        a.placement_fragment_id() + " and " + b.placement_fragment_id());
  }
  return Status::InvalidArgument(
      who +
      "logical fragment boxes overlap for tensor and parallel "
      "rank: " +
      a.placement_fragment_id() + " and " + b.placement_fragment_id() +
      " (tensor " + a.tensor_id() + ")");
}

// Rules 11, 12 and 14: no overlap per tensor, and every tensor of the part
// is referenced by one of its fragments.
Status CheckTensorGroups(const std::string& who,
                         const WeightPlacementPartSpec& s,
                         const TensorGroups& groups) {
  std::vector<internal::BoxRef> boxes;
  for (size_t t = 0; t < s.tensors.size(); ++t) {
    if (groups.start[t + 1] - groups.start[t] > 1) {
      RESHARD_RETURN_NOT_OK(CheckNoOverlap(who, s, groups, t, &boxes));
    }
  }
  for (size_t t = 0; t < s.tensors.size(); ++t) {
    if (groups.start[t + 1] == groups.start[t]) {
      return Status::InvalidArgument(
          who + "placement part contains an unreferenced tensor: " +
          s.tensors[t].tensor_id());
    }
  }
  return Status::OK();
}

}  // namespace

Result<WeightPlacementPart> WeightPlacementPart::Make(
    WeightPlacementPartSpec s) {
  return Make(std::move(s), {});
}

Result<WeightPlacementPart> WeightPlacementPart::Make(
    WeightPlacementPartSpec s, std::vector<uint32_t> tensor_of_hint) {
  if (s.participant_id.empty()) {
    return Status::InvalidArgument(
        "placement part participant_id must be a non-empty string");
  }
  const std::string who = "placement part " + s.participant_id + ": ";
  if (s.header.resource_id.empty() || s.header.revision.empty() ||
      s.header.placement_set_id.empty() || s.topology_id.empty()) {
    return Status::InvalidArgument(
        who +
        "resource_id, revision, placement_set_id and topology_id must be "
        "non-empty strings");
  }
  RESHARD_ASSIGN_OR_RETURN(const bool unique, SortTensorsAndFragments(who, &s));
  RESHARD_ASSIGN_OR_RETURN(
      std::vector<uint32_t> tensor_of,
      CheckFragments(who, s, unique, std::move(tensor_of_hint)));
  RESHARD_RETURN_NOT_OK(
      CheckTensorGroups(who, s, GroupFragments(s.tensors.size(), tensor_of)));
  return WeightPlacementPart(std::move(s), std::move(tensor_of));
}

}  // namespace reshard
