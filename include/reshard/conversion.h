// Conversions inside a reshard (PlanOptions::convert): which tensors
// convert, by which rule, and the staging placement the bytes are moved
// into before they convert. docs/conversion.md states the arithmetic and
// what is refused.
//
// A converting reshard is two steps. The planner moves bytes from the
// source into the staging placement: the target's geometry (same parts,
// same boxes) with each converting tensor in its source dtype, without the
// scale tensors quantization produces, and with the source's scale tensor
// of each weight that dequantizes, cut at block granularity like its
// weight (whole, on every participant holding the weight, where the
// target's fragments of it split blocks). Then every converting target
// fragment is computed from its staging fragment of the same participant
// and box, so no element needs a peer: a quantization block is always
// whole in one fragment (a block split between fragments is refused,
// naming the tensor and the block); dequantization reads the scale of each
// element's block, wherever the fragment cuts it.

#ifndef RESHARD_CONVERSION_H_
#define RESHARD_CONVERSION_H_

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "reshard/placement.h"
#include "reshard/status.h"

namespace reshard {

enum class ConversionKind {
  kCast,        // float32 / bfloat16 / float16 among each other
  kQuantize,    // float -> float8_e4m3fn blocks; scales produced
  kDequantize,  // float8_e4m3fn blocks -> float; scales read
};

// The FP8 block, [rows, cols] of a 2-D weight (DeepSeek-V3: 128 x 128).
struct Fp8Block {
  int64_t rows = 128;
  int64_t cols = 128;
};

struct ConversionOptions {
  Fp8Block block;
};

// What the source holds of one tensor.
struct SourceTensorInfo {
  Dims global_shape;
  std::string dtype;
  std::string layout_fingerprint;
};

// The source's tensor `id`, or nullopt when it has none.
using SourceTensorLookup =
    std::function<std::optional<SourceTensorInfo>(std::string_view id)>;

struct TensorConversion {
  std::string tensor_id;
  ConversionKind kind = ConversionKind::kCast;
  std::string source_dtype;
  std::string target_dtype;
  // kQuantize: the target's scale tensor; kDequantize: the source's.
  std::string scale_tensor_id;
  // The scale tensor's dtype: float32 when quantizing; when dequantizing
  // the source's, float32, bfloat16 (Qwen's FP8 releases) or float16,
  // widened exactly to float32.
  std::string scale_dtype = "float32";
  Fp8Block block;  // kQuantize and kDequantize
};

class ConversionPlan {
 public:
  // The conversions from `source` to `target`: every target tensor whose
  // dtype differs from the source's converts by a rule of
  // docs/conversion.md, else InvalidArgument naming the tensor. Without
  // conversions, staging() is `target` itself.
  static Result<ConversionPlan> Make(const SourceTensorLookup& source,
                                     const WeightPlacementManifest& target,
                                     const ConversionOptions& options = {});
  // The source tensors of a placement.
  static SourceTensorLookup LookupIn(const WeightPlacementManifest& source);

  bool empty() const { return conversions_.empty(); }
  const std::vector<TensorConversion>& conversions() const {
    return conversions_;
  }
  // The conversion of target tensor `id`, or nullptr.
  const TensorConversion* Find(std::string_view id) const;
  const WeightPlacementManifest& staging() const { return *staging_; }
  const WeightPlacementManifest& target() const { return *target_; }
  // The staging fragment of target fragment `id` (same participant and
  // box); the empty string for a scale fragment quantization produces.
  const std::string& StagingFragmentOf(std::string_view id) const;
  // kDequantize: the staging scale fragment that goes with the staging
  // weight fragment `id`: its blocks, or the whole scale tensor (shared by
  // the participant's fragments of the weight) where the target's
  // fragments of it split blocks.
  const std::string& StagingScaleOf(std::string_view id) const;

 private:
  friend class ConversionPlanBuilder;
  std::vector<TensorConversion> conversions_;
  std::optional<WeightPlacementManifest> staging_;
  std::optional<WeightPlacementManifest> target_;
  std::unordered_map<std::string, size_t> index_;  // into conversions_
  std::unordered_map<std::string, std::string> staging_of_;
  std::unordered_map<std::string, std::string> scale_of_;
};

// Quantization at the source (live sessions): `source` as it travels when
// each tensor that `target` holds in block FP8, and `source` in float32,
// bfloat16 or float16, quantizes before the wire. Such a tensor becomes
// float8_e4m3fn (the target's descriptor) and gains its target's scale
// tensor `<prefix>weight_scale_inv`, cut like the weight at block
// granularity and held by the participants that hold the weight; every
// other tensor and fragment is the source's own (same fragment ids). A
// tensor quantizes at the source only when every source fragment of it
// holds whole blocks (offsets multiples of the block, ends multiples or
// the tensor's end) and has no aliases, and the source has no tensor of
// the scale's id; otherwise it is left to the target side (the converting
// plan's staging, above). Returns `source` itself when no tensor
// qualifies. ConversionPlan::Make(ConversionPlan::LookupIn(source), the
// result) is then the quantization each source runs before sending.
Result<WeightPlacementManifest> QuantizedSourcePlacement(
    const WeightPlacementManifest& source,
    const WeightPlacementManifest& target,
    const ConversionOptions& options = {});

// The first target tensor whose dtype differs from the source's, as the
// planner's descriptor error names it ("tensor descriptor mismatch: X:
// dtype bfloat16 (source) vs float8_e4m3fn (target)"); OK when none does.
Status CheckNoDtypeDifference(const SourceTensorLookup& source,
                              const WeightPlacementManifest& target);

}  // namespace reshard

#endif  // RESHARD_CONVERSION_H_
