// Pieces of parameters both engine presets build: row slices of canonical
// weights fused into one parameter, with the FP8 block scales that follow
// them, column chunks, vocabulary-parallel tables with padding.

#ifndef RESHARD_ENGINE_PRESET_COMMON_H_
#define RESHARD_ENGINE_PRESET_COMMON_H_

#include <functional>
#include <initializer_list>
#include <string>
#include <utility>
#include <vector>

#include "engine/layout_builder.h"

namespace reshard::internal {

// Rows [row0, row0 + rows) of `w` (every column), laid out by `axes`.
struct RowSlice {
  const HfTensor* w = nullptr;
  TensorAxes axes;
  int64_t row0 = 0;
  int64_t rows = 0;
};

// Emits presets' parameters into an EngineBuilder for one rank at a time.
class PresetWriter {
 public:
  PresetWriter(std::string engine_label, const HfConfig& config,
               const CanonTensors& canon, EngineBuilder* builder)
      : label_(std::move(engine_label)),
        c_(config),
        canon_(canon),
        b_(builder) {}

  void SetRank(size_t r) { rank_ = r; }
  const CanonTensors& canon() const { return canon_; }

  // The canonical tensor `name`, or nullptr. A miss is remembered: a
  // RowSlice of a null tensor handed to Rows or StackedRows is refused
  // naming the last tensor Find missed (the presets build each call's
  // slices from Find right before it), never dereferenced.
  const HfTensor* Find(const std::string& name) const;
  // The canonical tensor `name`; InvalidArgument "<engine> needs tensor
  // NAME, which the checkpoint lacks" when the model has none.
  Result<const HfTensor*> Get(const std::string& name) const;

  // Parameter `name` of shape `shape` and dtype `dtype` whose every
  // element is `fill` (EngineBuilder::Fill): a constant the engine holds.
  Status Fill(const std::string& name, Dims shape, const std::string& dtype,
              std::string fill) {
    return b_->Fill(rank_, name, std::move(shape), dtype, std::move(fill));
  }
  // Parameter `name` whole from tensor `hf`.
  Status Whole(const std::string& name, const std::string& hf,
               const TensorAxes& axes);
  // Parameter `name` = the slices' rows, concatenated; and when the slices'
  // weights are FP8 block-quantized, `<name minus weight>weight_scale_inv`
  // = the slices' scale rows concatenated (a slice must start on a block
  // and hold whole blocks unless it ends its tensor). With `quantized`
  // false the scales are not emitted (the engine holds the weight only).
  Status Rows(const std::string& name, const std::vector<RowSlice>& slices,
              bool with_scales = true);
  // Parameter `name` = columns [col0, col0 + cols) of `hf` (and its scale
  // columns, which must be whole blocks).
  Status Cols(const std::string& name, const std::string& hf,
              const TensorAxes& axes, int64_t col0, int64_t cols);
  // A vocabulary-parallel table: `chunk` rows, rows [row0, min(row0 +
  // chunk, V)) of `hf`, the rest zero padding; all padding when row0 >= V.
  // The placement splits `hf` over the ceil(V / chunk) TP ranks that hold
  // real rows (a partial split when that is fewer than TP).
  Status Vocab(const std::string& name, const std::string& hf,
               const TensorAxes& axes, int64_t row0, int64_t chunk);
  // What a stacked call emits: the weight and then its scale, or only
  // one of them (an engine that registers every weight before any scale).
  enum Emit { kBoth, kWeight, kScale };
  // Stacked experts: parameter `name` of shape [n, per-expert shape] whose
  // expert j is the row slices `slices_of(j)` (or column chunk), and its
  // stacked scale. kScale emits nothing for unquantized weights. With
  // `experts` 0 (StackedCols: `none`) the rank holds no experts: one
  // expert's slices (names) give the per-expert shape, and the parameters
  // are zero-size ([0, ...]) with no pieces, as vLLM allocates them.
  Status StackedRows(const std::string& name, int64_t experts,
                     const std::vector<std::vector<RowSlice>>& slices,
                     Emit emit = kBoth);
  Status StackedCols(const std::string& name,
                     const std::vector<std::string>& hf, const TensorAxes& axes,
                     int64_t col0, int64_t cols, Emit emit = kBoth,
                     bool none = false);
  // transformers 5's fused experts under `x` (x + "gate_up_proj" [E, 2I,
  // H]: per expert its gate rows, then its up rows; x + "down_proj" [E, H,
  // I]) as an engine holds them, the same bytes StackedRows / StackedCols
  // give from one tensor per expert: `w13` = for each expert of [first,
  // first + count) its gate rows [row0, row0 + il) then its up rows [I +
  // row0, I + row0 + il); `w2` = its down columns [row0, row0 + il).
  // Shapes [count, 2 il, H] and [count, H, il]; with `stacked` false (one
  // expert, count 1) [2 il, H] and [H, il]. `tp_split`: TP splits every
  // expert (gate_up_proj's sections along dim 1, down_proj along dim 2),
  // else each rank holds its experts whole; EP ranks split dim 0. `count`
  // 0 (a rank without experts): both parameters zero-size, no pieces.
  // `over_dp` (with `tp_split`): the split spans DP too
  // (TensorAxes::tp_over_dp; row0 and il then count dp x tp parts).
  // Unimplemented for an FP8 model: the fused form carries no block
  // scales, and the engine would hold FP8 experts.
  Status FusedExperts(const std::string& w13, const std::string& w2,
                      const std::string& x, int64_t first, int64_t count,
                      int64_t row0, int64_t il, bool tp_split,
                      bool stacked = true, bool over_dp = false);

