// WeightPlacementPart: one participant's contribution (rules 7-14).

#include <algorithm>
#include <numeric>

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

// (tensor index, fragment index) pairs, sorted: the part's fragments grouped
// by tensor, for rules 11, 12 and 14.
using TensorFragmentIndex = std::vector<std::pair<size_t, size_t>>;

// Sorts tensors by id (unique) and fragments by placement_fragment_id.
Status SortTensorsAndFragments(const std::string& who,
                               WeightPlacementPartSpec* s) {
  std::sort(s->tensors.begin(), s->tensors.end(),
            [](const auto& a, const auto& b) {
              return a.tensor_id() < b.tensor_id();
            });
  for (size_t i = 1; i < s->tensors.size(); ++i) {
    if (s->tensors[i].tensor_id() == s->tensors[i - 1].tensor_id()) {
      return Status::InvalidArgument(
          who + "duplicate tensor_id: " + s->tensors[i].tensor_id());
    }
  }
  auto by_id = [](const auto& a, const auto& b) {
    return a.placement_fragment_id() < b.placement_fragment_id();
  };
  // Canonical input arrives sorted; checking is cheaper than sorting.
  if (!std::is_sorted(s->fragments.begin(), s->fragments.end(), by_id)) {
    std::sort(s->fragments.begin(), s->fragments.end(), by_id);
  }
  return Status::OK();
}

// Each fragment on its own: unique id, the part's rank, a known tensor and
// its geometry (rules 7-9). Returns the fragments grouped by tensor.
Result<TensorFragmentIndex> CheckFragments(const std::string& who,
                                           const WeightPlacementPartSpec& s) {
  TensorFragmentIndex by_tensor;
  by_tensor.reserve(s.fragments.size());
  for (size_t i = 0; i < s.fragments.size(); ++i) {
    const PlacementFragment& f = s.fragments[i];
    if (i > 0 && f.placement_fragment_id() ==
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
    const TensorDescriptor* it = internal::FindSorted(
        s.tensors, f.tensor_id(),
        [](const auto& t) -> decltype(auto) { return t.tensor_id(); });
    if (it == nullptr) {
      return Status::InvalidArgument(who + "unknown tensor_id " +
                                     f.tensor_id() + " in fragment " +
                                     f.placement_fragment_id());
    }
    RESHARD_RETURN_NOT_OK(internal::CheckFragmentGeometry(*it, f));
    by_tensor.emplace_back(it - s.tensors.data(), i);
  }
  std::sort(by_tensor.begin(), by_tensor.end());
  return by_tensor;
}

// Rules 11-12: the part's boxes of one tensor, entries [begin, end) of
// `by_tensor`, neither repeat nor overlap.
Status CheckNoOverlap(const std::string& who, const WeightPlacementPartSpec& s,
                      const TensorFragmentIndex& by_tensor, size_t begin,
                      size_t end, std::vector<internal::BoxRef>* boxes) {
  boxes->clear();
  for (size_t k = begin; k < end; ++k) {
    const auto& f = s.fragments[by_tensor[k].second];
    boxes->push_back({f.global_offset().data(), f.local_shape().data()});
  }
  const size_t ndim = s.tensors[by_tensor[begin].first].ndim();
  auto pair = internal::FindOverlap(ndim, *boxes);
  if (!pair) return Status::OK();
  const auto& a = s.fragments[by_tensor[begin + pair->first].second];
  const auto& b = s.fragments[by_tensor[begin + pair->second].second];
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
                         const TensorFragmentIndex& by_tensor) {
  std::vector<bool> referenced(s.tensors.size(), false);
  std::vector<internal::BoxRef> boxes;
  for (size_t i = 0; i < by_tensor.size();) {
    size_t j = i;
    while (j < by_tensor.size() && by_tensor[j].first == by_tensor[i].first) {
      ++j;
    }
    referenced[by_tensor[i].first] = true;
    if (j - i > 1) {
      RESHARD_RETURN_NOT_OK(CheckNoOverlap(who, s, by_tensor, i, j, &boxes));
    }
    i = j;
  }
  for (size_t t = 0; t < s.tensors.size(); ++t) {
    if (!referenced[t]) {
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
  RESHARD_RETURN_NOT_OK(SortTensorsAndFragments(who, &s));
  RESHARD_ASSIGN_OR_RETURN(TensorFragmentIndex by_tensor,
                           CheckFragments(who, s));
  RESHARD_RETURN_NOT_OK(CheckTensorGroups(who, s, by_tensor));
  return WeightPlacementPart(std::move(s));
}

}  // namespace reshard
