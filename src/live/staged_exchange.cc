#include "live/staged_exchange.h"

#include <algorithm>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "bind/binding_copy.h"
#include "bind/row_walker.h"
#include "exec_cuda/copy_lowering.h"
#include "exec_cuda/device_streams.h"
#include "exec_cuda/fragment_staging.h"
#include "live/device_regions.h"
#include "live/region_hash.h"

namespace reshard::live_internal {
namespace {

// The slots of an abandoned exchange, which a peer may still write: kept,
// reachable, for the life of the process.
void KeepForever(std::vector<std::unique_ptr<cuda::PinnedBuffer>> pinned,
                 std::vector<std::vector<uint8_t>> host) {
  struct Kept {
    std::vector<std::unique_ptr<cuda::PinnedBuffer>> pinned;
    std::vector<std::vector<uint8_t>> host;
  };
  static std::mutex* mu = new std::mutex;
  static std::vector<Kept>* kept = new std::vector<Kept>;
  std::lock_guard<std::mutex> lock(*mu);
  kept->push_back({std::move(pinned), std::move(host)});
}

const void* At(uint64_t address) {
  return reinterpret_cast<const void*>(static_cast<uintptr_t>(address));
}

// The copy from packed bytes at `address` into `piece`'s source side.
BoundRegion UnpackedFrom(const BoundRegion& piece, uint64_t address) {
  BoundRegion r = PackedAt(piece, address);
  std::swap(r.source_address, r.target_address);
  for (OuterLoop& loop : r.loops)
    std::swap(loop.source_stride, loop.target_stride);
  return r;
}

// The stream bytes [begin, end) of `r`'s source side as pieces in stream
// order: runs of whole outer iterations where they fit, else the
// iterations cut by the loops inside them, a single row cut into bytes.
void Cut(const BoundRegion& r, uint64_t begin, uint64_t end,
         std::vector<BoundRegion>* out) {
  if (begin >= end) return;
  if (begin == 0 && end == r.bytes) {
    out->push_back(r);
    return;
  }
  if (r.loops.empty()) {
    const uint64_t n = end - begin;
    out->push_back({r.source_address + begin, 0, n, {}, n, r.region});
    return;
  }
  const OuterLoop outer = r.loops[0];
  const uint64_t per = r.bytes / outer.count;
  BoundRegion inner = r;
  inner.loops.erase(inner.loops.begin());
  inner.bytes = per;
  for (uint64_t i = begin / per; i < outer.count && i * per < end;) {
    const uint64_t at = r.source_address + i * outer.source_stride;
    const uint64_t whole = std::min(outer.count, end / per) - i;
    if (begin <= i * per && whole > 1) {
      BoundRegion piece = r;
      piece.loops[0].count = whole;
      piece.source_address = at;
      piece.bytes = whole * per;
      out->push_back(std::move(piece));
      i += whole;
      continue;
    }
    inner.source_address = at;
    Cut(inner, std::max(begin, i * per) - i * per,
        std::min(end, (i + 1) * per) - i * per, out);
    ++i;
  }
}

// One message of a Run: a chunk of a staged operation, or an operation
// passed through (chunk 0). Ordered by (chunk, region) on every rank.
struct Message {
  size_t op = 0;
  uint64_t chunk = 0;
  uint32_t region = 0;
  uint64_t offset = 0;  // into the operation's stream
  uint64_t length = 0;
  bool staged = false;
};

std::vector<const BoundRegion*> RegionsOf(const ExchangeOp& op) {
  std::vector<const BoundRegion*> regions{op.region};
  regions.insert(regions.end(), op.more.begin(), op.more.end());
  return regions;
}

std::string PeerName(uint32_t peer) { return "rank " + std::to_string(peer); }

class StagedExchange final : public PeerExchange {
 public:
  StagedExchange(std::unique_ptr<PeerExchange> inner,
                 std::shared_ptr<cuda::DeviceApi> api,
                 StagedExchangeOptions options)
      : inner_(std::move(inner)),
        api_(std::move(api)),
        options_(std::move(options)),
        max_slots_(options_.budget / options_.chunk_bytes),
        double_(max_slots_ >= 2),
        per_window_(double_ ? max_slots_ / 2 : 1) {}

