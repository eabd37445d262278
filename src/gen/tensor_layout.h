// Laying one tensor out on a dp x pp x ep x tp participant grid: the shared
// core of the layout generator and the test builders.

#ifndef RESHARD_GEN_TENSOR_LAYOUT_H_
#define RESHARD_GEN_TENSOR_LAYOUT_H_

#include <optional>
#include <string>
#include <vector>

#include "reshard/placement.h"

namespace reshard::internal {

struct TensorLayout {
  std::string tensor_id;
  Dims shape;
  std::string dtype = "bfloat16";
  int64_t itemsize = 2;
  int64_t tp_dim = -1;  // TP split dimension; -1: replicated over TP
  // TP rank r holds [r * tp_chunk, min((r + 1) * tp_chunk, extent)) of
  // tp_dim (a padded split: engines pad a vocabulary TP does not divide,
  // the last ranks hold fewer rows); 0: an even split. Every rank must hold
  // at least one row.
  int64_t tp_chunk = 0;
  // A sectioned split: tp_dim is the concatenation of sections of these
  // extents (summing to it), each split evenly over TP, and TP rank r holds
  // its share of every section, one fragment per section (a fused [q | k |
  // v] tensor that engines split section by section: Qwen3-Next's
  // conv1d, Qwen3.5's in_proj_qkv). Empty: one section. Excludes tp_chunk.
  std::vector<int64_t> tp_sections;
  bool ep_split = false;  // EP splits dim 0 (grouped experts)
  int64_t pp_owner = -1;  // owning PP rank; -1: replicated over PP
  std::optional<int64_t> layer_id;
  std::optional<int64_t> expert_id;
  int64_t ep_owner = -1;  // owning EP rank (individually allocated experts)
  std::vector<std::string> aliases;
  std::string layout_fingerprint;  // defaults to "<dtype>:row-major"
};

// Appends the tensor's descriptor and one fragment per participant that
// holds it. Axes are declared for every axis of size > 1: DP replicated,
// PP ownership (or replicated), EP split / ownership / replicated, TP split
// or replicated. Fails when a split does not divide its dimension.
Status AppendTensorLayout(const ParallelTopologySpec& topology,
                          const TensorLayout& layout,
                          std::vector<TensorDescriptorSpec>* tensors,
                          std::vector<PlacementFragmentSpec>* fragments);

// The manifest of specs appended by AppendTensorLayout: every descriptor
// and fragment validated by its factory, then the whole placement.
Result<WeightPlacementManifest> ManifestFromSpecs(
    PlacementHeader header, const ParallelTopologySpec& topology,
    std::vector<TensorDescriptorSpec> tensors,
    std::vector<PlacementFragmentSpec> fragments);

// A grid layout's placement_set_id: "<name>-tp<T>-pp<P>-ep<E>-dp<D>".
std::string GridPlacementSetId(const std::string& name,
                               const ParallelSizes& sizes);

}  // namespace reshard::internal

#endif  // RESHARD_GEN_TENSOR_LAYOUT_H_
