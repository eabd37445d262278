// Internal to exec_cuda: the CUDA executor over any DeviceApi (the CUDA
// runtime in MakeCudaTransport, the host emulation in tests).
#ifndef RESHARD_EXEC_CUDA_CUDA_TRANSPORT_H_
#define RESHARD_EXEC_CUDA_CUDA_TRANSPORT_H_

#include <memory>

#include "exec_cuda/device_api.h"
#include "reshard/backends/cuda_transport.h"
#include "reshard/sdk/transport.h"

namespace reshard::cuda {

// The executor of include/reshard/backends/cuda_transport.h over `api`.
std::unique_ptr<Transport> MakeTransportOver(
    std::shared_ptr<DeviceApi> api, const CudaTransportOptions& options);

// The CUDA runtime's DeviceApi, or FailedPrecondition "CUDA executor
// unavailable: this build has no CUDA backend" where RESHARD_CUDA was off.
Result<std::shared_ptr<DeviceApi>> RuntimeDeviceApi();

}  // namespace reshard::cuda

#endif  // RESHARD_EXEC_CUDA_CUDA_TRANSPORT_H_
