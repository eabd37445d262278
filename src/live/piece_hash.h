// Internal to the live layer: the XXH3-64 of each region of an exchange's
// operations, computed from the pieces of their streams as the exchange
// packs or unpacks them (ExchangeRunOptions::on_piece), while those bytes
// are in cache, instead of reading every region from memory once more
// after it moved.
#ifndef RESHARD_LIVE_PIECE_HASH_H_
#define RESHARD_LIVE_PIECE_HASH_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "reshard/bound_plan.h"
#include "reshard/sdk/peer_exchange.h"

namespace reshard::live_internal {

// The regions of `op` in stream order: op.region, then op.more.
uint32_t RegionCount(const ExchangeOp& op);
const BoundRegion& RegionAt(const ExchangeOp& op, uint32_t k);

class PieceHasher {
 public:
  PieceHasher();
  ~PieceHasher();
  PieceHasher(const PieceHasher&) = delete;
  PieceHasher& operator=(const PieceHasher&) = delete;

  // Starts over for a run of `ops` (kept by pointer until the next Reset).
  void Reset(const std::vector<ExchangeOp>* ops);

  // A piece of operation `op`'s stream (its regions' streams one after
  // another, op.region first, then op.more): `length` bytes from
  // `offset`. While an operation's pieces come in stream order, calls
  // done(region, hash) for each region whose last byte this piece holds
  // (a region of no bytes as soon as the pieces reach it). The first piece
  // out of order gives the operation up (see Unhashed): a transport that
  // resends a piece may have written other bytes where the hash went.
  // Operations with a buffer (ExchangeOp::buffer) are not hashed.
  void Piece(size_t op, uint64_t offset, const uint8_t* bytes, uint64_t length,
             const std::function<void(const BoundRegion&, uint64_t)>& done);

  // Stops hashing `op` from its pieces.
  void GiveUp(size_t op);

  // How many of `op`'s regions (in stream order) its pieces hashed: the
  // rest are left to hash from memory. 0 once given up.
  size_t Hashed(size_t op) const;

 private:
  struct Op {
    uint64_t next = 0;       // stream bytes hashed
    uint64_t in_region = 0;  // of the region being hashed
    uint32_t region = 0;     // its position (0: op.region, k: op.more[k-1])
    bool given_up = false;
    void* state = nullptr;  // XXH3_state_t from the pool while hashing
  };
  void Release(Op& o);

  const std::vector<ExchangeOp>* ops_ = nullptr;
  std::vector<Op> state_;
  std::vector<void*> pool_;  // free XXH3 states
  std::vector<std::unique_ptr<void, void (*)(void*)>> owned_;
};

}  // namespace reshard::live_internal

#endif  // RESHARD_LIVE_PIECE_HASH_H_
