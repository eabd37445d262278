#include "live_ucx/ucx_exchange.h"

#include <algorithm>
#include <memory>
#include <vector>

#include "bind/row_walker.h"
#include "live_exchange/side_stream.h"

namespace reshard::internal {
namespace {

// What an abandoned operation leaves with UCX (its state, the completion
// queue, the datatype) UCX may still write into: it is kept until exit
// (KeepUntilExit, ucx_handles.h).

using Clock = std::chrono::steady_clock;

// Per-operation state; the stream must outlive the UCX request.
struct OpState {
  SideStream stream;
  void* request = nullptr;
  bool posted = false;
  bool done = false;
  bool freed = false;
  ucs_status_t status = UCS_OK;
  uint64_t received = 0;
  uint64_t pending = 0;  // kGet: get requests not yet completed
  size_t index = 0;
  std::vector<size_t>* completed = nullptr;  // completion queue
  // ExchangeRunOptions::on_piece, or null.
  const std::function<void(size_t, uint64_t, const uint8_t*, uint64_t)>*
      on_piece = nullptr;
};

// Generic datatype callbacks: the "buffer" UCX hands back is the OpState
// of the operation.
void* StartPack(void*, const void* buffer, size_t) {
  return const_cast<void*>(buffer);
}
void* StartUnpack(void*, void* buffer, size_t) { return buffer; }
size_t PackedSize(void* state) {
  return static_cast<const OpState*>(state)->stream.total_bytes;
}
size_t Pack(void* state, size_t offset, void* dest, size_t max_length) {
  const auto* op = static_cast<const OpState*>(state);
  if (offset >= op->stream.total_bytes) return 0;
  const uint64_t n =
      std::min<uint64_t>(max_length, op->stream.total_bytes - offset);
  op->stream.Pack(offset, n, static_cast<uint8_t*>(dest));
  if (op->on_piece != nullptr) {
    (*op->on_piece)(op->index, offset, static_cast<const uint8_t*>(dest), n);
  }
  return n;
}
ucs_status_t Unpack(void* state, size_t offset, const void* src,
                    size_t length) {
  const auto* op = static_cast<const OpState*>(state);
  if (offset + length > op->stream.total_bytes) {
    return UCS_ERR_MESSAGE_TRUNCATED;
  }
  op->stream.Unpack(offset, length, static_cast<const uint8_t*>(src));
  if (op->on_piece != nullptr) {
    (*op->on_piece)(op->index, offset, static_cast<const uint8_t*>(src),
                    length);
  }
  return UCS_OK;
}
void Finish(void*) {}

void OnSend(void*, ucs_status_t status, void* user_data) {
  auto* op = static_cast<OpState*>(user_data);
  op->status = status;
  op->done = true;
  op->completed->push_back(op->index);
}

void OnGetPart(void* request, ucs_status_t status, void* user_data) {
  auto* op = static_cast<OpState*>(user_data);
  if (status != UCS_OK && op->status == UCS_OK) op->status = status;
  ucp_request_free(request);
  if (--op->pending == 0) {
    op->done = true;
    op->completed->push_back(op->index);
  }
}

void OnRecv(void*, ucs_status_t status, const ucp_tag_recv_info_t* info,
            void* user_data) {
  auto* op = static_cast<OpState*>(user_data);
  op->status = status;
  if (status == UCS_OK && info != nullptr) op->received = info->length;
  op->done = true;
  op->completed->push_back(op->index);
}

// Owner of a generic datatype.
class GenericDatatype {
 public:
  GenericDatatype() {
    ucp_generic_dt_ops_t ops{};
    ops.start_pack = &StartPack;
    ops.start_unpack = &StartUnpack;
    ops.packed_size = &PackedSize;
    ops.pack = &Pack;
    ops.unpack = &Unpack;
    ops.finish = &Finish;
    status_ = ucp_dt_create_generic(&ops, nullptr, &datatype_);
  }
  ~GenericDatatype() {
    if (status_ == UCS_OK) ucp_dt_destroy(datatype_);
  }
  GenericDatatype(const GenericDatatype&) = delete;
  GenericDatatype& operator=(const GenericDatatype&) = delete;
  ucs_status_t status() const { return status_; }
  ucp_datatype_t get() const { return datatype_; }