  ~StagedExchange() override {
    // Copies still queued end before the slots are freed.
    (void)streams_.SynchronizeAll();
    // Slots of a window left in flight may still be written: kept.
    if (abandoned_) KeepForever(std::move(pinned_), std::move(host_));
  }

  TensorMover* tensor_mover() override { return inner_->tensor_mover(); }
  PeerExchangeCapabilities capabilities() const override {
    PeerExchangeCapabilities caps = inner_->capabilities();
    caps.pull_on_one_host = false;
    caps.pull_every_region = false;
    caps.memory_kinds = {MemoryKind::kHost, MemoryKind::kCuda};
    return caps;
  }
  Result<std::string> Address() override { return inner_->Address(); }
  Result<std::string> RegisterMemory(void* address, uint64_t length) override {
    return inner_->RegisterMemory(address, length);
  }
  Status Connect(uint32_t peer, const std::string& address,
                 std::string name) override {
    return inner_->Connect(peer, address, std::move(name));
  }
  Status Disconnect(uint32_t peer) override { return inner_->Disconnect(peer); }
  uint64_t connections_made() const override {
    return inner_->connections_made();
  }
  Status WireUp(std::chrono::steady_clock::time_point deadline,
                const std::function<Status()>& poll_abort) override {
    return inner_->WireUp(deadline, poll_abort);
  }
  Result<uint64_t> ImportRemoteKey(uint32_t peer,
                                   const std::string& packed) override {
    return inner_->ImportRemoteKey(peer, packed);
  }
  Status PeerFailure() const override { return inner_->PeerFailure(); }
  void Progress(std::chrono::microseconds idle_wait) override {
    inner_->Progress(idle_wait);
  }
  void Abandon() override {
    abandoned_ = true;
    inner_->Abandon();
  }

  Status Run(const std::vector<ExchangeOp>& ops,
             const ExchangeRunOptions& options, ExchangeStats* stats) override;

 private:
  // The state of one Run across its windows.
  struct RunState {
    const std::vector<ExchangeOp>* ops = nullptr;
    const ExchangeRunOptions* options = nullptr;
    std::vector<Message> messages;
    std::vector<uint64_t> remaining;  // messages left, by operation
    bool first = false;
    ExchangeStats stats;
  };

  bool Staged(const ExchangeOp& op) const;
  Status MessagesOf(RunState* run) const;
  size_t WindowEnd(const RunState& run, size_t begin) const;
  // One inner Run's operations: the passed-through ones as given, the
  // staged chunks as buffer operations on their slots (sends packed).
  struct Window {
    std::vector<ExchangeOp> ops;
    std::vector<size_t> which;      // the message of each operation
    std::vector<uint8_t*> slot_of;  // its slot (staged chunks only)
    std::vector<uint64_t> received;
    uint64_t chunk = 0;  // the chunk index of its messages
  };
  // Runs every window in order (the pipeline below Run).
  Status RunWindows(RunState* run);
  // Lays out messages [begin, end) on slots from `base` and queues the
  // sends' packing (waited for by the caller).
  Status BuildWindow(RunState* run, size_t begin, size_t end, size_t base,
                     Window* w);
  // The window's inner Run, its callbacks mapped to the caller's
  // operations.
  Status RunInner(RunState* run, Window* w);
  // Checks the window's received chunks and queues their unpacking.
  Status QueueUnpack(RunState* run, const Window& w);
  // After the packing (sends) or unpacking (receives) was waited for:
  // on_piece, and on_completion of received operations now whole.
  void ReportSent(RunState* run, const Window& w);
  void ReportReceived(RunState* run, const Window& w);
  void Done(RunState* run, const Message& m);
  // Queues the copies between `m`'s stream range of `op` and `slot`:
  // into the slot (pack) or out of it into the targets.
  Status Queue(const ExchangeOp& op, const Message& m, uint8_t* slot,
               bool pack);
  Status CopyPiece(const BoundRegion& piece, uint64_t host, bool pack);
  // Waits for every stream with queued copies.
  Status Wait(std::string_view what);
  Result<cuda::StreamHandle> StreamOf(int device);
  Status EnsureSlots(size_t n);

