#include "live/piece_hash.h"

#include <xxhash.h>
#if RESHARD_HAVE_XXH_DISPATCH
// Routes XXH3_64bits* to the run-time AVX2/AVX-512 dispatcher.
#include <xxh_x86dispatch.h>
#endif

#include <algorithm>

namespace reshard::live_internal {

const BoundRegion& RegionAt(const ExchangeOp& op, uint32_t k) {
  return k == 0 ? *op.region : *op.more[k - 1];
}

uint32_t RegionCount(const ExchangeOp& op) {
  return static_cast<uint32_t>(op.more.size() + 1);
}

PieceHasher::PieceHasher() = default;
PieceHasher::~PieceHasher() = default;

void PieceHasher::Reset(const std::vector<ExchangeOp>* ops) {
  for (Op& o : state_) Release(o);
  ops_ = ops;
  state_.assign(ops == nullptr ? 0 : ops->size(), Op{});
}

void PieceHasher::Release(Op& o) {
  if (o.state != nullptr) pool_.push_back(o.state);
  o.state = nullptr;
}

void PieceHasher::GiveUp(size_t op) {
  Op& o = state_.at(op);
  o.given_up = true;
  Release(o);
}

size_t PieceHasher::Hashed(size_t op) const {
  const Op& o = state_.at(op);
  return o.given_up ? 0 : o.region;
}

void PieceHasher::Piece(
    size_t op, uint64_t offset, const uint8_t* bytes, uint64_t length,
    const std::function<void(const BoundRegion&, uint64_t)>& done) {
  const ExchangeOp& x = ops_->at(op);
  Op& o = state_[op];
  if (x.buffer != nullptr || o.given_up) return;
  if (offset != o.next) {
    GiveUp(op);
    return;
  }
  if (o.state == nullptr) {
    if (pool_.empty()) {
      owned_.emplace_back(XXH3_createState(), [](void* p) {
        XXH3_freeState(static_cast<XXH3_state_t*>(p));
      });
      pool_.push_back(owned_.back().get());
    }
    o.state = pool_.back();
    pool_.pop_back();
    XXH3_64bits_reset(static_cast<XXH3_state_t*>(o.state));
  }
  auto* state = static_cast<XXH3_state_t*>(o.state);
  const uint32_t regions = RegionCount(x);
  // Ends every region the stream has passed (those of no bytes included).
  auto finish_full = [&] {
    while (o.region < regions && o.in_region == RegionAt(x, o.region).bytes) {
      done(RegionAt(x, o.region), XXH3_64bits_digest(state));
      XXH3_64bits_reset(state);
      ++o.region;
      o.in_region = 0;
    }
  };
  finish_full();
  while (length > 0 && o.region < regions) {
    const uint64_t take =
        std::min(length, RegionAt(x, o.region).bytes - o.in_region);
    XXH3_64bits_update(state, bytes, take);
    bytes += take;
    length -= take;
    o.in_region += take;
    o.next += take;
    finish_full();
  }
  if (o.region == regions) Release(o);
}

}  // namespace reshard::live_internal
