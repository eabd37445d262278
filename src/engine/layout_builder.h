// What the engine presets share: the grid, the model's canonical tensors,
// and a builder that turns "participant P's parameter X holds this box of
// tensor T, then that padding" into an EngineLayout.

#ifndef RESHARD_ENGINE_LAYOUT_BUILDER_H_
#define RESHARD_ENGINE_LAYOUT_BUILDER_H_

#include <functional>
#include <map>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "hf/hf_config.h"
#include "reshard/engine.h"

namespace reshard::internal {

// How a canonical tensor lies on the grid: its descriptor's axes.
struct TensorAxes {
  int64_t tp_dim = -1;    // TP split dimension; -1: whole on every TP rank
  int64_t tp_shards = 0;  // > 0: a grouped split into this many shards
  bool pp_owned = true;   // held by some stages only (else every stage)
  // kCoupled: the EP coordinate is a function of the DP and TP ranks and
  // the tensor does not depend on it (dense weights under expert
  // parallelism); kOwned: held by one EP rank (routed experts); kSplit:
  // EP ranks split dimension 0 (every expert of a layer in one tensor).
  // A kSplit tensor whole over TP (tp_dim -1) under EP leaves the TP axis
  // undeclared, which the placement accepts only where the TP rank is a
  // function of the EP rank: the presets lay it out only at EP = TP.
  enum class Ep { kCoupled, kOwned, kSplit } ep = Ep::kCoupled;
  // > 0 and below TP: a partial split held by the first tp_ranks TP ranks
  // (the ranks after them hold no box of the tensor); TP or above: a plain
  // split.
  int64_t tp_ranks = 0;
  // The TP split spans DP too (a spanning split): rank (d, t) holds part
  // d * tp + t of dp * tp along tp_dim, and the tensor has no DP replicas
  // (vLLM's routed experts at DP > 1 without EP). Only with tp_dim >= 0
  // and DP > 1.
  bool tp_over_dp = false;
  friend bool operator==(const TensorAxes&, const TensorAxes&) = default;
};

// One participant of an engine grid.
struct GridRank {
  int64_t d = 0, p = 0, e = 0, t = 0;
  std::string id;  // "p-d<d>-p<p>-e<e>-t<t>"
};

// The participants of a dp x pp x tp grid whose EP coordinate is
// `ep_of(d, t)`, in (d, p, t) order.
std::vector<GridRank> GridRanks(const ParallelSizes& sizes,
                                int64_t (*ep_of)(const ParallelSizes&,
                                                 int64_t d, int64_t t));

// The canonical tensors a layout may reference, by name, with their final
// dtypes (the checkpoint's when there is one).
class CanonTensors {
 public:
  // The tensors in the form `options` asks for (quantize / dtype), which
  // also updates `config`'s FP8 fields.
  static Result<CanonTensors> Make(HfConfig* config,
                                   const HfCheckpoint* checkpoint,
                                   const EngineLayoutOptions& options);
  // The tensor, or nullptr.
  const HfTensor* Find(const std::string& name) const;
  // The tensor; NotFound naming it and `what` when absent.
  Result<const HfTensor*> Get(const std::string& name) const;
  // The FP8 block scale of weight `name` ("...weight" ->
  // "...weight_scale_inv"), or nullptr when the weight is not quantized.
  const HfTensor* ScaleOf(const std::string& weight) const;
  // Makes every tensor `keep(name)` selects float32 (the engine holds it
  // so whatever the model dtype; a 16-bit source widens exactly).
  void SetFloat32(const std::function<bool(std::string_view name)>& keep);

 private:
  std::unordered_map<std::string, HfTensor> by_name_;
};

class EngineBuilder {
 public:
  // `engine`: the preset's name, in messages and the placement set id;
  // `spec`: its canonical release spec, the layout's engine().
  EngineBuilder(std::string engine, std::string spec,
                const ParallelSizes& sizes, const std::vector<GridRank>& ranks);

  // Starts parameter `name` of shape `shape` of rank `r` (an index into the
  // ranks given at construction). Its dtype is its first piece's.
  void Begin(size_t r, std::string name, Dims shape);
  // Appends box [offset, offset + shape) of `tensor`, laid out by `axes`,
  // to the current parameter. Every box of one tensor must use the same
  // axes.
  Status Piece(const HfTensor& tensor, const TensorAxes& axes, Dims offset,
               Dims shape);
  // Appends the whole tensor.
  Status Whole(const HfTensor& tensor, const TensorAxes& axes);
  // Appends `rows` rows of padding (the current parameter's row bytes).
  void PadRows(int64_t rows);
  // Parameter `name` of rank `r` of shape `shape` (not zero-size) and the
  // dtype of `like`, all padding: what a vocabulary-parallel rank beyond
  // the vocabulary's rows holds. Internal when `shape` is zero-size.
  Status Padding(size_t r, std::string name, Dims shape, const HfTensor& like);
  // Ends the current parameter: its pieces must fill its shape.
  Status End();
  // Parameter `name` of rank `r` of zero size (`shape` holds a 0) and the
  // dtype of `like`, with no pieces: what an engine rank without routed
  // experts holds. Internal when `shape` is not zero-size.
  Status Empty(size_t r, std::string name, Dims shape, const HfTensor& like);
  // Parameter `name` of rank `r` of shape `shape` and dtype `dtype`
  // (placement name) whose every element is `fill` (that element's bytes):
  // a constant the engine allocates, of no canonical tensor; one fill
  // piece (none when zero-size). Internal when `fill` is not one element.
  Status Fill(size_t r, std::string name, Dims shape, const std::string& dtype,
              std::string fill);

  Result<EngineLayout> Build(const HfConfig& config,
                             const EngineLayoutOptions& options);

 private:
  Status Declare(const HfTensor& tensor, const TensorAxes& axes);

  std::string engine_;
  std::string spec_;
  ParallelSizes sizes_;
  std::vector<GridRank> ranks_;
  std::vector<EngineParticipant> parts_;
  std::map<std::string, std::pair<TensorDescriptorSpec, TensorAxes>> tensors_;
  std::vector<PlacementFragment> fragments_;
  EngineParameter* current_ = nullptr;
  size_t current_rank_ = 0;
  uint64_t row_bytes_ = 0;  // of the current parameter
  uint64_t at_ = 0;
};

}  // namespace reshard::internal

#endif  // RESHARD_ENGINE_LAYOUT_BUILDER_H_
