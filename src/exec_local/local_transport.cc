// LocalTransport: a transfer is cut into pieces of about chunk_bytes (a
// piece is a range of one region's rows, or a byte range of one large
// contiguous run) and executed by `threads` workers started per transfer.

#include "reshard/backends/local_transport.h"

#include <condition_variable>
#include <cstring>
#include <map>
#include <mutex>
#include <thread>

#include "bind/row_walker.h"
#include "util/claimed_runs.h"
#include "util/stream_copy.h"

namespace reshard {

namespace {

struct Piece {
  const BoundRegion* region;
  uint64_t first_row;
  uint64_t rows;
  // For a single-row region split by bytes: byte range inside the row.
  uint64_t byte_offset;
  uint64_t byte_count;
};

// Streams at least this many bytes per transfer piece; smaller pieces use
// memcpy and stay in cache.
constexpr uint64_t kStreamThreshold = uint64_t{1} << 20;

// A plan's work in pieces of about `chunk` bytes: a range of one region's
// rows, or a byte range of one long single-row region.
std::vector<Piece> CutIntoPieces(const BoundTransferPlan& plan,
                                 uint64_t chunk) {
  std::vector<Piece> pieces;
  for (const BoundRegion& r : plan.regions()) {
    const uint64_t rows = internal::RowCount(r);
    if (rows == 1 && r.inner_bytes > chunk) {
      for (uint64_t off = 0; off < r.inner_bytes; off += chunk) {
        pieces.push_back({&r, 0, 1, off, std::min(chunk, r.inner_bytes - off)});
      }
      continue;
    }
    const uint64_t per =
        std::max<uint64_t>(1, chunk / std::max<uint64_t>(1, r.inner_bytes));
    for (uint64_t first = 0; first < rows; first += per) {
      pieces.push_back({&r, first, std::min(per, rows - first), 0, 0});
    }
  }
  return pieces;
}

}  // namespace

struct LocalTransport::Impl {
  LocalTransportOptions options;
  TransportCapabilities caps;
  std::mutex mu;
  std::condition_variable cv;
  TransferId next_id = 1;
  struct Transfer {
    std::thread runner;
    TransferState state = TransferState::kPending;
  };
  std::map<TransferId, Transfer> transfers;

  // Runs one transfer to completion on `threads` workers.
  void Run(TransferId id, BoundTransferPlan plan) {
    const std::vector<Piece> pieces = CutIntoPieces(plan, options.chunk_bytes);
    // Large transfers stream past the cache; a worker fences its streaming
    // stores after each piece (pieces are chunk_bytes, so the fence costs
    // nothing measurable), before the transfer is reported complete.
    const bool stream = plan.bytes() >= kStreamThreshold;
    auto copy = [stream](void* d, const void* s, size_t n) {
      if (stream) {
        internal::StreamCopy(d, s, n);
      } else {
        std::memcpy(d, s, n);
      }
    };
    internal::ForEachClaimed(
        pieces.size(), options.threads, [&](size_t i, unsigned) {
          const Piece& p = pieces[i];
          if (p.byte_count > 0) {
            copy(reinterpret_cast<void*>(p.region->target_address +
                                         p.byte_offset),
                 reinterpret_cast<const void*>(p.region->source_address +
                                               p.byte_offset),
                 p.byte_count);
          } else {
            internal::CopyRegionRows(*p.region, p.first_row, p.rows, copy);
          }
          if (stream) internal::StreamFence();
        });
    std::lock_guard<std::mutex> lock(mu);
    transfers[id].state = TransferState::kCompleted;
    cv.notify_all();
  }
};

LocalTransport::LocalTransport(std::unique_ptr<Impl> impl)
    : impl_(std::move(impl)) {}

LocalTransport::~LocalTransport() {
  // Join every runner; transfers in flight finish first.
  std::map<TransferId, Impl::Transfer> transfers;
  {
    std::lock_guard<std::mutex> lock(impl_->mu);
    transfers.swap(impl_->transfers);
  }
  for (auto& [id, t] : transfers) {
    if (t.runner.joinable()) t.runner.join();
  }
}

Result<std::unique_ptr<LocalTransport>> LocalTransport::Make(
    LocalTransportOptions options) {
  if (options.threads < 1) {
    return Status::InvalidArgument("local transport threads must be >= 1");
  }
  if (options.chunk_bytes < 1 || options.max_in_flight < 1) {
    return Status::InvalidArgument(
        "local transport chunk_bytes and max_in_flight must be >= 1");
  }
  auto impl = std::make_unique<Impl>();
  impl->options = options;
  impl->caps = {"local", {MemoryKind::kHost}, options.max_in_flight};
  return std::unique_ptr<LocalTransport>(new LocalTransport(std::move(impl)));
}

const TransportCapabilities& LocalTransport::capabilities() const {
  return impl_->caps;
}

Result<TransferId> LocalTransport::Submit(const BoundTransferPlan& plan) {
  // Host memory only: a device pointer copied with memcpy would fault or,
  // worse, read host memory that happens to be mapped there.
  RESHARD_RETURN_NOT_OK(
      plan.RequireMemoryKinds(impl_->caps.memory_kinds, impl_->caps.name));
  std::lock_guard<std::mutex> lock(impl_->mu);
  size_t pending = 0;
  for (const auto& [id, t] : impl_->transfers) {
    pending += t.state == TransferState::kPending;
  }
  if (pending >= impl_->options.max_in_flight) {
    return Status::ResourceExhausted(
        "local transport has " + std::to_string(pending) +
        " transfers in flight (max_in_flight " +
        std::to_string(impl_->options.max_in_flight) + ")");
  }
  const TransferId id = impl_->next_id++;
  auto& t = impl_->transfers[id];
  // The plan's regions are shared, so the copy is cheap and keeps them
  // alive for the runner.
  t.runner = std::thread([this, id, plan] { impl_->Run(id, plan); });
  return id;
}

Result<TransferState> LocalTransport::Poll(TransferId id) {
  std::thread finished;
  TransferState state;
  {
    std::lock_guard<std::mutex> lock(impl_->mu);
    auto it = impl_->transfers.find(id);
    if (it == impl_->transfers.end()) {
      return Status::NotFound("unknown transfer " + std::to_string(id));
    }
    state = it->second.state;
    // A terminal transfer's runner is done: reap it here so callers that
    // only poll do not accumulate finished threads.
    if (state != TransferState::kPending) {
      finished = std::move(it->second.runner);
    }
  }
  if (finished.joinable()) finished.join();
  return state;
}

Status LocalTransport::Wait(TransferId id) {
  std::thread runner;
  {
    std::unique_lock<std::mutex> lock(impl_->mu);
    auto it = impl_->transfers.find(id);
    if (it == impl_->transfers.end()) {
      return Status::NotFound("unknown transfer " + std::to_string(id));
    }
    impl_->cv.wait(lock, [&] {
      return impl_->transfers[id].state != TransferState::kPending;
    });
    runner = std::move(impl_->transfers[id].runner);
  }
  if (runner.joinable()) runner.join();
  std::lock_guard<std::mutex> lock(impl_->mu);
  return impl_->transfers[id].state == TransferState::kCompleted
             ? Status::OK()
             : Status::Aborted("transfer " + std::to_string(id) + " failed");
}

}  // namespace reshard