 private:
  ucp_datatype_t datatype_ = 0;
  ucs_status_t status_;
};

void OnFlush(void*, ucs_status_t status, void* user_data) {
  auto* op = static_cast<OpState*>(user_data);
  op->status = status;
  op->done = true;
}

}  // namespace

Status WireUp(UcxWorker& worker, const std::vector<UcxEndpoint*>& peers,
              std::chrono::steady_clock::time_point deadline,
              const std::function<Status()>& poll_abort) {
  std::vector<std::unique_ptr<OpState>> state;
  for (UcxEndpoint* p : peers) {
    state.push_back(std::make_unique<OpState>());
    ucp_request_param_t param{};
    param.op_attr_mask =
        UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA;
    param.cb.send = &OnFlush;
    param.user_data = state.back().get();
    void* req = ucp_ep_flush_nbx(p->get(), &param);
    if (UCS_PTR_IS_ERR(req)) {
      return FromUcs(UCS_PTR_STATUS(req),
                     "cannot connect to " + p->peer_name());
    }
    state.back()->request = req;
    if (req == nullptr) state.back()->done = true;
  }
  auto last_poll = Clock::now();
  Status failure;
  while (failure.ok()) {
    bool pending = false;
    for (size_t i = 0; i < peers.size(); ++i) {
      OpState& s = *state[i];
      if (!peers[i]->failure().ok()) {
        failure = peers[i]->failure();
        break;
      }
      if (!s.done) {
        pending = true;
      } else if (s.status != UCS_OK) {
        failure =
            FromUcs(s.status, "cannot connect to " + peers[i]->peer_name());
        break;
      }
    }
    if (!failure.ok() || !pending) break;
    const auto now = Clock::now();
    if (now >= deadline) {
      failure = Status::Unavailable("timed out connecting to peers");
    } else if (poll_abort && now - last_poll >= std::chrono::milliseconds(20)) {
      last_poll = now;
      failure = poll_abort();
    }
    if (failure.ok()) worker.ProgressOrWait(std::chrono::milliseconds(2));
  }
  for (auto& s : state) {
    if (s->request == nullptr) continue;
    if (s->done) {
      ucp_request_free(s->request);
    } else {
      KeepUntilExit(s.release());  // UCX's still (the session is abandoned)
    }
  }
  return failure;
}

namespace {

// One run of RunUcxExchange: the operations' state, the completion queue
// that UCX callbacks fill, the generic datatype and the send window.
// Receives are posted up front; sends and gets are initiated here and keep
// at most `max_in_flight` in flight.
class Exchange {
 public:
  Exchange(UcxWorker& worker, const UcxEndpointsByRank& endpoints,
           const std::vector<ExchangeOp>& ops,
           const ExchangeRunOptions& options, ExchangeStats* stats)
      : worker_(worker),
        endpoints_(endpoints),
        ops_(ops),
        options_(options),
        stats_(stats != nullptr ? stats : &unused_stats_),
        settled_(ops.size(), false),
        remaining_(ops.size()) {}

  Status Run() {
    RESHARD_RETURN_NOT_OK(Prepare());
    PostReceives();
    while (remaining_ > 0) {
      FillSendWindow();
      SettleCompleted();
      if (remaining_ == 0) break;
      if (failure_.ok()) failure_ = CheckHealth();
      if (!failure_.ok()) break;
      worker_.ProgressOrWait(std::chrono::milliseconds(2));
    }
    if (!failure_.ok()) AbandonInFlight();
    return failure_;
  }

