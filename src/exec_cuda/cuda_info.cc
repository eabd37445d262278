// QueryCuda, and RuntimeDeviceApi where this build has no CUDA backend
// (with one, cuda_runtime_api.cc defines it).
#include <memory>

#include "exec_cuda/cuda_transport.h"
#include "reshard/backends/cuda_transport.h"

namespace reshard {

CudaInfo QueryCuda() {
  CudaInfo info;
  Result<std::shared_ptr<cuda::DeviceApi>> api = cuda::RuntimeDeviceApi();
  if (!api.ok()) return info;
  info.built = true;
  info.runtime = (*api)->RuntimeVersion();
  Result<int> devices = (*api)->DeviceCount();
  info.devices = devices.ok() ? *devices : 0;
  return info;
}

}  // namespace reshard

#if !RESHARD_CUDA_BUILT
namespace reshard::cuda {

Result<std::shared_ptr<DeviceApi>> RuntimeDeviceApi() {
  return Status::FailedPrecondition(
      "CUDA executor unavailable: this build has no CUDA backend "
      "(configure with -DRESHARD_CUDA=ON where nvcc is installed)");
}

}  // namespace reshard::cuda
#endif
