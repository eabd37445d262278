#include "exec/ucx/ucx_exchange.h"

#include <algorithm>
#include <memory>

#include "bind/strided_stream.h"

namespace reshard::internal {
namespace {

using Clock = std::chrono::steady_clock;

// Per-operation state; the side must outlive the UCX request.
struct OpState {
  StridedSide side;
  void* request = nullptr;
  bool posted = false;
  bool done = false;
  bool freed = false;
  ucs_status_t status = UCS_OK;
  uint64_t received = 0;
  uint64_t pending = 0;  // kGet: get requests not yet completed
  size_t index = 0;
  std::vector<size_t>* completed = nullptr;  // completion queue
};

// Generic datatype callbacks: the "buffer" UCX hands back is the
// StridedSide of the operation.
void* StartPack(void*, const void* buffer, size_t) {
  return const_cast<void*>(buffer);
}
void* StartUnpack(void*, void* buffer, size_t) { return buffer; }
size_t PackedSize(void* state) {
  return static_cast<const StridedSide*>(state)->total_bytes;
}
size_t Pack(void* state, size_t offset, void* dest, size_t max_length) {
  const auto* side = static_cast<const StridedSide*>(state);
  if (offset >= side->total_bytes) return 0;
  const uint64_t n = std::min<uint64_t>(max_length, side->total_bytes - offset);
  PackStream(*side, offset, dest, n);
  return n;
}
ucs_status_t Unpack(void* state, size_t offset, const void* src,
                    size_t length) {
  const auto* side = static_cast<const StridedSide*>(state);
  if (offset + length > side->total_bytes) return UCS_ERR_MESSAGE_TRUNCATED;
  UnpackStream(*side, offset, src, length);
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

std::string Describe(const ExchangeOp& op) {
  const bool send = op.kind == ExchangeOp::Kind::kSend;
  const char* verb = send                                    ? "sending"
                     : op.kind == ExchangeOp::Kind::kReceive ? "receiving"
                                                             : "reading";
  return std::string(verb) + " region " + std::to_string(op.region->region) +
         (send ? " to " : " from ") + op.peer->peer_name();
}

void OnFlush(void*, ucs_status_t status, void* user_data) {
  auto* op = static_cast<OpState*>(user_data);
  op->status = status;
  op->done = true;
}

}  // namespace

bool PulledRegion(const BoundRegion& region) {
  return (StridedSide::Source(region).contiguous() &&
          StridedSide::Target(region).contiguous()) ||
         region.inner_bytes >= kMinPulledRow;
}

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
      s.release();  // still owned by UCX (the session is abandoned)
    }
  }
  return failure;
}

