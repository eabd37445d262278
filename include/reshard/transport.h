// The executor interface every transport implements (local, UCX, CUDA).
//
// Thread contract: Submit, Poll and Wait may be called from any thread; a
// Transport serialises its own state. A BoundTransferPlan passed to Submit must
// stay alive, and its buffers must stay allocated and unmodified by the
// caller, until Poll or Wait reports a terminal state other than
// kUncertain; an uncertain transfer keeps its buffers pinned until Drain
// succeeds.
//
// Outcomes:
//  - kCompleted: every byte of the plan was written.
//  - kFailed: the transfer stopped; nothing is in flight any more (every
//    buffer is drained and may be released). Target bytes are unspecified.
//  - kUncertain: completion could not be established (for example a lost
//    peer). Buffers stay pinned and the transport refuses new work until
//    Drain succeeds.

#ifndef RESHARD_TRANSPORT_H_
#define RESHARD_TRANSPORT_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "reshard/bound_plan.h"
#include "reshard/status.h"

namespace reshard {

struct TransportCapabilities {
  std::string name;
  // The kinds Submit accepts; a plan touching any other kind is refused
  // (BoundTransferPlan::RequireMemoryKinds).
  std::vector<MemoryKind> memory_kinds;
  // True if one strided region is one operation (never one per row).
  bool strided = false;
  // Transfers that may be in flight at once.
  uint32_t max_in_flight = 1;
};

enum class TransferState : uint8_t {
  kPending,
  kCompleted,
  kFailed,
  kUncertain,
};

using TransferId = uint64_t;

class Transport {
 public:
  virtual ~Transport() = default;

  virtual const TransportCapabilities& capabilities() const = 0;
  // Starts moving `plan`'s bytes. Fails (and moves nothing) when the
  // transport is draining an uncertain transfer or the in-flight limit is
  // reached.
  virtual Result<TransferId> Submit(const BoundTransferPlan& plan) = 0;
  // Non-blocking state of a submitted transfer.
  virtual Result<TransferState> Poll(TransferId id) = 0;
  // Blocks until the transfer is terminal; OK only for kCompleted.
  virtual Status Wait(TransferId id) = 0;
  // Settles uncertain transfers; new work is accepted again after OK.
  virtual Status Drain() = 0;
};

}  // namespace reshard

#endif  // RESHARD_TRANSPORT_H_
