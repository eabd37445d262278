// ConversionPlan: the rules of docs/conversion.md applied to two sets of
// tensor descriptors, and the staging placement (the target's boxes in
// the source's dtypes) a converting plan fills.

#include "reshard/conversion.h"

#include <algorithm>
#include <map>
#include <set>

#include "util/dims_text.h"
#include "util/float_convert.h"
#include "util/int_math.h"

namespace reshard {
namespace {

using internal::CeilDiv;
using internal::DimsText;
using internal::FloatType;
using internal::FloatTypeOf;

constexpr std::string_view kWeight = "weight";
constexpr std::string_view kScaleSuffix = "weight_scale_inv";

std::string BlockText(const Fp8Block& b) {
  return std::to_string(b.rows) + "x" + std::to_string(b.cols);
}

// "<prefix>weight" -> "<prefix>weight_scale_inv"; empty when the id does
// not end in "weight".
std::string ScaleIdOf(std::string_view weight_id) {
  if (!weight_id.ends_with(kWeight)) return {};
  return std::string(weight_id.substr(0, weight_id.size() - kWeight.size())) +
         std::string(kScaleSuffix);
}

Status Refuse(std::string_view tensor, const std::string& why) {
  return Status::InvalidArgument("cannot convert tensor " +
                                 std::string(tensor) + ": " + why);
}

TensorDescriptorSpec SpecOf(const TensorDescriptor& t) {
  return {t.tensor_id(),     t.global_shape(), t.dtype(),
          t.itemsize(),      t.shard_dims(),   t.layout_fingerprint(),
          t.parallel_axes(), t.layer_id(),     t.expert_id()};
}

Dims BlockGrid(const Dims& shape, const Fp8Block& b) {
  return Dims{CeilDiv(shape[0], b.rows), CeilDiv(shape[1], b.cols)};
}

// The blocks [offset / block, ceil(end / block)) of a weight box whose
// blocks are whole, else InvalidArgument naming the first split block
// (and the participant holding the box).
Result<std::pair<Dims, Dims>> BlockBox(std::string_view tensor,
                                       const Dims& global, const Dims& offset,
                                       const Dims& shape, const Fp8Block& b,
                                       std::string_view participant) {
  const int64_t block[2] = {b.rows, b.cols};
  Dims first(2), count(2);
  for (size_t d = 0; d < 2; ++d) {
    const int64_t end = offset[d] + shape[d];
    int64_t split = -1;
    if (offset[d] % block[d] != 0) split = offset[d] / block[d];
    if (split < 0 && end % block[d] != 0 && end != global[d]) {
      split = end / block[d];
    }
    if (split >= 0) {
      Dims where = {0, 0};
      where[d] = split;
      where[1 - d] = offset[1 - d] / block[1 - d];
      return Refuse(tensor, "block " + DimsText(where) + " of " + BlockText(b) +
                                " is split between fragments (participant " +
                                std::string(participant) + " holds offset " +
                                DimsText(offset) + " shape " + DimsText(shape) +
                                ")");
    }
    first[d] = offset[d] / block[d];
    count[d] = CeilDiv(end, block[d]) - first[d];
  }
  return std::make_pair(first, count);
}

}  // namespace

// Builds a ConversionPlan: classification, then the staging placement.
class ConversionPlanBuilder {
 public:
  ConversionPlanBuilder(const SourceTensorLookup& source,
                        const WeightPlacementManifest& target,
                        const ConversionOptions& options)
      : source_(source), target_(target), options_(options) {}

  Result<ConversionPlan> Build() {
    for (const TensorDescriptor& t : target_.tensors()) {
      RESHARD_RETURN_NOT_OK(Classify(t));
    }
    plan_.target_ = target_;
    if (plan_.conversions_.empty()) {
      plan_.staging_ = target_;
      return std::move(plan_);
    }
    FindSplitDequantizedBlocks();
    RESHARD_RETURN_NOT_OK(StageTensors());
    for (const WeightPlacementPart& part : target_.parts()) {
      for (const PlacementFragment& f : part.fragments()) {
        RESHARD_RETURN_NOT_OK(StageFragment(part, f));
      }
    }
    RESHARD_RETURN_NOT_OK(CheckProducedScales());
    auto staging = WeightPlacementManifest::FromFragments(
        target_.header(), target_.topology(), std::move(tensors_),
        std::move(fragments_));
    if (!staging.ok()) {
      return staging.status().WithContext("conversion staging placement");
    }
    plan_.staging_ = std::move(staging).ValueOrDie();
    return std::move(plan_);
  }

