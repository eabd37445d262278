// Delta updates of a standing session (LiveSessionOptions::delta,
// docs/live.md): what one rank keeps and does so that an update sends only
// the elements that changed since the last one.
//
// A source keeps a snapshot of every message it sends (the regions'
// streams as last delivered), in host memory. An update after the first
// runs in parts (by region index), each in two rounds over the peer
// exchange:
//  1. every target sends each source, per message, the XXH3-64 of each
//     region's target bytes as it holds them now (its base). Meanwhile
//     every source compares what it serves with its snapshot, encodes per
//     region the changed elements in their smallest encoding
//     (delta_codec.h) and brings the snapshot (and its cached hashes) up
//     to date;
//  2. every source checks the targets' hashes against the snapshot's
//     before the update, re-encodes whole each region whose target holds
//     another base (an overwritten or re-allocated target buffer: the
//     region in full, within the same update, never a delta on a wrong
//     base), and sends the messages.
// A source encodes part p + 1 while its targets apply part p and hash the
// bases of part p + 1.
// Targets apply each region in place. Local regions are copied whole.

#ifndef RESHARD_LIVE_LIVE_DELTA_H_
#define RESHARD_LIVE_LIVE_DELTA_H_

#include <cstdint>
#include <memory>
#include <vector>

#include "live_exchange/peer_exchange.h"
#include "reshard/live.h"
#include "reshard/placement.h"
#include "reshard/plan.h"

namespace reshard::live_internal {

class LiveDelta {
 public:
  // Element sizes come from `source`'s tensors (regions compare elements
  // as raw bytes of their itemsize). `threads`: LiveSessionOptions::
  // delta_threads.
  LiveDelta(const LogicalTransferPlan& plan,
            const WeightPlacementManifest& source, uint32_t threads);
  ~LiveDelta();
  LiveDelta(const LiveDelta&) = delete;
  LiveDelta& operator=(const LiveDelta&) = delete;

  // The snapshot memory `ops` need: the bytes of every message this rank
  // sends.
  static uint64_t SnapshotBytes(const std::vector<internal::ExchangeOp>& ops);

  // After a full update: the snapshot of every message this rank sent
  // (its sources as they were sent). `ops` are the update's operations.
  // ResourceExhausted when the snapshot cannot be allocated.
  Status Snapshot(const std::vector<internal::ExchangeOp>& ops);

  // One delta update over `ops` (the full update's operations, push):
  // rounds 1 with `base_round`'s tags, rounds 2 with `data_round`'s.
  // `base_generation` is the generation of the last update (every delta
  // names it; a target refuses another). Counters and times go to
  // `report`; exchange statistics of round 2 to `stats`.
  Status Run(internal::PeerExchange& exchange,
             const std::vector<internal::ExchangeOp>& ops,
             const internal::ExchangeOptions& base_round,
             const internal::ExchangeOptions& data_round,
             uint64_t base_generation, LiveReport* report,
             internal::ExchangeStats* stats);

  // Gives up the message buffers (never freed) after a failed exchange
  // left operations in flight: the exchange may still write into them.
  void Abandon();

 private:
  struct Buffers;
  uint32_t ItemSize(const BoundRegion& region) const;
  // The receive buffer of every message (once; each sized for its regions
  // raw).
  Status AllocateInbox(const std::vector<internal::ExchangeOp>& ops);
  // Round 1's operations `which` (indices into ops): targets send the
  // base hashes of their regions (computed here), sources receive them.
  std::vector<internal::ExchangeOp> BaseHashRound(
      const std::vector<internal::ExchangeOp>& ops,
      const std::vector<size_t>& which);
  // Round 2's operations `which` (indices into ops): encoded messages out,
  // receive buffers in.
  std::vector<internal::ExchangeOp> MessageRound(
      const std::vector<internal::ExchangeOp>& ops,
      const std::vector<size_t>& which);
  // The steps of Run over the operations `which` (indices into ops).
  Status Encode(const std::vector<internal::ExchangeOp>& ops,
                const std::vector<size_t>& which, uint64_t base_generation,
                LiveReport* report);
  // Encodes send operation `op` (index i) against its snapshot.
  void EncodeOp(const internal::ExchangeOp& op, size_t i,
                uint64_t base_generation);
  // After round 1: checks the targets' base hashes and re-encodes whole
  // every region whose target holds another base.
  Status Reconcile(const std::vector<internal::ExchangeOp>& ops,
                   const std::vector<size_t>& which, LiveReport* report);
  Status Apply(const std::vector<internal::ExchangeOp>& ops,
               const std::vector<size_t>& which, uint64_t base_generation,
               LiveReport* report);

  std::vector<uint32_t> region_itemsize_;  // by plan region
  std::unique_ptr<Buffers> buffers_;
  size_t encode_threads_;  // 0: automatic (Encode)
};

}  // namespace reshard::live_internal

#endif  // RESHARD_LIVE_LIVE_DELTA_H_
