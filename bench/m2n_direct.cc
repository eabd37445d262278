// libreshard_bench_m2n_direct.so: reshard_bench_m2n's baseline, the
// NCCL M2N calls made directly (see m2n_direct.h). The descriptors are
// built as the plugin builds them (src/exec_m2n/m2n_plugin.cc), so both
// sides of the benchmark move the same tensors with the same descriptors.

#include "bench/m2n_direct.h"

#include <cuda_runtime.h>
#include <nccl.h>
#include <nccl_m2n.h>

#include <string>
#include <vector>

namespace reshard::bench {
namespace {

std::string NcclError(const char* what, ncclResult_t r) {
  return std::string(what) + ": " + ncclGetErrorString(r) + " (" +
         ncclM2nGetLastError() + ")";
}

// One side's descriptor and the arrays it points into.
struct Side {
  std::vector<int> dims, placements;
  std::vector<size_t> local_shape;
  ncclMesh_t mesh = NCCL_M2N_MESH_INITIALIZER;
  ncclDistTensor_t tensor = NCCL_M2N_DIST_TENSOR_INITIALIZER;

  Side(const m2n::M2nSide& side, ncclDataType_t dtype, void* data)
      : dims(side.mesh.dims),
        placements(side.placements),
        local_shape(side.local_shape.begin(), side.local_shape.end()) {
    mesh.ndims = static_cast<int>(dims.size());
    mesh.dims = dims.data();
    mesh.startRank = side.mesh.start_rank;
    tensor.dataPtr = data;
    tensor.localShape = local_shape.data();
    tensor.ndims = static_cast<int>(local_shape.size());
    tensor.dtype = dtype;
    tensor.mesh = &mesh;
    tensor.placements = placements.data();
  }
  Side(const Side&) = delete;
  Side& operator=(const Side&) = delete;
};

class Direct final : public DirectM2n {
 public:
  std::string Open(int device) override {
    ncclResult_t r = ncclCommInitAll(&comm_, 1, &device);
    if (r != ncclSuccess) return NcclError("ncclCommInitAll", r);
    r = ncclM2nInit(&handle_, nullptr);
    return r == ncclSuccess ? "" : NcclError("ncclM2nInit", r);
  }

  std::string Run(const std::vector<m2n::M2nTensor>& tensors,
                  const std::vector<m2n::M2nBuffers>& buffers) override {
    ncclM2nGroupStart();
    for (size_t i = 0; i < tensors.size(); ++i) {
      if (tensors[i].dtype != m2n::M2nDtype::kFloat32 &&
          tensors[i].dtype != m2n::M2nDtype::kUint8) {
        ncclM2nGroupAbort();
        return "the baseline moves float32 and uint8 tensors only";
      }
      const ncclDataType_t dtype =
          tensors[i].dtype == m2n::M2nDtype::kFloat32 ? ncclFloat32 : ncclUint8;
      Side src(tensors[i].source, dtype, buffers[i].source);
      Side dst(tensors[i].target, dtype, buffers[i].target);
      const ncclResult_t r =
          ncclReshard(handle_, comm_, &src.tensor, &dst.tensor, nullptr);
      if (r != ncclSuccess) {
        ncclM2nGroupAbort();
        return NcclError("ncclReshard", r);
      }
    }
    const ncclResult_t r = ncclM2nGroupEnd();
    if (r != ncclSuccess) return NcclError("ncclM2nGroupEnd", r);
    const cudaError_t e = cudaStreamSynchronize(nullptr);
    return e == cudaSuccess ? "" : std::string(cudaGetErrorString(e));
  }

  void Close() override {
    if (handle_ != nullptr) ncclM2nFinalize(handle_);
    if (comm_ != nullptr) ncclCommDestroy(comm_);
    handle_ = nullptr;
    comm_ = nullptr;
  }

 private:
  ncclComm_t comm_ = nullptr;
  ncclM2nHandle_t handle_ = nullptr;
};

}  // namespace
}  // namespace reshard::bench

extern "C" __attribute__((visibility("default"))) reshard::bench::DirectM2n*
ReshardBenchM2nDirect() {
  static reshard::bench::Direct direct;
  return &direct;
}