 private:
  // InvalidArgument naming `name` as a tensor the engine needs.
  Status Missing(const std::string& name) const;

  Status Fp8Rows(const std::string& name, const RowSlice& s,
                 bool last_of_whole) const;
  Result<std::vector<RowSlice>> ScaleSlices(
      const std::string& name, const std::vector<RowSlice>& slices) const;
  std::string ScaleName(const std::string& name) const;

  std::string label_;
  const HfConfig& c_;
  const CanonTensors& canon_;
  EngineBuilder* b_;
  size_t rank_ = 0;
  mutable std::string missed_;  // the last name Find missed
};

// Whether the last vocabulary-parallel ranks may hold only padding: vLLM's
// VocabParallelEmbedding holds them (PresetWriter::Vocab), the Megatron
// preset refuses them.
enum class PaddingRanks { kRefuse, kHold };

// vLLM's EP rank of the rank (dp rank d, tp rank t): d * tp + t under
// expert parallelism, 0 without.
int64_t VllmEpRank(const ParallelSizes& n, int64_t d, int64_t t);

// [lo, hi): the decoder layers vLLM's stage p of pp holds
// (get_pp_indices: even stages, the remainder to the stages before the
// last).
std::pair<int64_t, int64_t> VllmStageLayers(int64_t layers, int64_t pp,
                                            int64_t p);

// Rows per vocabulary-parallel rank of a table of `vocab` rows padded to a
// multiple of `multiple` (`how`: why that multiple), TP `tp`;
// InvalidArgument naming `tensor` when the padded rows do not divide by TP
// or, with PaddingRanks::kRefuse, when the last rank would hold only
// padding.
Result<int64_t> VocabChunk(std::string_view engine, const std::string& tensor,
                           int64_t vocab, int64_t multiple, int64_t tp,
                           const std::string& how, PaddingRanks padding_ranks);

// `value` (the config's `what`) must be divisible by `by` (the engine's
// `by_name` size): "vllm refuses TP 3: num_attention_heads = 32 is not
// divisible by 3".
Status Divisible(std::string_view engine, std::string_view by_name, int64_t by,
                 std::string_view what, int64_t value);

// Unimplemented when the config holds transformers 5's fused experts
// (HfConfig::fused_experts, fused_mtp_experts) and EP is neither 1 nor
// TP: a rank's share of a fused tensor is a box of its dimension 0 only
// where the EP rank is the TP rank (PresetWriter::FusedExperts).
Status CheckFusedExpertsGrid(std::string_view engine, const HfConfig& config,
                             const ParallelSizes& sizes);

// Whether vLLM runs sequence-parallel MoE for `options` (vllm and sglang;
// EngineLayoutOptions::sequence_parallel_moe) and so builds the shared
// experts whole on every rank: with kAuto, expert parallelism, TP > 1 and
// DP > 1 (ParallelConfig.use_sequence_parallel_moe under the default
// all2all backend); kOff never; kOn as kAuto, InvalidArgument naming the
// grid where the rule does not hold.
Result<bool> VllmSequenceParallelMoe(std::string_view engine,
                                     const EngineLayoutOptions& options);

// Unimplemented naming the preset unless the config's architecture is one
// of `supported`.
Status CheckArchitecture(const HfConfig& config,
                         const EngineLayoutOptions& options,
                         std::initializer_list<HfArch> supported);

// Points `writer` at each rank in turn and calls `rank` for it, then
// builds the layout.
Result<EngineLayout> BuildRanks(
    const std::vector<GridRank>& ranks, EngineBuilder* builder,
    PresetWriter* writer, const std::function<Status(const GridRank&)>& rank,
    const HfConfig& config, const EngineLayoutOptions& options);

}  // namespace reshard::internal

#endif  // RESHARD_ENGINE_PRESET_COMMON_H_
