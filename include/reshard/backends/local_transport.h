// The local executor: host copies within this process. A transfer is cut
// into pieces of about `chunk_bytes` (a range of one region's rows, or a
// byte range of one large contiguous run) and copied by `threads` workers;
// strided regions are copied straight from their loops. Capabilities:
// name "local", host memory only, `max_in_flight` transfers. A transfer
// Submit accepted always completes (kCompleted): host copies cannot fail.

#ifndef RESHARD_BACKENDS_LOCAL_TRANSPORT_H_
#define RESHARD_BACKENDS_LOCAL_TRANSPORT_H_

#include <memory>

#include "reshard/sdk/transport.h"

namespace reshard {

struct LocalTransportOptions {
  // Worker threads per transfer (>= 1).
  uint32_t threads = 1;
  // Work is cut into pieces of about this many bytes for balancing.
  uint64_t chunk_bytes = uint64_t{32} << 20;
  uint32_t max_in_flight = 4;
};

class LocalTransport : public Transport {
 public:
  static Result<std::unique_ptr<LocalTransport>> Make(
      LocalTransportOptions options);
  ~LocalTransport() override;

  const TransportCapabilities& capabilities() const override;
  Result<TransferId> Submit(const BoundTransferPlan& plan) override;
  Result<TransferState> Poll(TransferId id) override;
  Status Wait(TransferId id) override;

 private:
  struct Impl;
  explicit LocalTransport(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace reshard

#endif  // RESHARD_BACKENDS_LOCAL_TRANSPORT_H_