 private:
  Status Classify(const TensorDescriptor& t);
  void FindSplitDequantizedBlocks();
  Status AddBlockConversion(const TensorDescriptor& t, TensorConversion c,
                            bool quantize);
  Status StageTensors();
  Status StageFragment(const WeightPlacementPart& part,
                       const PlacementFragment& f);
  Status AddStaged(PlacementFragmentSpec spec, const std::string& target_id);
  Status StageWholeScale(const WeightPlacementPart& part,
                         const PlacementFragment& f, const TensorConversion& c,
                         const Dims& weight_shape);
  Status CheckProducedScales() const;

  const SourceTensorLookup& source_;
  const WeightPlacementManifest& target_;
  const ConversionOptions& options_;
  ConversionPlan plan_;
  std::map<std::string, std::string, std::less<>> produced_;  // scale->weight
  std::vector<TensorDescriptor> tensors_;
  std::vector<PlacementFragment> fragments_;
  // Per participant and quantized weight: the block boxes it computes.
  std::multimap<std::pair<std::string, std::string>, std::pair<Dims, Dims>>
      quantized_blocks_;
  // Dequantized weights some target fragment of which splits a block: their
  // scales are staged whole on every participant holding the weight.
  std::set<std::string, std::less<>> whole_scales_;
  // Per participant and such weight: its staging scale fragment.
  std::map<std::pair<std::string, std::string>, std::string> whole_scale_of_;
};

// Dequantization reads its blocks' scales, so unlike quantization it needs
// no block whole in one fragment: a weight whose target fragments split
// blocks stages its (small) scale tensor whole, replicated over the axes
// that split the weight, and each fragment reads the scales of the blocks
// it overlaps (ApplyConversions).
void ConversionPlanBuilder::FindSplitDequantizedBlocks() {
  for (const WeightPlacementPart& part : target_.parts()) {
    for (const PlacementFragment& f : part.fragments()) {
      const TensorConversion* c = plan_.Find(f.tensor_id());
      if (c == nullptr || c->kind != ConversionKind::kDequantize) continue;
      const TensorDescriptor* t = target_.FindTensor(f.tensor_id());
      if (!BlockBox(f.tensor_id(), t->global_shape(), f.global_offset(),
                    f.local_shape(), c->block, part.participant_id())
               .ok()) {
        whole_scales_.insert(f.tensor_id());
      }
    }
  }
}

Status ConversionPlanBuilder::Classify(const TensorDescriptor& t) {
  const std::optional<SourceTensorInfo> src = source_(t.tensor_id());
  if (!src.has_value() || src->dtype == t.dtype()) return Status::OK();
  TensorConversion c;
  c.tensor_id = t.tensor_id();
  c.source_dtype = src->dtype;
  c.target_dtype = t.dtype();
  if (src->global_shape != t.global_shape()) {
    return Refuse(t.tensor_id(), "shape " + DimsText(src->global_shape) +
                                     " (source) vs " +
                                     DimsText(t.global_shape()) + " (target)");
  }
  const auto from = FloatTypeOf(src->dtype);
  const auto to = FloatTypeOf(t.dtype());
  if (!from.has_value() || !to.has_value()) {
    return Refuse(t.tensor_id(),
                  "no rule converts " + src->dtype + " (source) to " +
                      t.dtype() +
                      " (target); float32, bfloat16, float16 and "
                      "float8_e4m3fn blocks convert");
  }
  const bool from_fp8 = *from == FloatType::kFloat8E4M3;
  const bool to_fp8 = *to == FloatType::kFloat8E4M3;
  if (!from_fp8 && !to_fp8) {
    plan_.index_[c.tensor_id] = plan_.conversions_.size();
    plan_.conversions_.push_back(std::move(c));
    return Status::OK();
  }
  return AddBlockConversion(t, std::move(c), to_fp8);
}

Status ConversionPlanBuilder::AddBlockConversion(const TensorDescriptor& t,
                                                 TensorConversion c,
                                                 bool quantize) {
  c.kind = quantize ? ConversionKind::kQuantize : ConversionKind::kDequantize;
  c.block = options_.block;
  c.scale_tensor_id = ScaleIdOf(t.tensor_id());
  if (t.ndim() != 2 || c.scale_tensor_id.empty()) {
    return Refuse(t.tensor_id(),
                  "FP8 blocks need a 2-D weight named <prefix>weight, not " +
                      DimsText(t.global_shape()));
  }
  if (c.block.rows < 1 || c.block.cols < 1) {
    return Refuse(t.tensor_id(),
                  "the FP8 block " + BlockText(c.block) + " is empty");
  }
  const std::string_view side = quantize ? "target" : "source";
  Dims scale_shape;
  std::string scale_dtype;
  if (quantize) {
    const TensorDescriptor* s = target_.FindTensor(c.scale_tensor_id);
    if (s != nullptr) scale_shape = s->global_shape(), scale_dtype = s->dtype();
  } else if (auto s = source_(c.scale_tensor_id)) {
    scale_shape = s->global_shape, scale_dtype = s->dtype;
  }
  if (scale_dtype.empty()) {
    return Refuse(t.tensor_id(), "the " + std::string(side) +
                                     " lacks its scale tensor " +
                                     c.scale_tensor_id);
  }
  const Dims grid = BlockGrid(t.global_shape(), c.block);
  const bool widens =
      !quantize && (scale_dtype == "bfloat16" || scale_dtype == "float16");
  if (scale_dtype != "float32" && !widens) {
    return Refuse(t.tensor_id(),
                  "its scale tensor " + c.scale_tensor_id + " (" +
                      std::string(side) + ") is " + scale_dtype +
                      (quantize ? ", not float32"
                                : ", not float32, bfloat16 or float16"));
  }
  if (scale_shape != grid) {
    return Refuse(t.tensor_id(), "its scale tensor " + c.scale_tensor_id +
                                     " (" + std::string(side) + ") is " +
                                     scale_dtype + " " + DimsText(scale_shape) +
                                     " but blocks of " + BlockText(c.block) +
                                     " make " + scale_dtype + " " +
                                     DimsText(grid));
  }
  c.scale_dtype = scale_dtype;
  if (quantize) produced_[c.scale_tensor_id] = c.tensor_id;
  plan_.index_[c.tensor_id] = plan_.conversions_.size();
  plan_.conversions_.push_back(std::move(c));
  return Status::OK();
}

Status ConversionPlanBuilder::StageTensors() {
  for (const TensorDescriptor& t : target_.tensors()) {
    if (produced_.count(t.tensor_id())) continue;
    const TensorConversion* c = plan_.Find(t.tensor_id());
    if (c == nullptr) {
      tensors_.push_back(t);
      continue;
    }
    const SourceTensorInfo src = *source_(t.tensor_id());
    TensorDescriptorSpec spec = SpecOf(t);
    spec.dtype = src.dtype;
    spec.itemsize = static_cast<int64_t>(SizeOf(*FloatTypeOf(src.dtype)));
    spec.layout_fingerprint = src.layout_fingerprint;
    RESHARD_ASSIGN_OR_RETURN(TensorDescriptor staged,
                             TensorDescriptor::Make(std::move(spec)));
    tensors_.push_back(std::move(staged));
    if (c->kind != ConversionKind::kDequantize) continue;
    const SourceTensorInfo scale = *source_(c->scale_tensor_id);
    TensorDescriptorSpec s = SpecOf(t);
    s.tensor_id = c->scale_tensor_id;
    s.global_shape = scale.global_shape;
    s.dtype = scale.dtype;
    s.itemsize = static_cast<int64_t>(SizeOf(*FloatTypeOf(scale.dtype)));
    s.layout_fingerprint = scale.layout_fingerprint;
    if (whole_scales_.count(t.tensor_id())) {
      // Whole on every participant of the weight: each axis that splits
      // the weight replicates its scale.
      s.shard_dims.clear();
      std::vector<ParallelAxis> spanned;
      for (ParallelAxis& axis : s.parallel_axes) {
        if (axis.semantics() != AxisSemantics::kSplit) continue;
        // A split spanning DP leaves the scale replicated over DP too.
        if (axis.over().has_value()) {
          spanned.push_back(ReplicatedAxis(*axis.over()));
        }
        axis = ReplicatedAxis(axis.kind());
      }
      s.parallel_axes.insert(s.parallel_axes.end(), spanned.begin(),
                             spanned.end());
    }
    RESHARD_ASSIGN_OR_RETURN(TensorDescriptor scale_tensor,
                             TensorDescriptor::Make(std::move(s)));
    tensors_.push_back(std::move(scale_tensor));
  }
  return Status::OK();
}

Status ConversionPlanBuilder::AddStaged(PlacementFragmentSpec spec,
                                        const std::string& target_id) {
  spec.placement_fragment_id.reset();
  const std::string id = CanonicalPlacementFragmentId(spec);
  spec.placement_fragment_id = id;
  RESHARD_ASSIGN_OR_RETURN(PlacementFragment f,
                           PlacementFragment::Make(std::move(spec)));
  fragments_.push_back(std::move(f));
  if (!target_id.empty()) plan_.staging_of_[target_id] = id;
  return Status::OK();
}

Status ConversionPlanBuilder::StageFragment(const WeightPlacementPart& part,
                                            const PlacementFragment& f) {
  if (produced_.count(f.tensor_id())) return Status::OK();
  PlacementFragmentSpec spec{
      f.tensor_id(), f.global_offset(), f.local_shape(), f.nbytes(),
      f.rank(),      f.aliases(),       std::nullopt,    f.pipeline_stage_id()};
  const TensorConversion* c = plan_.Find(f.tensor_id());
  if (c == nullptr)
    return AddStaged(std::move(spec), f.placement_fragment_id());
  uint64_t elements = 1;
  for (int64_t e : f.local_shape()) elements *= static_cast<uint64_t>(e);
  spec.nbytes = elements * SizeOf(*FloatTypeOf(c->source_dtype));
  RESHARD_RETURN_NOT_OK(AddStaged(spec, f.placement_fragment_id()));
  if (c->kind == ConversionKind::kCast) return Status::OK();
  const TensorDescriptor* t = target_.FindTensor(f.tensor_id());
  if (c->kind == ConversionKind::kDequantize &&
      whole_scales_.count(f.tensor_id())) {
    return StageWholeScale(part, f, *c, t->global_shape());
  }
  RESHARD_ASSIGN_OR_RETURN(
      auto blocks, BlockBox(f.tensor_id(), t->global_shape(), f.global_offset(),
                            f.local_shape(), c->block, part.participant_id()));
  if (c->kind == ConversionKind::kQuantize) {
    quantized_blocks_.emplace(
        std::make_pair(part.participant_id(), f.tensor_id()), blocks);
    return Status::OK();
  }
  const std::string weight_id = plan_.staging_of_[f.placement_fragment_id()];
  PlacementFragmentSpec scale{
      c->scale_tensor_id, blocks.first, blocks.second, 0,
      f.rank(),           {},           std::nullopt,  f.pipeline_stage_id()};
  scale.nbytes = static_cast<uint64_t>(blocks.second[0] * blocks.second[1]) *
                 SizeOf(*FloatTypeOf(c->scale_dtype));
  RESHARD_RETURN_NOT_OK(AddStaged(scale, ""));
  plan_.scale_of_[weight_id] = fragments_.back().placement_fragment_id();
  return Status::OK();
}

// The scale of a weight in whole_scales_: one fragment of the whole scale
// tensor per participant, shared by its fragments of the weight.
Status ConversionPlanBuilder::StageWholeScale(const WeightPlacementPart& part,
                                              const PlacementFragment& f,
                                              const TensorConversion& c,
                                              const Dims& weight_shape) {
  const std::string weight_id = plan_.staging_of_[f.placement_fragment_id()];
  const auto key = std::make_pair(part.participant_id(), f.tensor_id());
  auto it = whole_scale_of_.find(key);
  if (it == whole_scale_of_.end()) {
    const Dims grid = BlockGrid(weight_shape, c.block);
    PlacementFragmentSpec scale{c.scale_tensor_id,
                                Dims{0, 0},
                                grid,
                                static_cast<uint64_t>(grid[0] * grid[1]) *
                                    SizeOf(*FloatTypeOf(c.scale_dtype)),
                                f.rank(),
                                {},
                                std::nullopt,
                                f.pipeline_stage_id()};
    RESHARD_RETURN_NOT_OK(AddStaged(scale, ""));
    it = whole_scale_of_.emplace(key, fragments_.back().placement_fragment_id())
             .first;
  }
  plan_.scale_of_[weight_id] = it->second;
  return Status::OK();
}

// Each produced scale fragment lies inside the blocks of one weight
// fragment of its participant, which computes its values.
Status ConversionPlanBuilder::CheckProducedScales() const {
  for (const WeightPlacementPart& part : target_.parts()) {
    for (const PlacementFragment& f : part.fragments()) {
      auto it = produced_.find(f.tensor_id());
      if (it == produced_.end()) continue;
      auto [lo, hi] = quantized_blocks_.equal_range(
          std::make_pair(part.participant_id(), it->second));
      const bool inside = std::any_of(lo, hi, [&](const auto& entry) {
        const auto& [first, count] = entry.second;
        for (size_t d = 0; d < 2; ++d) {
          if (f.global_offset()[d] < first[d] ||
              f.global_offset()[d] + f.local_shape()[d] > first[d] + count[d]) {
            return false;
          }
        }
        return true;
      });
      if (!inside) {
        return Refuse(it->second,
                      "participant " + part.participant_id() +
                          " holds blocks " + DimsText(f.global_offset()) +
                          " shape " + DimsText(f.local_shape()) + " of " +
                          f.tensor_id() +
                          " but not the weight rows and columns they scale");
      }
    }
  }
  return Status::OK();
}

Result<ConversionPlan> ConversionPlan::Make(
    const SourceTensorLookup& source, const WeightPlacementManifest& target,
    const ConversionOptions& options) {
  return ConversionPlanBuilder(source, target, options).Build();
}

SourceTensorLookup ConversionPlan::LookupIn(
    const WeightPlacementManifest& source) {
  return [source](std::string_view id) -> std::optional<SourceTensorInfo> {
    const TensorDescriptor* t = source.FindTensor(id);
    if (t == nullptr) return std::nullopt;
    return SourceTensorInfo{t->global_shape(), t->dtype(),
                            t->layout_fingerprint()};
  };
}

const TensorConversion* ConversionPlan::Find(std::string_view id) const {
  auto it = index_.find(std::string(id));
  return it == index_.end() ? nullptr : &conversions_[it->second];
}

const std::string& ConversionPlan::StagingFragmentOf(
    std::string_view id) const {
  static const std::string kNone;
  auto it = staging_of_.find(std::string(id));
  return it == staging_of_.end() ? kNone : it->second;
}

const std::string& ConversionPlan::StagingScaleOf(std::string_view id) const {
  static const std::string kNone;
  auto it = scale_of_.find(std::string(id));
  return it == scale_of_.end() ? kNone : it->second;
}

namespace {

// The target's scale tensor of `s` when `s` quantizes at the source (see
// QuantizedSourcePlacement), else nullptr.
const TensorDescriptor* SourceQuantizes(const TensorDescriptor& s,
                                        const WeightPlacementManifest& source,
                                        const WeightPlacementManifest& target,
                                        const Fp8Block& block) {
  const TensorDescriptor* t = target.FindTensor(s.tensor_id());
  if (t == nullptr || t->dtype() != "float8_e4m3fn") return nullptr;
  const auto from = FloatTypeOf(s.dtype());
  if (!from.has_value() || *from == FloatType::kFloat8E4M3) return nullptr;
  if (s.ndim() != 2 || s.global_shape() != t->global_shape()) return nullptr;
  const std::string scale_id = ScaleIdOf(s.tensor_id());
  if (scale_id.empty() || source.FindTensor(scale_id) != nullptr) {
    return nullptr;
  }
  if (block.rows < 1 || block.cols < 1) return nullptr;
  const TensorDescriptor* scale = target.FindTensor(scale_id);
  if (scale == nullptr || scale->dtype() != "float32" ||
      scale->global_shape() != BlockGrid(s.global_shape(), block)) {
    return nullptr;
  }
  return scale;
}

// Quantizing source tensor -> the target's scale tensor.
using ScaleMap = std::map<std::string, const TensorDescriptor*, std::less<>>;

// The source's tensors with the quantizing ones in FP8 and their scale
// tensors; the source's fragments with the quantizing ones in FP8 and
// their scale fragments.
Result<std::vector<TensorDescriptor>> QuantizedTensors(
    const WeightPlacementManifest& source,
    const WeightPlacementManifest& target, const ScaleMap& scales);
Result<std::vector<PlacementFragment>> QuantizedFragments(
    const WeightPlacementManifest& source, const ScaleMap& scales,
    const Fp8Block& block);

}  // namespace

Result<WeightPlacementManifest> QuantizedSourcePlacement(
    const WeightPlacementManifest& source,
    const WeightPlacementManifest& target, const ConversionOptions& options) {
  ScaleMap scales;
  for (const TensorDescriptor& s : source.tensors()) {
    if (auto* scale = SourceQuantizes(s, source, target, options.block)) {
      scales[s.tensor_id()] = scale;
    }
  }
  // Whole blocks in every fragment, no aliases: else the target converts.
  for (const PlacementFragment* f : source.fragments()) {
    auto it = scales.find(f->tensor_id());
    if (it == scales.end()) continue;
    const TensorDescriptor* s = source.FindTensor(f->tensor_id());
    if (!f->aliases().empty() ||
        !BlockBox(f->tensor_id(), s->global_shape(), f->global_offset(),
                  f->local_shape(), options.block, "")
             .ok()) {
      scales.erase(it);
    }
  }
  if (scales.empty()) return source;
  RESHARD_ASSIGN_OR_RETURN(auto tensors,
                           QuantizedTensors(source, target, scales));
  RESHARD_ASSIGN_OR_RETURN(auto fragments,
                           QuantizedFragments(source, scales, options.block));
  auto quantized = WeightPlacementManifest::FromFragments(
      source.header(), source.topology(), std::move(tensors),
      std::move(fragments));
  if (!quantized.ok()) {
    return quantized.status().WithContext("source quantization placement");
  }
  return quantized;
}

namespace {

Result<std::vector<TensorDescriptor>> QuantizedTensors(
    const WeightPlacementManifest& source,
    const WeightPlacementManifest& target, const ScaleMap& scales) {
  std::vector<TensorDescriptor> tensors;
  for (const TensorDescriptor& s : source.tensors()) {
    auto it = scales.find(s.tensor_id());
    if (it == scales.end()) {
      tensors.push_back(s);
      continue;
    }
    TensorDescriptorSpec weight = SpecOf(s);
    weight.dtype = "float8_e4m3fn";
    weight.itemsize = 1;
    weight.layout_fingerprint =
        target.FindTensor(s.tensor_id())->layout_fingerprint();
    TensorDescriptorSpec scale = SpecOf(s);
    scale.tensor_id = it->second->tensor_id();
    scale.global_shape = it->second->global_shape();
    scale.dtype = "float32";
    scale.itemsize = 4;
    scale.layout_fingerprint = it->second->layout_fingerprint();
    for (TensorDescriptorSpec* spec : {&weight, &scale}) {
      RESHARD_ASSIGN_OR_RETURN(TensorDescriptor d,
                               TensorDescriptor::Make(std::move(*spec)));
      tensors.push_back(std::move(d));
    }
  }
  return tensors;
}

Result<std::vector<PlacementFragment>> QuantizedFragments(
    const WeightPlacementManifest& source, const ScaleMap& scales,
    const Fp8Block& block) {
  std::vector<PlacementFragment> fragments;
  for (const PlacementFragment* f : source.fragments()) {
    auto it = scales.find(f->tensor_id());
    if (it == scales.end()) {
      fragments.push_back(*f);
      continue;
    }
    const TensorDescriptor* s = source.FindTensor(f->tensor_id());
    auto blocks = BlockBox(f->tensor_id(), s->global_shape(),
                           f->global_offset(), f->local_shape(), block, "");
    const auto& [first, count] = *blocks;
    PlacementFragmentSpec weight{
        f->tensor_id(),
        f->global_offset(),
        f->local_shape(),
        static_cast<uint64_t>(f->local_shape()[0] * f->local_shape()[1]),
        f->rank(),
        {},
        std::nullopt,
        f->pipeline_stage_id()};
    PlacementFragmentSpec scale{
        it->second->tensor_id(),
        first,
        count,
        static_cast<uint64_t>(count[0] * count[1]) * sizeof(float),
        f->rank(),
        {},
        std::nullopt,
        f->pipeline_stage_id()};
    for (PlacementFragmentSpec* spec : {&weight, &scale}) {
      RESHARD_ASSIGN_OR_RETURN(PlacementFragment made,
                               PlacementFragment::Make(std::move(*spec)));
      fragments.push_back(std::move(made));
    }
  }
  return fragments;
}

}  // namespace

Status CheckNoDtypeDifference(const SourceTensorLookup& source,
                              const WeightPlacementManifest& target) {
  for (const TensorDescriptor& t : target.tensors()) {
    const std::optional<SourceTensorInfo> src = source(t.tensor_id());
    if (!src.has_value() || src->dtype == t.dtype()) continue;
    return Status::InvalidArgument(
        "tensor descriptor mismatch: " + t.tensor_id() + ": dtype " +
        src->dtype + " (source) vs " + t.dtype() + " (target)");
  }
  return Status::OK();
}

}  // namespace reshard
