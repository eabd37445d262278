#include "live/live_delta.h"

#include <xxhash.h>

#include <chrono>
#include <cstring>
#include <map>
#include <string>
#include <utility>

#include "bind/strided_stream.h"
#include "live/delta_codec.h"
#include "live_exchange/side_stream.h"

namespace reshard::live_internal {
namespace {

using Clock = std::chrono::steady_clock;
using internal::ExchangeOp;
using internal::SideStream;
using internal::StridedSide;

double SecondsSince(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

// The side's stream: its memory when contiguous, else packed into
// `scratch`.
const uint8_t* StreamBytes(const StridedSide& side,
                           std::vector<uint8_t>* scratch) {
  if (side.contiguous()) return side.base;
  scratch->resize(side.total_bytes);
  internal::PackStream(side, 0, scratch->data(), side.total_bytes);
  return scratch->data();
}

const BoundRegion& RegionOf(const ExchangeOp& op, size_t r) {
  return r == 0 ? *op.region : *op.more[r - 1];
}

std::string PeerName(const ExchangeOp& op) {
  return "rank " + std::to_string(op.peer);
}

LivePeerTraffic& PeerOf(LiveReport* report, uint32_t peer) {
  for (LivePeerTraffic& p : report->peers) {
    if (p.peer == peer) return p;
  }
  report->peers.push_back({});
  report->peers.back().peer = peer;
  return report->peers.back();
}

}  // namespace

struct LiveDelta::Buffers {
  // By operation index: a send's snapshot (its message as last sent).
  std::vector<std::vector<uint8_t>> snapshots;
  // Round 1: the base hashes a target sends, or a source receives.
  std::vector<std::vector<uint8_t>> hashes;
  std::vector<uint64_t> hashes_received;
  // Round 2: a source's encoded message, or a target's received one.
  std::vector<std::vector<uint8_t>> messages;
  std::vector<uint64_t> received;
  std::vector<uint8_t> scratch;
};

LiveDelta::LiveDelta(const LogicalTransferPlan& plan,
                     const WeightPlacementManifest& source)
    : buffers_(std::make_unique<Buffers>()) {
  std::vector<uint32_t> by_tensor;
  for (const std::string& id : plan.tensors()) {
    const TensorDescriptor* t = source.FindTensor(id);
    by_tensor.push_back(t != nullptr ? static_cast<uint32_t>(t->itemsize())
                                     : 1);
  }
  for (const TransferRegion& r : plan.regions()) {
    region_itemsize_.push_back(by_tensor[r.tensor]);
  }
}

LiveDelta::~LiveDelta() = default;

uint32_t LiveDelta::ItemSize(const BoundRegion& region) const {
  return region_itemsize_[region.region];
}

uint64_t LiveDelta::SnapshotBytes(const std::vector<ExchangeOp>& ops) {
  uint64_t bytes = 0;
  for (const ExchangeOp& op : ops) {
    if (op.kind == ExchangeOp::Kind::kSend) bytes += op.bytes();
  }
  return bytes;
}

void LiveDelta::Snapshot(const std::vector<ExchangeOp>& ops) {
  Buffers& b = *buffers_;
  b.snapshots.resize(ops.size());
  for (size_t i = 0; i < ops.size(); ++i) {
    if (ops[i].kind != ExchangeOp::Kind::kSend) continue;
    const SideStream stream = SideStream::Of(ops[i]);
    std::vector<uint8_t>& snap = b.snapshots[i];
    snap.resize(stream.total_bytes);
    for (size_t r = 0; r < stream.sides.size(); ++r) {
      internal::PackStream(stream.sides[r], 0, snap.data() + stream.starts[r],
                           stream.sides[r].total_bytes);
    }
  }
}

Status LiveDelta::Run(internal::PeerExchange& exchange,
                      const std::vector<ExchangeOp>& ops,
                      const internal::ExchangeOptions& base_round,
                      const internal::ExchangeOptions& data_round,
                      uint64_t base_generation, LiveReport* report,
                      internal::ExchangeStats* stats) {
  if (buffers_ == nullptr) {
    return Status::FailedPrecondition("delta state abandoned by a failure");
  }
  Buffers& b = *buffers_;
  const size_t n = ops.size();
  b.hashes.resize(n);
  b.hashes_received.assign(n, 0);
  b.messages.resize(n);
  b.received.assign(n, 0);
  // Round 1: targets send the hashes of the bases they hold.
  const auto t0 = Clock::now();
  std::vector<ExchangeOp> round;
  for (size_t i = 0; i < n; ++i) {
    const ExchangeOp& op = ops[i];
    const size_t regions = 1 + op.more.size();
    std::vector<uint8_t>& h = b.hashes[i];
    h.assign(8 * regions, 0);
    ExchangeOp x{op.region, op.more, op.peer, ExchangeOp::Kind::kSend};
    x.buffer = h.data();
    x.buffer_bytes = h.size();
    if (op.kind == ExchangeOp::Kind::kReceive) {
      const SideStream stream = SideStream::Of(op);
      for (size_t r = 0; r < regions; ++r) {
        const StridedSide& side = stream.sides[r];
        StoreLe64(h.data() + 8 * r,
                  XXH3_64bits(StreamBytes(side, &b.scratch), side.total_bytes));
      }
    } else {
      x.kind = ExchangeOp::Kind::kReceive;
      x.received = &b.hashes_received[i];
    }
    round.push_back(std::move(x));
  }
  report->apply_seconds += SecondsSince(t0);
  internal::ExchangeStats first;
  Status st = exchange.Run(round, base_round, &first);
  stats->abandoned_in_flight = first.abandoned_in_flight;
  RESHARD_RETURN_NOT_OK(st);
  report->wire_bytes += first.bytes_received;
  // Round 2: sources send their encoded regions.
  RESHARD_RETURN_NOT_OK(Encode(ops, base_generation, report));
  round.clear();
  for (size_t i = 0; i < n; ++i) {
    const ExchangeOp& op = ops[i];
    ExchangeOp x{op.region, op.more, op.peer, op.kind};
    std::vector<uint8_t>& m = b.messages[i];
    if (op.kind == ExchangeOp::Kind::kReceive) {
      m.resize(MaxDeltaMessageBytes(op.bytes(), 1 + op.more.size()));
      x.received = &b.received[i];
    }
    x.buffer = m.data();
    x.buffer_bytes = m.size();
    round.push_back(std::move(x));
  }
  RESHARD_RETURN_NOT_OK(exchange.Run(round, data_round, stats));
  return Apply(ops, base_generation, report);
}

Status LiveDelta::Encode(const std::vector<ExchangeOp>& ops,
                         uint64_t base_generation, LiveReport* report) {
  Buffers& b = *buffers_;
  const auto t0 = Clock::now();
  for (size_t i = 0; i < ops.size(); ++i) {
    const ExchangeOp& op = ops[i];
    if (op.kind != ExchangeOp::Kind::kSend) continue;
    const SideStream stream = SideStream::Of(op);
    const size_t regions = stream.sides.size();
    if (i >= b.snapshots.size() ||
        b.snapshots[i].size() != stream.total_bytes) {
      return Status::Internal("delta update without a snapshot of " +
                              internal::DescribeExchangeOp(op, PeerName(op)));
    }
    if (b.hashes_received[i] != 8 * regions) {
      return Status::DataLoss(
          internal::DescribeExchangeOp(op, PeerName(op)) +
          ": the target sent " + std::to_string(b.hashes_received[i]) +
          " bytes of base hashes, expected " + std::to_string(8 * regions));
    }
    std::vector<uint8_t>& snap = b.snapshots[i];
    std::vector<uint8_t>& m = b.messages[i];
    m.clear();
    BeginDeltaMessage(static_cast<uint32_t>(regions), base_generation, &m);
    LivePeerTraffic& peer = PeerOf(report, op.peer);
    for (size_t r = 0; r < regions; ++r) {
      const StridedSide& side = stream.sides[r];
      const uint64_t bytes = side.total_bytes;
      uint8_t* base = snap.data() + stream.starts[r];
      const uint8_t* now = StreamBytes(side, &b.scratch);
      DeltaMode mode = DeltaMode::kRaw;
      if (XXH3_64bits(base, bytes) == LoadLe64(b.hashes[i].data() + 8 * r)) {
        uint64_t changed = 0;
        mode = EncodeDeltaRegion(now, base, bytes, ItemSize(RegionOf(op, r)),
                                 &m, &changed);
      } else {
        // The target's base is not what this source delivered: in full.
        EncodeRawRegion(now, bytes, &m);
        std::memcpy(base, now, bytes);
      }
      ++(mode == DeltaMode::kRaw ? peer.full_regions_sent
                                 : peer.delta_regions_sent);
    }
  }
  report->encode_seconds += SecondsSince(t0);
  return Status::OK();
}

Status LiveDelta::Apply(const std::vector<ExchangeOp>& ops,
                        uint64_t base_generation, LiveReport* report) {
  Buffers& b = *buffers_;
  const auto t0 = Clock::now();
  std::vector<uint64_t> sizes;
  std::vector<uint32_t> items;
  std::vector<DeltaMode> modes;
  for (size_t i = 0; i < ops.size(); ++i) {
    const ExchangeOp& op = ops[i];
    if (op.kind != ExchangeOp::Kind::kReceive) continue;
    const SideStream stream = SideStream::Of(op);
    sizes.clear();
    items.clear();
    for (size_t r = 0; r < stream.sides.size(); ++r) {
      sizes.push_back(stream.sides[r].total_bytes);
      items.push_back(ItemSize(RegionOf(op, r)));
    }
    Status st = DecodeDeltaMessage(
        b.messages[i].data(), b.received[i], base_generation, sizes, items,
        [&](size_t r, uint64_t offset, const uint8_t* bytes, uint64_t length) {
          const StridedSide& side = stream.sides[r];
          if (side.contiguous()) {
            std::memcpy(side.base + offset, bytes, length);
          } else {
            internal::UnpackStream(side, offset, bytes, length);
          }
        },
        &modes);
    RESHARD_RETURN_NOT_OK(
        st.WithContext(internal::DescribeExchangeOp(op, PeerName(op))));
    LivePeerTraffic& peer = PeerOf(report, op.peer);
    peer.wire_bytes_received += b.received[i];
    for (DeltaMode mode : modes) {
      if (mode == DeltaMode::kRaw) {
        ++peer.full_regions;
        ++report->full_regions;
      } else {
        ++peer.delta_regions;
        ++report->delta_regions;
      }
    }
  }
  report->apply_seconds += SecondsSince(t0);
  return Status::OK();
}

void LiveDelta::Abandon() { (void)buffers_.release(); }

}  // namespace reshard::live_internal
