#include "live/live_verify.h"

#include <xxhash.h>
#if RESHARD_HAVE_XXH_DISPATCH
#include <xxh_x86dispatch.h>
#endif

#include <algorithm>
#include <cstdio>
#include <limits>
#include <memory>
#include <utility>

#include "bind/strided_stream.h"
#include "live/region_hash.h"

namespace reshard::live_internal {

namespace {
constexpr uint32_t kThisRank = std::numeric_limits<uint32_t>::max();
}  // namespace

LiveVerify::LiveVerify(size_t regions)
    : sent_(regions, 0),
      held_(regions, 0),
      stamp_(regions, 0),
      on_send_(regions, 0),
      state_(XXH3_createState(),
             [](void* p) { XXH3_freeState(static_cast<XXH3_state_t*>(p)); }) {}

LiveVerify::~LiveVerify() { Cancel(); }

void LiveVerify::Clear() {
  Cancel();
  peers_.clear();
  local_.clear();
}

void LiveVerify::Outgoing(uint32_t peer, const BoundRegion* region) {
  peers_[peer].out.push_back(region);
}

void LiveVerify::Incoming(uint32_t peer, const BoundRegion* region) {
  peers_[peer].in.push_back(region);
}

void LiveVerify::Local(const BoundRegion* region) { local_.push_back(region); }

void LiveVerify::Start(bool sent_known, const std::vector<ExchangeOp>* early,
                       bool corrupt, uint32_t threads) {
  Cancel();
  ++update_;
  {
    std::lock_guard<std::mutex> lock(device_mu_);
    device_error_ = Status::OK();
  }
  early_ = early != nullptr;
  corrupt_ = nullptr;
  if (corrupt) {
    for (const auto& [peer, p] : peers_) {
      for (const BoundRegion* r : p.in) {
        if (r->bytes > 0 &&
            (corrupt_ == nullptr || r->region < corrupt_->region)) {
          corrupt_ = r;
        }
      }
    }
  }
  ops_ = early;
  pieces_.Reset(early);
  for (size_t i = 0; early != nullptr && i < early->size(); ++i) {
    const ExchangeOp& op = (*early)[i];
    if (op.buffer != nullptr) continue;
    if (op.kind == ExchangeOp::Kind::kSend && !sent_known) {
      on_send_[op.region->region] = update_;
      for (const BoundRegion* r : op.more) on_send_[r->region] = update_;
    }
    // The fault's region is flipped in memory and hashed from there.
    if (corrupt_ != nullptr && op.kind != ExchangeOp::Kind::kSend &&
        (op.region == corrupt_ || std::find(op.more.begin(), op.more.end(),
                                            corrupt_) != op.more.end())) {
      pieces_.GiveUp(i);
    }
  }
  hashing_ = std::thread(
      [this, sent_known, threads] { HashSources(sent_known, threads); });
}

bool LiveVerify::Hashes(const ExchangeOp& op) const {
  return early_ && op.buffer == nullptr &&
         (op.kind != ExchangeOp::Kind::kSend ||
          on_send_[op.region->region] == update_);
}

void LiveVerify::Piece(size_t i, uint64_t offset, const uint8_t* bytes,
                       uint64_t length) {
  const ExchangeOp& op = ops_->at(i);
  if (!Hashes(op)) return;
  const bool send = op.kind == ExchangeOp::Kind::kSend;
  pieces_.Piece(i, offset, bytes, length,
                [&](const BoundRegion& r, uint64_t hash) {
                  if (send) {
                    sent_[r.region] = hash;
                  } else {
                    held_[r.region] = hash;
                    stamp_[r.region] = update_;
                  }
                });
}

void LiveVerify::Arrived(size_t i) {
  const ExchangeOp& op = ops_->at(i);
  if (!Hashes(op)) return;
  const uint32_t count = RegionCount(op);
  for (auto k = static_cast<uint32_t>(pieces_.Hashed(i)); k < count; ++k) {
    const BoundRegion& r = RegionAt(op, k);
    if (op.kind == ExchangeOp::Kind::kSend) {
      sent_[r.region] = HashSource(r);
    } else {
      HashTarget(r);
    }
  }
}

void LiveVerify::Copied(const BoundRegion& region) {
  if (!early_) return;
  sent_[region.region] = HashSource(region);
  HashTarget(region);
}

uint64_t LiveVerify::HashSource(const BoundRegion& region) {
  return HashOneSide(region, RegionSide::kSource);
}

uint64_t LiveVerify::HashOneSide(const BoundRegion& region, RegionSide side) {
  if (device_ == nullptr || !device_->OnDevice(region, side)) {
    return HashRegion(region, side, state_.get());
  }
  Result<uint64_t> hash = device_->Hash(region, side);
  if (hash.ok()) return *hash;
  std::lock_guard<std::mutex> lock(device_mu_);
  if (device_error_.ok()) device_error_ = hash.status();
  return 0;
}

void LiveVerify::HashAll(const std::vector<const BoundRegion*>& regions,
                         RegionSide side, uint32_t threads, uint64_t* out) {
  std::vector<const BoundRegion*> host;
  std::vector<size_t> at;
  for (size_t i = 0; i < regions.size(); ++i) {
    if (device_ != nullptr && device_->OnDevice(*regions[i], side)) {
      out[i] = HashOneSide(*regions[i], side);  // one staging at a time
    } else {
      host.push_back(regions[i]);
      at.push_back(i);
    }
  }
  std::vector<uint64_t> hashes(host.size());
  HashRegions(host, side, threads, hashes.data());
  for (size_t k = 0; k < host.size(); ++k) out[at[k]] = hashes[k];
}

Status LiveVerify::DeviceError() {
  std::lock_guard<std::mutex> lock(device_mu_);
  return device_error_;
}

void LiveVerify::HashTarget(const BoundRegion& region) {
  CorruptOnce(&region);
  held_[region.region] = HashOneSide(region, RegionSide::kTarget);
  stamp_[region.region] = update_;
}

void LiveVerify::CorruptOnce(const BoundRegion* region) {
  if (region != corrupt_ || corrupt_ == nullptr) return;
  if (device_ != nullptr && device_->OnDevice(*corrupt_, RegionSide::kTarget)) {
    Status st = device_->FlipFirstTargetByte(*corrupt_, 0x5A);
    std::lock_guard<std::mutex> lock(device_mu_);
    if (device_error_.ok() && !st.ok()) device_error_ = st;
  } else {
    internal::StridedSide::Target(*corrupt_).base[0] ^= 0x5A;
  }
  corrupt_ = nullptr;
}

void LiveVerify::Cancel() {
  if (hashing_.joinable()) hashing_.join();
}

void LiveVerify::HashSources(bool sent_known, uint32_t threads) {
  std::vector<const BoundRegion*> regions;
  if (!sent_known) {
    for (const auto& [peer, p] : peers_) {
      for (const BoundRegion* r : p.out) {
        if (on_send_[r->region] != update_) regions.push_back(r);
      }
    }
  }
  // Local copies hash their two sides right after they copy (Copied).
  if (!early_) regions.insert(regions.end(), local_.begin(), local_.end());
  std::vector<uint64_t> hashes(regions.size());
  HashAll(regions, RegionSide::kSource, threads, hashes.data());
  for (size_t i = 0; i < regions.size(); ++i) {
    sent_[regions[i]->region] = hashes[i];
  }
}

std::vector<ExchangeOp> LiveVerify::Round() {
  std::vector<ExchangeOp> ops;
  for (auto& [peer, p] : peers_) {
    if (!p.out.empty()) {
      p.out_hashes.resize(p.out.size());
      for (size_t i = 0; i < p.out.size(); ++i) {
        p.out_hashes[i] = sent_[p.out[i]->region];
      }
      ExchangeOp op{p.out[0], {}, peer, ExchangeOp::Kind::kSend};
      op.buffer = reinterpret_cast<uint8_t*>(p.out_hashes.data());
      op.buffer_bytes = p.out_hashes.size() * sizeof(uint64_t);
      ops.push_back(std::move(op));
    }
    if (!p.in.empty()) {
      p.in_hashes.assign(p.in.size(), 0);
      p.received = 0;
      ExchangeOp op{p.in[0], {}, peer, ExchangeOp::Kind::kReceive};
      op.buffer = reinterpret_cast<uint8_t*>(p.in_hashes.data());
      op.buffer_bytes = p.in_hashes.size() * sizeof(uint64_t);
      op.received = &p.received;
      ops.push_back(std::move(op));
    }
  }
  return ops;
}

Status LiveVerify::Finish(
    PeerExchange& exchange, const ExchangeRunOptions& round, uint32_t threads,
    const std::function<std::string(const BoundRegion&, uint32_t peer)>&
        describe,
    ExchangeStats* stats) {
  Cancel();
  verified_ = 0;
  digest_ = 0;
  const std::vector<ExchangeOp> ops = Round();
  if (!ops.empty()) {
    ExchangeStats round_stats;
    Status st = exchange.Run(ops, round, &round_stats);
    stats->messages_sent += round_stats.messages_sent;
    stats->abandoned_in_flight = round_stats.abandoned_in_flight;
    RESHARD_RETURN_NOT_OK(st);
  }
  std::vector<const BoundRegion*> got;
  std::vector<uint64_t> expected;
  std::vector<uint32_t> from;
  for (const auto& [peer, p] : peers_) {
    if (p.in.empty()) continue;
    if (p.received != p.in.size() * sizeof(uint64_t)) {
      return Status::DataLoss(
          "the hashes of rank " + std::to_string(peer) + " came as " +
          std::to_string(p.received) + " bytes, " +
          std::to_string(p.in.size() * sizeof(uint64_t)) + " expected (" +
          std::to_string(p.in.size()) + " regions)");
    }
    got.insert(got.end(), p.in.begin(), p.in.end());
    expected.insert(expected.end(), p.in_hashes.begin(), p.in_hashes.end());
    from.insert(from.end(), p.in.size(), peer);
  }
  // A region the target thread did not see (delta updates).
  if (corrupt_ != nullptr && stamp_[corrupt_->region] != update_) {
    CorruptOnce(corrupt_);
  }
  for (const BoundRegion* r : local_) {
    got.push_back(r);
    expected.push_back(sent_[r->region]);
    from.push_back(kThisRank);
  }
  return Compare(got, expected, from, describe, threads);
}

Status LiveVerify::Compare(
    const std::vector<const BoundRegion*>& got,
    const std::vector<uint64_t>& expected, const std::vector<uint32_t>& from,
    const std::function<std::string(const BoundRegion&, uint32_t peer)>&
        describe,
    uint32_t threads) {
  // What the target thread hashed already; the rest now.
  std::vector<const BoundRegion*> rest;
  for (const BoundRegion* r : got) {
    if (stamp_[r->region] != update_) rest.push_back(r);
  }
  std::vector<uint64_t> late(rest.size());
  HashAll(rest, RegionSide::kTarget, threads, late.data());
  // A device side that could not be read has no hash to compare.
  RESHARD_RETURN_NOT_OK(DeviceError());
  for (size_t i = 0; i < rest.size(); ++i) held_[rest[i]->region] = late[i];
  std::vector<uint64_t> held(got.size());
  for (size_t i = 0; i < got.size(); ++i) held[i] = held_[got[i]->region];
  size_t worst = got.size();
  std::vector<std::pair<uint64_t, uint64_t>> pairs(got.size());
  for (size_t i = 0; i < got.size(); ++i) {
    pairs[i] = {got[i]->region, held[i]};
    if (held[i] != expected[i] &&
        (worst == got.size() || got[i]->region < got[worst]->region)) {
      worst = i;
    }
  }
  if (worst != got.size()) {
    const uint32_t peer = from[worst];
    return Status::DataLoss(
        describe(*got[worst], peer) +
        ": the bytes received differ from what the source sent (XXH3-64 " +
        HashHex(held[worst]) + " here, " + HashHex(expected[worst]) +
        " at the source)");
  }
  std::sort(pairs.begin(), pairs.end());
  verified_ = got.size();
  digest_ = XXH3_64bits(pairs.data(), pairs.size() * sizeof(pairs[0]));
  return Status::OK();
}

uint64_t CombineDigests(const std::vector<uint64_t>& rank_digests) {
  return XXH3_64bits(rank_digests.data(),
                     rank_digests.size() * sizeof(uint64_t));
}

std::string HashHex(uint64_t hash) {
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx",
                static_cast<unsigned long long>(hash));
  return buf;
}

}  // namespace reshard::live_internal
