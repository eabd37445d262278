// Internal to the api layer: the executor of the local entry points
// (Reshard and ReshardLocally without a transport of the caller's). A plan
// of host memory only goes to the local executor; a plan touching CUDA
// memory to the CUDA executor, made on first use. Where there is none (a
// build without CUDA, a machine without a device) such a plan is refused
// before a byte moves, in one line naming its first CUDA fragment and why.
#ifndef RESHARD_API_AUTO_TRANSPORT_H_
#define RESHARD_API_AUTO_TRANSPORT_H_

#include <functional>
#include <memory>

#include "reshard/backends/local_transport.h"
#include "reshard/sdk/transport.h"

namespace reshard::internal {

// Makes the CUDA executor (MakeCudaTransport, or a test's).
using CudaTransportFactory =
    std::function<Result<std::unique_ptr<Transport>>()>;

Result<std::unique_ptr<Transport>> MakeAutoTransport(
    const LocalTransportOptions& local, CudaTransportFactory cuda);

}  // namespace reshard::internal

#endif  // RESHARD_API_AUTO_TRANSPORT_H_