Status RunUcxExchange(UcxWorker& worker, const std::vector<ExchangeOp>& ops,
                      const ExchangeOptions& options, ExchangeStats* stats) {
  auto generic_owner = std::make_unique<GenericDatatype>();
  GenericDatatype& generic = *generic_owner;
  RESHARD_RETURN_NOT_OK(
      FromUcs(generic.status(), "cannot create UCX generic datatype"));
  // Heap-held so that requests still pending after a failure can keep it.
  auto* completed = new std::vector<size_t>();
  std::unique_ptr<std::vector<size_t>> completed_owner(completed);
  std::vector<std::unique_ptr<OpState>> state(ops.size());
  for (size_t i = 0; i < ops.size(); ++i) {
    state[i] = std::make_unique<OpState>();
    state[i]->index = i;
    state[i]->completed = completed;
    state[i]->side = ops[i].kind == ExchangeOp::Kind::kSend
                         ? StridedSide::Source(*ops[i].region)
                         : StridedSide::Target(*ops[i].region);
  }
  // Pull: one get per row, or one for a contiguous region.
  auto post_get = [&](size_t i) {
    const ExchangeOp& op = ops[i];
    OpState& s = *state[i];
    const StridedSide remote = StridedSide::Source(*op.region);
    const bool whole = remote.contiguous() && s.side.contiguous();
    const uint64_t rows =
        whole ? 1
              : s.side.total_bytes / std::max<uint64_t>(1, s.side.inner_bytes);
    const uint64_t run = whole ? s.side.total_bytes : s.side.inner_bytes;
    ucp_request_param_t param{};
    param.op_attr_mask =
        UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA;
    param.cb.send = &OnGetPart;
    param.user_data = &s;
    s.posted = true;
    s.pending = rows;
    for (uint64_t k = 0; k < rows; ++k) {
      uint8_t* local = s.side.base + (whole ? 0 : RowOffset(s.side, k));
      const uint64_t from = reinterpret_cast<uint64_t>(remote.base) +
                            (whole ? 0 : RowOffset(remote, k));
      void* req =
          ucp_get_nbx(op.peer->get(), local, run, from, op.rkey, &param);
      if (stats) ++stats->gets;
      if (UCS_PTR_IS_PTR(req)) continue;
      if (UCS_PTR_IS_ERR(req) && s.status == UCS_OK) {
        s.status = UCS_PTR_STATUS(req);
      }
      --s.pending;
    }
    if (s.pending == 0) {
      s.done = true;
      completed->push_back(i);
    }
  };
  auto post = [&](size_t i) -> Status {
    const ExchangeOp& op = ops[i];
    OpState& s = *state[i];
    if (op.kind == ExchangeOp::Kind::kGet) {
      post_get(i);
      return Status::OK();
    }
    const bool contiguous = s.side.contiguous();
    ucp_request_param_t param{};
    param.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK |
                         UCP_OP_ATTR_FIELD_USER_DATA |
                         UCP_OP_ATTR_FIELD_DATATYPE;
    param.user_data = &s;
    void* buffer;
    size_t count;
    if (contiguous) {
      param.datatype = ucp_dt_make_contig(1);
      buffer = s.side.base;
      count = s.side.total_bytes;
    } else {
      param.datatype = generic.get();
      buffer = &s.side;
      count = 1;
      if (stats) ++stats->packed_messages;
    }
    const ucp_tag_t tag =
        (ucp_tag_t{options.session_tag} << 32) | op.region->region;
    void* req;
    const bool send = op.kind == ExchangeOp::Kind::kSend;
    if (send) {
      param.cb.send = &OnSend;
      req = ucp_tag_send_nbx(op.peer->get(), buffer, count, tag, &param);
    } else {
      param.cb.recv = &OnRecv;
      req = ucp_tag_recv_nbx(worker.get(), buffer, count, tag, ~ucp_tag_t{0},
                             &param);
    }
    s.posted = true;
    if (UCS_PTR_IS_ERR(req)) {
      s.done = true;
      s.status = UCS_PTR_STATUS(req);
      completed->push_back(i);
    } else if (req == nullptr) {
      s.done = true;  // completed in place, no callback
      if (!send) s.received = s.side.total_bytes;
      completed->push_back(i);
    } else {
      s.request = req;
    }
    return Status::OK();
  };

  Status failure;
  size_t next_send = 0;
  size_t in_flight_sends = 0;
  size_t remaining = ops.size();
  std::vector<size_t> sends;
  for (size_t i = 0; i < ops.size(); ++i) {
    if (ops[i].kind == ExchangeOp::Kind::kReceive) {
      RESHARD_RETURN_NOT_OK(post(i));
    } else {
      sends.push_back(i);  // initiated here: sends and gets
    }
  }
  std::vector<UcxEndpoint*> peers;
  for (const ExchangeOp& op : ops) {
    if (std::find(peers.begin(), peers.end(), op.peer) == peers.end()) {
      peers.push_back(op.peer);
    }
  }
  std::vector<bool> settled(ops.size(), false);
  bool first_done = false;
  auto settle = [&](size_t i) {
    OpState& s = *state[i];
    settled[i] = true;
    --remaining;
    if (s.request != nullptr) {
      ucp_request_free(s.request);
      s.request = nullptr;
    }
    const ExchangeOp& op = ops[i];
    if (s.status != UCS_OK) {
      if (failure.ok()) {
        Status peer = op.peer->failure();
        failure = !peer.ok() ? peer.WithContext(Describe(op))
                             : FromUcs(s.status, Describe(op));
      }
      return;
    }
    if (!first_done) {
      first_done = true;
      if (options.on_first_completion) options.on_first_completion();
    }
    if (op.kind == ExchangeOp::Kind::kGet) {
      --in_flight_sends;
      if (stats) {
        ++stats->messages_received;
        stats->bytes_received += op.region->bytes;
      }
    } else if (op.kind == ExchangeOp::Kind::kSend) {
      --in_flight_sends;
      if (stats) {
        ++stats->messages_sent;
        stats->bytes_sent += op.region->bytes;
      }
    } else {
      if (s.received != op.region->bytes && failure.ok()) {
        failure = Status::DataLoss(
            Describe(op) + ": received " + std::to_string(s.received) +
            " bytes, expected " + std::to_string(op.region->bytes));
      }
      if (stats) {
        ++stats->messages_received;
        stats->bytes_received += s.received;
      }
    }
  };

  auto last_abort_poll = Clock::now();
  while (remaining > 0) {
    // Keep the send window full.
    while (failure.ok() && next_send < sends.size() &&
           in_flight_sends < options.max_in_flight) {
      ++in_flight_sends;
      RESHARD_RETURN_NOT_OK(post(sends[next_send++]));
    }
    while (!completed->empty()) {
      const size_t i = completed->back();
      completed->pop_back();
      if (!settled[i]) settle(i);
    }
    if (remaining == 0) break;
    // A peer failure stops the exchange before any further progress.
    for (UcxEndpoint* p : peers) {
      if (failure.ok() && !p->failure().ok()) failure = p->failure();
    }
    if (failure.ok()) {
      const auto now = Clock::now();
      if (now >= options.deadline) {
        failure =
            Status::Unavailable("timed out with " + std::to_string(remaining) +
                                " transfers outstanding");
      } else if (now - last_abort_poll >= options.abort_poll_interval) {
        last_abort_poll = now;
        if (options.poll_abort) failure = options.poll_abort();
      }
    }
    if (!failure.ok()) break;
    worker.ProgressOrWait(std::chrono::milliseconds(2));
  }
  if (failure.ok()) return Status::OK();

  // Stop without progressing the worker again (see UcxWorker::Abandon):
  // what is still posted stays with UCX, so its state, the completion
  // queue and the datatype live until process exit, and the caller treats
  // the buffers as uncertain (never marked ready).
  for (size_t i = 0; i < ops.size(); ++i) {
    if (!settled[i] && state[i]->posted && state[i]->done) {
      Status keep = failure;
      settle(i);
      failure = keep;
    }
  }
  completed_owner.release();
  generic_owner.release();
  for (size_t i = 0; i < ops.size(); ++i) {
    if (!settled[i] && state[i]->posted) state[i].release();
  }
  return failure;
}

}  // namespace reshard::internal
