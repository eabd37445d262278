// The engine presets behind MakeEngineLayout, and the release tables that
// engine specs ("vllm", "vllm@0.33", "vllm@<0.33") resolve against.

#ifndef RESHARD_ENGINE_PRESETS_H_
#define RESHARD_ENGINE_PRESETS_H_

#include <string>
#include <string_view>

#include "engine/layout_builder.h"

namespace reshard::internal {

// One row of a preset's release table: a range of engine releases that
// hold the same parameters, and what distinguishes it.
struct EngineRelease {
  std::string name;  // the preset: "vllm"
  // The canonical spec of the range ("vllm@0.33", "vllm@<0.33",
  // "megatron"): EngineLayout::engine() of the layouts built for it.
  std::string spec;
  // vLLM 0.33 and later: FusedMoE's parameters live in its routed_experts
  // submodule (mlp.experts.routed_experts.w13_weight); before, directly
  // in it (mlp.experts.w13_weight).
  bool routed_experts = false;
  // Router biases (DeepSeek's e_score_correction_bias, Megatron's
  // expert_bias) are float32 whatever the model dtype; a load from a
  // 16-bit checkpoint widens them exactly.
  bool f32_router_bias = false;
  // With a block-FP8 quant config, every attention layer but MLA holds
  // the KV-cache scale parameters attn.q_scale, k_scale, v_scale and
  // prob_scale (0-dim, the model dtype, -1.0 until a checkpoint's scales
  // replace them; none are in the checkpoints reshard reads): vLLM's
  // BaseKVCacheMethod.create_weights. Checked against vLLM 0.33; the older
  // vllm ranges follow the same rule (SGLang's k_scale/v_scale, float32
  // and on MLA's attention too, are not modelled).
  bool kv_cache_scales = false;
};

// `spec` resolved: NAME (the newest range), NAME@RELEASE (the range that
// holds RELEASE, "0.33" or "0.33.1") or NAME@<RELEASE (the range that ends
// just below RELEASE). InvalidArgument listing the supported specs for an
// unknown engine, a malformed release, a release no range covers, or a
// "<RELEASE" that is not a range's end.
Result<EngineRelease> ResolveEngine(std::string_view spec);

// The canonical specs of every preset, newest first per engine.
std::vector<std::string> EngineSpecs();

// Whether the release holds canonical tensor `tensor_id` in float32
// whatever the model or checkpoint dtype, as the engine allocates it: the
// one list every preset follows (MakeEngineLayout makes these tensors
// float32 before a preset sees them) and that a load widens from 16 bits
// without --convert (FirstConversionBeyondWidening). Router biases
// (DeepSeek's mlp.gate.e_score_correction_bias, which Megatron holds as
// mlp.router.expert_bias) where `f32_router_bias`; the gated DeltaNet's
// linear_attn.A_log in every vllm and sglang release (Qwen3-Next, Qwen3.5);
// GLM-4.5's router weight (mlp.gate.weight, which vLLM's Glm4MoE builds
// with params_dtype float32) in every vllm release, for `arch` kGlm4Moe.
bool HoldsFloat32(const EngineRelease& release, HfArch arch,
                  std::string_view tensor_id);

Result<EngineLayout> VllmLayout(const HfConfig& config,
                                const CanonTensors& canon,
                                const EngineLayoutOptions& options,
                                const EngineRelease& release);
Result<EngineLayout> MegatronLayout(const HfConfig& config,
                                    const CanonTensors& canon,
                                    const EngineLayoutOptions& options,
                                    const EngineRelease& release);
// vLLM's Qwen3-Next and Qwen3.5 text classes (vllm_hybrid_preset.cc),
// which VllmLayout hands these architectures to.
Result<EngineLayout> VllmHybridLayout(const HfConfig& config,
                                      const CanonTensors& canon,
                                      const EngineLayoutOptions& options,
                                      const EngineRelease& release);

// The first tensor of `layout` (in placement order) whose dtype differs
// from the checkpoint's, other than one the engine widens exactly
// (bfloat16 or float16 in the checkpoint, float32 in the layout, and
// HoldsFloat32 for the release `layout.engine()` names and architecture
// `arch`); nullptr when there is none. A load with none converts without
// --convert, as the engine itself widens those tensors when it loads.
const TensorDescriptor* FirstConversionBeyondWidening(
    const HfCheckpoint& checkpoint, const EngineLayout& layout, HfArch arch);

}  // namespace reshard::internal

#endif  // RESHARD_ENGINE_PRESETS_H_
