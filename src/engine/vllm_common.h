// What both vLLM presets (vllm_preset.cc, vllm_hybrid_preset.cc) share:
// the grid (the rank d * tp + t is EP rank d * tp + t under expert
// parallelism), the stages (get_pp_indices), the builder and writer of one
// layout, the tensor axes of dense weights, FusedMoE's parameter prefix per
// release, and vLLM's TP rule for attention heads.

#ifndef RESHARD_ENGINE_VLLM_COMMON_H_
#define RESHARD_ENGINE_VLLM_COMMON_H_

#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "engine/preset_common.h"
#include "engine/presets.h"

namespace reshard::internal {

class VllmPresetBase {
 protected:
  VllmPresetBase(const HfConfig& c, const CanonTensors& canon,
                 const EngineLayoutOptions& o, const EngineRelease& release)
      : c_(c),
        o_(o),
        release_(release),
        n_(o.sizes),
        ranks_(GridRanks(n_, &VllmEpRank)),
        b_(release.name, release.spec, n_, ranks_),
        w_(release.name, c, canon, &b_) {}

  // [lo, hi): the decoder layers of stage p (get_pp_indices).
  std::pair<int64_t, int64_t> Stage(int64_t p) const {
    return VllmStageLayers(c_.layers, n_.pp, p);
  }
  // Where FusedMoE keeps its weights: "experts.routed_experts." since vLLM
  // 0.33, "experts." before.
  std::string Experts() const {
    return release_.routed_experts ? "experts.routed_experts." : "experts.";
  }
  TensorAxes Split(int64_t dim, bool pp_owned = true) const {
    return {dim, 0, pp_owned, TensorAxes::Ep::kCoupled};
  }
  TensorAxes Replicated(bool pp_owned = true) const {
    return {-1, 0, pp_owned, TensorAxes::Ep::kCoupled};
  }
  const HfTensor* T(const std::string& name) const { return w_.Find(name); }
  // TP must divide num_attention_heads, and divide num_key_value_heads or
  // be a multiple of it (KV heads replicated over groups of ranks).
  Status CheckAttentionHeads() const {
    const std::string& e = release_.name;
    RESHARD_RETURN_NOT_OK(
        Divisible(e, "TP", n_.tp, "num_attention_heads", c_.heads));
    if (c_.kv_heads >= n_.tp) {
      return Divisible(e, "TP", n_.tp, "num_key_value_heads", c_.kv_heads);
    }
    if (n_.tp % c_.kv_heads != 0) {
      return Status::InvalidArgument(
          e + " refuses TP " + std::to_string(n_.tp) +
          ": it is neither a divisor nor a multiple of num_key_value_heads (" +
          std::to_string(c_.kv_heads) + ")");
    }
    return Status::OK();
  }

  // The expert grid vLLM accepts (EP 1 or tp x dp, routed experts under
  // EP, fused experts at EP 1 or EP = TP) and its sequence-parallel MoE
  // rule (sets sp_moe_).
  Status CheckExpertGrid();
  // PP must not exceed the layers.
  Status CheckStages() const;
  // Rows per rank of the vocabulary padded to a multiple of 64 (sets
  // vocab_chunk_; ranks holding only padding allowed, as vLLM does).
  Status SetVocabChunk();

  // Which routed experts FusedMoE gives a rank, and which rows of each:
  // linear placement under EP (determine_expert_map: E // ep each, the
  // first E % ep ranks one more, none past E), whole; without EP every
  // expert, split over TP flattened across DP (part d * tp + t of dp * tp).
  struct ExpertShare {
    bool ep = false;
    int64_t first = 0, count = 0;  // the rank's experts
    int64_t row0 = 0, il = 0;      // rows of each expert's intermediate dim
    bool over_dp = false;          // split over DP x TP
  };
  ExpertShare ExpertsOf(const GridRank& r) const;
  // FusedMoE's w13_weight and w2_weight (then both scales, as vLLM's FP8
  // method registers them) under `to`, from the checkpoint's experts under
  // `hf` ("<hf><x>.<gate>.weight", ... per expert, or transformers 5's fused
  // gate_up_proj / down_proj). A rank without experts holds them [0, ...].
  // `fp8_check` runs first when the experts are block-FP8.
  Status RoutedExperts(
      const ExpertShare& s, const std::string& to, const std::string& hf,
      const char* gate, const char* up, const char* down,
      const std::function<Status(const std::string& w13)>& fp8_check);

  const HfConfig& c_;
  const EngineLayoutOptions& o_;
  const EngineRelease& release_;
  const ParallelSizes n_;
  std::vector<GridRank> ranks_;
  EngineBuilder b_;
  PresetWriter w_;
  int64_t vocab_chunk_ = 0;
  // Sequence-parallel MoE: shared experts whole (VllmSequenceParallelMoe).
  bool sp_moe_ = false;
};

}  // namespace reshard::internal

#endif  // RESHARD_ENGINE_VLLM_COMMON_H_
