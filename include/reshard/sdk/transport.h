// The in-process executor interface: a Transport moves the bytes of a
// BoundTransferPlan whose sources and targets are all mapped in this
// process (LocalTransport: host memory; a CUDA transport next, for device
// memory of this process). Moving a plan between processes is not a
// Transport: each rank of a live session executes only its own share of
// the plan against its peers, and the session (include/reshard/live.h)
// owns that exchange, its failures and its outcome.
//
// Thread contract: Submit, Poll and Wait may be called from any thread; a
// Transport serialises its own state. Submit keeps what it needs of the
// plan (the caller may drop its BoundTransferPlan), but the buffers the plan
// names must stay allocated, the sources unmodified and the targets
// untouched by the caller until Poll or Wait reports a terminal state.
// Destroying a Transport waits for the transfers still in flight.
//
// Outcomes:
//  - kCompleted: every byte of the plan was written.
//  - kFailed: the transfer stopped and nothing of it is in flight any more
//    (the buffers may be released); target bytes are unspecified.
// A plan the transport cannot execute (a memory kind it does not move, the
// in-flight limit reached) is refused by Submit before any byte moves.

#ifndef RESHARD_SDK_TRANSPORT_H_
#define RESHARD_SDK_TRANSPORT_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "reshard/bound_plan.h"
#include "reshard/status.h"

namespace reshard {

// What a transport declares; Submit enforces both limits.
struct TransportCapabilities {
  std::string name;  // as named in refusals, e.g. "local"
  // The kinds Submit accepts; a plan touching any other kind is refused
  // (BoundTransferPlan::RequireMemoryKinds).
  std::vector<MemoryKind> memory_kinds;
  // Transfers that may be in flight at once; Submit refuses one more
  // (ResourceExhausted).
  uint32_t max_in_flight = 1;
};

enum class TransferState : uint8_t {
  kPending,
  kCompleted,
  kFailed,
};

using TransferId = uint64_t;

class Transport {
 public:
  virtual ~Transport() = default;

  virtual const TransportCapabilities& capabilities() const = 0;
  // Starts moving `plan`'s bytes. Fails, and moves nothing, for a plan
  // touching a memory kind the transport does not move
  // (FailedPrecondition) or when max_in_flight transfers are pending
  // (ResourceExhausted).
  virtual Result<TransferId> Submit(const BoundTransferPlan& plan) = 0;
  // Non-blocking state of a submitted transfer; NotFound for an id this
  // transport did not return.
  virtual Result<TransferState> Poll(TransferId id) = 0;
  // Blocks until the transfer is terminal; OK only for kCompleted. Waiting
  // again on a terminal transfer returns the same result.
  virtual Status Wait(TransferId id) = 0;
};

}  // namespace reshard

#endif  // RESHARD_SDK_TRANSPORT_H_
