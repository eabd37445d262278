// The local executor: same-process (or shared-memory) host copies, strided
// regions executed directly, large runs split across threads.

#ifndef RESHARD_LOCAL_TRANSPORT_H_
#define RESHARD_LOCAL_TRANSPORT_H_

#include <memory>

#include "reshard/transport.h"

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
  Status Drain() override;


 private:
  struct Impl;
  explicit LocalTransport(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace reshard

#endif  // RESHARD_LOCAL_TRANSPORT_H_
