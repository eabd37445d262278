// Internal to live_cuda_ipc: the CUDA IPC peer exchange ("cuda-ipc") over
// any DeviceApi (the CUDA runtime when made by name, the host emulation in
// tests), as exec_cuda's MakeTransportOver does for the executor.
//
// Ranks are processes of one host. A rank's memory is device memory: a
// source range it registers (RegisterMemory) is published as the CUDA IPC
// handle of the allocation holding it plus where the range lies in it;
// a peer opens that handle once per allocation for as long as it is
// connected (ImportRemoteKey; IpcOpenMemHandle) and closes it at
// Disconnect or when the exchange is destroyed (IpcCloseMemHandle). A get
// (kGet) is then a copy on this rank's device, lowered as the CUDA
// executor lowers a region (copy_lowering.h): the peer's bytes move
// straight from its memory into this rank's targets.
//
// Every region is read: capabilities() says pull_every_region, so a
// session pulls every region it receives. What a session sends besides
// the data (ExchangeOp::buffer: its verification hashes) travels through
// a mailbox of each rank (ipc_mailbox.h). A kSend or kReceive of regions
// is refused (Unimplemented) naming the operation: a session that pushes
// (LiveProtocol::kPush, delta updates, movable sources) cannot run over
// this exchange.
//
// Memory kinds (capabilities().memory_kinds): CUDA and host. A session
// hands it its CUDA fragments as they are (their device addresses, no
// host mirrors; live/device_regions.h); a source must lie in a device
// allocation (RegisterMemory refuses any other), a target may be host
// memory (the get copies device to host).
//
// Settings: "device", the CUDA device ordinal this rank's memory is on
// and its copies run on (default 0).
#ifndef RESHARD_LIVE_CUDA_IPC_CUDA_IPC_EXCHANGE_H_
#define RESHARD_LIVE_CUDA_IPC_CUDA_IPC_EXCHANGE_H_

#include <memory>

#include "exec_cuda/device_api.h"
#include "reshard/sdk/peer_exchange.h"

namespace reshard::internal {

// The registered exchange's settings, checked (InvalidArgument naming a
// setting it does not take or a malformed value).
Status CheckCudaIpcOptions(const PeerExchangeOptions& options);

// A "cuda-ipc" exchange for one rank over `api`.
Result<std::unique_ptr<PeerExchange>> MakeCudaIpcExchangeOver(
    std::shared_ptr<cuda::DeviceApi> api, const PeerExchangeConfig& config);

}  // namespace reshard::internal

#endif  // RESHARD_LIVE_CUDA_IPC_CUDA_IPC_EXCHANGE_H_
