#include "live/live_delta.h"

#include <xxhash.h>
#if RESHARD_HAVE_XXH_DISPATCH
// Routes XXH3_64bits* to the run-time AVX2/AVX-512 dispatcher.
#include <xxh_x86dispatch.h>
#endif

#include <algorithm>
#include <chrono>
#include <cstring>
#include <map>
#include <string>
#include <thread>
#include <utility>

#include "bind/strided_stream.h"
#include "live/delta_codec.h"
#include "live/region_hash.h"
#include "live_exchange/side_stream.h"
#include "util/byte_shares.h"
#include "util/host_memory.h"

namespace reshard::live_internal {
namespace {

using Clock = std::chrono::steady_clock;
using internal::SideStream;
using internal::StridedSide;

double SecondsSince(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
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

// Round 2's parts: enough for the encoding of one to overlap the
// application of the previous, few enough that each stays a large batch.
constexpr uint64_t kParts = 8;

void AddStats(const ExchangeStats& part, ExchangeStats* total) {
  total->messages_sent += part.messages_sent;
  total->messages_received += part.messages_received;
  total->bytes_sent += part.bytes_sent;
  total->bytes_received += part.bytes_received;
  total->packed_messages += part.packed_messages;
  total->coalesced_regions += part.coalesced_regions;
  total->abandoned_in_flight = part.abandoned_in_flight;
  total->gets += part.gets;
}

// One buffer per operation in a single allocation with huge pages (a
// fault per 2 MiB, not per 4 KiB, on first touch; fewer TLB misses when
// scanned): operation i's is at(i), bytes[i] long (0: it has none).
struct OpArena {
  internal::HostBuffer memory;
  std::vector<uint64_t> offset, bytes;
  uint64_t total = 0;

  uint8_t* at(size_t i) { return memory.get() + offset[i]; }
  // Lays out and allocates buffers of `sizes` (by operation); false when
  // the allocation of `total` bytes fails.
  bool Allocate(std::vector<uint64_t> sizes) {
    bytes = std::move(sizes);
    offset.assign(bytes.size(), 0);
    total = 0;
    for (size_t i = 0; i < bytes.size(); ++i) {
      offset[i] = total;
      total += bytes[i];
    }
    memory = internal::AllocateHostBytes(total);
    return memory != nullptr;
  }
};

}  // namespace

struct LiveDelta::Buffers {
  Buffers() : hash(XXH3_createState()) {}
  ~Buffers() { XXH3_freeState(hash); }
  Buffers(const Buffers&) = delete;
  Buffers& operator=(const Buffers&) = delete;

