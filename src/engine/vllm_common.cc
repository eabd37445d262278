// What both vLLM presets share (vllm_common.h): the routed experts.

#include "engine/vllm_common.h"

#include <algorithm>

namespace reshard::internal {

Status VllmPresetBase::CheckExpertGrid() {
  const std::string& e = release_.name;
  if (n_.ep != 1 && n_.ep != n_.tp * n_.dp) {
    return Status::InvalidArgument(
        e + " expert parallelism spans TP x DP: --ep must be 1 or " +
        std::to_string(n_.tp * n_.dp) + ", not " + std::to_string(n_.ep));
  }
  if (n_.ep > 1 && c_.experts == 0) {
    return Status::InvalidArgument("EP " + std::to_string(n_.ep) +
                                   " needs routed experts; " + c_.architecture +
                                   " has none");
  }
  RESHARD_RETURN_NOT_OK(CheckFusedExpertsGrid(e, c_, n_));
  RESHARD_ASSIGN_OR_RETURN(sp_moe_, VllmSequenceParallelMoe(e, o_));
  return Status::OK();
}

Status VllmPresetBase::CheckStages() const {
  if (n_.pp > c_.layers) {
    return Status::InvalidArgument("PP " + std::to_string(n_.pp) +
                                   " exceeds the " + std::to_string(c_.layers) +
                                   " layers of " + c_.architecture);
  }
  return Status::OK();
}

Status VllmPresetBase::SetVocabChunk() {
  RESHARD_ASSIGN_OR_RETURN(
      vocab_chunk_,
      VocabChunk(release_.name, "model.embed_tokens.weight", c_.vocab, 64,
                 n_.tp, " (a multiple of 64)", PaddingRanks::kHold));
  return Status::OK();
}

VllmPresetBase::ExpertShare VllmPresetBase::ExpertsOf(const GridRank& r) const {
  ExpertShare s;
  s.ep = n_.ep > 1;
  const int64_t base = c_.experts / n_.ep, rem = c_.experts % n_.ep;
  s.count = s.ep ? base + (r.e < rem ? 1 : 0) : c_.experts;
  s.first = s.ep ? r.e * base + std::min(r.e, rem) : 0;
  s.over_dp = !s.ep && n_.dp > 1;
  s.il = s.ep ? c_.moe_intermediate : c_.moe_intermediate / (n_.dp * n_.tp);
  s.row0 = s.ep ? 0 : (r.d * n_.tp + r.t) * s.il;
  return s;
}

Status VllmPresetBase::RoutedExperts(
    const ExpertShare& s, const std::string& to, const std::string& hf,
    const char* gate, const char* up, const char* down,
    const std::function<Status(const std::string& w13)>& fp8_check) {
  if (c_.fused_experts) {
    return w_.FusedExperts(to + "w13_weight", to + "w2_weight", hf, s.first,
                           s.count, s.row0, s.il, !s.ep, true, s.over_dp);
  }
  using Ep = TensorAxes::Ep;
  TensorAxes gate_up = s.ep ? TensorAxes{-1, 0, true, Ep::kOwned} : Split(0);
  TensorAxes d = s.ep ? TensorAxes{-1, 0, true, Ep::kOwned} : Split(1);
  gate_up.tp_over_dp = d.tp_over_dp = s.over_dp;
  std::vector<std::vector<RowSlice>> w13;
  std::vector<std::string> w2;
  // EP above the expert count leaves the last ranks without experts:
  // vLLM gives them w13_weight [0, 2I, h] (and w2, scales) with no bytes;
  // expert 0 then stands for the per-expert shape only.
  const bool none = s.count == 0;
  for (int64_t x = none ? 0 : s.first; x < (none ? 1 : s.first + s.count);
       ++x) {
    const std::string e = hf + std::to_string(x) + ".";
    w13.push_back({{T(e + gate + ".weight"), gate_up, s.row0, s.il},
                   {T(e + up + ".weight"), gate_up, s.row0, s.il}});
    w2.push_back(e + down + ".weight");
  }
  if (w13[0][0].w != nullptr &&
      w_.canon().ScaleOf(w13[0][0].w->name) != nullptr) {
    RESHARD_RETURN_NOT_OK(fp8_check(to + "w13_weight"));
  }
  RESHARD_RETURN_NOT_OK(
      w_.StackedRows(to + "w13_weight", s.count, w13, PresetWriter::kWeight));
  RESHARD_RETURN_NOT_OK(w_.StackedCols(to + "w2_weight", w2, d, s.row0, s.il,
                                       PresetWriter::kWeight, none));
  RESHARD_RETURN_NOT_OK(
      w_.StackedRows(to + "w13_weight", s.count, w13, PresetWriter::kScale));
  return w_.StackedCols(to + "w2_weight", w2, d, s.row0, s.il,
                        PresetWriter::kScale, none);
}

}  // namespace reshard::internal
