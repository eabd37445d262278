// What the calls into NCCL M2N build from the lowering's descriptions
// (m2n_backend.h), shared by the plugin (m2n_plugin.cc) and the
// benchmark's direct baseline (bench/m2n_direct.cc), so that both hand
// ncclReshard the same descriptors. Only for code built against the M2N
// wheel's headers (nccl.h 2.30.5 or newer, nccl_m2n.h): the two modules
// cmake/m2n.cmake and the benchmark build; nothing else includes it.

#ifndef RESHARD_EXEC_M2N_M2N_NCCL_DESCRIPTOR_H_
#define RESHARD_EXEC_M2N_M2N_NCCL_DESCRIPTOR_H_

#include <nccl.h>
#include <nccl_m2n.h>

#include <string>
#include <vector>

#include "exec_m2n/m2n_backend.h"

namespace reshard::m2n {

// The NCCL type of `dtype`.
inline ncclDataType_t NcclDtype(M2nDtype dtype) {
  switch (dtype) {
    case M2nDtype::kInt8:
      return ncclInt8;
    case M2nDtype::kUint8:
      return ncclUint8;
    case M2nDtype::kFloat8e4m3:
      return ncclFloat8e4m3;
    case M2nDtype::kFloat8e5m2:
      return ncclFloat8e5m2;
    case M2nDtype::kFloat16:
      return ncclFloat16;
    case M2nDtype::kBfloat16:
      return ncclBfloat16;
    case M2nDtype::kInt32:
      return ncclInt32;
    case M2nDtype::kUint32:
      return ncclUint32;
    case M2nDtype::kFloat32:
      return ncclFloat32;
    case M2nDtype::kInt64:
      return ncclInt64;
    case M2nDtype::kUint64:
      return ncclUint64;
    case M2nDtype::kFloat64:
      return ncclFloat64;
  }
  return ncclUint8;
}

// `what` failed with `r`: "what: <NCCL's string> (<M2N's last error>)",
// the parenthesis left out when M2N has none.
inline std::string NcclError(const char* what, ncclResult_t r) {
  std::string detail = ncclM2nGetLastError();
  return std::string(what) + ": " + ncclGetErrorString(r) +
         (detail.empty() ? "" : " (" + detail + ")");
}

// The descriptors of one side; the arrays they point into live here, as
// long as the call that reads them.
struct SideDescriptor {
  std::vector<int> dims;
  std::vector<int> placements;
  std::vector<size_t> local_shape;
  ncclMesh_t mesh = NCCL_M2N_MESH_INITIALIZER;
  ncclDistTensor_t tensor = NCCL_M2N_DIST_TENSOR_INITIALIZER;

  SideDescriptor(const M2nSide& side, M2nDtype dtype, void* data)
      : dims(side.mesh.dims),
        placements(side.placements),
        local_shape(side.local_shape.begin(), side.local_shape.end()) {
    mesh.ndims = static_cast<int>(dims.size());
    mesh.dims = dims.data();
    mesh.startRank = side.mesh.start_rank;
    tensor.dataPtr = data;
    tensor.localShape = local_shape.data();
    tensor.ndims = static_cast<int>(local_shape.size());
    tensor.dtype = NcclDtype(dtype);
    tensor.mesh = &mesh;
    tensor.placements = placements.data();
  }
  SideDescriptor(const SideDescriptor&) = delete;
  SideDescriptor& operator=(const SideDescriptor&) = delete;
};

}  // namespace reshard::m2n

#endif  // RESHARD_EXEC_M2N_M2N_NCCL_DESCRIPTOR_H_
