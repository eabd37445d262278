// How the NCCL exchange reaches the memory it moves: the streams its
// collectives run on, buffers the collectives can read and write, and the
// packing of strided sides into such buffers. Two implementations:
//  - device memory (MakeDeviceMemory), for the NCCL library: streams,
//    events and device buffers of the CUDA device-API seam
//    (exec_cuda/device_api.h); a strided side is packed into (or unpacked
//    from) a device buffer by the CUDA executor's lowering of a region to
//    pitched copies or the gather/scatter kernel (copy_lowering.h), queued
//    on the pair's stream ahead of the send (after the receive); regions
//    in host memory are refused, naming the operation;
//  - host memory (MakeHostMemory), for HostNcclApi: the emulation's
//    streams, host buffers, and the strided stream helpers
//    (live_exchange/side_stream.h), which run at once.
// Either way the caller orders its work by stream: it waits for Done()
// before it reads what a receive or a Download wrote.

#ifndef RESHARD_EXEC_NCCL_NCCL_MEMORY_H_
#define RESHARD_EXEC_NCCL_NCCL_MEMORY_H_

#include <cstdint>
#include <memory>
#include <string>

#include "exec_cuda/device_api.h"
#include "exec_nccl/nccl_host_api.h"
#include "reshard/sdk/peer_exchange.h"
#include "reshard/status.h"

namespace reshard::nccl {

class NcclMemory {
 public:
  virtual ~NcclMemory() = default;

  // The memory kind of the regions it moves (kCuda for the device
  // implementation, kHost for the emulation's), which the exchange
  // declares in its capabilities.
  virtual MemoryKind kind() const = 0;

  virtual Result<cuda::StreamHandle> CreateStream() = 0;
  virtual void DestroyStream(cuda::StreamHandle stream) = 0;
  // True once the work queued on `stream` so far has finished.
  virtual Result<bool> Done(cuda::StreamHandle stream) = 0;

  // A buffer of `bytes` (at least 1) the collectives can reach, and its
  // release.
  virtual Result<uint8_t*> Allocate(uint64_t bytes) = 0;
  virtual void Release(uint8_t* buffer) = 0;

  // Host bytes into a buffer of Allocate, queued on `stream`; and a
  // buffer's bytes (its work done) back to the host, complete on return.
  virtual Status Upload(const void* host, uint8_t* buffer, uint64_t bytes,
                        cuda::StreamHandle stream) = 0;
  virtual Status Download(const uint8_t* buffer, void* host, uint64_t bytes,
                          cuda::StreamHandle stream) = 0;

  // OK where the collectives can move `op`'s side where it lies (else
  // InvalidArgument naming the operation through `what`).
  virtual Status CheckReachable(const ExchangeOp& op,
                                const std::string& what) = 0;
  // Where the collectives can send `op`'s stream from (or receive it
  // into) where it lies: a contiguous side; null where it must be staged
  // (a strided side, or a host buffer for device collectives).
  virtual uint8_t* InPlace(const ExchangeOp& op) = 0;
  // `op`'s stream (SideStream order) into `buffer`, or `buffer` into its
  // side, queued on `stream`.
  virtual Status Pack(const ExchangeOp& op, uint8_t* buffer,
                      cuda::StreamHandle stream) = 0;
  virtual Status Unpack(const ExchangeOp& op, const uint8_t* buffer,
                        cuda::StreamHandle stream) = 0;
};

std::unique_ptr<NcclMemory> MakeHostMemory(std::shared_ptr<HostNcclApi> api);
std::unique_ptr<NcclMemory> MakeDeviceMemory(
    std::shared_ptr<cuda::DeviceApi> api, int device);

}  // namespace reshard::nccl

#endif  // RESHARD_EXEC_NCCL_NCCL_MEMORY_H_
