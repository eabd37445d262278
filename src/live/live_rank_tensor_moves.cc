// LiveRank (live_rank.h): whole tensors the exchange moves itself
// (sdk/peer_exchange.h TensorMover; the "nccl" exchange's NCCL M2N).
//
// Which tensors is asked once, at Connect, from what every rank published
// (the plan, both placements, every participant's rank and bindings,
// every rank's address), so every rank leaves the same tensors out of its
// operations. None at all in a session whose ranks could see different
// inputs or where whole tensors cannot stand for the regions: delta
// updates (a mover has no deltas), a converting plan (its targets are
// converted from what the regions carry), shadow targets (this rank binds
// its shadows, the others see what it published).
//
// Verification covers the moved regions as any other: a source's regions
// are hashed like a pull's, unseen (LiveVerify hashes the outgoing regions
// no operation completes on its thread), a target's after the move (the
// regions no operation completed are hashed in Finish), and those with
// both ends here once moved (Copied). Fault injection
// (corrupt_received_in_update) flips a moved region too.
#include <algorithm>

#include "live/live_rank.h"

namespace reshard::live_internal {

Status LiveRank::AdoptTensorMoves() {
  moved_whole_.assign(plan_->tensors().size(), false);
  TensorMover* mover = exchange_->tensor_mover();
  if (mover == nullptr || options_.delta || options_.shadow_targets ||
      plan_->conversion() != nullptr) {
    return Status::OK();
  }
  TensorMoveSetup setup;
  setup.plan = &*plan_;
  setup.source = &source_;
  setup.target = &target_;
  setup.source_rank = &world_.source_rank;
  setup.target_rank = &world_.target_rank;
  setup.source_bindings = &world_.sources;
  setup.target_bindings = &world_.targets;
  setup.addresses = &world_.addresses;
  setup.rank = options_.rank;
  setup.ranks = options_.ranks;
  RESHARD_ASSIGN_OR_RETURN(std::vector<std::string> why, mover->Adopt(setup));
  if (why.size() != moved_whole_.size()) {
    return Status::Internal("the exchange's tensor mover answered for " +
                            std::to_string(why.size()) + " tensors of " +
                            std::to_string(moved_whole_.size()));
  }
  for (size_t i = 0; i < why.size(); ++i) moved_whole_[i] = why[i].empty();
  return Status::OK();
}

bool LiveRank::MovedWhole(const BoundRegion& br) const {
  const uint32_t tensor = plan_->regions()[br.region].tensor;
  return tensor < moved_whole_.size() && moved_whole_[tensor];
}

Status LiveRank::ShareMovedWhole(const BoundRegion& br, uint32_t from,
                                 uint32_t to) {
  if (!verify_) return Status::OK();
  const uint32_t me = options_.rank;
  if (from == me && to == me) {
    verify_->Local(&br);
  } else if (from == me) {
    RESHARD_RETURN_NOT_OK(Peer(to));  // for the hash round
    verify_->Outgoing(to, &br);
  } else if (to == me) {
    RESHARD_RETURN_NOT_OK(Peer(from));
    verify_->Incoming(from, &br);
  }
  return Status::OK();
}

Status LiveRank::RunTensorMoves(const ExchangeRunOptions& xo) {
  const auto moved = std::count(moved_whole_.begin(), moved_whole_.end(), true);
  report_.m2n_tensors = static_cast<uint64_t>(moved);
  if (moved == 0) return Status::OK();
  RESHARD_RETURN_NOT_OK(
      exchange_->tensor_mover()->Run(bindings_.sources, bindings_.targets, xo));
  for (const BoundRegion& br : bound_->regions()) {
    if (!MovedWhole(br)) continue;
    const TransferRegion& lr = plan_->regions()[br.region];
    const auto to = world_.target_rank.find(
        plan_->target_fragments()[lr.target_fragment].participant_id);
    if (to == world_.target_rank.end() || to->second != options_.rank) {
      continue;
    }
    report_.bytes_received += br.bytes;
    const auto from = world_.source_rank.find(
        plan_->source_fragments()[lr.source_fragment].participant_id);
    if (verify_ && from != world_.source_rank.end() &&
        from->second == options_.rank) {
      verify_->Copied(br);
    }
  }
  return Status::OK();
}

}  // namespace reshard::live_internal
