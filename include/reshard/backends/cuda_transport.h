// The CUDA executor: moves a plan whose sources and targets are in this
// process, in host memory or CUDA device memory (fragments bound to
// "cuda" or "cuda:<ordinal>"), host to device, device to host and device
// to device (peer GPUs included). Each region becomes one or a few
// cudaMemcpy3DAsync/2DAsync copies on a stream per device, or, where no
// copy descriptor expresses its strides, one launch of a gather/scatter
// kernel; every stream holds a bounded amount of queued work. Capabilities:
// name "cuda", host and CUDA memory, `max_in_flight` transfers.
//
// A build without CUDA (RESHARD_CUDA off) or a machine without a CUDA
// device has no such executor: MakeCudaTransport fails with one line
// saying which, and the local entry points refuse CUDA fragments naming
// the first one (CudaUnavailable).

#ifndef RESHARD_BACKENDS_CUDA_TRANSPORT_H_
#define RESHARD_BACKENDS_CUDA_TRANSPORT_H_

#include <cstdint>
#include <memory>
#include <string>

#include "reshard/sdk/transport.h"

namespace reshard {

// What this build and machine offer (`reshard info --json`'s "cuda").
struct CudaInfo {
  bool built = false;   // compiled with the CUDA runtime backend
  std::string runtime;  // the CUDA runtime's version, "13.0"; "" if not built
  int devices = 0;      // visible CUDA devices (0 without a driver)
};
CudaInfo QueryCuda();

struct CudaTransportOptions {
  uint32_t max_in_flight = 4;
  // Copies and kernel launches queued on one stream before the executor
  // waits for the oldest batch of them to finish (bounded in-flight work).
  uint32_t max_queued_per_stream = 1024;
  // A strided region is lowered to at most this many copies; beyond, it
  // goes through the gather/scatter kernel.
  uint32_t max_copies_per_region = 64;
};

// The executor over the CUDA runtime. FailedPrecondition "CUDA executor
// unavailable: ..." where this build has no CUDA backend or the machine no
// device.
Result<std::unique_ptr<Transport>> MakeCudaTransport(
    const CudaTransportOptions& options = {});

}  // namespace reshard

#endif  // RESHARD_BACKENDS_CUDA_TRANSPORT_H_
