// The converting reshard tests' FP8 model (api/convert_reshard_test.cc,
// api/device_conversion_test.cc): one weight whose rows split its
// 128 x 128 blocks (two blocks and 44 rows), its block scales and a norm.

#ifndef RESHARD_TESTING_FP8_LAYOUT_H_
#define RESHARD_TESTING_FP8_LAYOUT_H_

#include <cstdint>
#include <optional>
#include <string>

#include "reshard/placement.h"
#include "testing/must.h"
#include "testing/placement_builders.h"

namespace reshard::testing {

inline constexpr int64_t kFp8Rows = 300, kFp8Cols = 256;
inline const std::string kFp8Weight = "model.layers.0.mlp.up_proj.weight";
inline const std::string kFp8Scale =
    "model.layers.0.mlp.up_proj.weight_scale_inv";
inline const std::string kFp8Norm = "model.norm.weight";

// A tensor's dtype, itemsize and TP split dimension (-1: replicated).
struct Fp8Tensor {
  std::string dtype;
  int64_t itemsize;
  int64_t tp_dim = -1;
};

// The weight [300, 256], the norm [256] (replicated: its tp_dim is not
// read) and, where given, the scales [3, 2], over `tp` ranks.
inline WeightPlacementManifest Fp8Layout(
    int64_t tp, const Fp8Tensor& weight, const Fp8Tensor& norm,
    const std::optional<Fp8Tensor>& scale) {
  auto draft = GridDraft({1, 1, 1, tp});
  AddTensor(&draft, {.tensor_id = kFp8Weight,
                     .shape = {kFp8Rows, kFp8Cols},
                     .dtype = weight.dtype,
                     .itemsize = weight.itemsize,
                     .tp_dim = weight.tp_dim});
  AddTensor(&draft, {.tensor_id = kFp8Norm,
                     .shape = {kFp8Cols},
                     .dtype = norm.dtype,
                     .itemsize = norm.itemsize});
  if (scale.has_value()) {
    AddTensor(&draft, {.tensor_id = kFp8Scale,
                       .shape = {3, 2},
                       .dtype = scale->dtype,
                       .itemsize = scale->itemsize,
                       .tp_dim = scale->tp_dim});
  }
  return Must(draft.Build());
}

}  // namespace reshard::testing

#endif  // RESHARD_TESTING_FP8_LAYOUT_H_
