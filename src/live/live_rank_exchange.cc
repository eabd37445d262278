// LiveRank (live_rank.h), steps 3 and 4: this rank's share of the
// regions as exchange operations (local copies, sends, receives, gets in
// coalesced batches), the connections, and the exchange itself.
#include <algorithm>
#include <iterator>

#include "bind/binding_copy.h"
#include "bind/row_walker.h"
#include "live/live_rank.h"

namespace reshard::live_internal {

Status LiveRank::Connect() {
  wired_ = true;
  if (options_.verify) verify_.emplace(plan_->regions().size());
  if (verify_) verify_->UseDevice(device_.get());
  RESHARD_RETURN_NOT_OK(AdoptTensorMoves());
  for (const BoundRegion& br : bound_->regions()) {
    RESHARD_RETURN_NOT_OK(TakeShareOf(br));
  }
  RESHARD_RETURN_NOT_OK(
      exchange_->WireUp(Deadline(), [&] { return records_.CheckPeers(); }));
  // Plan, bind, fence and connect; not the wait for the others to publish.
  report_.plan_seconds = Seconds(start_) - waited_seconds_;
  return Status::OK();
}

Status LiveRank::TakeShareOf(const BoundRegion& br) {
  const TransferRegion& lr = plan_->regions()[br.region];
  // Bind proved every participant published; a miss is a bug.
  const auto from_it = world_.source_rank.find(
      plan_->source_fragments()[lr.source_fragment].participant_id);
  const auto to_it = world_.target_rank.find(
      plan_->target_fragments()[lr.target_fragment].participant_id);
  if (from_it == world_.source_rank.end() ||
      to_it == world_.target_rank.end()) {
    return Status::Internal("live plan names an unpublished participant");
  }
  const uint32_t from = from_it->second;
  const uint32_t to = to_it->second;
  if (MovedWhole(br)) return ShareMovedWhole(br, from, to);
  using Kind = ExchangeOp::Kind;
  const bool small = br.bytes <= kMaxCoalescedRegion;
  const bool pulled =
      pull_ && (exchange_->capabilities().pull_every_region ||
                (!small && PulledRegion(br)));
  if (from == options_.rank && to == options_.rank) {
    local_.push_back(&br);
    if (verify_) verify_->Local(&br);
  } else if (from == options_.rank) {
    RESHARD_RETURN_NOT_OK(Peer(to));
    if (verify_) verify_->Outgoing(to, &br);
    if (!pulled) AddMessage(br, to, Kind::kSend, small);
  } else if (to == options_.rank) {
    RESHARD_RETURN_NOT_OK(Peer(from));
    if (verify_) verify_->Incoming(from, &br);
    if (!pulled) {
      AddMessage(br, from, Kind::kReceive, small);
    } else {
      RESHARD_ASSIGN_OR_RETURN(uint64_t key, RemoteKey(from, br));
      ops_.push_back({&br, {}, from, Kind::kGet, key});
    }
  }
  return Status::OK();
}

void LiveRank::AddMessage(const BoundRegion& br, uint32_t peer,
                          ExchangeOp::Kind kind, bool small) {
  if (!small) {
    ops_.push_back({&br, {}, peer, kind});
    return;
  }
  const auto key = std::make_pair(peer, static_cast<int>(kind));
  auto it = batches_.find(key);
  if (it != batches_.end() &&
      it->second.second + br.bytes <= kMaxCoalescedBytes) {
    ops_[it->second.first].more.push_back(&br);
    it->second.second += br.bytes;
    return;
  }
  batches_[key] = {ops_.size(), br.bytes};
  ops_.push_back({&br, {}, peer, kind});
}

Status LiveRank::Peer(uint32_t r) {
  if (connected_.count(r)) return Status::OK();
  RESHARD_RETURN_NOT_OK(
      exchange_->Connect(r, world_.addresses[r], RankName(r, world_)));
  connected_.insert(r);
  ++connections_;
  return Status::OK();
}

Result<uint64_t> LiveRank::RemoteKey(uint32_t r, const BoundRegion& br) {
  auto it = ranges_.find(r);
  if (it == ranges_.end()) {
    const std::string key = records_.Key("rkeys", r);
    RESHARD_ASSIGN_OR_RETURN(std::string text, records_.Get(key));
    RESHARD_ASSIGN_OR_RETURN(auto decoded,
                             internal::DecodeRemoteKeysRecord(text, key, r));
    it = ranges_.emplace(r, std::move(decoded)).first;
  }
  const auto& list = it->second;
  auto at = std::upper_bound(
      list.begin(), list.end(), br.source_address,
      [](uint64_t a, const RemoteRange& x) { return a < x.address; });
  if (at == list.begin() ||
      br.source_address + 1 > std::prev(at)->address + std::prev(at)->length) {
    return Status::InvalidArgument("region " + std::to_string(br.region) +
                                   ": rank " + std::to_string(r) +
                                   " published no remote key for its source");
  }
  const size_t index = static_cast<size_t>(std::prev(at) - list.begin());
  auto u = unpacked_.find(std::make_pair(r, index));
  if (u == unpacked_.end()) {
    RESHARD_ASSIGN_OR_RETURN(uint64_t key,
                             exchange_->ImportRemoteKey(r, list[index].packed));
    u = unpacked_.emplace(std::make_pair(r, index), key).first;
  }
  return u->second;
}

Status LiveRank::Exchange() {
  const auto t0 = Clock::now();
  ExchangeRunOptions xo;
  xo.session_tag = tag_;
  xo.max_in_flight = options_.max_in_flight;
  xo.deadline = Deadline();
  xo.poll_abort = [&] { return records_.CheckPeers(); };
  xo.on_first_completion = [&] { Stage("transfer"); };
  // The sources are read-only until the update ends: they hash while the
  // data moves (a delta session's encoding hashes what it sends), and so
  // does every target region once its operation completed (a delta
  // update's apply after the exchange: those are hashed after it); local
  // copies as each is made.
  if (verify_) {
    const uint64_t corrupt_at = options_.corrupt_received_in_update;
    verify_->Start(
        /*sent_known=*/delta_.has_value(), delta_ ? nullptr : &ops_,
        corrupt_at != 0 && corrupt_at == (scope_.empty() ? 1 : generation_), 0);
    if (!delta_) {
      xo.on_completion = [this](size_t i) { verify_->Arrived(i); };
      xo.on_piece = [this](size_t i, uint64_t offset, const uint8_t* bytes,
                           uint64_t length) {
        verify_->Piece(i, offset, bytes, length);
      };
    }
  }
  if (Status copied = CopyLocal(); !copied.ok()) {
    if (verify_) verify_->Cancel();
    return copied;
  }
  report_.local_operations = local_.size();
  if (Status moved = RunTensorMoves(xo); !moved.ok()) {
    if (verify_) verify_->Cancel();
    return moved;
  }
  ExchangeStats stats;
  Status exchanged = RunOps(xo, &stats);
  abandoned_in_flight_ = stats.abandoned_in_flight;
  if (!exchanged.ok() && verify_) verify_->Cancel();
  RESHARD_RETURN_NOT_OK(exchanged);
  uint64_t regions_in = 0, bytes_in = 0;
  for (const auto& op : ops_) {
    if (op.kind != ExchangeOp::Kind::kSend) {
      regions_in += 1 + op.more.size();
      bytes_in += op.bytes();
    }
  }
  report_.operations = local_.size() + regions_in;
  report_.coalesced_regions = stats.coalesced_regions;
  report_.messages_sent = stats.messages_sent;
  report_.gets = stats.gets;
  report_.packed_messages = stats.packed_messages;
  report_.bytes_sent = stats.bytes_sent;
  // A delta update brings every region up to date with fewer bytes.
  report_.bytes_received += delta_ ? bytes_in : stats.bytes_received;
  report_.wire_bytes += stats.bytes_received;
  report_.transfer_seconds = Seconds(t0);
  return Status::OK();
}

Status LiveRank::RunOps(const ExchangeRunOptions& xo, ExchangeStats* stats) {
  if (!delta_ || !delta_round_) {
    Status st = exchange_->Run(ops_, xo, stats);
    if (st.ok() && delta_) st = delta_->Snapshot(ops_);
    return st;
  }
  ExchangeRunOptions base_round = xo;
  base_round.session_tag = SessionTag(options_.session + "/" + scope_ + "base");
  base_round.on_first_completion = nullptr;
  Status st = delta_->Run(*exchange_, ops_, base_round, xo,
                          delivered_generation_, &report_, stats);
  if (!st.ok() && stats->abandoned_in_flight > 0) delta_->Abandon();
  return st;
}

Status LiveRank::Verify() {
  if (!verify_) return Status::OK();
  const auto t0 = Clock::now();
  if (delta_) delta_->SentHashes(ops_, &verify_->sent());
  ExchangeRunOptions round;
  round.session_tag = SessionTag(options_.session + "/" + scope_ + "hashes");
  round.max_in_flight = options_.max_in_flight;
  round.deadline = Deadline();
  round.poll_abort = [&] { return records_.CheckPeers(); };
  ExchangeStats stats;
  Status st = verify_->Finish(
      *exchange_, round, 0,
      [&](const BoundRegion& br, uint32_t peer) {
        return DescribeRegion(br, peer);
      },
      &stats);
  abandoned_in_flight_ = stats.abandoned_in_flight;
  report_.verify_seconds = Seconds(t0);
  report_.verified_regions = verify_->verified();
  return st;
}

std::string LiveRank::DescribeRegion(const BoundRegion& br,
                                     uint32_t peer) const {
  const TransferRegion& lr = plan_->regions()[br.region];
  std::string out =
      "region " + std::to_string(br.region) + " (tensor " +
      plan_->tensors()[lr.tensor] + ", target participant " +
      std::string(
          plan_->target_fragments()[lr.target_fragment].participant_id) +
      ")";
  if (peer >= options_.ranks) {
    return out + ", copied within rank " + std::to_string(options_.rank);
  }
  return out + " from " + RankName(peer, world_);
}

}  // namespace reshard::live_internal