  std::unique_ptr<PeerExchange> inner_;
  std::shared_ptr<cuda::DeviceApi> api_;
  StagedExchangeOptions options_;
  size_t max_slots_;
  // Two halves of the slots, used by windows in turn (the next window
  // packs while one moves), where at least two slots fit; else one slot.
  bool double_;
  size_t per_window_;  // staged chunks per window
  // The slots: pinned memory of api_, or host memory without one.
  std::vector<uint8_t*> slots_;
  std::vector<std::unique_ptr<cuda::PinnedBuffer>> pinned_;
  std::vector<std::vector<uint8_t>> host_;
  cuda::DeviceStreams streams_{api_};  // none made without api_
  bool abandoned_ = false;
};

bool StagedExchange::Staged(const ExchangeOp& op) const {
  if (!options_.staged || op.buffer != nullptr || op.region == nullptr) {
    return false;
  }
  for (const BoundRegion* r : RegionsOf(op)) {
    if (options_.staged(r->region)) return true;
  }
  return false;
}

Status StagedExchange::MessagesOf(RunState* run) const {
  const auto& ops = *run->ops;
  run->remaining.assign(ops.size(), 0);
  for (size_t i = 0; i < ops.size(); ++i) {
    const ExchangeOp& op = ops[i];
    const uint32_t region = op.region == nullptr ? 0 : op.region->region;
    if (!Staged(op)) {
      run->messages.push_back({i, 0, region, 0, op.bytes(), false});
      run->remaining[i] = 1;
      continue;
    }
    if (op.kind == ExchangeOp::Kind::kGet) {
      return Status::FailedPrecondition(
          DescribeExchangeOp(op, PeerName(op.peer)) +
          ": the exchange stages CUDA memory through pinned host buffers "
          "and reads no peer's memory (push)");
    }
    const uint64_t bytes = op.bytes();
    const uint64_t chunks = std::max<uint64_t>(
        1, (bytes + options_.chunk_bytes - 1) / options_.chunk_bytes);
    for (uint64_t c = 0; c < chunks; ++c) {
      const uint64_t at = c * options_.chunk_bytes;
      run->messages.push_back(
          {i, c, region, at, std::min(options_.chunk_bytes, bytes - at), true});
    }
    run->remaining[i] = chunks;
  }
  std::stable_sort(run->messages.begin(), run->messages.end(),
                   [](const Message& a, const Message& b) {
                     return a.chunk != b.chunk ? a.chunk < b.chunk
                                               : a.region < b.region;
                   });
  return Status::OK();
}

size_t StagedExchange::WindowEnd(const RunState& run, size_t begin) const {
  const uint64_t chunk = run.messages[begin].chunk;
  size_t staged = 0, end = begin;
  for (; end < run.messages.size(); ++end) {
    const Message& m = run.messages[end];
    if (m.chunk != chunk) break;
    if (m.staged && staged == per_window_) break;
    staged += m.staged ? 1 : 0;
  }
  return end;
}

Status StagedExchange::Run(const std::vector<ExchangeOp>& ops,
                           const ExchangeRunOptions& options,
                           ExchangeStats* stats) {
  ExchangeStats ignored;
  if (stats == nullptr) stats = &ignored;
  RunState run;
  run.ops = &ops;
  run.options = &options;
  RESHARD_RETURN_NOT_OK(MessagesOf(&run));
  const bool any = std::any_of(run.messages.begin(), run.messages.end(),
                               [](const Message& m) { return m.staged; });
  if (!any) return inner_->Run(ops, options, stats);
  Status st = RunWindows(&run);
  *stats = run.stats;
  if (!st.ok() && stats->abandoned_in_flight > 0) abandoned_ = true;
  return st;
}

void StagedExchange::Done(RunState* run, const Message& m) {
  if (--run->remaining[m.op] == 0 && run->options->on_completion) {
    run->options->on_completion(m.op);
  }
}

Status StagedExchange::RunWindows(RunState* run) {
  std::vector<std::pair<size_t, size_t>> bounds;
  for (size_t begin = 0; begin < run->messages.size();) {
    bounds.emplace_back(begin, WindowEnd(*run, begin));
    begin = bounds.back().second;
  }
  std::vector<Window> w(bounds.size());
  std::vector<bool> built(bounds.size(), false);
  const auto base = [&](size_t k) { return double_ ? k % 2 * per_window_ : 0; };
  constexpr std::string_view kCopies = "staging chunks through pinned memory";
  Status st;
  for (size_t k = 0; k < bounds.size() && st.ok(); ++k) {
    // Window k's packing (queued while k - 1 moved) and k - 1's unpacking.
    st = Wait(kCopies);
    if (st.ok() && k > 0) {
      ReportReceived(run, w[k - 1]);
      w[k - 1] = Window{};
    }
    if (st.ok() && !built[k]) {
      st = BuildWindow(run, bounds[k].first, bounds[k].second, base(k), &w[k]);
      if (st.ok()) st = Wait(kCopies);
    }
    if (!st.ok()) break;
    ReportSent(run, w[k]);
    // The next window packs into the other half while this one moves.
    if (double_ && k + 1 < bounds.size()) {
      built[k + 1] = true;
      st = BuildWindow(run, bounds[k + 1].first, bounds[k + 1].second,
                       base(k + 1), &w[k + 1]);
    }
    if (st.ok()) st = RunInner(run, &w[k]);
    if (st.ok()) st = QueueUnpack(run, w[k]);
  }
  // Nothing queued is left running, whatever failed.
  Status waited = Wait(kCopies);
  if (st.ok()) st = waited;
  if (st.ok() && !w.empty()) ReportReceived(run, w.back());
  return st;
}

Status StagedExchange::BuildWindow(RunState* run, size_t begin, size_t end,
                                   size_t base, Window* w) {
  const auto& ops = *run->ops;
  w->received.assign(end - begin, 0);
  w->chunk = run->messages[begin].chunk;
  // Slots as the windows need them (at most max_slots_), kept.
  RESHARD_RETURN_NOT_OK(EnsureSlots(
      base + static_cast<size_t>(std::count_if(
                 run->messages.begin() + begin, run->messages.begin() + end,
                 [](const Message& m) { return m.staged; }))));
  size_t slot = base;
  for (size_t k = begin; k < end; ++k) {
    const Message& m = run->messages[k];
    const ExchangeOp& op = ops[m.op];
    w->which.push_back(k);
    if (!m.staged) {
      w->ops.push_back(op);
      w->slot_of.push_back(nullptr);
      continue;
    }
    uint8_t* buffer = slots_[slot++];
    w->slot_of.push_back(buffer);
    ExchangeOp x;
    x.region = op.region;
    x.peer = op.peer;
    x.kind = op.kind;
    x.buffer = buffer;
    x.buffer_bytes = m.length;
    if (op.kind == ExchangeOp::Kind::kReceive) {
      x.received = &w->received[k - begin];
    } else {
      RESHARD_RETURN_NOT_OK(Queue(op, m, buffer, /*pack=*/true));
    }
    w->ops.push_back(std::move(x));
  }
  return Status::OK();
}

void StagedExchange::ReportSent(RunState* run, const Window& w) {
  const ExchangeRunOptions& options = *run->options;
  for (size_t j = 0; j < w.ops.size(); ++j) {
    const Message& m = run->messages[w.which[j]];
    if (!m.staged || w.ops[j].kind != ExchangeOp::Kind::kSend) continue;
    ++run->stats.packed_messages;
    if (options.on_piece) {
      options.on_piece(m.op, m.offset, w.slot_of[j], m.length);
    }
  }
}

Status StagedExchange::RunInner(RunState* run, Window* window) {
  const ExchangeRunOptions& options = *run->options;
  Window& w = *window;
  ExchangeRunOptions io = options;
  io.session_tag = ChunkTag(options.session_tag, w.chunk);
  io.on_first_completion = [&] {
    if (run->first) return;
    run->first = true;
    if (options.on_first_completion) options.on_first_completion();
  };
  io.on_completion = [&](size_t j) {
    const Message& m = run->messages[w.which[j]];
    if (!m.staged || w.ops[j].kind == ExchangeOp::Kind::kSend) Done(run, m);
  };
  io.on_piece = [&](size_t j, uint64_t offset, const uint8_t* bytes,
                    uint64_t length) {
    const Message& m = run->messages[w.which[j]];
    if (!m.staged && options.on_piece) {
      options.on_piece(m.op, offset, bytes, length);
    }
  };
  ExchangeStats ws;
  Status st = inner_->Run(w.ops, io, &ws);
  ExchangeStats& total = run->stats;
  total.messages_sent += ws.messages_sent;
  total.messages_received += ws.messages_received;
  total.bytes_sent += ws.bytes_sent;
  total.bytes_received += ws.bytes_received;
  total.packed_messages += ws.packed_messages;
  total.coalesced_regions += ws.coalesced_regions;
  total.abandoned_in_flight += ws.abandoned_in_flight;
  total.gets += ws.gets;
  return st;
}

Status StagedExchange::QueueUnpack(RunState* run, const Window& w) {
  const auto& ops = *run->ops;
  for (size_t j = 0; j < w.ops.size(); ++j) {
    const Message& m = run->messages[w.which[j]];
    if (!m.staged || w.ops[j].kind != ExchangeOp::Kind::kReceive) continue;
    const ExchangeOp& op = ops[m.op];
    const uint64_t got = w.received[j];
    if (got != m.length) {
      return Status::DataLoss(DescribeExchangeOp(op, PeerName(op.peer)) +
                              ": staged chunk " + std::to_string(m.chunk) +
                              " holds " + std::to_string(got) +
                              " bytes, expected " + std::to_string(m.length));
    }
    RESHARD_RETURN_NOT_OK(Queue(op, m, w.slot_of[j], /*pack=*/false));
  }
  return Status::OK();
}

void StagedExchange::ReportReceived(RunState* run, const Window& w) {
  for (size_t j = 0; j < w.ops.size(); ++j) {
    const Message& m = run->messages[w.which[j]];
    if (!m.staged || w.ops[j].kind != ExchangeOp::Kind::kReceive) continue;
    ++run->stats.packed_messages;
    if (run->options->on_piece) {
      run->options->on_piece(m.op, m.offset, w.slot_of[j], m.length);
    }
    Done(run, m);
  }
}

Status StagedExchange::Queue(const ExchangeOp& op, const Message& m,
                             uint8_t* slot, bool pack) {
  const RegionSide side = pack ? RegionSide::kSource : RegionSide::kTarget;
  const uint64_t lo = m.offset, hi = m.offset + m.length;
  uint64_t at = 0;  // the region's first byte in the stream
  for (const BoundRegion* r : RegionsOf(op)) {
    const uint64_t from = std::max(lo, at), to = std::min(hi, at + r->bytes);
    if (from < to) {
      std::vector<BoundRegion> pieces;
      Cut(SideAsSource(*r, side), from - at, to - at, &pieces);
      uint64_t packed = from - lo;
      for (const BoundRegion& piece : pieces) {
        const uint64_t host = reinterpret_cast<uint64_t>(slot) + packed;
        RESHARD_RETURN_NOT_OK(CopyPiece(piece, host, pack));
        packed += piece.bytes;
      }
    }
    at += r->bytes;
  }
  return Status::OK();
}

Status StagedExchange::CopyPiece(const BoundRegion& piece, uint64_t host,
                                 bool pack) {
  const BoundRegion copy =
      pack ? PackedAt(piece, host) : UnpackedFrom(piece, host);
  if (api_ == nullptr) {  // host memory on both sides
    internal::CopyRegionSegments(copy, 0, internal::RowCount(copy));
    return Status::OK();
  }
  RESHARD_ASSIGN_OR_RETURN(cuda::PointerInfo info,
                           api_->Pointer(At(piece.source_address)));
  const bool device = info.on_device();
  cuda::CopyKind kind = cuda::CopyKind::kHostToHost;
  if (device) {
    kind = pack ? cuda::CopyKind::kDeviceToHost : cuda::CopyKind::kHostToDevice;
  }
  RESHARD_ASSIGN_OR_RETURN(cuda::StreamHandle stream,
                           StreamOf(std::max(info.device, 0)));
  cuda::LoweringLimits limits;
  limits.max_pitch = api_->MaxPitch();
  limits.kernel_allowed = false;  // one side is host memory
  RESHARD_ASSIGN_OR_RETURN(cuda::RegionWork work,
                           cuda::LowerRegion(copy, limits));
  for (cuda::Copy3D& c : work.copies) {
    c.kind = kind;
    RESHARD_RETURN_NOT_OK(
        c.extent.depth == 1
            ? api_->Copy2DAsync(c.dst.ptr, c.dst.pitch, c.src.ptr, c.src.pitch,
                                c.extent.width, c.extent.height, kind, stream)
            : api_->Copy3DAsync(c, stream));
  }
  return Status::OK();
}

Status StagedExchange::Wait(std::string_view what) {
  Status st = streams_.SynchronizeAll();
  if (!st.ok()) return st.WithContext(std::string(what));
  return Status::OK();
}

Result<cuda::StreamHandle> StagedExchange::StreamOf(int device) {
  return streams_.Of(device);
}

Status StagedExchange::EnsureSlots(size_t n) {
  while (slots_.size() < n) {
    if (api_ == nullptr) {
      host_.emplace_back(options_.chunk_bytes);
      slots_.push_back(host_.back().data());
      continue;
    }
    RESHARD_ASSIGN_OR_RETURN(
        cuda::PinnedBuffer buffer,
        cuda::PinnedBuffer::Make(api_, options_.chunk_bytes));
    pinned_.push_back(std::make_unique<cuda::PinnedBuffer>(std::move(buffer)));
    slots_.push_back(pinned_.back()->data());
  }
  return Status::OK();
}

}  // namespace

uint32_t ChunkTag(uint32_t tag, uint64_t chunk) {
  return chunk == 0 ? tag : tag ^ static_cast<uint32_t>(chunk * 0x9E3779B1u);
}

Status CheckStagedBudget(uint64_t budget, uint64_t chunk_bytes) {
  if (chunk_bytes > 0 && budget >= chunk_bytes) return Status::OK();
  return Status::InvalidArgument(
      "device_staging_bytes (" + std::to_string(budget) +
      ") is smaller than one staged chunk (" + std::to_string(chunk_bytes) +
      " bytes): the pipeline through pinned host buffers needs at least one");
}

Result<std::unique_ptr<PeerExchange>> MakeStagedExchange(
    std::unique_ptr<PeerExchange> inner, std::shared_ptr<cuda::DeviceApi> api,
    StagedExchangeOptions options) {
  RESHARD_RETURN_NOT_OK(CheckStagedBudget(options.budget, options.chunk_bytes));
  return std::unique_ptr<PeerExchange>(std::make_unique<StagedExchange>(
      std::move(inner), std::move(api), std::move(options)));
}

}  // namespace reshard::live_internal
