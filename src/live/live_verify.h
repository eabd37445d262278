// Internal to the live layer: verification on arrival
// (LiveSessionOptions::verify). Every region a rank receives, from another
// rank or from itself, is checked against the XXH3-64 its source computed
// over the bytes it sent (for a quantizing source, the converted bytes; in
// a delta update, the region as it is after the change applies):
//  - while the data moves, each rank hashes the source side of every region
//    it sends or serves (pull) and of its local copies, on threads of its
//    own (the sources are read-only during an update); a delta update reuses
//    the hashes its encoding computed;
//  - once its exchange is over, each rank sends every peer it sent regions
//    to one message with their hashes in plan order (the hash round, on the
//    session's connections, tagged apart from the data), and receives
//    theirs;
//  - each rank hashes what it received and compares, region by region:
//    a region that arrived whole in the exchange (a receive or get that
//    completed) is hashed on a thread of its own while the rest moves, the
//    others (delta updates, which apply after the exchange) once it is
//    over. The first difference fails the update, naming the region, its
//    tensor, the target participant and the peer.
// Each rank's digest (XXH3-64 of its received regions' index and hash, in
// plan order) goes into its vote; the update's digest combines them.
#ifndef RESHARD_LIVE_LIVE_VERIFY_H_
#define RESHARD_LIVE_LIVE_VERIFY_H_

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "reshard/bound_plan.h"
#include "reshard/sdk/peer_exchange.h"
#include "reshard/status.h"

namespace reshard::live_internal {

class LiveVerify {
 public:
  // `regions`: the plan's region count (hashes are kept by region index).
  explicit LiveVerify(size_t regions);
  ~LiveVerify();
  LiveVerify(const LiveVerify&) = delete;
  LiveVerify& operator=(const LiveVerify&) = delete;

  // This rank's share, in plan order (Connect and every rebind form it
  // anew): regions it sends to (or that are read by) `peer`, regions it
  // receives from `peer`, regions with both ends here.
  void Clear();
  void Outgoing(uint32_t peer, const BoundRegion* region);
  void Incoming(uint32_t peer, const BoundRegion* region);
  void Local(const BoundRegion* region);

  // Starts hashing the source sides this rank sends (unless `sent_known`:
  // a delta update's encoding hashed them, see sent()) and of its local
  // copies, on a thread of its own; with `early_targets`, also a thread
  // that hashes what Arrived hands it. `corrupt`: fault injection, one
  // byte of the first region (lowest index) received from another rank
  // flipped once it arrived, before it is hashed. Pairs with Finish or
  // Cancel.
  void Start(bool sent_known, bool early_targets, bool corrupt,
             uint32_t threads);

  // A receive or get of the exchange completed: its target bytes are
  // final; they are hashed on the target thread (Start's early_targets).
  void Arrived(const ExchangeOp& op);

  // Hashes of the regions this rank sent, by region index, to fill in
  // when Start was told they are known.
  std::vector<uint64_t>& sent() { return sent_; }

  // Waits for the hashing threads (after a failed exchange, before its
  // buffers may change).
  void Cancel();

  // After the data exchange: the hash round over `exchange` with
  // `round`'s tags, then the check of everything received. `describe`
  // names a region for errors ("region 7 (tensor t, target participant p)
  // from rank 1 (host h)"). DataLoss on a difference.
  Status Finish(PeerExchange& exchange, const ExchangeRunOptions& round,
                uint32_t threads,
                const std::function<std::string(const BoundRegion&,
                                                uint32_t peer)>& describe,
                ExchangeStats* stats);

  // Of the last Finish: regions checked, and this rank's digest.
  uint64_t verified() const { return verified_; }
  uint64_t digest() const { return digest_; }

 private:
  struct Peer {
    std::vector<const BoundRegion*> out, in;
    std::vector<uint64_t> out_hashes, in_hashes;  // the hash round's
    uint64_t received = 0;
  };
  void HashSources(bool sent_known, uint32_t threads);
  // The target thread: hashes the regions of every operation Arrived
  // queued until Cancel.
  void HashArrivals();
  // Flips the fault's byte once (Start's `corrupt`).
  void CorruptOnce(const BoundRegion* region);
  // The hash round's operations: one message per peer each way.
  std::vector<ExchangeOp> Round();
  // The first region whose target hash differs, as an error.
  Status Compare(const std::vector<const BoundRegion*>& got,
                 const std::vector<uint64_t>& expected,
                 const std::vector<uint32_t>& from,
                 const std::function<std::string(const BoundRegion&,
                                                 uint32_t peer)>& describe,
                 uint32_t threads);

  std::map<uint32_t, Peer> peers_;
  std::vector<const BoundRegion*> local_;
  std::vector<uint64_t> sent_;  // by region index
  std::thread hashing_;
  // Early target hashes by region index, valid where stamp_ is update_.
  std::vector<uint64_t> held_;
  std::vector<uint32_t> stamp_;
  uint32_t update_ = 0;
  std::thread targets_;
  std::mutex mu_;
  std::condition_variable wake_;
  std::deque<const ExchangeOp*> arrived_;  // guarded by mu_
  bool closing_ = false;                   // guarded by mu_
  const BoundRegion* corrupt_ = nullptr;   // the fault's region until flipped
  uint64_t verified_ = 0;
  uint64_t digest_ = 0;
};

// The update's digest from every rank's (in rank order).
uint64_t CombineDigests(const std::vector<uint64_t>& rank_digests);

// "0123456789abcdef": a 64-bit hash as 16 lowercase hex digits.
std::string HashHex(uint64_t hash);

}  // namespace reshard::live_internal

#endif  // RESHARD_LIVE_LIVE_VERIFY_H_