 private:
  // The datatype, one state per operation (with the side it moves) and
  // the peers to watch.
  Status Prepare() {
    generic_ = std::make_unique<GenericDatatype>();
    RESHARD_RETURN_NOT_OK(
        FromUcs(generic_->status(), "cannot create UCX generic datatype"));
    completed_ = std::make_unique<std::vector<size_t>>();
    state_.resize(ops_.size());
    for (size_t i = 0; i < ops_.size(); ++i) {
      const ExchangeOp& op = ops_[i];
      state_[i] = std::make_unique<OpState>();
      state_[i]->index = i;
      state_[i]->completed = completed_.get();
      if (options_.on_piece) state_[i]->on_piece = &options_.on_piece;
      if (op.peer >= endpoints_.size() || endpoints_[op.peer] == nullptr) {
        return Status::Internal("exchange operation names unconnected rank " +
                                std::to_string(op.peer));
      }
      state_[i]->stream = SideStream::Of(op);
      if (!op.more.empty()) stats_->coalesced_regions += op.more.size() + 1;
      if (std::find(peers_.begin(), peers_.end(), Ep(op)) == peers_.end()) {
        peers_.push_back(Ep(op));
      }
    }
    return Status::OK();
  }

  void PostReceives() {
    for (size_t i = 0; i < ops_.size(); ++i) {
      if (ops_[i].kind == ExchangeOp::Kind::kReceive) {
        PostMessage(i);
      } else {
        initiated_.push_back(i);  // sends and gets
      }
    }
  }

  void FillSendWindow() {
    while (failure_.ok() && next_initiated_ < initiated_.size() &&
           in_flight_ < options_.max_in_flight) {
      ++in_flight_;
      const size_t i = initiated_[next_initiated_++];
      if (ops_[i].kind == ExchangeOp::Kind::kGet) {
        PostGet(i);
      } else {
        PostMessage(i);
      }
    }
  }

  // A tagged send or receive: contiguous sides zero-copy, strided sides
  // through the generic datatype (one message either way).
  void PostMessage(size_t i) {
    const ExchangeOp& op = ops_[i];
    OpState& s = *state_[i];
    ucp_request_param_t param{};
    param.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK |
                         UCP_OP_ATTR_FIELD_USER_DATA |
                         UCP_OP_ATTR_FIELD_DATATYPE;
    param.user_data = &s;
    void* buffer;
    size_t count;
    if (s.stream.contiguous()) {
      param.datatype = ucp_dt_make_contig(1);
      buffer = s.stream.sides[0].base;
      count = s.stream.total_bytes;
    } else {
      param.datatype = generic_->get();
      buffer = &s;
      count = 1;
      ++stats_->packed_messages;
    }
    const ucp_tag_t tag =
        (ucp_tag_t{options_.session_tag} << 32) | op.region->region;
    void* req;
    const bool send = op.kind == ExchangeOp::Kind::kSend;
    if (send) {
      param.cb.send = &OnSend;
      req = ucp_tag_send_nbx(Ep(op)->get(), buffer, count, tag, &param);
    } else {
      param.cb.recv = &OnRecv;
      // A delta message's length is known only from the callback's info.
      if (op.buffer != nullptr) {
        param.op_attr_mask |= UCP_OP_ATTR_FLAG_NO_IMM_CMPL;
      }
      req = ucp_tag_recv_nbx(worker_.get(), buffer, count, tag, ~ucp_tag_t{0},
                             &param);
    }
    s.posted = true;
    if (UCS_PTR_IS_ERR(req)) {
      s.done = true;
      s.status = UCS_PTR_STATUS(req);
      completed_->push_back(i);
    } else if (req == nullptr) {
      s.done = true;  // completed in place, no callback
      if (!send) s.received = s.stream.total_bytes;
      completed_->push_back(i);
    } else {
      s.request = req;
    }
  }

