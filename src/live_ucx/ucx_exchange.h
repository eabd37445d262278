// The UCX exchange: one process's share of a bound transfer plan. A pushed
// operation is exactly one tagged message: a contiguous region goes
// zero-copy (UCX picks eager or rendezvous; CMA or shared memory on one
// host); a strided region, or a batch of small regions coalesced into one
// message (ExchangeOp::more), is packed and unpacked through a UCX generic
// datatype, so small rows and small regions never become one request
// each. A pulled region is one RMA get, or one per row of at least
// kMinPulledRow bytes.
//
// Receives are all posted up front (cheap, and no cycle of full windows
// can deadlock); sends and gets keep at most `max_in_flight` in flight and
// never drain between batches.

#ifndef RESHARD_LIVE_UCX_UCX_EXCHANGE_H_
#define RESHARD_LIVE_UCX_UCX_EXCHANGE_H_

#include <chrono>
#include <cstdint>
#include <functional>
#include <vector>

#include "reshard/sdk/peer_exchange.h"
#include "live_ucx/ucx_handles.h"

namespace reshard::internal {

// The endpoint of each rank an operation names (nullptr for ranks this
// process does not exchange with).
using UcxEndpointsByRank = std::vector<UcxEndpoint*>;

// Completes connection establishment to every peer (a flush of each new
// endpoint), so that transfers start on wired-up connections and a peer
// that dies later is seen as a lost connection, not a failed connect.
Status WireUp(UcxWorker& worker, const std::vector<UcxEndpoint*>& peers,
              std::chrono::steady_clock::time_point deadline,
              const std::function<Status()>& poll_abort);

// Runs `ops` to completion. On any failure (a peer lost, a wrong message
// size, the deadline, an abort) the exchange stops without progressing the
// worker again: operations still in flight are left to UCX with their
// state (see UcxWorker::Abandon), so their buffers must be treated as in
// use, and the first error is returned, naming the region and the peer.
// An operation's ExchangeOp::remote_key is a ucp_rkey_h (UcxPeerExchange
// issues them).
Status RunUcxExchange(UcxWorker& worker, const UcxEndpointsByRank& endpoints,
                      const std::vector<ExchangeOp>& ops,
                      const ExchangeRunOptions& options, ExchangeStats* stats);

// For an exchange that declared CUDA memory, before Run: a message that
// RunUcxExchange packs (a strided side, or coalesced regions that are not
// one run) goes through a generic datatype whose callbacks copy with the
// CPU, which cannot read device memory. FailedPrecondition naming the
// first such operation one of whose sides UCX detects as other than host
// memory (DetectMemoryType); contiguous messages and gets are left to UCX,
// which moves device memory itself.
Status RefusePackedDeviceMemory(const UcxContext& context,
                                const UcxEndpointsByRank& endpoints,
                                const std::vector<ExchangeOp>& ops);

}  // namespace reshard::internal

#endif  // RESHARD_LIVE_UCX_UCX_EXCHANGE_H_
