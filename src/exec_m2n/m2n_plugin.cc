// libreshard_m2n.so: the calls into NCCL M2N (nccl_m2n.h, API version 2)
// behind M2nPlugin. Built only with the M2N wheel and CUDA
// (cmake/m2n.cmake), against the NCCL headers of the nvidia-nccl wheel
// (nccl_m2n.h needs NCCL 2.30.5 or newer); loaded by M2nBackend.

#include <cuda_runtime.h>
#include <nccl.h>
#include <nccl_m2n.h>

#include <string>
#include <vector>

#include "exec_m2n/m2n_backend.h"
#include "exec_m2n/m2n_nccl_descriptor.h"

namespace reshard::m2n {
namespace {

static_assert(NCCL_RESHARD_MAX_MESH_DIMS == kMaxMeshDims);
static_assert(NCCL_RESHARD_MAX_TENSOR_DIMS == kMaxTensorDims);
static_assert(NCCL_RESHARD_REPLICATE == kReplicate);

struct Session {
  ncclComm_t comm = nullptr;
  bool owns_comm = false;
  ncclM2nHandle_t handle = nullptr;
};

class Plugin final : public M2nPlugin {
 public:
  std::string Version() override {
    return "nccl-m2n " + std::to_string(NCCL_M2N_MAJOR) + "." +
           std::to_string(NCCL_M2N_MINOR) + "." +
           std::to_string(NCCL_M2N_PATCH) + ", nccl " +
           std::to_string(NCCL_MAJOR) + "." + std::to_string(NCCL_MINOR) + "." +
           std::to_string(NCCL_PATCH);
  }

  // The process has one libnccl.so.2: whichever was loaded first (a
  // framework's, the toolkit's) serves this plugin too, and NCCL M2N
  // needs a newer one than some of those.
  std::string Check() override {
    int version = 0;
    if (ncclGetVersion(&version) == ncclSuccess &&
        version < NCCL_M2N_MIN_NCCL_VERSION_CODE) {
      return "NCCL M2N needs NCCL 2.30.5 or newer, and this process loaded "
             "NCCL " +
             std::to_string(version / 10000) + "." +
             std::to_string(version / 100 % 100) + "." +
             std::to_string(version % 100) +
             " (load the newer libnccl.so.2 before reshard)";
    }
    return "";
  }

  std::string Open(void* comm, int device, void** out) override {
    if (std::string why = Check(); !why.empty()) return why;
    auto* s = new Session;
    if (comm != nullptr) {
      s->comm = static_cast<ncclComm_t>(comm);
    } else {
      ncclResult_t r = ncclCommInitAll(&s->comm, 1, &device);
      if (r != ncclSuccess) {
        delete s;
        return NcclError("ncclCommInitAll", r);
      }
      s->owns_comm = true;
    }
    ncclResult_t r = ncclM2nInit(&s->handle, nullptr);
    if (r != ncclSuccess) {
      Close(s);
      return NcclError("ncclM2nInit", r);
    }
    *out = s;
    return "";
  }

  std::string Run(void* session, const std::vector<M2nTensor>& tensors,
                  const std::vector<M2nBuffers>& buffers,
                  void* stream) override {
    auto* s = static_cast<Session*>(session);
    auto st = static_cast<cudaStream_t>(stream);
    ncclM2nGroupStart();
    for (size_t i = 0; i < tensors.size(); ++i) {
      // Grouped calls copy the descriptors while recording.
      SideDescriptor src(tensors[i].source, tensors[i].dtype,
                         buffers[i].source);
      SideDescriptor dst(tensors[i].target, tensors[i].dtype,
                         buffers[i].target);
      ncclResult_t r =
          ncclReshard(s->handle, s->comm, &src.tensor, &dst.tensor, st);
      if (r != ncclSuccess) {
        ncclM2nGroupAbort();
        return NcclError(("ncclReshard of " + tensors[i].tensor_id).c_str(), r);
      }
    }
    ncclResult_t r = ncclM2nGroupEnd();
    return r == ncclSuccess ? "" : NcclError("ncclM2nGroupEnd", r);
  }

  std::string Query(void* stream, bool* done) override {
    cudaError_t e = cudaStreamQuery(static_cast<cudaStream_t>(stream));
    *done = e == cudaSuccess;
    return e == cudaSuccess || e == cudaErrorNotReady
               ? ""
               : std::string(cudaGetErrorString(e));
  }

  std::string Synchronize(void* stream) override {
    cudaError_t e = cudaStreamSynchronize(static_cast<cudaStream_t>(stream));
    return e == cudaSuccess ? "" : std::string(cudaGetErrorString(e));
  }

  void Close(void* session) override {
    auto* s = static_cast<Session*>(session);
    if (s == nullptr) return;
    if (s->handle != nullptr) ncclM2nFinalize(s->handle);
    if (s->owns_comm) ncclCommDestroy(s->comm);
    delete s;
  }
};

}  // namespace
}  // namespace reshard::m2n

extern "C" __attribute__((visibility("default"))) reshard::m2n::M2nPlugin*
ReshardM2nPlugin() {
  static reshard::m2n::Plugin plugin;
  return &plugin;
}
