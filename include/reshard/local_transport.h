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
  Result<TransferId> Submit(const TransferPlan& plan) override;
  Result<TransferState> Poll(TransferId id) override;
  Status Wait(TransferId id) override;
  Status Drain() override;

  struct Impl;

 private:
  explicit LocalTransport(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// Executes one bound region synchronously on the calling thread, copying
// segments [first, first + count) of its row enumeration (outer loops,
// last fastest). Exposed for executors built on top and for tests.
void CopyRegionSegments(const BoundRegion& region, uint64_t first,
                        uint64_t count);

}  // namespace reshard

#endif  // RESHARD_LOCAL_TRANSPORT_H_