  // By operation index: a send's snapshot (its message as last sent) and
  // the XXH3-64 of each of its regions in the snapshot. The snapshots are
  // one allocation (OpArena).
  OpArena snapshots;
  std::vector<std::vector<uint64_t>> snapshot_hashes;
  // A source's encoded message; a target's received one, in one
  // allocation sized for every region raw (allocated once, reused).
  std::vector<std::vector<uint8_t>> messages;
  OpArena inbox;
  std::vector<uint64_t> received;
  // By operation index, one byte per region: 1 where a target found
  // another base than the message's (the region waits for its whole
  // bytes), as the target sends them and the source receives them.
  std::vector<std::vector<uint8_t>> stale;
  std::vector<uint64_t> stale_received;
  // By operation index, one byte per region: 1 where a source sent the
  // region whole (its encoding was raw).
  std::vector<std::vector<uint8_t>> sent_raw;
  XXH3_state_t* hash;
};

LiveDelta::LiveDelta(const LogicalTransferPlan& plan,
                     const WeightPlacementManifest& source, uint32_t threads)
    : buffers_(std::make_unique<Buffers>()), encode_threads_(threads) {
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

Status LiveDelta::Snapshot(const std::vector<ExchangeOp>& ops) {
  Buffers& b = *buffers_;
  if (b.snapshots.memory == nullptr) {
    std::vector<uint64_t> sizes(ops.size(), 0);
    for (size_t i = 0; i < ops.size(); ++i) {
      if (ops[i].kind == ExchangeOp::Kind::kSend) sizes[i] = ops[i].bytes();
    }
    if (!b.snapshots.Allocate(std::move(sizes))) {
      return Status::ResourceExhausted(
          "delta: cannot allocate the snapshot of " +
          std::to_string(b.snapshots.total) + " bytes");
    }
  }
  b.snapshot_hashes.resize(ops.size());
  for (size_t i = 0; i < ops.size(); ++i) {
    if (ops[i].kind != ExchangeOp::Kind::kSend) continue;
    const SideStream stream = SideStream::Of(ops[i]);
    b.snapshot_hashes[i].clear();
    for (size_t r = 0; r < stream.sides.size(); ++r) {
      uint8_t* at = b.snapshots.at(i) + stream.starts[r];
      const uint64_t bytes = stream.sides[r].total_bytes;
      internal::PackStream(stream.sides[r], 0, at, bytes);
      b.snapshot_hashes[i].push_back(XXH3_64bits(at, bytes));
    }
  }
  return Status::OK();
}

Status LiveDelta::Run(PeerExchange& exchange,
                      const std::vector<ExchangeOp>& ops,
                      const ExchangeRunOptions& base_round,
                      const ExchangeRunOptions& data_round,
                      uint64_t base_generation, LiveReport* report,
                      ExchangeStats* stats) {
  if (buffers_ == nullptr) {
    return Status::FailedPrecondition("delta state abandoned by a failure");
  }
  Buffers& b = *buffers_;
  const size_t n = ops.size();
  b.messages.resize(n);
  b.received.assign(n, 0);
  b.stale.resize(n);
  b.stale_received.assign(n, 0);
  b.sent_raw.resize(n);
  for (size_t i = 0; i < n; ++i) b.stale[i].assign(1 + ops[i].more.size(), 0);
  RESHARD_RETURN_NOT_OK(AllocateInbox(ops));
  // The messages go in parts by region index (both ends of a message agree
  // on its part: its first region's index), so that a source encodes part
  // p + 1 while its targets check and apply part p.
  const uint64_t regions = std::max<uint64_t>(region_itemsize_.size(), 1);
  std::vector<std::vector<size_t>> parts(kParts);
  for (size_t i = 0; i < n; ++i) {
    parts[ops[i].region->region * kParts / regions].push_back(i);
  }
  ExchangeRunOptions xo = data_round;
  for (const std::vector<size_t>& part : parts) {
    if (part.empty()) continue;
    RESHARD_RETURN_NOT_OK(Encode(ops, part, base_generation, report));
    RESHARD_RETURN_NOT_OK(
        Exchange(exchange, MessageRound(ops, part), xo, stats));
    xo.on_first_completion = nullptr;  // once per update
    RESHARD_RETURN_NOT_OK(Apply(ops, part, base_generation, report));
  }
  // Regions whose target held another base: every target tells each of
  // its sources which (one byte per region, every message), and those
  // regions come again whole. The flags are bookkeeping, not messages of
  // the update: only their bytes count (wire bytes).
  ExchangeStats flags;
  Status st = Exchange(exchange, StaleRound(ops), base_round, &flags);
  stats->abandoned_in_flight = flags.abandoned_in_flight;
  report->wire_bytes += flags.bytes_received;
  RESHARD_RETURN_NOT_OK(st);
  std::vector<size_t> resend;
  for (size_t i = 0; i < n; ++i) {
    const std::vector<uint8_t>& stale = b.stale[i];
    if (std::find(stale.begin(), stale.end(), 1) != stale.end()) {
      resend.push_back(i);
    }
  }
  RESHARD_RETURN_NOT_OK(Resend(ops, resend, base_generation, report));
  if (resend.empty()) return Status::OK();
  RESHARD_RETURN_NOT_OK(
      Exchange(exchange, MessageRound(ops, resend), xo, stats));
  return Apply(ops, resend, base_generation, report, /*whole=*/true);
}

Status LiveDelta::Exchange(PeerExchange& exchange,
                           const std::vector<ExchangeOp>& round,
                           const ExchangeRunOptions& options,
                           ExchangeStats* stats) {
  if (round.empty()) return Status::OK();
  ExchangeStats part;
  Status st = exchange.Run(round, options, &part);
  AddStats(part, stats);
  return st;
}

std::vector<ExchangeOp> LiveDelta::StaleRound(
    const std::vector<ExchangeOp>& ops) {
  Buffers& b = *buffers_;
  std::vector<ExchangeOp> round;
  for (size_t i = 0; i < ops.size(); ++i) {
    const ExchangeOp& op = ops[i];
    ExchangeOp x{op.region, op.more, op.peer, ExchangeOp::Kind::kSend};
    x.buffer = b.stale[i].data();
    x.buffer_bytes = b.stale[i].size();
    if (op.kind == ExchangeOp::Kind::kSend) {
      x.kind = ExchangeOp::Kind::kReceive;
      x.received = &b.stale_received[i];
    }
    round.push_back(std::move(x));
  }
  return round;
}

std::vector<ExchangeOp> LiveDelta::MessageRound(
    const std::vector<ExchangeOp>& ops, const std::vector<size_t>& which) {
  Buffers& b = *buffers_;
  std::vector<ExchangeOp> round;
  for (size_t i : which) {
    const ExchangeOp& op = ops[i];
    ExchangeOp x{op.region, op.more, op.peer, op.kind};
    if (op.kind == ExchangeOp::Kind::kReceive) {
      x.buffer = b.inbox.at(i);
      x.buffer_bytes = b.inbox.bytes[i];
      x.received = &b.received[i];
    } else {
      x.buffer = b.messages[i].data();
      x.buffer_bytes = b.messages[i].size();
    }
    round.push_back(std::move(x));
  }
  return round;
}

void LiveDelta::EncodeOp(const ExchangeOp& op, size_t i,
                         uint64_t base_generation) {
  Buffers& b = *buffers_;
  const SideStream stream = SideStream::Of(op);
  const size_t regions = stream.sides.size();
  std::vector<uint8_t>& m = b.messages[i];
  m.clear();
  BeginDeltaMessage(static_cast<uint32_t>(regions), base_generation, &m);
  b.sent_raw[i].assign(regions, 0);
  for (size_t r = 0; r < regions; ++r) {
    const StridedSide& side = stream.sides[r];
    // The change applies to the snapshot as it was: its hash goes into the
    // region's header, and Finish replaces it with the new one.
    uint64_t& hash = b.snapshot_hashes[i][r];
    DeltaRegionEncoder encoder(b.snapshots.at(i) + stream.starts[r],
                               side.total_bytes, ItemSize(RegionOf(op, r)),
                               hash, &m);
    internal::ForEachStreamRow(
        side, [&](const uint8_t* p, uint64_t position, uint64_t bytes) {
          encoder.Piece(p, position, bytes);
        });
    uint64_t changed = 0;
    b.sent_raw[i][r] = encoder.Finish(&changed, &hash) == DeltaMode::kRaw;
  }
}

Status LiveDelta::AllocateInbox(const std::vector<ExchangeOp>& ops) {
  Buffers& b = *buffers_;
  if (b.inbox.memory != nullptr) return Status::OK();
  std::vector<uint64_t> sizes(ops.size(), 0);
  for (size_t i = 0; i < ops.size(); ++i) {
    if (ops[i].kind != ExchangeOp::Kind::kReceive) continue;
    sizes[i] = MaxDeltaMessageBytes(ops[i].bytes(), 1 + ops[i].more.size());
  }
  if (!b.inbox.Allocate(std::move(sizes))) {
    return Status::ResourceExhausted("delta: cannot allocate " +
                                     std::to_string(b.inbox.total) +
                                     " bytes for the messages received");
  }
  return Status::OK();
}

Status LiveDelta::Encode(const std::vector<ExchangeOp>& ops,
                         const std::vector<size_t>& which,
                         uint64_t base_generation, LiveReport* report) {
  Buffers& b = *buffers_;
  const auto t0 = Clock::now();
  std::vector<size_t> sends;
  uint64_t total = 0;
  for (size_t i : which) {
    const ExchangeOp& op = ops[i];
    if (op.kind != ExchangeOp::Kind::kSend) continue;
    if (i >= b.snapshots.bytes.size() || b.snapshots.bytes[i] != op.bytes() ||
        b.snapshot_hashes[i].size() != 1 + op.more.size()) {
      return Status::Internal("delta update without a snapshot of " +
                              DescribeExchangeOp(op, PeerName(op)));
    }
    sends.push_back(i);
    total += op.bytes();
  }
  // The scan is bound by memory reads: a second thread on another core
  // adds bandwidth. Automatic: half the cores, between 2 and 8 (ranks of
  // the same host share them, and its targets hash and apply meanwhile),
  // one below 64 MiB (a thread costs more than it saves). Operations are
  // split into contiguous shares of about equal bytes; each touches only
  // its own snapshot and message.
  size_t threads = encode_threads_;
  if (threads == 0) {
    threads = total < (64u << 20)
                  ? 1
                  : std::clamp(std::thread::hardware_concurrency() / 2, 2u, 8u);
  }
  internal::RunInByteShares(
      sends.size(), threads, [&](size_t k) { return ops[sends[k]].bytes(); },
      [&](size_t first, size_t last) {
        for (size_t k = first; k < last; ++k) {
          EncodeOp(ops[sends[k]], sends[k], base_generation);
        }
      });
  for (size_t i : sends) {
    LivePeerTraffic& peer = PeerOf(report, ops[i].peer);
    for (uint8_t raw : b.sent_raw[i]) {
      ++(raw ? peer.full_regions_sent : peer.delta_regions_sent);
    }
  }
  report->encode_seconds += SecondsSince(t0);
  return Status::OK();
}

Status LiveDelta::Resend(const std::vector<ExchangeOp>& ops,
                         const std::vector<size_t>& which,
                         uint64_t base_generation, LiveReport* report) {
  Buffers& b = *buffers_;
  const auto t0 = Clock::now();
  for (size_t i = 0; i < ops.size(); ++i) {
    const ExchangeOp& op = ops[i];
    if (op.kind != ExchangeOp::Kind::kSend) continue;
    const size_t regions = 1 + op.more.size();
    if (b.stale_received[i] != regions) {
      return Status::DataLoss(
          DescribeExchangeOp(op, PeerName(op)) + ": the target sent " +
          std::to_string(b.stale_received[i]) +
          " bytes of stale-region flags, expected " + std::to_string(regions));
    }
    for (uint8_t flag : b.stale[i]) {
      if (flag > 1) {
        return Status::DataLoss(DescribeExchangeOp(op, PeerName(op)) +
                                ": malformed stale-region flag " +
                                std::to_string(flag));
      }
    }
  }
  for (size_t i : which) {
    const ExchangeOp& op = ops[i];
    if (op.kind != ExchangeOp::Kind::kSend) continue;
    // The stale regions whole (the snapshot holds them as they are now),
    // the others as unchanged.
    const SideStream stream = SideStream::Of(op);
    std::vector<uint8_t>& m = b.messages[i];
    m.clear();
    BeginDeltaMessage(static_cast<uint32_t>(stream.sides.size()),
                      base_generation, &m);
    LivePeerTraffic& peer = PeerOf(report, op.peer);
    for (size_t r = 0; r < stream.sides.size(); ++r) {
      if (b.stale[i][r] == 0) {
        EncodeUnchangedRegion(b.snapshot_hashes[i][r], &m);
        continue;
      }
      EncodeRawRegion(b.snapshots.at(i) + stream.starts[r],
                      stream.sides[r].total_bytes, &m);
      if (!b.sent_raw[i][r]) {
        --peer.delta_regions_sent;
        ++peer.full_regions_sent;
      }
    }
  }
  report->encode_seconds += SecondsSince(t0);
  return Status::OK();
}

Status LiveDelta::Apply(const std::vector<ExchangeOp>& ops,
                        const std::vector<size_t>& which,
                        uint64_t base_generation, LiveReport* report,
                        bool whole) {
  Buffers& b = *buffers_;
  const auto t0 = Clock::now();
  std::vector<uint64_t> sizes;
  std::vector<uint32_t> items;
  std::vector<DeltaMode> modes;
  std::vector<internal::StreamWriter> writers;
  // Contiguous regions take their pieces directly, strided ones through
  // their writer.
  std::vector<uint8_t*> direct;
  for (size_t i : which) {
    const ExchangeOp& op = ops[i];
    if (op.kind != ExchangeOp::Kind::kReceive) continue;
    const SideStream stream = SideStream::Of(op);
    sizes.clear();
    items.clear();
    writers.clear();
    direct.clear();
    for (size_t r = 0; r < stream.sides.size(); ++r) {
      const internal::StridedSide& side = stream.sides[r];
      sizes.push_back(side.total_bytes);
      items.push_back(ItemSize(RegionOf(op, r)));
      writers.emplace_back(side);
      direct.push_back(side.contiguous() ? side.base : nullptr);
    }
    // A change applies only onto the base it was computed from: the region
    // is hashed right before (then its bytes are in cache for the apply);
    // another base marks it stale, and it comes again whole.
    std::vector<uint8_t>& stale = b.stale[i];
    const DeltaBase base = [&](size_t r, uint64_t hash) {
      if (HashSide(stream.sides[r], b.hash) == hash) return true;
      stale[r] = 1;
      return false;
    };
    Status st = DecodeDeltaMessage(
        b.inbox.at(i), b.received[i], base_generation, sizes, items,
        [&](size_t r, uint64_t offset, const uint8_t* bytes, uint64_t length) {
          writers[r].Write(offset, bytes, length);
        },
        &modes, &direct, whole ? nullptr : &base);
    for (internal::StreamWriter& w : writers) w.Flush();
    RESHARD_RETURN_NOT_OK(st.WithContext(DescribeExchangeOp(op, PeerName(op))));
    LivePeerTraffic& peer = PeerOf(report, op.peer);
    peer.wire_bytes_received += b.received[i];
    for (size_t r = 0; r < modes.size(); ++r) {
      if (whole && stale[r] && modes[r] != DeltaMode::kRaw) {
        return Status::DataLoss(
            DescribeExchangeOp(op, PeerName(op)) + ": region " +
            std::to_string(r) +
            " of the message holds another base and did not come whole");
      }
      // A stale region counts once, when it comes whole.
      if (whole != (stale[r] == 1)) continue;
      if (modes[r] == DeltaMode::kRaw) {
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

void LiveDelta::SentHashes(const std::vector<ExchangeOp>& ops,
                           std::vector<uint64_t>* by_region) const {
  const Buffers& b = *buffers_;
  for (size_t i = 0; i < ops.size() && i < b.snapshot_hashes.size(); ++i) {
    const ExchangeOp& op = ops[i];
    if (op.kind != ExchangeOp::Kind::kSend) continue;
    const auto& hashes = b.snapshot_hashes[i];
    for (size_t r = 0; r < hashes.size() && r < 1 + op.more.size(); ++r) {
      (*by_region)[RegionOf(op, r).region] = hashes[r];
    }
  }
}

}  // namespace reshard::live_internal
