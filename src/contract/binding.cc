// Runtime binding factories and validation (rules 29-38).

#include "reshard/binding.h"

#include <algorithm>
#include <map>
#include <optional>
#include <tuple>
#include <unordered_map>
#include <unordered_set>

#include "contract/binding_checks.h"
#include "util/sha256.h"
#include "util/sorted_find.h"

namespace reshard {
namespace {

// a + b without wrapping, as u64.
bool AddFits(uint64_t a, uint64_t b) { return a <= UINT64_MAX - b; }

}  // namespace

std::string_view MemoryKindName(MemoryKind kind) {
  switch (kind) {
    case MemoryKind::kHost:
      return "host";
    case MemoryKind::kCuda:
      return "cuda";
  }
  return "unknown";
}

Result<MemoryKind> MemoryKindOfDevice(std::string_view device) {
  if (device == "cpu") return MemoryKind::kHost;
  if (device == "cuda") return MemoryKind::kCuda;
  if (device.starts_with("cuda:")) {
    const std::string_view ordinal = device.substr(5);
    const bool digits = !ordinal.empty() && ordinal.size() <= 9 &&
                        (ordinal == "0" || ordinal.front() != '0') &&
                        std::all_of(ordinal.begin(), ordinal.end(), [](char c) {
                          return c >= '0' && c <= '9';
                        });
    if (digits) return MemoryKind::kCuda;
  }
  return Status::InvalidArgument("unsupported runtime fragment device \"" +
                                 std::string(device) +
                                 "\" (known: cpu, cuda, cuda:<ordinal>)");
}

Status RequireMemoryKind(const RuntimeBindingFragment& fragment,
                         const std::vector<MemoryKind>& supported,
                         std::string_view executor, std::string_view side,
                         std::string_view participant_id) {
  auto kind = MemoryKindOfDevice(fragment.device());
  if (kind.ok() &&
      std::find(supported.begin(), supported.end(), *kind) != supported.end()) {
    return Status::OK();
  }
  const std::string what = kind.ok()
                               ? std::string(MemoryKindName(*kind)) + " memory"
                               : std::string("unknown memory kind");
  return Status::FailedPrecondition(
      std::string(executor) + " executor cannot move " + what + ": " +
      std::string(side) + " fragment " + fragment.placement_fragment_id() +
      " of participant " + std::string(participant_id) + " (device \"" +
      fragment.device() + "\")");
}

std::optional<Dims> CanonicalStrides(const Dims& shape, int64_t itemsize) {
  // Checked arithmetic: shapes come from input.
  Dims s(shape.size());
  int64_t stride = itemsize;
  for (size_t d = shape.size(); d-- > 0;) {
    s[d] = stride;
    if (d > 0 && __builtin_mul_overflow(stride, shape[d], &stride)) {
      return std::nullopt;
    }
  }
  return s;
}

Result<RuntimeBindingFragment> RuntimeBindingFragment::Make(
    RuntimeBindingFragmentSpec s) {
  if (s.placement_fragment_id.empty()) {
    return Status::InvalidArgument(
        "runtime fragment placement_fragment_id must be a non-empty string");
  }
  auto fail = [&](const std::string& what) {
    return Status::InvalidArgument("runtime fragment for placement fragment " +
                                   s.placement_fragment_id + ": " + what);
  };
  const std::pair<const char*, const std::string*> ids[] = {
      {"fragment_id", &s.runtime_fragment_id},
      {"worker_id", &s.worker_id},
      {"endpoint", &s.endpoint},
      {"device", &s.device}};
  for (const auto& [name, v] : ids) {
    if (v->empty())
      return fail(std::string(name) + " must be a non-empty string");
  }
  if (s.address == 0) return fail("address must be >= 1 (zero is reserved)");
  if (s.nbytes == 0) return fail("nbytes must be >= 1");
  if (!AddFits(s.address, s.nbytes)) {
    return fail("address + nbytes must fit in an unsigned 64-bit integer");
  }
  if (s.itemsize < 1) return fail("itemsize must be >= 1");
  if (s.local_shape.empty()) return fail("local_shape must not be empty");
  for (int64_t e : s.local_shape) {
    if (e < 1) return fail("local_shape extents must be >= 1");
  }
  if (s.strides_bytes.size() != s.local_shape.size()) {
    return fail("strides_bytes must have the same rank as local_shape");
  }
  const std::optional<Dims> canonical =
      CanonicalStrides(s.local_shape, s.itemsize);
  if (!canonical.has_value()) {
    return fail(
        "local_shape byte strides must fit in a signed 64-bit "
        "integer");
  }
  for (size_t d = 0; d < s.strides_bytes.size(); ++d) {
    if (s.strides_bytes[d] < 0) return fail("strides_bytes must be >= 0");
    if (s.local_shape[d] == 1) {
      s.strides_bytes[d] = (*canonical)[d];  // singleton dims do not constrain
    } else if (s.strides_bytes[d] == 0) {
      return fail("stride 0 is only allowed on extent-1 dimensions");
    }
  }
  if (s.storage_address == 0) {
    return fail("storage_address must be >= 1 (zero is reserved)");
  }
  if (s.storage_nbytes == 0) return fail("storage_nbytes must be >= 1");
  if (!AddFits(s.storage_address, s.storage_nbytes)) {
    return fail(
        "storage_address + storage_nbytes must fit in an unsigned 64-bit "
        "integer");
  }
  if (!AddFits(s.storage_address, s.storage_offset_bytes)) {
    return fail(
        "storage_address + storage_offset_bytes must fit in an unsigned "
        "64-bit integer");
  }
  if (s.address != s.storage_address + s.storage_offset_bytes) {
    return fail("address must equal storage_address + storage_offset_bytes");
  }
  if (!AddFits(s.storage_offset_bytes, s.nbytes) ||
      s.storage_offset_bytes + s.nbytes > s.storage_nbytes) {
    return fail(
        "view exceeds its storage allocation: storage_offset_bytes + nbytes "
        "> storage_nbytes");
  }
  return RuntimeBindingFragment(std::move(s));
}

bool operator==(const RuntimeBindingFragment& a,
                const RuntimeBindingFragment& b) {
  const auto& x = a.s_;
  const auto& y = b.s_;
  return x.placement_fragment_id == y.placement_fragment_id &&
         x.runtime_fragment_id == y.runtime_fragment_id &&
         x.address == y.address && x.nbytes == y.nbytes &&
         x.worker_id == y.worker_id && x.endpoint == y.endpoint &&
         x.device == y.device && x.itemsize == y.itemsize &&
         x.local_shape == y.local_shape && x.strides_bytes == y.strides_bytes &&
         x.storage_address == y.storage_address &&
         x.storage_nbytes == y.storage_nbytes &&
         x.storage_offset_bytes == y.storage_offset_bytes;
}

Result<WeightRuntimeBindingManifest> WeightRuntimeBindingManifest::Make(
    WeightRuntimeBindingManifestSpec s) {
  const std::pair<const char*, const std::string*> ids[] = {
      {"resource_id", &s.resource_id}, {"placement_id", &s.placement_id},
      {"instance_id", &s.instance_id}, {"lease_id", &s.lease_id},
      {"revision", &s.revision},       {"participant_id", &s.participant_id}};
  for (const auto& [name, v] : ids) {
    if (v->empty()) {
      return Status::InvalidArgument(std::string("runtime binding ") + name +
                                     " must be a non-empty string");
    }
  }
  if (!internal::IsLowercaseSha256Hex(s.placement_digest)) {
    return Status::InvalidArgument(
        "runtime binding placement_digest must be a lowercase SHA-256 digest "
        "(64 hex characters)");
  }
  std::sort(s.fragments.begin(), s.fragments.end(),
            [](const auto& a, const auto& b) {
              return a.placement_fragment_id() < b.placement_fragment_id();
            });
  std::vector<std::string_view> runtime_ids;
  runtime_ids.reserve(s.fragments.size());
  for (size_t i = 0; i < s.fragments.size(); ++i) {
    if (i > 0 && s.fragments[i].placement_fragment_id() ==
                     s.fragments[i - 1].placement_fragment_id()) {
      return Status::InvalidArgument("runtime binding of participant " +
                                     s.participant_id +
                                     " has a duplicate placement fragment: " +
                                     s.fragments[i].placement_fragment_id());
    }
    runtime_ids.push_back(s.fragments[i].runtime_fragment_id());
  }
  std::sort(runtime_ids.begin(), runtime_ids.end());
  for (size_t i = 1; i < runtime_ids.size(); ++i) {
    if (runtime_ids[i] == runtime_ids[i - 1]) {
      return Status::InvalidArgument("runtime binding of participant " +
                                     s.participant_id +
                                     " has a duplicate runtime fragment_id: " +
                                     std::string(runtime_ids[i]));
    }
  }
  return WeightRuntimeBindingManifest(std::move(s));
}

const RuntimeBindingFragment* WeightRuntimeBindingManifest::FindFragment(
    std::string_view id) const {
  return internal::FindSorted(s_.fragments, id,
                              [](const auto& f) -> decltype(auto) {
                                return f.placement_fragment_id();
                              });
}

namespace {

using View = internal::BindingView;

// The test observer of binding checks (binding_checks.h).
internal::BindingCheckObserver& CheckObserver() {
  static internal::BindingCheckObserver observer;
  return observer;
}

// Exact declared alias (rule 35): same range, same alias group containing
// both tensors, same box, descriptors identical except tensor_id.
bool ExactDeclaredAlias(const WeightPlacementManifest& placement, const View& a,
                        const View& b) {
  const auto& ra = *a.runtime;
  const auto& rb = *b.runtime;
  const auto& la = *a.logical;
  const auto& lb = *b.logical;
  if (ra.address() != rb.address() || ra.nbytes() != rb.nbytes()) return false;
  if (la.tensor_id() == lb.tensor_id()) return false;
  if (la.aliases().size() < 2 || la.aliases() != lb.aliases()) return false;
  if (la.global_offset() != lb.global_offset() ||
      la.local_shape() != lb.local_shape()) {
    return false;
  }
  const TensorDescriptor* ta = placement.FindTensor(la.tensor_id());
  const TensorDescriptor* tb = placement.FindTensor(lb.tensor_id());
  if (ta == nullptr || tb == nullptr) return false;
  return ta->global_shape() == tb->global_shape() &&
         ta->dtype() == tb->dtype() && ta->itemsize() == tb->itemsize() &&
         ta->shard_dims() == tb->shard_dims() &&
         ta->parallel_axes() == tb->parallel_axes() &&
         ta->layer_id() == tb->layer_id() &&
         ta->expert_id() == tb->expert_id() &&
         ta->layout_fingerprint() == tb->layout_fingerprint();
}

// Rule 30: the binding attests this placement (resource, placement id and
// digest, revision).
Status CheckAttestation(const WeightPlacementManifest& placement,
                        const WeightRuntimeBindingManifest& b) {
  if (b.resource_id() != placement.resource_id()) {
    return Status::InvalidArgument(
        "placement and runtime binding resource_id differ: " +
        placement.resource_id() + " vs " + b.resource_id());
  }
  if (b.placement_id() != placement.placement_id()) {
    return Status::InvalidArgument(
        "placement_id and runtime binding placement_id differ (participant " +
        b.participant_id() + ")");
  }
  if (b.placement_digest() != placement.digest()) {
    return Status::InvalidArgument(
        "placement digest and runtime binding placement digest differ "
        "(participant " +
        b.participant_id() + ")");
  }
  if (b.revision() != placement.revision()) {
    return Status::InvalidArgument(
        "placement and runtime binding revision differ: " +
        placement.revision() + " vs " + b.revision());
  }
  return Status::OK();
}

// One view against its placement fragment: same size and shape, the
// tensor's itemsize, canonical contiguous strides.
Status CheckViewGeometry(const WeightPlacementManifest& placement,
                         const PlacementFragment& lf,
                         const RuntimeBindingFragment& rf) {
  const std::string& id = lf.placement_fragment_id();
  if (rf.nbytes() != lf.nbytes()) {
    return Status::InvalidArgument(
        "runtime binding byte size does not match placement: " + id +
        ": expected " + std::to_string(lf.nbytes()) + ", got " +
        std::to_string(rf.nbytes()));
  }
  if (rf.local_shape() != lf.local_shape()) {
    return Status::InvalidArgument(
        "runtime binding local_shape does not match placement: " + id);
  }
  const TensorDescriptor* t = placement.FindTensor(lf.tensor_id());
  if (rf.itemsize() != t->itemsize()) {
    return Status::InvalidArgument(
        "runtime binding itemsize does not match tensor descriptor: " + id +
        ": expected " + std::to_string(t->itemsize()) + ", got " +
        std::to_string(rf.itemsize()));
  }
  if (rf.strides_bytes() != CanonicalStrides(lf.local_shape(), t->itemsize())) {
    return Status::InvalidArgument(
        "runtime binding stride does not describe a canonical contiguous "
        "view: " +
        id);
  }
  return Status::OK();
}

}  // namespace

namespace internal {

void SetBindingCheckObserverForTesting(BindingCheckObserver observer) {
  CheckObserver() = std::move(observer);
}

// Rules 35-36 over views of one or more bindings. Address spaces are
// (instance_id, worker_id, device); the endpoint is routing only.
Status CheckAddressRanges(const WeightPlacementManifest& placement,
                          std::vector<BindingView>* views) {
  auto space_less = [](const View& a, const View& b) {
    return std::tie(*a.instance, a.runtime->worker_id(), a.runtime->device()) <
           std::tie(*b.instance, b.runtime->worker_id(), b.runtime->device());
  };
  auto same_space = [&](const View& a, const View& b) {
    return !space_less(a, b) && !space_less(b, a);
  };
  std::sort(views->begin(), views->end(), [&](const View& a, const View& b) {
    if (space_less(a, b)) return true;
    if (space_less(b, a)) return false;
    return std::make_pair(a.runtime->address(), a.runtime->nbytes()) <
           std::make_pair(b.runtime->address(), b.runtime->nbytes());
  });
  const View* widest = nullptr;  // the view with the largest end so far
  for (size_t i = 0; i < views->size(); ++i) {
    const View& v = (*views)[i];
    if (widest != nullptr && !same_space(*widest, v)) widest = nullptr;
    if (widest != nullptr &&
        v.runtime->address() <
            widest->runtime->address() + widest->runtime->nbytes() &&
        !ExactDeclaredAlias(placement, *widest, v)) {
      return Status::InvalidArgument(
          "runtime binding address ranges overlap: " +
          widest->logical->placement_fragment_id() + " and " +
          v.logical->placement_fragment_id() + " (worker " +
          v.runtime->worker_id() + ", device " + v.runtime->device() + ")");
    }
    if (widest == nullptr ||
        v.runtime->address() + v.runtime->nbytes() >
            widest->runtime->address() + widest->runtime->nbytes()) {
      widest = &v;
    }
  }
  // Allocations: identical or disjoint.
  std::sort(views->begin(), views->end(), [&](const View& a, const View& b) {
    if (space_less(a, b)) return true;
    if (space_less(b, a)) return false;
    return std::make_pair(a.runtime->storage_address(),
                          a.runtime->storage_nbytes()) <
           std::make_pair(b.runtime->storage_address(),
                          b.runtime->storage_nbytes());
  });
  for (size_t i = 1; i < views->size(); ++i) {
    const View& p = (*views)[i - 1];
    const View& v = (*views)[i];
    if (!same_space(p, v)) continue;
    if (p.runtime->storage_address() == v.runtime->storage_address() &&
        p.runtime->storage_nbytes() == v.runtime->storage_nbytes()) {
      continue;
    }
    if (v.runtime->storage_address() <
        p.runtime->storage_address() + p.runtime->storage_nbytes()) {
      return Status::InvalidArgument(
          "runtime binding storage allocation ranges overlap: " +
          p.logical->placement_fragment_id() + " and " +
          v.logical->placement_fragment_id() + " (worker " +
          v.runtime->worker_id() + ", device " + v.runtime->device() + ")");
    }
  }
  return Status::OK();
}

// Rules 30-34 for one binding; appends its views.
Status CheckBinding(const WeightPlacementManifest& placement,
                    const WeightRuntimeBindingManifest& b,
                    std::vector<BindingView>* views) {
  if (CheckObserver()) CheckObserver()(b);
  RESHARD_RETURN_NOT_OK(CheckAttestation(placement, b));
  const WeightPlacementPart* part = placement.FindPart(b.participant_id());
  if (part == nullptr) {
    return Status::InvalidArgument("unknown runtime binding participant: " +
                                   b.participant_id());
  }
  const auto& logical = part->fragments();
  const auto& runtime = b.fragments();
  // Both sorted by placement_fragment_id: merge.
  size_t i = 0;
  size_t j = 0;
  while (i < logical.size() || j < runtime.size()) {
    if (j == runtime.size() ||
        (i < logical.size() && logical[i].placement_fragment_id() <
                                   runtime[j].placement_fragment_id())) {
      return Status::InvalidArgument(
          "missing placement fragment in runtime binding: " +
          logical[i].placement_fragment_id() + " (participant " +
          b.participant_id() + ")");
    }
    if (i == logical.size() || runtime[j].placement_fragment_id() <
                                   logical[i].placement_fragment_id()) {
      return Status::InvalidArgument(
          "unknown placement fragment in runtime binding: " +
          runtime[j].placement_fragment_id() + " (participant " +
          b.participant_id() + ")");
    }
    const PlacementFragment& lf = logical[i];
    const RuntimeBindingFragment& rf = runtime[j];
    RESHARD_RETURN_NOT_OK(CheckViewGeometry(placement, lf, rf));
    views->push_back({&b.instance_id(), &rf, &lf});
    ++i;
    ++j;
  }
  return Status::OK();
}

}  // namespace internal

Status ValidateRuntimeBinding(const WeightPlacementManifest& placement,
                              const WeightRuntimeBindingManifest& binding) {
  std::vector<View> views;
  RESHARD_RETURN_NOT_OK(internal::CheckBinding(placement, binding, &views));
  return internal::CheckAddressRanges(placement, &views);
}

}  // namespace reshard
