// Delta updates of a standing session (LiveSessionOptions::delta,
// docs/live.md): what one rank keeps and does so that an update sends only
// the elements that changed since the last one.
//
// A source keeps a snapshot of every message it sends (the regions'
// streams as last delivered), in host memory, and the XXH3-64 of each
// region in it. An update after the first:
//  1. in parts by region index, every source compares what it serves with
//     its snapshot, encodes per region the changed elements in their
//     smallest encoding (delta_codec.h), each region naming the hash of the
//     base it applies to (the snapshot before the update), brings the
//     snapshot and its hashes up to date, and sends the messages; every
//     target hashes each region as it holds it, applies the change where
//     the hash is the message's (the bytes are then in cache), and marks
//     the region stale where it is not (an overwritten or re-allocated
//     target buffer), never applying a change to another base. A source
//     encodes part p + 1 while its targets check and apply part p;
//  2. every target sends each of its sources one byte per region of every
//     message (1: stale), and each source sends the stale regions again
//     whole, in the same update.
// Local regions are copied whole.

#ifndef RESHARD_LIVE_LIVE_DELTA_H_
#define RESHARD_LIVE_LIVE_DELTA_H_

#include <cstdint>
#include <memory>
#include <vector>

#include "reshard/live.h"
#include "reshard/placement.h"
#include "reshard/plan.h"
#include "reshard/sdk/peer_exchange.h"

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
  static uint64_t SnapshotBytes(const std::vector<ExchangeOp>& ops);

  // After a full update: the snapshot of every message this rank sent
  // (its sources as they were sent). `ops` are the update's operations.
  // ResourceExhausted when the snapshot cannot be allocated.
  Status Snapshot(const std::vector<ExchangeOp>& ops);

  // One delta update over `ops` (the full update's operations, push):
  // the stale-region flags with `base_round`'s tags, the messages with
  // `data_round`'s. `base_generation` is the generation of the last update
  // (every delta names it; a target refuses another). Counters and times
  // go to `report`; exchange statistics of every round to `stats`.
  Status Run(PeerExchange& exchange, const std::vector<ExchangeOp>& ops,
             const ExchangeRunOptions& base_round,
             const ExchangeRunOptions& data_round, uint64_t base_generation,
             LiveReport* report, ExchangeStats* stats);

  // The hash of every region this rank sent in the last update (its
  // snapshot's, which the update brought up to date: what the target holds
  // after applying), into (*by_region)[region index]; sized by the caller.
  void SentHashes(const std::vector<ExchangeOp>& ops,
                  std::vector<uint64_t>* by_region) const;

  // Gives up the message buffers (never freed) after a failed exchange
  // left operations in flight: the exchange may still write into them.
  void Abandon();

 private:
  struct Buffers;
  uint32_t ItemSize(const BoundRegion& region) const;
  // The receive buffer of every message (once; each sized for its regions
  // raw).
  Status AllocateInbox(const std::vector<ExchangeOp>& ops);
  // Runs `round` (nothing if empty), adding its statistics to `stats`.
  static Status Exchange(PeerExchange& exchange,
                         const std::vector<ExchangeOp>& round,
                         const ExchangeRunOptions& options,
                         ExchangeStats* stats);
  // The messages' operations `which` (indices into ops): encoded messages
  // out, receive buffers in.
  std::vector<ExchangeOp> MessageRound(const std::vector<ExchangeOp>& ops,
                                       const std::vector<size_t>& which);
  // Every operation's stale-region flags: targets send theirs, sources
  // receive them.
  std::vector<ExchangeOp> StaleRound(const std::vector<ExchangeOp>& ops);
  // Encodes the send operations among `which` against their snapshots.
  Status Encode(const std::vector<ExchangeOp>& ops,
                const std::vector<size_t>& which, uint64_t base_generation,
                LiveReport* report);
  // Encodes send operation `op` (index i) against its snapshot.
  void EncodeOp(const ExchangeOp& op, size_t i, uint64_t base_generation);
  // After the stale round: checks every source's flags, and encodes the
  // send operations `which` (those with a stale region) again: stale
  // regions whole, the others unchanged.
  Status Resend(const std::vector<ExchangeOp>& ops,
                const std::vector<size_t>& which, uint64_t base_generation,
                LiveReport* report);
  // Checks and applies the received messages of `which`; `whole`: the
  // resent messages (no base check; stale regions must come raw).
  Status Apply(const std::vector<ExchangeOp>& ops,
               const std::vector<size_t>& which, uint64_t base_generation,
               LiveReport* report, bool whole = false);

  std::vector<uint32_t> region_itemsize_;  // by plan region
  std::unique_ptr<Buffers> buffers_;
  size_t encode_threads_;  // 0: automatic (Encode)
};

}  // namespace reshard::live_internal

#endif  // RESHARD_LIVE_LIVE_DELTA_H_