  // Pull: one get for a region contiguous on both sides, else one per row.
  void PostGet(size_t i) {
    const ExchangeOp& op = ops_[i];
    OpState& s = *state_[i];
    const BoundRegion& region = *op.region;
    const StridedSide remote = StridedSide::Source(region);
    const StridedSide& side = s.stream.sides[0];
    const bool whole = remote.contiguous() && side.contiguous();
    const uint64_t rows = whole ? 1 : RowCount(region);
    s.posted = true;
    s.pending = rows;
    if (whole) {
      PostGetPart(op, s, side.base, region.source_address, side.total_bytes);
    } else {
      ForEachRegionRow(region, 0, rows, [&](uint64_t from, uint64_t to) {
        PostGetPart(op, s, side.base + to, region.source_address + from,
                    region.inner_bytes);
      });
    }
    if (s.pending == 0) {
      s.done = true;
      completed_->push_back(i);
    }
  }

  void PostGetPart(const ExchangeOp& op, OpState& s, uint8_t* local,
                   uint64_t remote, uint64_t bytes) {
    ucp_request_param_t param{};
    param.op_attr_mask =
        UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA;
    param.cb.send = &OnGetPart;
    param.user_data = &s;
    void* req =
        ucp_get_nbx(Ep(op)->get(), local, bytes, remote,
                    reinterpret_cast<ucp_rkey_h>(op.remote_key), &param);
    ++stats_->gets;
    if (UCS_PTR_IS_PTR(req)) return;
    if (UCS_PTR_IS_ERR(req) && s.status == UCS_OK) {
      s.status = UCS_PTR_STATUS(req);
    }
    --s.pending;
  }

  void SettleCompleted() {
    while (!completed_->empty()) {
      const size_t i = completed_->back();
      completed_->pop_back();
      if (!settled_[i]) Settle(i);
    }
  }

  // Frees a completed operation's request and counts it; the first failed
  // operation (or a receive of the wrong size) becomes the failure.
  void Settle(size_t i) {
    OpState& s = *state_[i];
    const ExchangeOp& op = ops_[i];
    settled_[i] = true;
    --remaining_;
    if (s.request != nullptr) {
      ucp_request_free(s.request);
      s.request = nullptr;
    }
    if (s.status != UCS_OK) {
      if (failure_.ok()) {
        Status peer = Ep(op)->failure();
        failure_ = !peer.ok() ? peer.WithContext(Describe(op))
                              : FromUcs(s.status, Describe(op));
      }
      return;
    }
    if (!first_done_) {
      first_done_ = true;
      if (options_.on_first_completion) options_.on_first_completion();
    }
    switch (op.kind) {
      case ExchangeOp::Kind::kGet:
        --in_flight_;
        ++stats_->messages_received;
        stats_->bytes_received += op.region->bytes;
        break;
      case ExchangeOp::Kind::kSend:
        --in_flight_;
        ++stats_->messages_sent;
        stats_->bytes_sent += op.bytes();
        break;
      case ExchangeOp::Kind::kReceive:
        if (op.buffer != nullptr) {
          // A delta message: any length up to the buffer (UCX fails a
          // longer one as truncated).
          *op.received = s.received;
        } else if (s.received != op.bytes() && failure_.ok()) {
          failure_ = Status::DataLoss(
              Describe(op) + ": received " + std::to_string(s.received) +
              " bytes, expected " + std::to_string(op.bytes()));
        }
        ++stats_->messages_received;
        stats_->bytes_received += s.received;
        if (!failure_.ok()) return;
        break;
    }
    if (options_.on_completion) options_.on_completion(i);
  }

