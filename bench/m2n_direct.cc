// libreshard_bench_m2n_direct.so: reshard_bench_m2n's baseline, the
// NCCL M2N calls made directly (see m2n_direct.h). The descriptors are
// built by the plugin's own code (exec_m2n/m2n_nccl_descriptor.h), so both
// sides of the benchmark move the same tensors with the same descriptors.

#include "bench/m2n_direct.h"

#include <cuda_runtime.h>
#include <nccl.h>
#include <nccl_m2n.h>

#include <string>
#include <vector>

#include "exec_m2n/m2n_nccl_descriptor.h"

namespace reshard::bench {
namespace {

using m2n::NcclError;
using m2n::SideDescriptor;

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
      SideDescriptor src(tensors[i].source, tensors[i].dtype,
                         buffers[i].source);
      SideDescriptor dst(tensors[i].target, tensors[i].dtype,
                         buffers[i].target);
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
