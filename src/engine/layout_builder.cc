#include "engine/layout_builder.h"

#include <algorithm>

#include "util/dims_text.h"

namespace reshard::internal {

std::vector<GridRank> GridRanks(const ParallelSizes& n,
                                int64_t (*ep_of)(const ParallelSizes&,
                                                 int64_t d, int64_t t)) {
  std::vector<GridRank> out;
  for (int64_t d = 0; d < n.dp; ++d) {
    for (int64_t p = 0; p < n.pp; ++p) {
      for (int64_t t = 0; t < n.tp; ++t) {
        const int64_t e = ep_of(n, d, t);
        out.push_back({d, p, e, t,
                       "p-d" + std::to_string(d) + "-p" + std::to_string(p) +
                           "-e" + std::to_string(e) + "-t" +
                           std::to_string(t)});
      }
    }
  }
  return out;
}

Result<CanonTensors> CanonTensors::Make(HfConfig* config,
                                        const HfCheckpoint* checkpoint,
                                        const EngineLayoutOptions& options) {
  RESHARD_ASSIGN_OR_RETURN(auto model, HfModelTensors(*config));
  RESHARD_ASSIGN_OR_RETURN(auto laid,
                           HfLayoutTensors(*config, model, checkpoint));
  RESHARD_RETURN_NOT_OK(ApplyLayoutForm(options.quantize, options.block,
                                        options.dtype, model, config, &laid));
  CanonTensors c;
  for (HfLaidTensor& l : laid) c.by_name_.emplace(l.t.name, std::move(l.t));
  return c;
}

const HfTensor* CanonTensors::Find(const std::string& name) const {
  auto it = by_name_.find(name);
  return it == by_name_.end() ? nullptr : &it->second;
}

Result<const HfTensor*> CanonTensors::Get(const std::string& name) const {
  const HfTensor* t = Find(name);
  if (t == nullptr) {
    return Status::NotFound("the model has no tensor " + name);
  }
  return t;
}

const HfTensor* CanonTensors::ScaleOf(const std::string& weight) const {
  constexpr std::string_view kWeight = "weight";
  if (!weight.ends_with(kWeight)) return nullptr;
  return Find(weight.substr(0, weight.size() - kWeight.size()) +
              "weight_scale_inv");
}

void CanonTensors::SetFloat32(
    const std::function<bool(std::string_view name)>& keep) {
  for (auto& [name, t] : by_name_) {
    if (!keep(name)) continue;
    t.dtype = "float32";
    t.itemsize = 4;
  }
}

EngineBuilder::EngineBuilder(std::string engine, std::string spec,
                             const ParallelSizes& sizes,
                             const std::vector<GridRank>& ranks)
    : engine_(std::move(engine)),
      spec_(std::move(spec)),
      sizes_(sizes),
      ranks_(ranks) {
  for (const GridRank& r : ranks_) parts_.push_back({r.id, {}});
}

void EngineBuilder::Begin(size_t r, std::string name, Dims shape) {
  parts_[r].parameters.push_back(
      {std::move(name), std::move(shape), "", 0, {}});
  current_ = &parts_[r].parameters.back();
  current_->pieces.reserve(4);
  at_ = 0;
  row_bytes_ = 0;
  // Pieces reference the rank through the parameter's participant.
  current_rank_ = r;
}

Status EngineBuilder::Declare(const HfTensor& tensor, const TensorAxes& axes) {
  auto it = tensors_.find(tensor.name);
  if (it != tensors_.end()) {
    if (!(it->second.second == axes)) {
      return Status::Internal("engine preset " + engine_ + " lays " +
                              tensor.name + " out in two ways");
    }
    return Status::OK();
  }
  TensorDescriptorSpec t;
  t.tensor_id = tensor.name;
  t.global_shape = tensor.shape;
  t.dtype = tensor.dtype;
  t.itemsize = tensor.itemsize;
  t.layout_fingerprint = tensor.dtype + ":row-major";
  t.layer_id = tensor.layer;
  t.expert_id = tensor.expert;
  if (axes.tp_over_dp) {
    if (axes.tp_dim < 0 || sizes_.dp < 2) {
      return Status::Internal("engine preset " + engine_ + " splits " +
                              tensor.name +
                              " over DP without a TP dimension "
                              "or DP above 1");
    }
    RESHARD_ASSIGN_OR_RETURN(
        auto axis,
        SpanningSplitAxis(AxisKind::kTp, axes.tp_dim, AxisKind::kDp));
    t.parallel_axes.push_back(axis);
    t.shard_dims.push_back(axes.tp_dim);
  } else if (sizes_.dp > 1) {
    t.parallel_axes.push_back(ReplicatedAxis(AxisKind::kDp));
  }
  if (sizes_.pp > 1) {
    t.parallel_axes.push_back(axes.pp_owned ? OwnershipAxis(AxisKind::kPp)
                                            : ReplicatedAxis(AxisKind::kPp));
  }
  if (sizes_.ep > 1 && axes.ep == TensorAxes::Ep::kOwned) {
    t.parallel_axes.push_back(OwnershipAxis(AxisKind::kEp));
  }
  if (sizes_.ep > 1 && axes.ep == TensorAxes::Ep::kSplit) {
    RESHARD_ASSIGN_OR_RETURN(auto axis, SplitAxis(AxisKind::kEp, 0));
    t.parallel_axes.push_back(axis);
    t.shard_dims.push_back(0);  // before any TP dimension: sorted
  }
  if (sizes_.tp > 1 && !axes.tp_over_dp) {
    if (axes.tp_dim >= 0) {
      auto axis =
          axes.tp_shards > 0
              ? GroupedSplitAxis(AxisKind::kTp, axes.tp_dim, axes.tp_shards)
          : axes.tp_ranks > 0 && axes.tp_ranks < sizes_.tp
              ? PartialSplitAxis(AxisKind::kTp, axes.tp_dim, axes.tp_ranks)
              : SplitAxis(AxisKind::kTp, axes.tp_dim);
      if (!axis.ok()) return axis.status().WithContext(tensor.name);
      t.parallel_axes.push_back(*axis);
      t.shard_dims.push_back(axes.tp_dim);
    } else if (!(sizes_.ep > 1 && axes.ep == TensorAxes::Ep::kSplit)) {
      t.parallel_axes.push_back(ReplicatedAxis(AxisKind::kTp));
    }
  }
  tensors_.emplace(tensor.name, std::make_pair(std::move(t), axes));
  return Status::OK();
}

Status EngineBuilder::Piece(const HfTensor& tensor, const TensorAxes& axes,
                            Dims offset, Dims shape) {
  RESHARD_RETURN_NOT_OK(Declare(tensor, axes));
  if (current_->pieces.empty()) {
    current_->dtype = tensor.dtype;
    current_->itemsize = tensor.itemsize;
    row_bytes_ = static_cast<uint64_t>(tensor.itemsize);
    for (size_t i = 1; i < current_->shape.size(); ++i) {
      row_bytes_ *= static_cast<uint64_t>(current_->shape[i]);
    }
  } else if (current_->dtype != tensor.dtype) {
    return Status::InvalidArgument("parameter " + current_->name + " fuses " +
                                   tensor.name + " (" + tensor.dtype +
                                   ") with " + current_->dtype +
                                   " tensors; its pieces must share one dtype");
  }
  const GridRank& r = ranks_[current_rank_];
  PlacementFragmentSpec f;
  f.tensor_id = tensor.name;
  f.global_offset = std::move(offset);
  f.local_shape = std::move(shape);
  uint64_t n = static_cast<uint64_t>(tensor.itemsize);
  for (int64_t e : f.local_shape) n *= static_cast<uint64_t>(e);
  f.nbytes = n;
  f.rank = ParallelRank{r.d, r.t, r.p, r.e};
  RESHARD_ASSIGN_OR_RETURN(auto fragment, PlacementFragment::Make(f));
  current_->pieces.push_back({at_, n, fragment.placement_fragment_id()});
  at_ += n;
  fragments_.push_back(std::move(fragment));
  return Status::OK();
}

Status EngineBuilder::Whole(const HfTensor& tensor, const TensorAxes& axes) {
  return Piece(tensor, axes, Dims(tensor.shape.size(), 0), tensor.shape);
}

void EngineBuilder::PadRows(int64_t rows) {
  if (rows <= 0) return;
  const uint64_t n = static_cast<uint64_t>(rows) * row_bytes_;
  current_->pieces.push_back({at_, n, ""});
  at_ += n;
}

Status EngineBuilder::End() {
  if (current_->pieces.empty() || at_ != current_->nbytes()) {
    return Status::Internal(
        "engine preset " + engine_ + ": parameter " + current_->name + " " +
        DimsText(current_->shape) + " is filled with " + std::to_string(at_) +
        " bytes, not " + std::to_string(current_->nbytes()));
  }
  current_ = nullptr;
  return Status::OK();
}

Status EngineBuilder::Empty(size_t r, std::string name, Dims shape,
                            const HfTensor& like) {
  Begin(r, std::move(name), std::move(shape));
  current_->dtype = like.dtype;
  current_->itemsize = like.itemsize;
  if (current_->nbytes() != 0) {
    return Status::Internal("engine preset " + engine_ + ": parameter " +
                            current_->name + " " + DimsText(current_->shape) +
                            " is not zero-size");
  }
  current_ = nullptr;
  return Status::OK();
}

Status EngineBuilder::Padding(size_t r, std::string name, Dims shape,
                              const HfTensor& like) {
  Begin(r, std::move(name), std::move(shape));
  current_->dtype = like.dtype;
  current_->itemsize = like.itemsize;
  const uint64_t n = current_->nbytes();
  if (n == 0) {
    return Status::Internal("engine preset " + engine_ + ": parameter " +
                            current_->name + " " + DimsText(current_->shape) +
                            " is zero-size, not padding");
  }
  current_->pieces.push_back({0, n, ""});
  current_ = nullptr;
  return Status::OK();
}

Status EngineBuilder::Fill(size_t r, std::string name, Dims shape,
                           const std::string& dtype, std::string fill) {
  const SafetensorsDtype* dt = FindSafetensorsDtypeByPlacement(dtype);
  if (dt == nullptr || fill.size() != static_cast<size_t>(dt->itemsize)) {
    return Status::Internal("engine preset " + engine_ + ": parameter " + name +
                            " is filled with " + std::to_string(fill.size()) +
                            " bytes, not one " + dtype + " element");
  }
  Begin(r, std::move(name), std::move(shape));
  current_->dtype = dtype;
  current_->itemsize = dt->itemsize;
  if (const uint64_t n = current_->nbytes(); n != 0) {
    current_->pieces.push_back({0, n, "", std::move(fill)});
  }
  current_ = nullptr;
  return Status::OK();
}

Result<EngineLayout> EngineBuilder::Build(const HfConfig& c,
                                          const EngineLayoutOptions& o) {
  ParallelTopologySpec topo;
  topo.sizes = sizes_;
  for (const GridRank& r : ranks_) {
    topo.participants.push_back({r.id, ParallelRank{r.d, r.t, r.p, r.e}});
  }
  RESHARD_ASSIGN_OR_RETURN(auto topology, ParallelTopology::Make(topo));
  std::vector<TensorDescriptor> tensors;
  for (auto& [name, spec] : tensors_) {
    RESHARD_ASSIGN_OR_RETURN(auto d, TensorDescriptor::Make(spec.first));
    tensors.push_back(std::move(d));
  }
  const std::string model =
      c.model_type.empty() ? c.architecture : c.model_type;
  PlacementHeader header{
      o.resource_id.empty() ? model : o.resource_id, o.revision,
      o.weight_generation,
      model + "-" + engine_ + "-tp" + std::to_string(sizes_.tp) + "-pp" +
          std::to_string(sizes_.pp) + "-ep" + std::to_string(sizes_.ep) +
          "-dp" + std::to_string(sizes_.dp)};
  auto placement = WeightPlacementManifest::FromFragments(
      std::move(header), std::move(topology), std::move(tensors),
      std::move(fragments_));
  if (!placement.ok()) {
    return placement.status().WithContext("engine preset " + engine_);
  }
  return EngineLayout::Make(spec_, std::move(*placement), std::move(parts_));
}

}  // namespace reshard::internal