  // A lost peer, the deadline or another rank's abort (polled about every
  // abort_poll_interval) stops the exchange before any further progress.
  Status CheckHealth() {
    for (UcxEndpoint* p : peers_) {
      if (!p->failure().ok()) return p->failure();
    }
    const auto now = Clock::now();
    if (now >= options_.deadline) {
      return Status::Unavailable("timed out with " +
                                 std::to_string(remaining_) +
                                 " transfers outstanding");
    }
    if (now - last_abort_poll_ >= options_.abort_poll_interval) {
      last_abort_poll_ = now;
      if (options_.poll_abort) return options_.poll_abort();
    }
    return Status::OK();
  }

  // Stops without progressing the worker again (see UcxWorker::Abandon):
  // what is still posted stays with UCX, so its state, the completion
  // queue and the datatype live until process exit, and the caller treats
  // the buffers as uncertain (never marked ready). Operations that
  // completed are still settled (counted); the failure stays the first.
  void AbandonInFlight() {
    for (size_t i = 0; i < ops_.size(); ++i) {
      if (!settled_[i] && state_[i]->posted && state_[i]->done) Settle(i);
    }
    KeepUntilExit(completed_.release());
    KeepUntilExit(generic_.release());
    for (size_t i = 0; i < ops_.size(); ++i) {
      if (!settled_[i] && state_[i]->posted) {
        ++stats_->abandoned_in_flight;
        KeepUntilExit(state_[i].release());
      }
    }
  }

  UcxWorker& worker_;
  const UcxEndpointsByRank& endpoints_;
  const std::vector<ExchangeOp>& ops_;
  const ExchangeRunOptions& options_;
  ExchangeStats unused_stats_;
  ExchangeStats* stats_;
  // Heap-held so that requests still posted after a failure can keep them.
  std::unique_ptr<GenericDatatype> generic_;
  std::unique_ptr<std::vector<size_t>> completed_;
  std::vector<std::unique_ptr<OpState>> state_;
  UcxEndpoint* Ep(const ExchangeOp& op) const { return endpoints_[op.peer]; }
  std::string Describe(const ExchangeOp& op) const {
    return DescribeExchangeOp(op, Ep(op)->peer_name());
  }

  std::vector<UcxEndpoint*> peers_;
  std::vector<size_t> initiated_;  // sends and gets, in posting order
  size_t next_initiated_ = 0;
  size_t in_flight_ = 0;  // initiated and not settled
  std::vector<bool> settled_;
  size_t remaining_;
  bool first_done_ = false;
  Status failure_;
  Clock::time_point last_abort_poll_ = Clock::now();
};

}  // namespace

Status RefusePackedDeviceMemory(const UcxContext& context,
                                const UcxEndpointsByRank& endpoints,
                                const std::vector<ExchangeOp>& ops) {
  for (const ExchangeOp& op : ops) {
    if (op.kind == ExchangeOp::Kind::kGet || op.buffer != nullptr) continue;
    const SideStream stream = SideStream::Of(op);
    if (stream.contiguous()) continue;
    for (const StridedSide& side : stream.sides) {
      RESHARD_ASSIGN_OR_RETURN(const ucs_memory_type_t type,
                               DetectMemoryType(context, side.base));
      if (type == UCS_MEMORY_TYPE_HOST) continue;
      const UcxEndpoint* ep =
          op.peer < endpoints.size() ? endpoints[op.peer] : nullptr;
      return Status::FailedPrecondition(
          DescribeExchangeOp(op, ep != nullptr
                                     ? ep->peer_name()
                                     : "rank " + std::to_string(op.peer)) +
          ": a packed message (strided, or regions coalesced) of CUDA "
          "memory, which the ucx exchange packs on the host; the setting "
          "memory=host stages CUDA fragments in host memory");
    }
  }
  return Status::OK();
}

Status RunUcxExchange(UcxWorker& worker, const UcxEndpointsByRank& endpoints,
                      const std::vector<ExchangeOp>& ops,
                      const ExchangeRunOptions& options, ExchangeStats* stats) {
  return Exchange(worker, endpoints, ops, options, stats).Run();
}

}  // namespace reshard::internal
