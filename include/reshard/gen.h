// The reference layout generator: real-looking placements of real models
// without a framework. A model spec describes the architecture (see
// docs/model-spec.md and examples/models/); the generator lays every weight
// tensor out on a dp x pp x ep x tp grid with the usual sharding of training
// and inference engines.

#ifndef RESHARD_GEN_H_
#define RESHARD_GEN_H_

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "reshard/placement.h"
#include "reshard/status.h"

namespace reshard {

struct ModelSpec {
  std::string name;
  int64_t layers = 0;
  int64_t hidden = 0;
  int64_t vocab = 0;
  std::string dtype = "bfloat16";
  int64_t itemsize = 2;
  // Attention: "gqa" or "mla".
  std::string attention = "gqa";
  int64_t heads = 0;
  int64_t kv_heads = 0;      // gqa
  int64_t head_dim = 0;      // gqa
  bool qk_norm = false;      // gqa
  int64_t q_lora_rank = 0;   // mla
  int64_t kv_lora_rank = 0;  // mla
  int64_t qk_nope_head_dim = 0;
  int64_t qk_rope_head_dim = 0;
  int64_t v_head_dim = 0;
  // Dense MLP width (0: no dense layers).
  int64_t intermediate = 0;
  // MoE (experts == 0: dense model).
  int64_t experts = 0;
  int64_t moe_intermediate = 0;
  int64_t shared_experts = 0;
  bool router_bias = false;
  // The first `dense_layers` layers use the dense MLP.
  int64_t dense_layers = 0;
};

// Strict decoder of a model spec file.
Result<ModelSpec> ModelSpecFromJson(std::string_view json);

// How a model's routed experts are stored as tensors (`reshard gen
// --experts`).
enum class ExpertTensors {
  kGrouped,   // one [experts, ...] tensor per projection, EP splits dim 0
  kSeparate,  // one tensor per expert with expert_id, EP ownership
};
// Deprecated: the former name of ExpertTensors ("layout" names a parallel
// layout only, docs/decisions.md).
using ExpertLayout = ExpertTensors;

struct LayoutOptions {
  ParallelSizes sizes;
  ExpertTensors experts = ExpertTensors::kGrouped;
  std::string resource_id;  // defaults to the model name
  std::string revision = "step-0";
  uint64_t weight_generation = 0;
};

// Lays the model out. Invalid combinations (TP not dividing a split
// dimension, EP not dividing the expert count, more PP stages than layers)
// fail with a message naming the tensor and dimension.
Result<WeightPlacementManifest> GenerateLayout(const ModelSpec& model,
                                               const LayoutOptions& options);

}  // namespace reshard

#endif  // RESHARD_GEN_H_
