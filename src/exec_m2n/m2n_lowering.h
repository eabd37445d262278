// The lowering of one tensor's move onto NCCL M2N's ncclReshard: whether
// the boxes its source ranks hold and the boxes its target ranks want are
// the local tensors of two DTensor-style meshes that ncclReshard accepts,
// and if so, the two descriptors (mesh dims, first rank, per-axis
// placements, local shape).
//
// Pure: no CUDA or NCCL header, compiled in every build. The limits are
// those of nccl_m2n.h (API version 2) and its Python side:
//
//   rule            limit
//   tensor-rank     1 to 3 tensor dimensions (NCCL_RESHARD_MAX_TENSOR_DIMS)
//   dtype           one of the twelve dtypes ncclDistTensor_t lists
//   same-dtype      source and target dtype equal (no conversion, so no
//                   quantized FP8 target of a wider source)
//   one-box-per-rank  each rank holds one box of the tensor (one local
//                   tensor); fused or sectioned layouts hold several
//   one-shard-axis  a sharded layout has exactly one SHARD mesh axis, so
//                   the boxes split at most one tensor dimension
//   dtensor-chunks  the boxes along the split dimension are DTensor
//                   chunks (rank i holds chunk i, each of ceil(n / k))
//   even-split      the split divides the dimension (ncclReshard derives
//                   the global shape as local shape times shard factor)
//   uniform-replicas  every chunk is held by the same number of ranks
//   contiguous-ranks  a side's ranks are one interval [start, start + n)
//   mesh-dims       chunks and their replicas are laid out row-major over
//                   at most 2 mesh dims (NCCL_RESHARD_MAX_MESH_DIMS)
//   source-count    at most 16 source ranks
//   target-count    at most 64 target ranks
//   disjoint-sides  source and target intervals disjoint unless the
//                   communicator has one rank
//
// Every refusal is one line naming its rule:
//   tensor "w": not lowered to ncclReshard: rule tensor-rank: 4
//   dimensions, at most 3

#ifndef RESHARD_EXEC_M2N_M2N_LOWERING_H_
#define RESHARD_EXEC_M2N_M2N_LOWERING_H_

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "reshard/dims.h"

namespace reshard::m2n {

inline constexpr int kMaxMeshDims = 2;    // NCCL_RESHARD_MAX_MESH_DIMS
inline constexpr int kMaxTensorDims = 3;  // NCCL_RESHARD_MAX_TENSOR_DIMS
inline constexpr int kMaxSources = 16;    // NVIDIA's stated product limits
inline constexpr int kMaxTargets = 64;
inline constexpr int kReplicate = -1;  // NCCL_RESHARD_REPLICATE

// ncclReshard's dtypes, named as reshard names them; the backend maps each
// to its ncclDataType_t.
enum class M2nDtype {
  kInt8,
  kUint8,
  kFloat8e4m3,
  kFloat8e5m2,
  kFloat16,
  kBfloat16,
  kInt32,
  kUint32,
  kFloat32,
  kInt64,
  kUint64,
  kFloat64,
};
// "float8_e4m3fn" -> kFloat8e4m3 ...; nullopt for any other name.
std::optional<M2nDtype> ParseM2nDtype(std::string_view dtype);

// The box of the tensor one communicator rank holds (source) or wants
// (target).
struct M2nBox {
  int rank = 0;
  Dims offset;
  Dims shape;
};

struct M2nTensorInput {
  std::string tensor_id;
  Dims global_shape;
  std::string source_dtype;
  std::string target_dtype;
  std::vector<M2nBox> source;
  std::vector<M2nBox> target;
  int comm_size = 0;  // ranks of the communicator both sides belong to
};

// ncclMesh_t: dims row-major over ranks [start_rank, start_rank + prod).
struct M2nMesh {
  std::vector<int> dims;
  int start_rank = 0;
  friend bool operator==(const M2nMesh&, const M2nMesh&) = default;
};

// One side of ncclDistTensor_t, buffers aside.
struct M2nSide {
  M2nMesh mesh;
  std::vector<int> placements;  // per mesh axis: kReplicate or the dim
  Dims local_shape;
  friend bool operator==(const M2nSide&, const M2nSide&) = default;
};

struct M2nTensor {
  std::string tensor_id;
  M2nDtype dtype = M2nDtype::kUint8;
  M2nSide source;
  M2nSide target;
};

// "src [4]@0 S(0) local [2,8] -> dst [2,2]@4 R,S(1) local [4,4]".
std::string DescribeM2nTensor(const M2nTensor& tensor);

// What becomes of one tensor: lowered (m2n set), or refused with the rule
// that failed and the one-line reason.
struct M2nDecision {
  std::string tensor_id;
  std::optional<M2nTensor> m2n;
  std::string rule;    // empty when lowered
  std::string reason;  // empty when lowered
};

// Lowers `input`, or refuses it naming the first rule that fails (in the
// order of the table above, source side before target side).
M2nDecision LowerTensorToM2n(const M2nTensorInput& input);

}  // namespace reshard::m2n

#endif  // RESHARD_EXEC_M2N_M2N_LOWERING_H_
