// Internal to the live layer: verification on arrival
// (LiveSessionOptions::verify). Every region a rank receives, from another
// rank or from itself, is checked against the XXH3-64 its source computed
// over the bytes it sent (for a quantizing source, the converted bytes; in
// a delta update, the region as it is after the change applies):
//  - while the data moves, each rank hashes the source side of every region
//    it sends as the send completes and of its local copies as they are
//    made, on the thread that moves the data; the sources of a pull (read
//    by peers unseen) on a thread of its own (the sources are read-only
//    during an update); a delta update reuses the hashes its encoding
//    computed;
//  - once its exchange is over, each rank sends every peer it sent regions
//    to one message with their hashes in plan order (the hash round, on the
//    session's connections, tagged apart from the data), and receives
//    theirs;
//  - each rank hashes what it received and compares, region by region:
//    a region that arrived whole in the exchange (a receive or get that
//    completed) is hashed right then, the others (delta updates, which
//    apply after the exchange) once it is over. The first difference fails
//    the update, naming the region, its tensor, the target participant
//    and the peer.
// Each rank's digest (XXH3-64 of its received regions' index and hash, in
// plan order) goes into its vote; the update's digest combines them.
// Region sides in CUDA device memory (an exchange that moves device memory,
// device_regions.h) are hashed through DeviceRegions' staged reads, at the
// same points and to the same values; a failed read fails Finish.
#ifndef RESHARD_LIVE_LIVE_VERIFY_H_
#define RESHARD_LIVE_LIVE_VERIFY_H_

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "live/device_regions.h"
#include "live/piece_hash.h"
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

  // Where this rank's regions may lie in device memory: their device sides
  // are hashed (and the fault flipped) through `device` (kept by pointer;
  // null: every side is host memory, the default).
  void UseDevice(DeviceRegions* device) { device_ = device; }

  // This rank's share, in plan order (Connect and every rebind form it
  // anew): regions it sends to (or that are read by) `peer`, regions it
  // receives from `peer`, regions with both ends here.
  void Clear();
  void Outgoing(uint32_t peer, const BoundRegion* region);
  void Incoming(uint32_t peer, const BoundRegion* region);
  void Local(const BoundRegion* region);

  // Starts hashing, on a thread of its own, the source sides this rank
  // sends that no completion will hand it (unless `sent_known`: a delta
  // update's encoding hashed them, see sent()): a pull's sources, which
  // peers read unseen. With `early` (the exchange's operations, not a
  // delta's), the other regions are hashed by Arrived and Copied as their
  // bytes move; without it, local copies are hashed on that thread too
  // and targets in Finish. `corrupt`: fault injection, one byte of the
  // first region (lowest index) received from another rank flipped once
  // it arrived, before it is hashed. Pairs with Finish or Cancel.
  void Start(bool sent_known, const std::vector<ExchangeOp>* early,
             bool corrupt, uint32_t threads);

  // ExchangeRunOptions::on_piece of Start's `early`: a piece of operation
  // `op`'s stream just packed (a send) or unpacked (a receive) on the
  // exchange's thread. Its regions are hashed from these bytes while they
  // are in cache (PieceHasher); a region the pieces did not cover is
  // hashed from memory when its operation completes.
  void Piece(size_t op, uint64_t offset, const uint8_t* bytes, uint64_t length);

  // ExchangeRunOptions::on_completion of Start's `early`: operation `op`
  // completed, so a receive's or get's target bytes are final, and a
  // send's source side was just read by the peer. What Piece did not hash
  // of it is hashed here, on the thread that moves the data: a thread of
  // its own beside the copy contends with it for cores and memory
  // bandwidth (on 2 cores over shared memory, 300 ms per update against
  // 240 ms hashed here; Qwen3 layout, 1.85 GiB, 155 ms unverified).
  void Arrived(size_t op);

  // A local copy of `region` (both ends on this rank) is done: hashes its
  // source and target while their bytes are still in cache (Start's
  // `early`; otherwise a no-op).
  void Copied(const BoundRegion& region);

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
  // Whether `op` of Start's `early` is this update's to hash (not a
  // buffer: the hash round or a delta message).
  bool Hashes(const ExchangeOp& op) const;
  uint64_t HashSource(const BoundRegion& region);
  // `side` of `region`, from host memory or through device_ (whose
  // failure is kept for Finish, the hash then 0).
  uint64_t HashOneSide(const BoundRegion& region, RegionSide side);
  // HashRegions with the device sides read through device_.
  void HashAll(const std::vector<const BoundRegion*>& regions, RegionSide side,
               uint32_t threads, uint64_t* out);
  // The first failure of a staged read since Start.
  Status DeviceError();
  // Hashes what arrived in `region` into held_ (after the fault, if any).
  void HashTarget(const BoundRegion& region);
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
  // Regions whose source side the arrivals thread hashes (their sends'
  // completions), where on_send_ is update_.
  std::vector<uint32_t> on_send_;
  uint32_t update_ = 0;
  bool early_ = false;                            // Start's `early` was given
  const std::vector<ExchangeOp>* ops_ = nullptr;  // Start's `early`
  PieceHasher pieces_;
  std::unique_ptr<void, void (*)(void*)> state_;  // XXH3_state_t scratch
  const BoundRegion* corrupt_ = nullptr;  // the fault's region until flipped
  DeviceRegions* device_ = nullptr;       // UseDevice
  std::mutex device_mu_;                  // device_error_
  Status device_error_;
  uint64_t verified_ = 0;
  uint64_t digest_ = 0;
};

// The update's digest from every rank's (in rank order).
uint64_t CombineDigests(const std::vector<uint64_t>& rank_digests);

// "0123456789abcdef": a 64-bit hash as 16 lowercase hex digits.
std::string HashHex(uint64_t hash);

}  // namespace reshard::live_internal

#endif  // RESHARD_LIVE_LIVE_VERIFY_H_
