#include "bind/binding_copy.h"

#include <string>

namespace reshard::internal {

RuntimeBindingFragmentSpec SpecOf(const RuntimeBindingFragment& f) {
  return {f.placement_fragment_id(),
          f.runtime_fragment_id(),
          f.address(),
          f.nbytes(),
          f.worker_id(),
          f.endpoint(),
          f.device(),
          f.itemsize(),
          f.local_shape(),
          f.strides_bytes(),
          f.storage_address(),
          f.storage_nbytes(),
          f.storage_offset_bytes(),
          f.owner()};
}

Status RequireContiguousHost(const RuntimeBindingFragment& f,
                             std::string_view what, std::string_view side,
                             std::string_view participant) {
  const auto canonical = CanonicalStrides(f.local_shape(), f.itemsize());
  const auto kind = MemoryKindOfDevice(f.device());
  if (canonical.has_value() && *canonical == f.strides_bytes() && kind.ok() &&
      *kind == MemoryKind::kHost) {
    return Status::OK();
  }
  return Status::InvalidArgument(
      std::string(what) +
      " needs contiguous host memory: " + std::string(side) + " fragment " +
      f.placement_fragment_id() + " of " + std::string(participant));
}

Result<RuntimeBindingFragment> OwnedBindingFragment(
    const PlacementFragment& f, int64_t itemsize, void* address,
    const RuntimeBindingFragment& like) {
  const auto strides = CanonicalStrides(f.local_shape(), itemsize);
  const uint64_t at = reinterpret_cast<uint64_t>(address);
  return RuntimeBindingFragment::Make(
      {f.placement_fragment_id(), f.placement_fragment_id() + ":convert", at,
       f.nbytes(), like.worker_id(), like.endpoint(), like.device(), itemsize,
       f.local_shape(), strides.value_or(Dims{}), at, f.nbytes(), 0, nullptr});
}

Result<WeightRuntimeBindingManifest> RebuiltBinding(
    const WeightRuntimeBindingManifest& like,
    const WeightPlacementManifest& placement,
    std::vector<RuntimeBindingFragment> fragments) {
  return WeightRuntimeBindingManifest::Make(
      {like.resource_id(), placement.placement_id(), placement.digest(),
       like.instance_id(), like.generation(), like.lease_id(), like.revision(),
       like.participant_id(), std::move(fragments)});
}

}  // namespace reshard::internal
