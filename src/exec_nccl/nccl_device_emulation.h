// The NCCL exchange's memory for the host emulation of NCCL over emulated
// CUDA device memory (exec_cuda's HostDeviceApi), for tests of what a
// session does with an exchange that moves device memory ("nccl" over the
// NCCL library) without a GPU: the exchange declares CUDA memory
// (MemoryKind::kCuda), as the library's does, so a session hands it its
// CUDA fragments' device addresses, and a region side that is not device
// memory of `device` (DeviceApi::Pointer) is refused naming the operation,
// as the library's device memory refuses it. The collectives, streams and
// packing are the emulation's host ones (MakeHostMemory): emulated device
// memory is host memory, which only the emulation may touch so.
#ifndef RESHARD_EXEC_NCCL_NCCL_DEVICE_EMULATION_H_
#define RESHARD_EXEC_NCCL_NCCL_DEVICE_EMULATION_H_

#include <memory>

#include "exec_cuda/device_api.h"
#include "exec_nccl/nccl_host_api.h"
#include "exec_nccl/nccl_memory.h"

namespace reshard::nccl {

std::unique_ptr<NcclMemory> MakeEmulatedDeviceMemory(
    std::shared_ptr<HostNcclApi> api, std::shared_ptr<cuda::DeviceApi> device);

}  // namespace reshard::nccl

#endif  // RESHARD_EXEC_NCCL_NCCL_DEVICE_EMULATION_H_
