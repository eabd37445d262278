// The UCX executor: one process's share of a bound transfer plan. A pushed
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

#ifndef RESHARD_EXEC_UCX_UCX_EXCHANGE_H_
#define RESHARD_EXEC_UCX_UCX_EXCHANGE_H_

#include <chrono>
#include <cstdint>
#include <functional>
#include <vector>

#include "exec/ucx/ucx_handles.h"
#include "reshard/bound_plan.h"

namespace reshard::internal {

struct ExchangeOp {
  enum class Kind : uint8_t {
    kSend,     // tag-send the source side to the peer (push)
    kReceive,  // tag-receive into the target side
    kGet,      // read the peer's source side into the target side (pull)
  };
  const BoundRegion* region = nullptr;  // the first (or only) region
  // kSend/kReceive: further regions travelling in the same message; the
  // message is the concatenation of every region's stream in this order,
  // and both ends must list the same regions in the same order.
  std::vector<const BoundRegion*> more;
  UcxEndpoint* peer = nullptr;  // the other side's endpoint
  Kind kind = Kind::kSend;
  ucp_rkey_h rkey = nullptr;  // kGet: the peer's key for the source side

  // Bytes of every region of the operation.
  uint64_t bytes() const;
};

// Regions of at most this many bytes between the same two ranks are
// coalesced into shared messages of at most kMaxCoalescedBytes (push; in
// pull mode they are pushed too), so a layout with tens of thousands of
// small tensors costs a few messages per pair of ranks.
constexpr uint64_t kMaxCoalescedRegion = uint64_t{64} << 10;
constexpr uint64_t kMaxCoalescedBytes = uint64_t{4} << 20;

// Regions read with RMA get in pull mode: both sides contiguous (one get),
// or rows of at least this many bytes (one get per row). The others are
// pushed as tagged messages, so small rows never become one get each.
constexpr uint64_t kMinPulledRow = uint64_t{256} << 10;
bool PulledRegion(const BoundRegion& region);

struct ExchangeOptions {
  // High 32 bits of every tag (the region index fills the low 32), so that
  // messages of another session never match.
  uint32_t session_tag = 0;
  uint32_t max_in_flight = 64;
  std::chrono::steady_clock::time_point deadline;
  // Polled about every `abort_poll_interval`; a non-OK status stops the
  // exchange with that status (a peer's abort, for example).
  std::function<Status()> poll_abort;
  std::chrono::milliseconds abort_poll_interval{20};
  // Called once, after the first operation completed successfully.
  std::function<void()> on_first_completion;
};

struct ExchangeStats {
  uint64_t messages_sent = 0;
  uint64_t messages_received = 0;
  uint64_t bytes_sent = 0;
  uint64_t bytes_received = 0;
  uint64_t packed_messages = 0;    // sides that went through pack/unpack
  uint64_t coalesced_regions = 0;  // regions in messages of several regions
  // When the exchange failed: operations posted and not completed, left to
  // UCX. Non-zero means their buffers may still be read or written.
  uint64_t abandoned_in_flight = 0;
  uint64_t gets = 0;  // RMA get requests (pull mode)
};

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
Status RunUcxExchange(UcxWorker& worker, const std::vector<ExchangeOp>& ops,
                      const ExchangeOptions& options, ExchangeStats* stats);

}  // namespace reshard::internal

#endif  // RESHARD_EXEC_UCX_UCX_EXCHANGE_H_
