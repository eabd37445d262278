#include "gen/tensor_layout.h"

#include <algorithm>

namespace reshard::internal {

namespace {

// A padded TP split: every rank holds at least one row, the ranks all of
// them.
Status FitsChunks(int64_t tp, const TensorLayout& l) {
  const int64_t extent = l.shape[static_cast<size_t>(l.tp_dim)];
  if (l.tp_chunk * (tp - 1) >= extent || l.tp_chunk * tp < extent) {
    return Status::InvalidArgument(
        "TP " + std::to_string(tp) + " in chunks of " +
        std::to_string(l.tp_chunk) + " does not cover dimension " +
        std::to_string(l.tp_dim) + " (" + std::to_string(extent) + ") of " +
        l.tensor_id + " with at least one row on every rank");
  }
  return Status::OK();
}

// Every section of a sectioned split divides evenly over TP.
Status FitsSections(int64_t tp, const TensorLayout& l) {
  const int64_t extent = l.shape[static_cast<size_t>(l.tp_dim)];
  int64_t sum = 0;
  for (int64_t s : l.tp_sections) {
    if (s < 1 || s % tp != 0) {
      return Status::InvalidArgument(
          "TP " + std::to_string(tp) + " does not divide section " +
          std::to_string(s) + " of dimension " + std::to_string(l.tp_dim) +
          " of " + l.tensor_id);
    }
    sum += s;
  }
  if (sum != extent || l.tp_chunk > 0) {
    return Status::InvalidArgument(
        "the sections of dimension " + std::to_string(l.tp_dim) + " of " +
        l.tensor_id + " sum to " + std::to_string(sum) + ", not its extent " +
        std::to_string(extent));
  }
  return Status::OK();
}

// The box of `l` that participant rank `r` holds (of section
// `section` of a sectioned split).
PlacementFragmentSpec FragmentOf(const ParallelTopologySpec& topo,
                                 const TensorLayout& l, const ParallelRank& r,
                                 size_t section = 0) {
  PlacementFragmentSpec f;
  f.tensor_id = l.tensor_id;
  f.global_offset.assign(l.shape.size(), 0);
  f.local_shape = l.shape;
  if (l.ep_split) {
    f.local_shape[0] = l.shape[0] / topo.sizes.ep;
    f.global_offset[0] = r.ep * f.local_shape[0];
  }
  if (l.tp_dim >= 0) {
    const auto dim = static_cast<size_t>(l.tp_dim);
    if (!l.tp_sections.empty()) {
      int64_t begin = 0;
      for (size_t i = 0; i < section; ++i) begin += l.tp_sections[i];
      const int64_t chunk = l.tp_sections[section] / topo.sizes.tp;
      f.global_offset[dim] = begin + r.tp * chunk;
      f.local_shape[dim] = chunk;
    } else {
      const int64_t chunk =
          l.tp_chunk > 0 ? l.tp_chunk : l.shape[dim] / topo.sizes.tp;
      f.global_offset[dim] = r.tp * chunk;
      f.local_shape[dim] = std::min(chunk, l.shape[dim] - r.tp * chunk);
    }
  }
  uint64_t n = static_cast<uint64_t>(l.itemsize);
  for (int64_t e : f.local_shape) n *= static_cast<uint64_t>(e);
  f.nbytes = n;
  f.rank = r;
  f.aliases = l.aliases;
  return f;
}

}  // namespace

Status AppendTensorLayout(const ParallelTopologySpec& topo,
                          const TensorLayout& l,
                          std::vector<TensorDescriptorSpec>* tensors,
                          std::vector<PlacementFragmentSpec>* fragments) {
  auto divides = [&](const char* axis, int64_t size, int64_t dim) -> Status {
    if (dim < 0 || dim >= static_cast<int64_t>(l.shape.size())) {
      return Status::InvalidArgument(std::string(axis) + " split dimension " +
                                     std::to_string(dim) +
                                     " is out of range for " + l.tensor_id);
    }
    if (l.shape[dim] % size != 0) {
      return Status::InvalidArgument(
          std::string(axis) + " " + std::to_string(size) +
          " does not divide dimension " + std::to_string(dim) + " (" +
          std::to_string(l.shape[dim]) + ") of " + l.tensor_id);
    }
    return Status::OK();
  };
  TensorDescriptorSpec t;
  t.tensor_id = l.tensor_id;
  t.global_shape = l.shape;
  t.dtype = l.dtype;
  t.itemsize = l.itemsize;
  t.layout_fingerprint = l.layout_fingerprint.empty() ? l.dtype + ":row-major"
                                                      : l.layout_fingerprint;
  t.layer_id = l.layer_id;
  t.expert_id = l.expert_id;
  if (topo.sizes.dp > 1)
    t.parallel_axes.push_back(ReplicatedAxis(AxisKind::kDp));
  if (topo.sizes.pp > 1) {
    t.parallel_axes.push_back(l.pp_owner >= 0 ? OwnershipAxis(AxisKind::kPp)
                                              : ReplicatedAxis(AxisKind::kPp));
  }
  if (l.ep_split) {
    RESHARD_RETURN_NOT_OK(divides("EP", topo.sizes.ep, 0));
    t.parallel_axes.push_back(*SplitAxis(AxisKind::kEp, 0));
    t.shard_dims.push_back(0);
  } else if (l.ep_owner >= 0) {
    t.parallel_axes.push_back(OwnershipAxis(AxisKind::kEp));
  } else if (topo.sizes.ep > 1) {
    t.parallel_axes.push_back(ReplicatedAxis(AxisKind::kEp));
  }
  if (l.tp_dim >= 0) {
    if (!l.tp_sections.empty()) {
      RESHARD_RETURN_NOT_OK(FitsSections(topo.sizes.tp, l));
    } else if (l.tp_chunk > 0) {
      RESHARD_RETURN_NOT_OK(FitsChunks(topo.sizes.tp, l));
    } else {
      RESHARD_RETURN_NOT_OK(divides("TP", topo.sizes.tp, l.tp_dim));
    }
    auto axis = SplitAxis(AxisKind::kTp, l.tp_dim);
    if (!axis.ok()) return axis.status();
    t.parallel_axes.push_back(*axis);
    // EP and TP never share dimension 0 (the descriptor rejects it).
    t.shard_dims.push_back(l.tp_dim);
    std::sort(t.shard_dims.begin(), t.shard_dims.end());
  } else if (topo.sizes.tp > 1) {
    t.parallel_axes.push_back(ReplicatedAxis(AxisKind::kTp));
  }
  for (const auto& p : topo.participants) {
    const ParallelRank& r = p.rank;
    if (l.pp_owner >= 0 && r.pp != l.pp_owner) continue;
    if (l.ep_owner >= 0 && r.ep != l.ep_owner) continue;
    const size_t sections =
        l.tp_dim >= 0 ? std::max<size_t>(1, l.tp_sections.size()) : 1;
    for (size_t i = 0; i < sections; ++i) {
      fragments->push_back(FragmentOf(topo, l, r, i));
    }
  }
  tensors->push_back(std::move(t));
  return Status::OK();
}

Result<WeightPlacementManifest> ManifestFromSpecs(
    PlacementHeader header, const ParallelTopologySpec& topology,
    std::vector<TensorDescriptorSpec> tensors,
    std::vector<PlacementFragmentSpec> fragments) {
  RESHARD_ASSIGN_OR_RETURN(auto topo, ParallelTopology::Make(topology));
  std::vector<TensorDescriptor> descriptors;
  descriptors.reserve(tensors.size());
  for (auto& t : tensors) {
    RESHARD_ASSIGN_OR_RETURN(auto d, TensorDescriptor::Make(std::move(t)));
    descriptors.push_back(std::move(d));
  }
  std::vector<PlacementFragment> made;
  made.reserve(fragments.size());
  for (auto& f : fragments) {
    RESHARD_ASSIGN_OR_RETURN(auto pf, PlacementFragment::Make(std::move(f)));
    made.push_back(std::move(pf));
  }
  return WeightPlacementManifest::FromFragments(
      std::move(header), std::move(topo), std::move(descriptors),
      std::move(made));
}

std::string GridPlacementSetId(const std::string& name,
                               const ParallelSizes& sizes) {
  return name + "-tp" + std::to_string(sizes.tp) + "-pp" +
         std::to_string(sizes.pp) + "-ep" + std::to_string(sizes.ep) + "-dp" +
         std::to_string(sizes.dp);
}

}  // namespace reshard::internal
