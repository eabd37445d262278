// The NCCL peer exchange (registered as "nccl"): a live session's ranks
// move their regions with NCCL point-to-point sends and receives.
//
// Connections. NCCL has no connect of one rank to another; ranks form a
// communicator from a unique id that one of them made. A live session must
// be able to replace one peer and keep the others' connections
// (sdk/peer_exchange.h), which one communicator over the whole session
// cannot do, so the exchange makes one communicator of two ranks per pair
// of connected ranks (NCCL rank 0 the lower session rank). The unique ids
// travel in the addresses: rank r's address carries one id for each lower
// rank, made when Address() is first called, and the pair (a, b), a < b,
// forms its communicator from b's id for a. Connect() starts the
// (non-blocking) initialisation; WireUp() waits until every connection's
// communicator is ready. A restarted rank publishes fresh ids, so a
// survivor reaches a restarted higher rank again with Disconnect and
// Connect; a survivor cannot reconnect to a restarted lower rank (its own
// id for that rank was used) and says so (FailedPrecondition).
//
// Run(). Per peer pair, three batches of ncclGroupStart / ncclSend /
// ncclRecv / ncclGroupEnd on the pair's own stream (so that the pairs
// never wait on one another): the number of messages each way, their list
// (first region and bytes, ordered by first region on both ends, since NCCL
// matches sends to receives per peer in order and has no tags), then the
// messages. A message whose size differs from what its receive expects is
// received into scratch memory and reported as DataLoss naming the
// operation; contiguous sides are sent and received in place, strided ones
// packed into (unpacked from) a staging buffer (nccl_memory.h). The
// deadline, poll_abort and the communicators' asynchronous errors are
// polled while the batches run; a run that fails aborts the communicators
// with work still in flight (ncclCommAbort), so it leaves nothing in
// flight, and those connections then report the failure until they are
// disconnected. kGet is not offered (capabilities: no pull; RegisterMemory
// and ImportRemoteKey are Unimplemented), so sessions push. Pieces are not
// handed to on_piece. The capabilities' memory kinds are CUDA memory for
// the library and host memory for the emulation: a session refuses
// fragments of the other kind before the exchange sees them.
//
// Settings (PeerExchangeOptions):
//   api     "nccl" (default): the NCCL library, on CUDA device memory
//           (built with RESHARD_CUDA where cmake/nccl.cmake finds NCCL);
//           "host": the host emulation (nccl_host_api.h), for ranks that
//           are threads of one process, on host memory
//   device  the CUDA device of the library's communicators, streams and
//           staging buffers (default 0)
//   m2n     "auto" (default): whole tensors that NCCL M2N's ncclReshard
//           takes move through it, collectively over every rank (the
//           exchange's TensorMover, nccl_m2n_mover.h): with api=host
//           through its host emulation, with the library through the M2N
//           plugin where this build has it (else nothing does: every
//           tensor moves by send/recv); "off": never

#ifndef RESHARD_EXEC_NCCL_NCCL_EXCHANGE_H_
#define RESHARD_EXEC_NCCL_NCCL_EXCHANGE_H_

#include <cstdint>
#include <memory>
#include <string>

#include "exec_nccl/nccl_api.h"
#include "exec_nccl/nccl_m2n_mover.h"
#include "exec_nccl/nccl_memory.h"
#include "reshard/sdk/peer_exchange.h"

namespace reshard::nccl {

struct NcclExchangeSettings {
  bool host_emulation = false;  // api=host
  int device = 0;
  bool m2n = true;  // m2n=auto
};

// The settings by name; InvalidArgument naming an unknown setting or a
// malformed value.
Result<NcclExchangeSettings> ParseNcclSettings(
    const PeerExchangeOptions& options);

// The exchange of `rank` over `api` and `memory` (which must go together:
// HostNcclApi with MakeHostMemory over it, the library with device memory),
// moving whole tensors as `m2n` says (kHost with HostNcclApi only).
std::unique_ptr<PeerExchange> MakeNcclExchange(
    uint32_t rank, std::shared_ptr<NcclApi> api,
    std::unique_ptr<NcclMemory> memory, int device,
    M2nMode m2n = M2nMode::kOff);

// The largest rank an address can serve: its ids must fit the 64 KiB of an
// address record.
constexpr uint32_t kMaxNcclRank = 240;

}  // namespace reshard::nccl

#endif  // RESHARD_EXEC_NCCL_NCCL_EXCHANGE_H_
